package roce_test

import (
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/roce/linkcap"
	"github.com/sroce/sroce/roce/memlink"
	"github.com/sroce/sroce/verbs"
)

// claimsLend forwards a memlink port and says it lends, without the
// methods: a wrapper that forwards Caps and drops the fast path.
type claimsLend struct{ *memlink.Port }

func (l claimsLend) Caps() linkcap.Caps { return l.Port.Caps() | linkcap.Lend }

// TestOpenRefusesCapsWithoutInterface checks that a device does not open
// on a link whose Caps name an interface it lacks, and says which.
func TestOpenRefusesCapsWithoutInterface(t *testing.T) {
	r := memlink.NewRouter(roce.SystemClock(), 1, memlink.Impairments{})
	port := r.NewPort(net.HardwareAddr{2, 0, 0, 0, 0, 1}, 1500)
	d, err := roce.Open(claimsLend{port}, nil)
	if err == nil {
		d.Close()
		t.Fatal("a device opened on a link that claims to lend without roce.Lender")
	}
	if !strings.Contains(err.Error(), "lend-rx|lend-tx") || !strings.Contains(err.Error(), "roce.Lender") {
		t.Errorf("error %q does not name the capability and the interface", err)
	}
	d, err = roce.Open(port, nil)
	if err != nil {
		t.Fatalf("the bare port: %v", err)
	}
	d.Close()
}

// groupLink is a memlink port that must be told of multicast groups; it
// records the joins and how many memberships are open.
type groupLink struct {
	*memlink.Port
	joins []netip.Addr
	open  map[netip.Addr]int
}

func (l *groupLink) Caps() linkcap.Caps { return l.Port.Caps() | linkcap.Groups }

func (l *groupLink) JoinGroup(g netip.Addr) (io.Closer, error) {
	l.joins = append(l.joins, g)
	l.open[g]++
	return closerFunc(func() error { l.open[g]--; return nil }), nil
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }

// TestMcastMembershipsInDevice checks that the device keeps the
// memberships: a link is told to join a group once, when its first QP
// attaches, and the membership is closed with the last detach, or when
// the device closes.
func TestMcastMembershipsInDevice(t *testing.T) {
	var gl *groupLink
	b := newBed(t, bedOpts{Nodes: 1, LinkMTU: 1500, Link: func(i int, p *memlink.Port) roce.Link {
		gl = &groupLink{Port: p, open: map[netip.Addr]int{}}
		return gl
	}})
	n := b.Nodes[0]
	g1, g2 := netip.MustParseAddr("239.0.0.1"), netip.MustParseAddr("239.0.0.2")
	var qs []*roce.QP
	for i := 0; i < 3; i++ {
		qs = append(qs, b.CreateQP(n, rcOpts{QPType: verbs.QPTypeUD, MaxWR: 1, MaxSGE: 1}, nil))
	}
	for _, q := range qs {
		if err := q.AttachMcast(bth.GIDFromAddr(g1), 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := qs[0].AttachMcast(bth.GIDFromAddr(g2), 0); err != nil {
		t.Fatal(err)
	}
	if len(gl.joins) != 2 || gl.open[g1] != 1 || gl.open[g2] != 1 {
		t.Fatalf("joins %v, open %v: want each group joined once", gl.joins, gl.open)
	}
	qs[1].DetachMcast(bth.GIDFromAddr(g1), 0)
	qs[2].DetachMcast(bth.GIDFromAddr(g1), 0)
	if gl.open[g1] != 1 {
		t.Errorf("group 1 left while a QP is attached: open %v", gl.open)
	}
	qs[0].DetachAllMcast()
	if gl.open[g1] != 0 || gl.open[g2] != 0 {
		t.Errorf("memberships open after the last detach: %v", gl.open)
	}
	if err := qs[1].AttachMcast(bth.GIDFromAddr(g2), 0); err != nil {
		t.Fatal(err)
	}
	n.Dev.Close()
	if gl.open[g2] != 0 || len(gl.joins) != 3 {
		t.Errorf("after Close: joins %v, open %v; want 3 joins, none open", gl.joins, gl.open)
	}
}
