package netif

import (
	"errors"
	"net/netip"
	"strconv"
	"testing"
	"time"
)

func TestPathMTU(t *testing.T) {
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
		if got := PathMTU(c.ifMTU); got != c.want {
			t.Errorf("PathMTU(%d) = %d, want %d", c.ifMTU, got, c.want)
		}
		if got := PathMTUEnum(c.ifMTU); got != c.enum {
			t.Errorf("PathMTUEnum(%d) = %d, want %d", c.ifMTU, got, c.enum)
		}
	}
}

func TestMTUEnum(t *testing.T) {
	for b, m := range map[int]MTU{256: 1, 512: 2, 1024: 3, 2048: 4, 4096: 5} {
		got, err := MTUFromBytes(b)
		if err != nil || got != m {
			t.Errorf("MTUFromBytes(%d) = %d, %v; want %d", b, got, err, m)
		}
		if m.Bytes() != b || m.String() != strconv.Itoa(b) {
			t.Errorf("MTU %d: Bytes %d String %q", m, m.Bytes(), m.String())
		}
	}
	for _, b := range []int{0, 1000, 1500, 8192, -1} {
		if _, err := MTUFromBytes(b); err == nil {
			t.Errorf("MTUFromBytes(%d) accepted", b)
		}
	}
	if MTU(0).Bytes() != 0 || MTU(6).Bytes() != 0 || MTU(6).String() != "MTU(6)" {
		t.Error("invalid enum values")
	}
}

func TestNoAnswerError(t *testing.T) {
	e := &NoAnswerError{IP: netip.MustParseAddr("10.0.0.2"), Ifname: "veth0", Wait: 3*time.Second + 2*time.Millisecond}
	if got, want := e.Error(), "no ARP answer from 10.0.0.2 on veth0 within 3s"; got != want {
		t.Errorf("Error = %q, want %q", got, want)
	}
	e = &NoAnswerError{IP: netip.MustParseAddr("fd00::2"), Ifname: "eth1", Wait: 1500 * time.Millisecond}
	if got, want := e.Error(), "no ND answer from fd00::2 on eth1 within 1.5s"; got != want {
		t.Errorf("Error = %q, want %q", got, want)
	}
	if !errors.Is(e, ErrNoNeighbor) {
		t.Error("not ErrNoNeighbor")
	}
}

func TestNeighState(t *testing.T) {
	if NeighReachable.String() != "REACHABLE" || NeighNone.String() != "NONE" ||
		(NeighStale|NeighPermanent).String() != "STALE|PERMANENT" {
		t.Error("NeighState strings")
	}
	for _, s := range []NeighState{NeighReachable, NeighStale, NeighDelay, NeighProbe, NeighPermanent, NeighNoARP} {
		if !s.Usable() {
			t.Errorf("%v not usable", s)
		}
	}
	for _, s := range []NeighState{NeighNone, NeighIncomplete, NeighFailed} {
		if s.Usable() {
			t.Errorf("%v usable", s)
		}
	}
	if OperUp.String() != "UP" || OperLowerLayerDown.String() != "LOWERLAYERDOWN" {
		t.Error("OperState strings")
	}
}
