package netns

// A link is a port, not a lifetime: two sroce daemons on a veth pair, with
// Debian's ib_write_bw running through them, while their interfaces flap
// (ip link set down/up on one side, the peer's end down and up: carrier
// loss), flap fifty times in a row, get a new address, and are deleted and
// created again. The daemons live through all of it; a Go client's context
// on the device gets the verbs events (PORT_ERR, PORT_ACTIVE, GID_CHANGE,
// DEVICE_FATAL), and a new run works after each.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/client"
	"github.com/sroce/sroce/internal/nsutil"
	"github.com/sroce/sroce/verbs"
)

// ctl.PortAttr's state as QUERY_PORT gives it (enum ibv_port_state).
const (
	portDown   = uint32(verbs.PortDown)
	portActive = uint32(verbs.PortActive)
)

// awaitEvent reads x's asynchronous events until one of type want comes,
// within 10s. Address events the kernel makes on the way (IPv6 addresses
// leave with the link) may come first, as may PORT_ERR before
// DEVICE_FATAL; any other event fails the test.
func awaitEvent(t *testing.T, x *client.Context, want verbs.EventType) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ev, err := x.AsyncEvent(time.Until(deadline))
		if err != nil {
			t.Fatalf("waiting for %v: %v", want, err)
		}
		got := verbs.EventType(ev.EventType)
		switch {
		case got == want:
			return
		case got == verbs.EventGIDChange, got == verbs.EventPortErr && want == verbs.EventDeviceFatal:
			t.Logf("%v while waiting for %v", got, want)
		default:
			t.Fatalf("asynchronous event %v, want %v", got, want)
		}
	}
}

// checkPort checks the port state that QUERY_PORT and QUERY_STATS give.
func checkPort(t *testing.T, x *client.Context, want uint32) {
	t.Helper()
	pa, err := x.QueryPort()
	if err != nil {
		t.Fatal(err)
	}
	phys := uint8(3) // disabled
	stat := "PORT_DOWN"
	if want == portActive {
		phys, stat = 5, "PORT_ACTIVE" // link up
	}
	if pa.State != want || pa.PhysState != phys {
		t.Errorf("QUERY_PORT: state %d phys_state %d, want %d and %d", pa.State, pa.PhysState, want, phys)
	}
	st, err := x.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.PortState != stat {
		t.Errorf("QUERY_STATS: port state %s, want %s", st.PortState, stat)
	}
}

// alive checks that both daemons run and answer on their sockets.
func (d *daemonPair) alive(t *testing.T) {
	t.Helper()
	for i, p := range d.procs {
		if p.exited() {
			t.Fatalf("daemon %d ended:\n%s", i, p.stderr.String())
		}
		if _, err := client.Devices(d.sockets[i]); err != nil {
			t.Fatalf("daemon %d does not answer: %v", i, err)
		}
	}
}

// procCounts returns what process pid holds: descriptors, mappings,
// threads.
func procCounts(t *testing.T, pid int) (fds, maps, threads int) {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(st), "\n") {
		if v, ok := strings.CutPrefix(l, "Threads:"); ok {
			threads, _ = strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return len(ents), strings.Count(string(b), "\n"), threads
}

// writeBW is the real tool the link tests run.
var writeBW = realTool{"ib_write_bw", "-n 500 -s 65536", "-x"}

// TestDaemonLinks runs the link events against one pair of daemons, in
// order: flaps under a running ib_write_bw, fifty flaps with the daemon's
// descriptors, mappings and threads watched, an address added, the veth
// deleted and created again.
func TestDaemonLinks(t *testing.T) {
	laneParallel(t, 9*time.Second, needHost)
	needRealTools(t)
	d := startDaemonsIn(t, "sroce-links", "xdp", false)
	ifA, ifB := d.pair.Veth.NameA, d.pair.Veth.NameB
	open := func(t *testing.T) *client.Context {
		t.Helper()
		x, err := client.Open(d.sockets[0], d.devs[0])
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { x.Close() })
		return x
	}

	t.Run("flaps under ib_write_bw", func(t *testing.T) {
		x := open(t)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// Long enough to be running through both flaps: it runs until
		// the flaps are over, and must then finish by itself.
		args := []string{"-d", d.devs[0], "-x", d.gidIdx(t, 0), "-p", "18700", "-s", "65536", "-n", "8000"}
		srv := d.runIn(t, ctx, true, false, nil, "ib_write_bw", args...)
		if err := listening(ctx, d.pair.A, srv, 18700); err != nil {
			t.Fatal(err)
		}
		args = []string{"-d", d.devs[1], "-x", d.gidIdx(t, 1), "-p", "18700", "-s", "65536", "-n", "8000",
			d.pair.Veth.AddrA[0].Addr().String()}
		cli := d.runIn(t, ctx, false, false, nil, "ib_write_bw", args...)
		// The flaps begin once WRITEs arrive at A.
		if err := waitFor(ctx, "ib_write_bw's WRITEs to arrive", func() (bool, error) {
			if cli.exited() {
				return false, fmt.Errorf("ib_write_bw ended before the flaps:\n%v", cli.wait(ctx))
			}
			st, err := x.Stats()
			if err != nil {
				return false, err
			}
			for _, c := range st.Engine {
				if c.Name == "rcvd_pkts" && c.Value > 2000 {
					return true, nil
				}
			}
			return false, nil
		}); err != nil {
			t.Fatal(err)
		}
		for _, fall := range []struct {
			name   string
			ns     *nsutil.Namespace
			ifname string
		}{{"ip link set down (A)", d.pair.A, ifA}, {"carrier loss (B's end down)", d.pair.B, ifB}} {
			if err := fall.ns.SetLinkUp(fall.ifname, false); err != nil {
				t.Fatal(err)
			}
			awaitEvent(t, x, verbs.EventPortErr)
			checkPort(t, x, portDown)
			if cli.exited() {
				t.Errorf("%s: ib_write_bw ended while the link was down:\n%v", fall.name, cli.wait(ctx))
			}
			if err := fall.ns.SetLinkUp(fall.ifname, true); err != nil {
				t.Fatal(err)
			}
			awaitEvent(t, x, verbs.EventPortActive)
			checkPort(t, x, portActive)
			d.alive(t)
		}
		// As on rxe the QPs lived through the falls (perftest's retry_cnt
		// 7 retries for ever): the run goes on to its end.
		c := cli.wait(ctx)
		s := srv.wait(ctx)
		checkReal(t, realTool{"ib_write_bw", "-n 8000 -s 65536", "-x"}, s, c)
		srvOut, cliOut := d.realPair(t, writeBW, 18701, false, nil)
		checkReal(t, writeBW, srvOut, cliOut)
	})

	t.Run("50 flaps", func(t *testing.T) {
		x := open(t)
		flap := func() {
			t.Helper()
			if err := d.pair.A.SetLinkUp(ifA, false); err != nil {
				t.Fatal(err)
			}
			awaitEvent(t, x, verbs.EventPortErr)
			if err := d.pair.A.SetLinkUp(ifA, true); err != nil {
				t.Fatal(err)
			}
			awaitEvent(t, x, verbs.EventPortActive)
		}
		pid := d.procs[0].cmd.Process.Pid
		for i := 0; i < 3; i++ { // the daemon's first flaps may grow what it keeps
			flap()
		}
		fds0, maps0, thr0 := procCounts(t, pid)
		start := time.Now()
		for i := 0; i < 50; i++ {
			flap()
		}
		fds1, maps1, thr1 := procCounts(t, pid)
		t.Logf("50 flaps in %v: descriptors %d -> %d, mappings %d -> %d, threads %d -> %d",
			time.Since(start).Round(time.Millisecond), fds0, fds1, maps0, maps1, thr0, thr1)
		// Slack: none for descriptors (a leak per flap would be 50); a
		// few mappings for the Go heap and stacks growing; threads may
		// grow by the runtime's spare M or two.
		if fds1 > fds0 {
			t.Errorf("descriptors %d -> %d over 50 flaps", fds0, fds1)
		}
		if maps1 > maps0+8 {
			t.Errorf("mappings %d -> %d over 50 flaps", maps0, maps1)
		}
		if thr1 > thr0+2 {
			t.Errorf("threads %d -> %d over 50 flaps", thr0, thr1)
		}
		checkPort(t, x, portActive)
		d.alive(t)
		srv, cli := d.realPair(t, writeBW, 18702, false, nil)
		checkReal(t, writeBW, srv, cli)
	})

	t.Run("address added", func(t *testing.T) {
		x := open(t)
		extra := netip.MustParsePrefix("10.66.0.1/24")
		if err := d.pair.A.AddAddr(ifA, extra); err != nil {
			t.Fatal(err)
		}
		awaitEvent(t, x, verbs.EventGIDChange)
		want := bth.GIDFromAddr(extra.Addr())
		found := false
		for i := 0; i < 16 && !found; i++ {
			g, err := x.QueryGID(i)
			found = err == nil && g == want
		}
		if !found {
			t.Errorf("GID of %v not in the device's table after GID_CHANGE", extra.Addr())
		}
		if err := d.pair.A.DelAddr(ifA, extra); err != nil {
			t.Fatal(err)
		}
		awaitEvent(t, x, verbs.EventGIDChange)
	})

	t.Run("deleted and created again", func(t *testing.T) {
		x := open(t)
		v := d.pair.Veth
		if err := v.Close(); err != nil { // both ends go
			t.Fatal(err)
		}
		awaitEvent(t, x, verbs.EventDeviceFatal)
		if _, err := x.AsyncEvent(10 * time.Second); !errors.Is(err, io.EOF) {
			t.Errorf("after DEVICE_FATAL: %v, want the connection closed", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for i := range d.sockets {
			if err := waitFor(ctx, fmt.Sprintf("daemon %d to drop its device", i), func() (bool, error) {
				devs, err := client.Devices(d.sockets[i])
				return err == nil && len(devs) == 0, err
			}); err != nil {
				t.Fatal(err)
			}
		}
		d.alive(t)
		// Created down, as ip link add leaves it: the daemons serve it
		// at once, DOWN, and ACTIVE once it is up.
		nv, err := nsutil.NewVeth(d.pair.A, d.pair.B, nsutil.VethConfig{NameA: ifA, NameB: ifB,
			AddrA: v.AddrA, AddrB: v.AddrB, MTU: v.MTUA, MTUB: v.MTUB, Down: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nv.Close() })
		d.pair.Veth = nv
		for i := range d.sockets {
			if err := waitFor(ctx, fmt.Sprintf("daemon %d to serve the new %s, DOWN", i, d.devs[i]), func() (bool, error) {
				st, err := client.Stats(d.sockets[i], d.devs[i])
				return err == nil && st.PortState == "PORT_DOWN", nil
			}); err != nil {
				t.Fatal(err)
			}
		}
		if err := errors.Join(d.pair.A.SetLinkUp(ifA, true), d.pair.B.SetLinkUp(ifB, true)); err != nil {
			t.Fatal(err)
		}
		for i := range d.sockets {
			if err := waitFor(ctx, fmt.Sprintf("daemon %d to serve %s again, ACTIVE", i, d.devs[i]), func() (bool, error) {
				devs, err := client.Devices(d.sockets[i])
				if err != nil || len(devs) != 1 || devs[0].Name != d.devs[i] {
					return false, err
				}
				st, err := client.Stats(d.sockets[i], d.devs[i])
				return err == nil && st.PortState == "PORT_ACTIVE", nil
			}); err != nil {
				t.Fatal(err)
			}
		}
		y := open(t)
		checkPort(t, y, portActive)
		srv, cli := d.realPair(t, writeBW, 18703, false, nil)
		checkReal(t, writeBW, srv, cli)
		// The daemons' RDMA CM runs on the devices opened again.
		if _, err := exec.LookPath("rping"); err != nil {
			t.Log("rping is not installed (rdmacm-utils): the CM on the devices opened again is not tried")
		} else {
			tool := cmTool{"rping", "rping", "-s -a {addrA} -p 7481 -C 10 -v", "", "-c -a {addrA} -p 7481 -C 10 -v", countPings(10)}
			srv, cli = d.cmPair(t, tool)
			if !srv.OK() || !cli.OK() {
				t.Errorf("rping after the interfaces came back:\nserver: %v\nclient: %v", srv, cli)
			} else if problem := tool.check(srv, cli); problem != "" {
				t.Error(problem)
			}
		}
		d.alive(t)
	})
}
