package oob

import (
	"github.com/sroce/sroce/bth"
	"math"
	"testing"
	"time"
)

// The expected strings in this file were printed by glibc's printf and
// inet_ntop (gcc, Debian bookworm) with the reference tools' own format
// strings and the same values.

func TestCAltHex(t *testing.T) {
	for _, c := range []struct {
		v     uint64
		width int
		want  string
	}{
		{0, 4, "0000"}, {0, 6, "000000"}, {0, 8, "00000000"}, {0, 16, "0000000000000000"},
		{1, 4, "0x01"}, {1, 6, "0x0001"}, {1, 8, "0x000001"}, {1, 16, "0x00000000000001"},
		{0x13, 4, "0x13"}, {0x13, 6, "0x0013"}, {0x13, 8, "0x000013"},
		{0xffff, 4, "0xffff"}, {0xffff, 6, "0xffff"}, {0xffff, 8, "0x00ffff"},
		{0x7a0e1, 4, "0x7a0e1"}, {0x7a0e1, 6, "0x7a0e1"}, {0x7a0e1, 8, "0x07a0e1"},
		{0x123456, 6, "0x123456"}, {0xfffffe, 8, "0xfffffe"},
		{0x7f30e35a0000, 16, "0x007f30e35a0000"}, {math.MaxUint64, 16, "0xffffffffffffffff"},
	} {
		if got := cAltHex(c.v, c.width); got != c.want {
			t.Errorf("cAltHex(%#x, %d) = %q, want %q", c.v, c.width, got, c.want)
		}
	}
}

func TestCFloat(t *testing.T) {
	z := 0.0
	negNaN := z / z // x86 produces the NaN with the sign bit set, as C does
	for _, c := range []struct {
		f           float64
		width, prec int
		want        string
	}{
		{0, -7, 2, "0.00   "}, {6.47, -7, 2, "6.47   "}, {16.05, -7, 2, "16.05  "},
		{1234567.891, -7, 2, "1234567.89"}, {0.000103, -7, 6, "0.000103"}, {1e-9, -7, 6, "0.000000"},
		{123456789.5, 0, 2, "123456789.50"}, {6.47, -7, 6, "6.470000"},
		{math.Inf(1), -7, 2, "inf    "}, {math.Inf(-1), -7, 2, "-inf   "}, {math.Copysign(math.NaN(), -1), -7, 2, "-nan   "},
		{math.Copysign(math.NaN(), 1), 0, 2, "nan"},
	} {
		if got := cFloat(c.f, c.width, c.prec); got != c.want {
			t.Errorf("cFloat(%v, %d, %d) = %q, want %q", c.f, c.width, c.prec, got, c.want)
		}
	}
	if math.Signbit(negNaN) {
		if got := cFloat(negNaN, 0, 2); got != "-nan" {
			t.Errorf("cFloat(0/0) = %q, want -nan", got)
		}
	}
}

func TestCG(t *testing.T) {
	for _, c := range []struct {
		f    float64
		want string
	}{
		{0, "0"}, {6.47, "6.47"}, {16.05, "16.05"}, {1234567.891, "1.23457e+06"}, {0.000103, "0.000103"},
		{1e-9, "1e-09"}, {123456789.5, "1.23457e+08"}, {1e6, "1e+06"}, {123456.7, "123457"},
		{1234567.0, "1.23457e+06"}, {0.0001, "0.0001"}, {0.00001234, "1.234e-05"},
		{math.Inf(1), "inf"}, {math.Copysign(math.NaN(), 1), "nan"}, {math.Copysign(math.NaN(), -1), "-nan"},
	} {
		if got := cG(c.f); got != c.want {
			t.Errorf("cG(%v) = %q, want %q", c.f, got, c.want)
		}
	}
}

func TestFormatGID(t *testing.T) {
	for _, c := range []struct {
		gid  bth.GID
		text string // glibc inet_ntop(AF_INET6)
		wire string // rdma-core gid_to_wire_gid on x86-64
	}{
		{bth.GID{10: 0xff, 11: 0xff, 12: 192, 13: 0, 14: 2, 15: 1}, "::ffff:192.0.2.1", "00000000000000000000ffffc0000201"},
		{bth.GID{}, "::", "00000000000000000000000000000000"},
		{bth.GID{0xfe, 0x80, 8: 0x50, 9: 0x54, 10: 0, 11: 0xff, 12: 0xfe, 13: 0x5e, 14: 0, 15: 1}, "fe80::5054:ff:fe5e:1", "fe80000000000000505400fffe5e0001"},
		{bth.GID{15: 1}, "::1", "00000000000000000000000000000001"},
		{bth.GID{12: 10, 15: 1}, "::10.0.0.1", "0000000000000000000000000a000001"},
		{bth.GID{10: 0xff, 11: 0xff}, "::ffff:0.0.0.0", "00000000000000000000ffff00000000"},
		{bth.GID{0x20, 0x01, 0x0d, 0xb8, 7: 1, 15: 1}, "2001:db8:0:1::1", "20010db8000000010000000000000001"},
		{bth.GID{0x20, 0x01, 0x0d, 0xb8, 9: 1, 15: 1}, "2001:db8::1:0:0:1", "20010db8000000000001000000000001"},
		{bth.GID{0x20, 0x01, 3: 1, 5: 1, 7: 1, 9: 1, 11: 1, 13: 1, 15: 1}, "2001:1:1:1:1:1:1:1", "20010001000100010001000100010001"},
		{bth.GID{1: 1}, "1::", "00010000000000000000000000000000"},
		{bth.GID{10: 0xff, 11: 0xfe, 12: 1, 13: 2, 14: 3, 15: 4}, "::fffe:102:304", "00000000000000000000fffe01020304"},
		{bth.GID{14: 1, 15: 2}, "::102", "00000000000000000000000000000102"},
	} {
		if got := FormatGID(c.gid); got != c.text {
			t.Errorf("GID %x: FormatGID = %q, want %q", c.gid[:], got, c.text)
		}
		if got := WireGID(c.gid); got != c.wire {
			t.Errorf("GID %x: WireGID = %q, want %q", c.gid[:], got, c.wire)
		}
		back, err := ParseWireGID(c.wire)
		if err != nil || back != c.gid {
			t.Errorf("ParseWireGID(%q) = %x, %v", c.wire, back[:], err)
		}
	}
	for _, bad := range []string{"", "00", "00000000000000000000ffffc000020", "00000000000000000000ffffc00002011", "0000000000000000000gffffc0000201"} {
		if _, err := ParseWireGID(bad); err == nil {
			t.Errorf("ParseWireGID(%q) succeeded", bad)
		}
	}
	mapped := bth.GID{10: 0xff, 11: 0xff, 12: 192, 15: 1}
	if !GIDIsIPv4Mapped(mapped) || GIDIsIPv4Mapped(bth.GID{0xfe, 0x80}) || !GIDIsIPv4Mapped(bth.GID{0xff, 0x0e, 10: 0xff, 11: 0xff}) {
		t.Error("IsIPv4Mapped")
	}
	if GIDInterfaceID(mapped) != 0x0000ffffc0000001 || GIDInterfaceID(bth.GID{}) != 0 {
		t.Error("InterfaceID")
	}
}

func TestPingpongLines(t *testing.T) {
	d := Dest{LID: 0, QPN: 0x11, PSN: 0x74cfce, GID: bth.GID{10: 0xff, 11: 0xff, 12: 192, 13: 0, 14: 2, 15: 1}}
	if got, want := PingpongLocalLine(d), "  local address:  LID 0x0000, QPN 0x000011, PSN 0x74cfce, GID ::ffff:192.0.2.1\n"; got != want {
		t.Errorf("local line %q, want %q", got, want)
	}
	if got, want := UDPingpongLocalLine(d), "  local address:  LID 0x0000, QPN 0x000011, PSN 0x74cfce: GID ::ffff:192.0.2.1\n"; got != want {
		t.Errorf("UD local line %q, want %q", got, want)
	}
	if got, want := PingpongRemoteLine(d), "  remote address: LID 0x0000, QPN 0x000011, PSN 0x74cfce, GID ::ffff:192.0.2.1\n"; got != want {
		t.Errorf("remote line %q, want %q", got, want)
	}
	for _, c := range []struct {
		size, iters uint32
		elapsed     time.Duration
		want        string
	}{
		{4096, 1000, 12345 * time.Microsecond,
			"8192000 bytes in 0.01 seconds = 5308.71 Mbit/sec\n1000 iters in 0.01 seconds = 12.35 usec/iter\n"},
		{4096, 1000, 10000 * time.Microsecond,
			"8192000 bytes in 0.01 seconds = 6553.60 Mbit/sec\n1000 iters in 0.01 seconds = 10.00 usec/iter\n"},
		// The float32 the tools keep the time in loses the last digit here.
		{1, 7, 16777217 * time.Microsecond,
			"14 bytes in 16.78 seconds = 0.00 Mbit/sec\n7 iters in 16.78 seconds = 2396745.25 usec/iter\n"},
		{1, 1, 0, "2 bytes in 0.00 seconds = inf Mbit/sec\n1 iters in 0.00 seconds = 0.00 usec/iter\n"},
	} {
		if got := PingpongResultLines(c.size, c.iters, c.elapsed); got != c.want {
			t.Errorf("PingpongResultLines(%d, %d, %v) = %q, want %q", c.size, c.iters, c.elapsed, got, c.want)
		}
	}
}
