package rdmacm_test

import (
	"context"
	"testing"

	"github.com/sroce/sroce/internal/nsutil"
	"github.com/sroce/sroce/rdmacm"
	"github.com/sroce/sroce/roce/iface"
)

// TestXDPVethConnect connects two CMs in two network namespaces over
// AF_XDP on a veth pair, as two hosts would: the address is resolved
// through the kernel's route and neighbour table, the MADs and the data
// cross the veth, both sides disconnect cleanly.
func TestXDPVethConnect(t *testing.T) {
	ns := nsutil.NewTestPair(t, nsutil.PairConfig{Prefix: "cmA"})
	open := func(n *nsutil.Namespace, ifname string) *host {
		t.Helper()
		var port *iface.Port
		if err := n.Do(func() (err error) {
			port, err = iface.Open(context.Background(), ifname, iface.Options{Mode: iface.ModeXDP})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { port.Close() })
		c, err := rdmacm.New(rdmacm.Config{}, port)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return &host{dev: port.Device(), addr: port.LocalAddr(), cm: c, ch: rdmacm.NewEventChannel()}
	}
	p := &pair{a: open(ns.A, ns.Veth.NameA), b: open(ns.B, ns.Veth.NameB)}
	p.a.addr, p.b.addr = nsutil.DefaultAddrA.Addr(), nsutil.DefaultAddrB.Addr()
	act, pas := connect(t, p, 7174)
	if act.SGIDIndex() != 1 || act.PathMTU().Bytes() != 1024 {
		t.Errorf("active side: GID index %d (the IPv4 GID is 1), path MTU %v", act.SGIDIndex(), act.PathMTU())
	}
	sendRecv(t, act, pas, []byte("over the veth"))
	sendRecv(t, pas, act, []byte("and back"))
	must(t, pas.Disconnect())
	expect(t, p.a.ch, rdmacm.EventDisconnected)
	expect(t, p.b.ch, rdmacm.EventDisconnected)
	for _, s := range append(p.a.cm.Stats(), p.b.cm.Stats()...) {
		t.Logf("%s: sent %d received %d dropped %v", s.Device, s.MADsSent, s.MADsReceived, s.Dropped)
		if len(s.Dropped) != 0 || s.Resends != 0 {
			t.Errorf("%s: %+v", s.Device, s)
		}
	}
}
