package verbs

import (
	"strconv"
	"testing"
)

func TestPortMTU(t *testing.T) {
	// Values rxe reported as active_mtu in the guest for these netdev
	// MTUs, plus the rounding edges.
	for _, c := range []struct {
		ifMTU int
		want  int
		enum  MTU
	}{
		{1500, 1024, MTU1024},
		{9000, 4096, MTU4096},
		{1100, 512, MTU512},
		{576, 256, MTU256},
		{68, 256, MTU256},
		{0, 256, MTU256},
		{336, 256, MTU256},
		{591, 256, MTU256},
		{592, 512, MTU512},
		{1103, 512, MTU512},
		{1104, 1024, MTU1024},
		{2127, 1024, MTU1024},
		{2128, 2048, MTU2048},
		{4175, 2048, MTU2048},
		{4176, 4096, MTU4096},
		{65535, 4096, MTU4096},
	} {
		if got := PortMTU(c.ifMTU); got != c.enum || got.Bytes() != c.want {
			t.Errorf("PortMTU(%d) = %v, want %d", c.ifMTU, got, c.want)
		}
	}
}

func TestMTUEnum(t *testing.T) {
	for b, m := range map[int]MTU{256: 1, 512: 2, 1024: 3, 2048: 4, 4096: 5} {
		got, ok := MTUFromBytes(b)
		if !ok || got != m {
			t.Errorf("MTUFromBytes(%d) = %d, %v; want %d", b, got, ok, m)
		}
		if m.Bytes() != b || m.String() != strconv.Itoa(b) {
			t.Errorf("MTU %d: Bytes %d String %q", m, m.Bytes(), m.String())
		}
	}
	for _, b := range []int{0, 1000, 1500, 8192, -1} {
		if _, ok := MTUFromBytes(b); ok {
			t.Errorf("MTUFromBytes(%d) accepted", b)
		}
	}
	if MTU(0).Bytes() != 0 || MTU(6).Bytes() != 0 || MTU(6).String() != "MTU(6)" {
		t.Error("invalid enum values")
	}
}
