package netns

// RDMA CM multicast with Debian's mckey (rdmacm-utils) through `sroce run`
// and the drop-in librdmacm, between two sroce daemons in two namespaces
// over AF_XDP: a receiver joins a group in A (its daemon's link joins the
// IP group on A's veth), a sender in B joins it too and sends ten
// datagrams to the group, and the receiver, which completes only once its
// QP has received all ten, and the sender both end well.

import (
	"context"
	"strings"
	"testing"
	"time"
)

// mckeyGroup is the group the multicast tests join.
const mckeyGroup = "239.1.7.9"

// mckeyJoined is what mckey prints once its join's event has come (and
// librdmacm attached its QP to the group).
const mckeyJoined = "mckey: joined dgid: ::ffff:" + mckeyGroup

// checkMckey checks one mckey's outcome: it joined the group, moved its
// ten messages (a receiver prints "data transfers complete" only after
// ten receive completions) and left.
func checkMckey(t testing.TB, side string, o toolOutcome) {
	t.Helper()
	for _, want := range []string{mckeyJoined, "data transfers complete", "return status 0"} {
		if !strings.Contains(o.Stdout, want) {
			t.Errorf("the %s mckey did not print %q:\n%v", side, want, o)
		}
	}
	if !o.OK() || strings.Contains(o.Stdout+o.Stderr, "failure") {
		t.Errorf("the %s mckey failed:\n%v", side, o)
	}
}

// TestRealMckeyDaemonsXDP runs mckey's receiver in A and its sender in B
// through the daemons.
func TestRealMckeyDaemonsXDP(t *testing.T) {
	needCMTools(t)
	d := startDaemonsIn(t, "cmM-daemon", "xdp", false)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	addrA, addrB := d.pair.Veth.AddrA[0].Addr().String(), d.pair.Veth.AddrB[0].Addr().String()
	// stdbuf: mckey's lines as it prints them, to see the join.
	rx := d.runIn(t, ctx, true, false, nil, "stdbuf", "-oL", "mckey", "-m", mckeyGroup, "-b", addrA)
	if err := waitFor(ctx, "the receiving mckey to join", func() (bool, error) {
		return strings.Contains(rx.stdout.String(), mckeyJoined) || rx.exited(), nil
	}); err != nil {
		t.Fatal(err)
	}
	if rx.exited() {
		t.Fatalf("the receiving mckey ended before it joined:\n%v", rx.wait(ctx))
	}
	// The QP's attach made daemon A's link join the IP group on the veth.
	if out, err := d.pair.A.Exec(ctx, "ip", "maddr", "show", "dev", d.pair.Veth.NameA); err != nil ||
		!strings.Contains(string(out), "inet  "+mckeyGroup) {
		t.Errorf("%s is not a member of %s while the receiver runs (%v):\n%s", d.pair.Veth.NameA, mckeyGroup, err, out)
	}
	tx := d.runIn(t, ctx, false, false, nil, "mckey", "-m", mckeyGroup, "-b", addrB, "-s").wait(ctx)
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	ro := rx.wait(wctx)
	wcancel()
	checkMckey(t, "sending", tx)
	checkMckey(t, "receiving", ro)
}
