package rdmacm_test

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/cm"
	"github.com/sroce/sroce/rdmacm"
	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/roce/memlink"
)

// TestDeviceReplaced: a device that closes leaves the CM (its agent is
// forgotten), and a device opened later on the same address (the daemon's
// interface deleted and created again) takes its binds.
func TestDeviceReplaced(t *testing.T) {
	p := newPair(t, memlink.Impairments{}, rdmacm.Config{})
	p.a.dev.Close()
	// wall clock: waits for the agent's goroutine to let go of the old CM
	for deadline := time.Now().Add(5 * time.Second); len(p.a.cm.Stats()) != 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the CM still runs on %d devices 5s after its only device closed", len(p.a.cm.Stats()))
		}
	}
	gid := bth.GIDFromAddr(p.a.addr)
	dev, err := roce.Open(p.router.NewPort(net.HardwareAddr{2, 0, 0, 0, 9, 0x11}, 1500),
		&roce.Options{Name: "cm0-again", GIDs: []bth.GID{gid}})
	if err != nil {
		t.Fatal(err)
	}
	if err := dev.Start(); err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	if err := p.a.cm.AddPort(&rdmacm.StaticPort{Dev: dev}); err != nil {
		t.Fatal(err)
	}
	if st := p.a.cm.Stats(); len(st) != 1 || st[0].Device != "cm0-again" {
		t.Fatalf("the CM runs on %+v, want cm0-again only", st)
	}
	id, err := p.a.cm.CreateID(p.a.ch, cm.PortSpaceTCP, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer id.Destroy()
	if err := id.BindAddr(netip.AddrPortFrom(p.a.addr, 7600)); err != nil {
		t.Fatal(err)
	}
	if id.Device() != dev {
		t.Fatalf("bound to %v, want the device opened again", id.Device().Name())
	}
}
