package netns

// RDMA CM multicast with Debian's mckey (rdmacm-utils) through `sroce run`
// and the drop-in librdmacm: between two sroce daemons in two namespaces
// over AF_XDP, and against mckey on rdma_rxe, each side once the receiver.
// A receiver joins a group (its daemon's link, or rxe's rdma_cm, joins the
// IP group on the interface), a sender joins it too and sends ten
// datagrams to the group, and the receiver, which completes only once its
// QP has received all ten, and the sender both end well.

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sroce/sroce/interop"
)

// mckeyGroup is the group the veth test joins.
const mckeyGroup = "239.1.7.9"

// mckeyJoined is what mckey prints once its join's event has come (and
// librdmacm attached its QP to the group).
func mckeyJoined(group string) string { return "mckey: joined dgid: ::ffff:" + group }

// checkMckey checks one mckey's outcome: it joined the group, moved its
// ten messages (a receiver prints "data transfers complete" only after
// ten receive completions) and left.
func checkMckey(t testing.TB, side, group string, o toolOutcome) {
	t.Helper()
	for _, want := range []string{mckeyJoined(group), "data transfers complete", "return status 0"} {
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
		return strings.Contains(rx.stdout.String(), mckeyJoined(mckeyGroup)) || rx.exited(), nil
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
	checkMckey(t, "sending", mckeyGroup, tx)
	checkMckey(t, "receiving", mckeyGroup, ro)
}

// TestMckeyShimRxe runs mckey through the shim against mckey on rdma_rxe,
// each side once the receiver: the group's datagrams go between the
// daemon's engine and rxe.
func TestMckeyShimRxe(t *testing.T) {
	rigTestParallel(t, 10*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	rig := newShimRxeRig(ctx, t)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the guest after the runs:\n%s", rig.GuestState(context.Background()))
		}
	})
	guest, shim := rig.PeerAddr().String(), interop.ShimAddr.Addr().String()

	t.Run("rxe-receiver", func(t *testing.T) {
		const group, out = "239.1.7.10", "/tmp/sroce-mckey-rx.out"
		// stdbuf: mckey's lines in the file as it prints them, to see
		// the join.
		rx, err := rig.StartPeer(ctx, "stdbuf -oL mckey -m "+group+" -b "+guest+" >"+out+" 2>&1; rc=$?; cat "+out+"; exit $rc")
		if err != nil {
			t.Fatal(err)
		}
		if err := waitFor(ctx, "rxe's mckey to join", func() (bool, error) {
			res, err := rig.RunPeer(ctx, "cat "+out+" 2>/dev/null")
			if err != nil {
				return false, err
			}
			done, err := rx.Exited(ctx)
			return strings.Contains(string(res.Stdout), mckeyJoined(group)) || done, err
		}); err != nil {
			t.Fatal(err)
		}
		so, se, serr := runShim(ctx, rig, "mckey", "-m", group, "-b", shim, "-s")
		wctx, wcancel := context.WithTimeout(ctx, 2*time.Minute)
		res, werr := rx.Wait(wctx)
		wcancel()
		ro := toolOutcome{Exit: res.ExitCode, Stdout: string(res.Stdout), Stderr: string(res.Stderr)}
		if werr != nil {
			ro.Exit = -1
		}
		tx := toolOutcome{Exit: exitOf(serr), Stdout: so, Stderr: se}
		checkMckey(t, "sending (the shim's)", group, tx)
		checkMckey(t, "receiving (rxe's)", group, ro)
	})

	t.Run("shim-receiver", func(t *testing.T) {
		const group = "239.1.7.11"
		cmd, err := rig.ShimCommand(ctx, "stdbuf", "-oL", "mckey", "-m", group, "-b", shim)
		if err != nil {
			t.Fatal(err)
		}
		rx := startTool(t, cmd, (*exec.Cmd).Start)
		if err := waitFor(ctx, "the shim's mckey to join", func() (bool, error) {
			return strings.Contains(rx.stdout.String(), mckeyJoined(group)) || rx.exited(), nil
		}); err != nil {
			t.Fatal(err)
		}
		res, err := rig.RunPeer(ctx, "mckey -m "+group+" -b "+guest+" -s")
		tx := toolOutcome{Exit: res.ExitCode, Stdout: string(res.Stdout), Stderr: string(res.Stderr)}
		if err != nil {
			t.Errorf("rxe's mckey: %v", err)
		}
		wctx, wcancel := context.WithTimeout(ctx, 2*time.Minute)
		ro := rx.wait(wctx)
		wcancel()
		checkMckey(t, "sending (rxe's)", group, tx)
		checkMckey(t, "receiving (the shim's)", group, ro)
	})
}

// exitOf is a command's exit status from its error: 0, its code, or -1
// when it did not exit by itself.
func exitOf(err error) int {
	if err == nil {
		return 0
	}
	if ee, ok := err.(*exec.ExitError); ok && ee.Exited() {
		return ee.ExitCode()
	}
	return -1
}
