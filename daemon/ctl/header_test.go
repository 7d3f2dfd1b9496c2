package ctl

import (
	"testing"

	"github.com/sroce/sroce/internal/cmirror"
)

// TestHeaderGenerated regenerates the Go mirror of sroce_ctl.h and fails
// when the checked-in files differ: the header was edited without
// running go generate, or a generated file by hand.
func TestHeaderGenerated(t *testing.T) {
	cmirror.CheckGenerated(t, cmirror.Ctl, ".")
}

// TestHeaderLayout compiles a C program against sroce_ctl.h that prints
// every constant, struct size and member offset, and compares them with
// the generated Go's.
func TestHeaderLayout(t *testing.T) {
	checks := cLayout()
	if len(checks) < 300 {
		t.Errorf("only %d checks of sroce_ctl.h: the generated table lost members", len(checks))
	}
	cmirror.CheckLayout(t, ".", "sroce_ctl.h", checks)
}

// TestParse checks the framing's refusals.
func TestParse(t *testing.T) {
	body := Handle{Handle: 7}
	msg := Append(nil, Hdr{Op: OpDeallocPD, Seq: 3}, Bytes(&body))
	h, b, err := Parse(msg)
	if err != nil || h.Op != OpDeallocPD || h.Seq != 3 {
		t.Fatalf("Parse = %+v, %v", h, err)
	}
	if got, err := Get[Handle](b); err != nil || got.Handle != 7 {
		t.Fatalf("Get = %+v, %v", got, err)
	}
	if _, err := Get[QPAttr](b); err != ErrShort {
		t.Errorf("short body: %v", err)
	}
	bad := append([]byte(nil), msg...)
	bad[0] ^= 1
	for name, m := range map[string][]byte{"short": msg[:5], "magic": bad, "length": msg[:len(msg)-1]} {
		if _, _, err := Parse(m); err == nil {
			t.Errorf("%s: Parse accepted it", name)
		}
	}
}

// FuzzParse feeds arbitrary datagrams to the framing and to every body
// decoder: errors, never a panic, and a datagram Parse accepts keeps its
// length.
func FuzzParse(f *testing.F) {
	h := Hello{ABI: Version}
	f.Add(Append(nil, Hdr{Op: OpHello, Seq: 1}, Bytes(&h)))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		hdr, body, err := Parse(b)
		if err != nil {
			return
		}
		if int(hdr.Len) != len(b) || len(body) != len(b)-HdrSize {
			t.Fatalf("accepted a datagram of %d bytes whose header says %d", len(b), hdr.Len)
		}
		Get[Hello](body)
		Get[RegMR](body)
		Get[ReregMR](body)
		Get[ResizeCQ](body)
		Get[ModifyQP](body)
		Get[CreateQP](body)
		Get[AH](body)
		Get[CMConn](body)
		Get[CMAddrReq](body)
		Name(body)
	})
}
