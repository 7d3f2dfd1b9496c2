package netif

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/sroce/sroce/internal/nsutil"
)

// TestWaitActive waits for an interface that is down, then deleted, then
// created again under the same name: WaitActive returns only once the new
// one is up with carrier, and returns ctx's error when ctx ends first;
// WaitInterface without a condition returns once it exists.
func TestWaitActive(t *testing.T) {
	tp := newTopo(t, nsutil.VethConfig{})
	name := tp.Veth.NameA
	if ifc, err := tp.hA.WaitActive(ctxFor(t, 5*time.Second), name); err != nil || ifc.Index != tp.Veth.IndexA {
		t.Fatalf("an active interface: %v, %v", ifc, err)
	}
	if err := tp.A.SetLinkUp(name, false); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := tp.hA.WaitActive(ctx, name); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a down interface: %v, want the context's deadline", err)
	}
	if ifc, err := tp.hA.WaitInterface(ctxFor(t, 5*time.Second), name, nil); err != nil || ifc.Up {
		t.Fatalf("a down interface that exists: %+v, %v", ifc, err)
	}
	if err := tp.Veth.Close(); err != nil {
		t.Fatal(err)
	}
	type result struct {
		ifc *Interface
		err error
	}
	got := make(chan result, 1)
	go func() {
		ifc, err := tp.hA.WaitActive(ctxFor(t, 10*time.Second), name)
		got <- result{ifc, err}
	}()
	v, err := nsutil.NewVeth(tp.A, tp.B, nsutil.VethConfig{NameA: name, NameB: tp.Veth.NameB,
		AddrA: []netip.Prefix{netip.PrefixFrom(tp.ipA, 24)}, AddrB: []netip.Prefix{netip.PrefixFrom(tp.ipB, 24)}})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	r := <-got
	if r.err != nil || r.ifc.Index != v.IndexA || !r.ifc.Active() {
		t.Fatalf("the interface created again (index %d): %+v, %v", v.IndexA, r.ifc, r.err)
	}
}
