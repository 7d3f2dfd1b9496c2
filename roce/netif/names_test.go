package netif

import (
	"errors"
	"net/netip"
	"testing"
	"time"
)

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
