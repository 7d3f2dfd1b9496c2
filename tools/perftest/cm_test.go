package perftest

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sroce/sroce/internal/nsutil"
	"github.com/sroce/sroce/internal/testpair"
	"github.com/sroce/sroce/tools/oob"
)

// cmPairs runs tool pairs for the RDMA CM tests on two loopback addresses
// of their own.
var cmPairs = &testpair.Pairs{
	Run:       runTool,
	Server:    netip.MustParseAddr("127.99.65.3"),
	Client:    netip.MustParseAddr("127.99.65.4"),
	FirstPort: 20900,
}

// TestRDMACMPairs runs perftest tools connected with RDMA CM (-R: the
// exchange and the test's QP; -z: the exchange only) sroce against sroce,
// and checks both sides finish with their report.
func TestRDMACMPairs(t *testing.T) {
	t.Setenv("SROCE_LINK", "udp")
	for _, tc := range []struct {
		cmd  string
		args []string
	}{
		{"write-bw", []string{"-R", "-s", "4096", "-n", "200"}},
		{"read-bw", []string{"-R", "-s", "4096", "-n", "200"}},
		{"send-bw", []string{"-R", "-s", "1024", "-n", "200"}},
		{"write-lat", []string{"-R", "-s", "64", "-n", "100"}},
		{"send-lat", []string{"-R", "-s", "64", "-n", "100"}},
		{"write-bw", []string{"-z", "-s", "4096", "-n", "200"}},
	} {
		t.Run(tc.cmd+strings.Join(tc.args, ""), func(t *testing.T) {
			srv, cli := cmPairs.RunPair(t, tc.cmd, "Waiting for client to connect", tc.args, tc.args)
			if srv.Code != 0 || cli.Code != 0 {
				t.Fatalf("server: %v\nclient: %v", srv, cli)
			}
			for _, r := range []testpair.Result{srv, cli} {
				if !strings.Contains(r.Stdout, "rdma_cm QPs") || !strings.Contains(r.Stdout, "Data ex. method : rdma_cm") {
					t.Errorf("the report does not say RDMA CM:\n%s", r.Stdout)
				}
			}
			if !strings.Contains(cli.Stdout, "#bytes") {
				t.Errorf("client printed no results:\n%s", cli.Stdout)
			}
		})
	}
}

// TestRDMACMXDPNamespaces runs write-bw -R between two network namespaces
// over AF_XDP on a veth pair, as between two hosts.
func TestRDMACMXDPNamespaces(t *testing.T) {
	nsutil.Skip(t)
	t.Setenv("SROCE_LINK", "xdp")
	ns, err := nsutil.NewPair(nsutil.PairConfig{Prefix: "cmA"})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	run := func(n *nsutil.Namespace, args []string) (*testpair.Buffer, *testpair.Buffer, <-chan int) {
		out, errw := &testpair.Buffer{}, &testpair.Buffer{}
		done := make(chan int, 1)
		go func() {
			code := -1
			n.Do(func() error {
				code = Run(context.Background(), oob.WriteBW, args, out, errw)
				return nil
			})
			done <- code
		}()
		return out, errw, done
	}
	sout, serr, sdone := run(ns.A, []string{"-d", ns.Veth.NameA, "-R", "-s", "65536", "-n", "100"})
	for !strings.Contains(sout.String(), "Waiting for client") {
		select {
		case code := <-sdone:
			t.Fatalf("server ended: %d\n%s%s", code, sout, serr)
		case <-time.After(10 * time.Millisecond):
		}
	}
	cout, cerr, cdone := run(ns.B, []string{"-d", ns.Veth.NameB, "-R", "-s", "65536", "-n", "100", nsutil.DefaultAddrA.Addr().String()})
	for _, r := range []struct {
		who       string
		done      <-chan int
		out, errw *testpair.Buffer
	}{{"client", cdone, cout, cerr}, {"server", sdone, sout, serr}} {
		select {
		case code := <-r.done:
			if code != 0 {
				t.Fatalf("%s exit %d\n%s%s", r.who, code, r.out, r.errw)
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("%s did not finish in 60 s\n%s%s", r.who, r.out, r.errw)
		}
	}
	if !strings.Contains(cout.String(), " 65536      100") {
		t.Fatalf("client's report:\n%s", cout)
	}
}
