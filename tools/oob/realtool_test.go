package oob

// Against the real tools: an rdma_rxe guest (Debian bookworm, perftest
// 4.5+0.17, ibverbs-utils 44.0) runs the reference tools, and this
// package's exchange talks to them from a host namespace on the same
// bridge. There is no data path here (the engine lives elsewhere), so
// only the tools whose other side stays passive during the run can finish
// completely: the servers of ib_write_bw, ib_read_bw, ib_atomic_bw,
// ib_read_lat and ib_atomic_lat. For the others the test checks that the
// exchange reaches the run, on both sides, and then stops the real tool.
//
// Needs root, qemu, debootstrap (the image is cached; the first build
// takes a few minutes and a Debian mirror) and is skipped otherwise, and
// with -short.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/internal/nsutil"
	"github.com/sroce/sroce/internal/rxeguest"
	"github.com/sroce/sroce/verbs"
)

// realEnv is one guest and one host namespace on a bridge.
type realEnv struct {
	guest *rxeguest.Guest
	host  *rxeguest.Host
	// hostNS is the host's namespace, where this side's sockets are made.
	hostNS *nsutil.Namespace
	// hostGID is the IPv4-mapped GID of the host's address, which this
	// side announces (no engine answers on it).
	hostGID bth.GID
}

var (
	realGuestAddr = netip.MustParsePrefix("192.0.2.1/24")
	realHostAddr  = netip.MustParsePrefix("192.0.2.10/24")
)

func newRealEnv(t *testing.T, ctx context.Context) *realEnv {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipping: the real-tool tests need root (network namespaces, tap devices and an rxe guest)")
	}
	rxeguest.Skip(t)
	img, err := rxeguest.ImageOptions{Logf: t.Logf}.Ensure(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v := img.Packages["perftest"]; v != "4.5+0.17-1" {
		t.Fatalf("guest image has perftest %q, want Debian bookworm's 4.5+0.17-1", v)
	}
	lan, err := rxeguest.NewLAN(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lan.Close() })
	g, err := lan.Boot(ctx, img, rxeguest.Config{Name: "rxe-oob", IP: realGuestAddr})
	if err != nil {
		t.Fatal(err)
	}
	h, err := lan.AddHost(ctx, rxeguest.HostConfig{IP: realHostAddr})
	if err != nil {
		t.Fatal(err)
	}
	ns, err := nsutil.Open(h.NS.Name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	e := &realEnv{guest: g, host: h, hostNS: ns}
	a := realHostAddr.Addr().As4()
	e.hostGID = bth.GID{10: 0xff, 11: 0xff, 12: a[0], 13: a[1], 14: a[2], 15: a[3]}
	return e
}

// start runs cmd in the guest with line-buffered output, so that a tool
// stopped with Kill still leaves what it printed.
func (e *realEnv) start(t *testing.T, ctx context.Context, cmd string) *rxeguest.Proc {
	t.Helper()
	p, err := e.guest.Start(ctx, "exec stdbuf -oL -eL "+cmd)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// stop kills p if it still runs and returns its output.
func stop(t *testing.T, ctx context.Context, p *rxeguest.Proc) rxeguest.Result {
	t.Helper()
	if done, _ := p.Exited(ctx); !done {
		p.Kill(ctx)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	res, err := p.Wait(wctx)
	if err != nil {
		t.Fatalf("collecting the guest tool's output: %v", err)
	}
	return res
}

// dial connects from the host namespace to the guest, retrying while the
// tool there starts up.
func (e *realEnv) dial(t *testing.T, ctx context.Context) net.Conn {
	t.Helper()
	addr := netip.AddrPortFrom(realGuestAddr.Addr(), DefPort).String()
	var nc net.Conn
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := e.hostNS.Do(func() error {
			var err error
			nc, err = Dial(ctx, addr, 5*time.Second)
			return err
		})
		if err == nil {
			return nc
		}
		if time.Now().After(deadline) {
			t.Fatalf("connecting to the guest tool: %v", err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// listen opens the exchange's port in the host namespace.
func (e *realEnv) listen(t *testing.T, ctx context.Context) net.Listener {
	t.Helper()
	var ln net.Listener
	err := e.hostNS.Do(func() error {
		var err error
		ln, err = Listen(ctx, fmt.Sprintf(":%d", DefPort))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

var errNoDataPath = errors.New("no data path in this test")

func TestRealTools(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping the real-tool tests in -short mode")
	}
	// Beside TestClosingHandshakeAfterSilentPeerHost, which mostly
	// sleeps: each has a network of its own.
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	e := newRealEnv(t, ctx)
	guestGID := bth.GID{10: 0xff, 11: 0xff, 12: 192, 13: 0, 14: 2, 15: 1}

	// Our client against the real perftest servers.
	for _, test := range Tests {
		t.Run("perftest-server/"+test.ToolName(), func(t *testing.T) {
			size := uint64(DefSizeLat)
			if test.IsBW() {
				size = 4096
			}
			if test.Verb() == VerbAtomic {
				size = 8
			}
			args := fmt.Sprintf("%s -d rxe0 -x 1 -n 5", test.ToolName())
			if test.Verb() != VerbAtomic {
				args += fmt.Sprintf(" -s %d", size)
			}
			srv := e.start(t, ctx, args)
			c := NewConn(e.dial(t, ctx), Client)
			c.Timeouts = Timeouts{Step: 30 * time.Second, PeerRun: 30 * time.Second}
			pro, err := c.Prologue(ctx, LocalSysData(), verbs.MTU1024)
			if err != nil {
				t.Fatal(err)
			}
			if pro.PeerVersion != "6.06" || pro.MTU != verbs.MTU1024 {
				t.Errorf("prologue %+v", pro)
			}
			local := KeyMsg{OutReads: 1, QPN: 0x4321, PSN: 0x123456, RKey: 0xabcd, VAddr: 0x7f0000001000, GID: e.hostGID}
			if test.Verb() == VerbRead || test.Verb() == VerbAtomic {
				local.OutReads = 16
			}
			report := BWReport{Size: size, Iters: 5, BWPeak: 12.5, BWAvg: 10.25, MsgRate: 0.002625}
			passive := test == WriteBW || test == ReadBW || test == AtomicBW || test == ReadLat || test == AtomicLat
			var remote []KeyMsg
			_, err = c.Run(ctx, Flow{Test: test, Sizes: []uint64{size}}, []KeyMsg{local}, Hooks{
				Connect: func(r []KeyMsg) error { remote = r; return nil },
				Run: func(uint64) (BWReport, error) {
					if !passive {
						return BWReport{}, errNoDataPath
					}
					return report, nil
				},
			})
			res := stop(t, ctx, srv)
			out := string(res.Stdout)
			t.Logf("%s server:\n%s%s", test.ToolName(), out, res.Stderr)
			if passive {
				if err != nil {
					t.Fatalf("exchange: %v", err)
				}
				if res.ExitCode != 0 {
					t.Errorf("%s exited with %d", test.ToolName(), res.ExitCode)
				}
			} else if !errors.Is(err, errNoDataPath) {
				t.Fatalf("exchange: %v", err)
			}
			if len(remote) != 1 || remote[0].GID != guestGID || remote[0].QPN == 0 {
				t.Errorf("the server's keys: %+v", remote)
			}
			// The server printed our keys, and a BW server our result.
			if want := AddressLine("remote", test, local, true); !strings.Contains(out, want) {
				t.Errorf("server output lacks %q", want)
			}
			if want := AddressLine("local", test, remote[0], true); !strings.Contains(out, want) {
				t.Errorf("server output lacks %q", want)
			}
			if test == WriteBW || test == ReadBW || test == AtomicBW {
				p, _ := ParsePerftest(test, nil)
				if want := BWRow(p, report); !strings.Contains(out, want) {
					t.Errorf("server output lacks the row %q", want)
				}
			}
		})
	}

	t.Run("perftest-server/old-version", func(t *testing.T) {
		srv := e.start(t, ctx, "ib_write_bw -d rxe0 -x 1 -n 5")
		c := NewConn(e.dial(t, ctx), Client)
		c.Version = "5.60"
		_, err := c.Prologue(ctx, LocalSysData(), verbs.MTU1024)
		res := stop(t, ctx, srv)
		wantKind(t, err, ErrPeerClosed)
		if res.ExitCode == 0 || !strings.Contains(string(res.Stderr), "not compatible with versions older than 5.70") {
			t.Errorf("ib_write_bw: exit %d: %s", res.ExitCode, res.Stderr)
		}
	})

	// The real perftest client against our server: the exchange reaches the
	// run; with nobody answering its RDMA traffic, the client is then
	// stopped and our server reports the closed connection.
	for _, test := range []Test{WriteBW, SendBW, ReadLat} {
		t.Run("perftest-client/"+test.ToolName(), func(t *testing.T) {
			ln := e.listen(t, ctx)
			cli := e.start(t, ctx, fmt.Sprintf("%s -d rxe0 -x 1 -n 5 %s", test.ToolName(), realHostAddr.Addr()))
			c, err := AcceptPerftest(ctx, ln, Timeouts{Step: 60 * time.Second, PeerRun: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Prologue(ctx, LocalSysData(), verbs.MTU1024); err != nil {
				t.Fatal(err)
			}
			local := KeyMsg{OutReads: 1, QPN: 0x4321, PSN: 0x123456, RKey: 0xabcd, VAddr: 0x7f0000001000, GID: e.hostGID}
			ready := make(chan []KeyMsg, 1)
			errc := make(chan error, 1)
			go func() {
				_, err := c.Run(ctx, Flow{Test: test, Sizes: []uint64{DefSizeLat}}, []KeyMsg{local}, Hooks{
					Connect: func([]KeyMsg) error { return nil },
					Ready:   func(r []KeyMsg) error { ready <- r; return nil },
					Run:     func(uint64) (BWReport, error) { return BWReport{}, errNoDataPath },
				})
				errc <- err
			}()
			var remote []KeyMsg
			select {
			case remote = <-ready:
			case err := <-errc:
				t.Fatalf("exchange ended before the run: %v", err)
			case <-time.After(2 * time.Minute):
				t.Fatal("the key phase did not complete")
			}
			time.Sleep(time.Second)
			res := stop(t, ctx, cli)
			err = <-errc
			t.Logf("%s client:\n%s%s\nserver side: %v", test.ToolName(), res.Stdout, res.Stderr, err)
			if test == SendBW {
				if !errors.Is(err, errNoDataPath) {
					t.Errorf("server side: %v", err)
				}
			} else if !errors.Is(err, ErrPeerClosed) && !errors.Is(err, ErrTimeout) {
				t.Errorf("server side: %v", err)
			}
			if len(remote) != 1 || remote[0].GID != guestGID {
				t.Errorf("the client's keys: %+v", remote)
			}
			if want := AddressLine("remote", test, local, true); !strings.Contains(string(res.Stdout), want) {
				t.Errorf("client output lacks %q", want)
			}
		})
	}

	// Pingpong, both ways. The real tools start their data transfer right
	// after the exchange, which nothing answers here; they are stopped
	// once the exchange is over.
	for _, ud := range []bool{false, true} {
		tool := "ibv_rc_pingpong"
		if ud {
			tool = "ibv_ud_pingpong"
		}
		local := Dest{QPN: 0x4321, PSN: 0x123456, GID: e.hostGID}
		t.Run("pingpong-server/"+tool, func(t *testing.T) {
			srv := e.start(t, ctx, tool+" -g 1")
			remote, err := PingpongClient(ctx, e.dial(t, ctx), Timeouts{Step: 30 * time.Second}, local, nil)
			time.Sleep(time.Second)
			res := stop(t, ctx, srv)
			t.Logf("%s server:\n%s%s", tool, res.Stdout, res.Stderr)
			if err != nil {
				t.Fatal(err)
			}
			if remote.GID != guestGID || remote.QPN == 0 {
				t.Errorf("server address %+v", remote)
			}
			if want := PingpongRemoteLine(local); !strings.Contains(string(res.Stdout), want) {
				t.Errorf("server output lacks %q", want)
			}
		})
		t.Run("pingpong-client/"+tool, func(t *testing.T) {
			ln := e.listen(t, ctx)
			cli := e.start(t, ctx, fmt.Sprintf("%s -g 1 %s", tool, realHostAddr.Addr()))
			remote, err := ServePingpong(ctx, ln, Timeouts{Step: 60 * time.Second}, local, nil)
			time.Sleep(time.Second)
			res := stop(t, ctx, cli)
			t.Logf("%s client:\n%s%s", tool, res.Stdout, res.Stderr)
			if err != nil {
				t.Fatal(err)
			}
			if remote.GID != guestGID || remote.QPN == 0 {
				t.Errorf("client address %+v", remote)
			}
			if want := PingpongRemoteLine(local); !strings.Contains(string(res.Stdout), want) {
				t.Errorf("client output lacks %q", want)
			}
		})
	}
}
