package netns

// sroce's own tools through sroce daemons: when a daemon serves the
// interface a tool is given, the tool uses the daemon's device (the
// daemon holds the interface's AF_XDP queue, so the tool could not open
// one of its own there). Every tool pair of TestToolsVeth runs between two
// daemons in two namespaces, each side as a client of its daemon, with
// sroce's data checks on; each run must have gone through the daemons'
// engines.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sroce/sroce/client"
)

// ownPair runs sroce's tool cmd with args through the daemons (server in
// A, client in B) and returns both outcomes.
func (d *daemonPair) ownPair(t testing.TB, cmd string, args ...string) (srv, cli toolOutcome) {
	return d.ownPairAs(t, false, cmd, args...)
}

// ownPairAs is ownPair, the tools run as nobody when nobody is set.
func (d *daemonPair) ownPairAs(t testing.TB, nobody bool, cmd string, args ...string) (srv, cli toolOutcome) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// The link is the daemon's; the tools would take an AF_XDP link only
	// for a device of their own, which they must not open here.
	env := []string{"SROCE_LINK=xdp"}
	if nobody {
		// sroce run builds its library into a cache nobody can write.
		cache := filepath.Join(filepath.Dir(d.sockets[0]), "cache")
		os.MkdirAll(cache, 0o777)
		os.Chmod(cache, 0o777)
		env = append(env, "XDG_CACHE_HOME="+cache, "HOME="+cache)
	}
	s := d.runIn(t, ctx, true, nobody, env, d.bin, append([]string{cmd, "-d", d.pair.Veth.NameA}, args...)...)
	if err := listening(ctx, d.pair.A, s, 18515); err != nil {
		t.Fatal(err)
	}
	c := d.runIn(t, ctx, false, nobody, env, d.bin,
		append(append([]string{cmd, "-d", d.pair.Veth.NameB}, args...), d.pair.Veth.AddrA[0].Addr().String())...)
	cli = c.wait(ctx)
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	srv = s.wait(wctx)
	wcancel()
	return srv, cli
}

// received returns the packets daemon i's device received.
func (d *daemonPair) received(t *testing.T, i int) uint64 {
	t.Helper()
	st, err := client.Stats(d.sockets[i], d.devs[i])
	if err != nil {
		t.Fatalf("daemon %d's counters: %v", i, err)
	}
	for _, c := range st.Engine {
		if c.Name == "rcvd_pkts" {
			return c.Value
		}
	}
	t.Fatalf("daemon %d has no rcvd_pkts counter", i)
	return 0
}

// TestOwnToolsDaemonsXDP runs every tool pair of TestToolsVeth, and the
// tools with completion events, through two daemons over AF_XDP.
func TestOwnToolsDaemonsXDP(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping sroce's tools through the daemons in -short mode")
	}
	d := startDaemons(t, "xdp", false)
	cases := append(vethCases[:len(vethCases):len(vethCases)], []struct{ name, cmd, args string }{
		{"send-lat/events", "send-lat", "-x 1 -n 200 -s 64 -e"},
		{"send-bw/events", "send-bw", "-x 1 -n 500 -s 8192 -e"},
		{"send-bw/UC", "send-bw", "-x 1 -n 300 -s 1024 -c UC"},
	}...)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rcvd := d.received(t, 0)
			srv, cli := d.ownPair(t, c.cmd, strings.Fields(c.args)...)
			checkOwn(t, c.cmd, srv, cli)
			// The server's daemon received the client's traffic: the
			// tools ran on the daemons' devices, not devices of their own
			// (every case sends the server at least 100 packets).
			if got := d.received(t, 0) - rcvd; got < 100 {
				t.Errorf("the server's daemon received %d packets during the run: the tools did not use it", got)
			}
		})
	}
}

// TestOwnToolsDaemonsUDPUnprivileged runs a few tool pairs between two
// daemons on the UDP link, daemons and tools as nobody: no privilege
// anywhere.
func TestOwnToolsDaemonsUDPUnprivileged(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping sroce's tools through the daemons in -short mode")
	}
	d := startDaemons(t, "udp", true)
	for _, c := range []struct{ name, cmd, args string }{
		{"rc-pingpong", "rc-pingpong", "-g 1 -n 200 -s 4096 -c"},
		{"write-bw", "write-bw", "-x 1 -n 500 -s 65536"},
		{"read-bw", "read-bw", "-x 1 -n 300 -s 16384"},
		{"send-lat", "send-lat", "-x 1 -n 200 -s 64"},
		{"atomic-bw", "atomic-bw", "-x 1 -n 500"},
	} {
		t.Run(c.name, func(t *testing.T) {
			rcvd := d.received(t, 0)
			srv, cli := d.ownPairAs(t, true, c.cmd, strings.Fields(c.args)...)
			checkOwn(t, c.cmd, srv, cli)
			if got := d.received(t, 0) - rcvd; got < 100 {
				t.Errorf("the server's daemon received %d packets during the run: the tools did not use it", got)
			}
		})
	}
}

// checkOwn checks both sides of a run of sroce's tool cmd: each ran to its
// result, and said nothing on standard error (the READ and atomic tools
// print perftest's notes there).
func checkOwn(t testing.TB, cmd string, srv, cli toolOutcome) {
	t.Helper()
	checkSides(t, cmd, cmd, srv, cli, true)
}

// TestOwnToolsDaemonRDMACM checks that -R on a daemon's device says it
// cannot, in one sentence, and does not hang.
func TestOwnToolsDaemonRDMACM(t *testing.T) {
	d := startDaemons(t, "xdp", false)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := d.runIn(t, ctx, true, false, nil, d.bin, "write-bw", "-d", d.pair.Veth.NameA, "-x", "1", "-R")
	o := p.wait(ctx)
	want := fmt.Sprintf("%s is the sroce daemon's device: sroce's tools run -R and --rdma_cm only on a device of their own", d.devs[0])
	if o.Exit != 1 || !strings.Contains(o.Stderr, want) {
		t.Errorf("write-bw -R on the daemon's device: want exit 1 and %q, got %v", want, o)
	}
}

// TestOwnToolDaemonKilled kills the client's daemon in the middle of a
// run: the client ends within seconds, saying the daemon went away,
// instead of waiting out its stall limit.
func TestOwnToolDaemonKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping the killed daemon in -short mode")
	}
	d := startDaemons(t, "xdp", false)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	env := []string{"SROCE_LINK=xdp", "SROCE_STALL_TIMEOUT=10s"}
	args := []string{"write-bw", "-x", "1", "-s", "65536", "-D", "60"}
	s := d.runIn(t, ctx, true, false, env, d.bin, append(append([]string{}, args...), "-d", d.pair.Veth.NameA)...)
	if err := listening(ctx, d.pair.A, s, 18515); err != nil {
		t.Fatal(err)
	}
	rcvd := d.received(t, 0)
	c := d.runIn(t, ctx, false, false, env, d.bin, append(args, "-d", d.pair.Veth.NameB, d.pair.Veth.AddrA[0].Addr().String())...)
	if err := waitFor(ctx, "the WRITEs to flow", func() (bool, error) {
		if c.exited() {
			return false, fmt.Errorf("the client ended:\n%v", c.wait(ctx))
		}
		return d.received(t, 0)-rcvd > 1000, nil
	}); err != nil {
		t.Fatal(err)
	}
	d.procs[1].cmd.Process.Kill()
	killed := time.Now()
	o := c.wait(ctx)
	took := time.Since(killed)
	want := fmt.Sprintf("serves %s no longer", d.devs[1])
	if o.Exit != 1 || !strings.Contains(o.Stderr, want) {
		t.Errorf("client after its daemon was killed: want exit 1 and %q, got %v", want, o)
	}
	if took > 8*time.Second {
		t.Errorf("the client took %v to notice its daemon was gone (its stall limit is 10s)", took.Round(time.Millisecond))
	}
	t.Logf("the client ended %v after its daemon was killed: %s", took.Round(time.Millisecond), strings.TrimSpace(o.Stderr))
	s.cmd.Process.Kill()
}
