package oob

import (
	"bytes"
	"testing"
)

// FuzzParseDest checks that ParseDest never panics and that whatever it
// accepts encodes back to the same message (up to the case of hex digits).
func FuzzParseDest(f *testing.F) {
	f.Add([]byte(realRCClientMsg))
	for _, name := range []string{"rc_pingpong", "ud_pingpong"} {
		for _, s := range loadTranscript(f, name) {
			f.Add(s.data)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := ParseDest(b)
		if err != nil {
			return
		}
		out, err := d.Marshal()
		if err != nil || !bytes.EqualFold(out, b) {
			t.Fatalf("%q parsed to %+v, which encodes to %q (%v)", b, d, out, err)
		}
	})
}

// FuzzParseKeyMsg is the same for perftest's key messages, both formats.
func FuzzParseKeyMsg(f *testing.F) {
	f.Add([]byte(realWriteBWClientKeys))
	short, _ := realWriteBWClient.Marshal(false)
	f.Add(short)
	for _, s := range loadTranscript(f, "write_bw") {
		f.Add(s.data)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, withGID := range []bool{true, false} {
			k, err := ParseKeyMsg(b, withGID)
			if err != nil {
				continue
			}
			out, err := k.Marshal(withGID)
			if err != nil || !bytes.EqualFold(out, b) {
				t.Fatalf("%q parsed to %+v, which encodes to %q (%v)", b, k, out, err)
			}
		}
	})
}

// FuzzParseVersionAndMTU exercises the small prologue messages.
func FuzzParseVersionAndMTU(f *testing.F) {
	f.Add([]byte("6.06\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"))
	f.Add([]byte("3\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if v, err := ParseVersion(b); err == nil {
			CheckPeerVersion(v)
			if len(v) < VersionMsgSize {
				out, err := MarshalVersion(v)
				if err != nil || !bytes.Equal(out[:len(v)], b[:len(v)]) {
					t.Fatalf("version %q: %q, %v", v, out, err)
				}
			}
		}
		if m, err := ParseMTU(b); err == nil {
			out, _ := MarshalMTU(m)
			if !bytes.Equal(out, b) {
				t.Fatalf("MTU %q -> %d -> %q", b, m, out)
			}
		}
	})
}
