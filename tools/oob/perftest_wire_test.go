package oob

import (
	"bytes"
	"encoding/hex"
	"errors"
	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/verbs"
	"math"
	"strings"
	"testing"
)

// The client's key message of testdata/real-write_bw.txt.
const realWriteBWClientKeys = "0000:0001:000013:ace676:000004b8:00007f8dc4a8f000:00:00:00:00:00:00:00:00:00:00:ff:ff:c0:00:02:02:00000000:\x00"

var realWriteBWClient = KeyMsg{LID: 0, OutReads: 1, QPN: 0x13, PSN: 0xace676, RKey: 0x4b8, VAddr: 0x7f8dc4a8f000,
	GID: bth.GID{10: 0xff, 11: 0xff, 12: 0xc0, 13: 0, 14: 2, 15: 2}}

func TestKeyMsgGolden(t *testing.T) {
	b, err := realWriteBWClient.Marshal(true)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != realWriteBWClientKeys || len(b) != KeyMsgSizeGID {
		t.Fatalf("Marshal = %q\nwant      %q", b, realWriteBWClientKeys)
	}
	back, err := ParseKeyMsg(b, true)
	if err != nil || back != realWriteBWClient {
		t.Fatalf("ParseKeyMsg = %+v, %v", back, err)
	}
	// KEY_PRINT_FMT "%04x:%04x:%06x:%06x:%08x:%016llx:%08x" without GID,
	// printed by glibc for these values.
	k := KeyMsg{LID: 0x1234, OutReads: 0x10, QPN: 0xabcdef, PSN: 0x1, RKey: 0xdeadbeef, VAddr: 0x123456789abcdef0, SRQN: 0x42}
	b, err = k.Marshal(false)
	if want := "1234:0010:abcdef:000001:deadbeef:123456789abcdef0:00000042\x00"; err != nil || string(b) != want || len(b) != KeyMsgSize {
		t.Fatalf("Marshal(no GID) = %q, %v; want %q", b, err, want)
	}
	back, err = ParseKeyMsg(b, false)
	if err != nil || back != k {
		t.Fatalf("ParseKeyMsg(no GID) = %+v, %v", back, err)
	}
	// Every field at its widest, SRQN included.
	k = KeyMsg{LID: 0xffff, OutReads: 0xffff, QPN: 0xffffff, PSN: 0xffffff, RKey: 0xffffffff, VAddr: math.MaxUint64,
		GID: bth.GID{0xfe, 0x80, 15: 0xff}, SRQN: 0xffffffff}
	b, _ = k.Marshal(true)
	if back, err := ParseKeyMsg(b, true); err != nil || back != k || len(b) != KeyMsgSizeGID {
		t.Fatalf("widest: %q -> %+v, %v", b, back, err)
	}
	if _, err := (KeyMsg{QPN: 1 << 24}).Marshal(true); err == nil {
		t.Error("QPN of 25 bits accepted")
	}
	if _, err := (KeyMsg{PSN: 1 << 24}).Marshal(false); err == nil {
		t.Error("PSN of 25 bits accepted")
	}
}

func TestParseKeyMsgMalformed(t *testing.T) {
	good := []byte(realWriteBWClientKeys)
	for n := 0; n < len(good); n++ {
		if _, err := ParseKeyMsg(good[:n], true); !errors.Is(err, ErrMalformed) {
			t.Errorf("prefix of %d bytes: %v", n, err)
		}
	}
	short, _ := realWriteBWClient.Marshal(false)
	for n := 0; n < len(short); n++ {
		if _, err := ParseKeyMsg(short[:n], false); !errors.Is(err, ErrMalformed) {
			t.Errorf("no-GID prefix of %d bytes: %v", n, err)
		}
	}
	if _, err := ParseKeyMsg(short, true); !errors.Is(err, ErrMalformed) {
		t.Error("59-byte message accepted where 108 were expected")
	}
	mutate := func(i int, c byte) []byte {
		b := bytes.Clone(good)
		b[i] = c
		return b
	}
	for _, bad := range [][]byte{
		mutate(107, 'x'), // no NUL
		mutate(4, '-'),   // separator
		mutate(0, 'g'),   // not hex
		mutate(60, 'z'),  // GID byte
		mutate(106, '0'), // no trailing ':'
		mutate(50, 0),    // NUL inside
		mutate(99, ':'),  // SRQN digit becomes a separator
		[]byte(strings.Repeat("A", 108)),
	} {
		if _, err := ParseKeyMsg(bad, true); !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseKeyMsg(%q) = %v", bad, err)
		} else if !strings.HasPrefix(err.Error(), "peer sent a malformed key message: ") {
			t.Errorf("message %q", err)
		}
	}
}

func TestVersionMessage(t *testing.T) {
	b, err := MarshalVersion(PerftestVersion)
	if want := "6.06\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"; err != nil || string(b) != want {
		t.Fatalf("MarshalVersion = %q, %v", b, err)
	}
	if v, err := ParseVersion(b); err != nil || v != "6.06" {
		t.Fatalf("ParseVersion = %q, %v", v, err)
	}
	if _, err := MarshalVersion("0123456789abcdef"); err == nil {
		t.Error("16-character version accepted")
	}
	if v, err := ParseVersion([]byte("0123456789abcdef")); err != nil || v != "0123456789abcdef" {
		t.Errorf("unterminated version: %q, %v", v, err)
	}
	// A pingpong client talking to a perftest server: its first 16 bytes.
	if v, err := ParseVersion([]byte(realRCClientMsg[:16])); err != nil {
		t.Errorf("ParseVersion(pingpong) = %q, %v", v, err)
	} else if err := CheckPeerVersion(v); !errors.Is(err, ErrVersion) {
		t.Errorf("pingpong message accepted as version %q", v)
	}
	if _, err := ParseVersion([]byte("\x01\x02binary junk\xff\xfe\xfd")); !errors.Is(err, ErrVersion) {
		t.Errorf("binary junk: %v", err)
	}
	for v, ok := range map[string]bool{
		"6.06": true, "5.94": true, "6.17": true, "6.10": true, "6.16rc": true,
		"6.20": false, "6.28": false, "5.92": false, "5.60": false, "4.6": false, "": false, "abc": false, ".": false,
		"0000:000011:0d07": false,
	} {
		err := CheckPeerVersion(v)
		if (err == nil) != ok {
			t.Errorf("CheckPeerVersion(%q) = %v", v, err)
		}
		if err != nil && !errors.Is(err, ErrVersion) {
			t.Errorf("CheckPeerVersion(%q) error %v is not ErrVersion", v, err)
		}
	}
	err = CheckPeerVersion("6.28")
	if !strings.HasPrefix(err.Error(), `peer speaks a different perftest exchange: got version "6.28"`) {
		t.Errorf("message %q", err)
	}
}

func TestMTUAndSysData(t *testing.T) {
	for n, m := range map[int]verbs.MTU{256: verbs.MTU256, 512: verbs.MTU512, 1024: verbs.MTU1024, 2048: verbs.MTU2048, 4096: verbs.MTU4096, 1500: 0, 0: 0} {
		if got, ok := verbs.MTUFromBytes(n); got != m || ok != (m != 0) {
			t.Errorf("MTUFromBytes(%d) = %d, %v", n, got, ok)
		}
		if m != 0 && m.Bytes() != n {
			t.Errorf("%d.Bytes() = %d", m, m.Bytes())
		}
	}
	b, _ := MarshalMTU(verbs.MTU1024)
	if string(b) != "3\x00" {
		t.Errorf("MarshalMTU = %q", b)
	}
	if m, err := ParseMTU([]byte("5\x00")); err != nil || m != verbs.MTU4096 {
		t.Errorf("ParseMTU = %d, %v", m, err)
	}
	for _, bad := range []string{"", "3", "x\x00", "33", "3\x00\x00"} {
		if _, err := ParseMTU([]byte(bad)); !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseMTU(%q) = %v", bad, err)
		}
	}
	if negotiateMTU(verbs.MTU4096, verbs.MTU1024) != verbs.MTU1024 || negotiateMTU(verbs.MTU1024, verbs.MTU4096) != verbs.MTU1024 ||
		negotiateMTU(verbs.MTU2048, 0) != verbs.MTU2048 || negotiateMTU(verbs.MTU2048, 9) != verbs.MTU2048 {
		t.Error("negotiateMTU")
	}
	if got := (SysData{4096, 64}).Max(SysData{65536, 32}); got != (SysData{65536, 64}) {
		t.Errorf("Max = %+v", got)
	}
	if s := LocalSysData(); s.CycleBuffer <= 0 || s.CacheLineSize <= 0 {
		t.Errorf("LocalSysData = %+v", s)
	}
}

func TestReportItems(t *testing.T) {
	// The client's report of testdata/real-write_bw.txt: 65536 bytes,
	// 10 iterations, then the doubles, big-endian.
	wire := [][]byte{
		{0, 0, 0, 0, 0, 1, 0, 0}, {0, 0, 0, 0, 0, 0, 0, 10},
		{0x40, 0x30, 0x0d, 0x3d, 0x3d, 0x66, 0xbd, 0x26},
		{0x40, 0x19, 0xdd, 0xf6, 0xdd, 0xd4, 0x2f, 0xfb},
		{0x3f, 0x1b, 0x1f, 0xa2, 0x03, 0x32, 0x15, 0xf7},
	}
	r := reportFromItems(wire)
	if r.Size != 65536 || r.Iters != 10 || math.Abs(r.BWPeak-16.05) > 0.01 || math.Abs(r.BWAvg-6.47) > 0.01 || math.Abs(r.MsgRate-0.000103) > 1e-6 {
		t.Fatalf("decoded %+v", r)
	}
	items := r.reportItems(false)
	for i := range wire {
		if !bytes.Equal(items[i], wire[i]) {
			t.Errorf("item %d = %x, want %x", i, items[i], wire[i])
		}
	}
	if n := len(r.reportItems(true)); n != 9 {
		t.Errorf("per-port items: %d", n)
	}
	sum := r.Add(BWReport{BWPeak: 1, BWAvg: 2, MsgRate: 3})
	if sum.Size != r.Size || sum.BWPeak != r.BWPeak+1 || sum.BWAvg != r.BWAvg+2 || sum.MsgRate != r.MsgRate+3 {
		t.Errorf("Add = %+v", sum)
	}
}

// TestCMKeyMsg decodes the key messages of rxe's ib_write_bw -R
// (cm/testdata/rxe-perftest-R.pcap, frames 31 and 33) and encodes them
// back byte for byte.
func TestCMKeyMsg(t *testing.T) {
	for _, h := range []string{
		"0000000000000001000000140046aff60000083600000000000055ab7a36400000000000000000000000ffffc00002020000000000000001",
		"00000000000000010000001400974e0b0000073f00000000000055fa5cf7e00000000000000000000000ffffc00002010000000000000001",
	} {
		b, _ := hex.DecodeString(h)
		k, err := ParseCMKeyMsg(b)
		if err != nil {
			t.Fatal(err)
		}
		if k.OutReads != 1 || k.QPN != 0x14 || k.GIDIndex != 1 || !k.GID.IsIPv4() || k.VAddr>>40 != 0x55 {
			t.Fatalf("%+v", k)
		}
		if got := k.MarshalCM(); !bytes.Equal(got, b) {
			t.Fatalf("re-encoded\n%x\nwant\n%x", got, b)
		}
	}
	for n := 0; n < CMKeyMsgSize; n++ {
		if _, err := ParseCMKeyMsg(make([]byte, n)); err == nil {
			t.Fatalf("a %d-byte key message parsed", n)
		}
	}
	bad := KeyMsg{QPN: 1 << 24}.MarshalCM()
	if _, err := ParseCMKeyMsg(bad); err == nil {
		t.Fatal("a 25-bit QPN parsed")
	}
}
