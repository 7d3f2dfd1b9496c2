package rping

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sroce/sroce/internal/buildinfo"
	"github.com/sroce/sroce/internal/nsutil"
	"github.com/sroce/sroce/internal/testpair"
)

// Two addresses of lo used by no other package's tests: the UDP link binds
// port 4791 on each.
var (
	serverAddr = netip.MustParseAddr("127.99.65.1")
	clientAddr = netip.MustParseAddr("127.99.65.2")
)

func runRping(args []string) (*testpair.Buffer, *testpair.Buffer, <-chan int) {
	return testpair.Go(func(out, errw io.Writer) int { return Main(context.Background(), args, out, errw) })
}

func wait(t *testing.T, done <-chan int, who string, out, errw *testpair.Buffer) int {
	t.Helper()
	select {
	case code := <-done:
		return code
	case <-time.After(90 * time.Second):
		t.Fatalf("%s did not finish in 90 s\nstdout:\n%s\nstderr:\n%s", who, out, errw)
	}
	return 0
}

func needUDPLink(t *testing.T) {
	t.Helper()
	t.Setenv("SROCE_LINK", "udp")
}

// pingLines returns what the real rping prints for count pings of size.
func pingLines(prefix string, count, size int) string {
	var b strings.Builder
	start := byte(65)
	for ping := 0; ping < count; ping++ {
		s := []byte(fmt.Sprintf("rdma-ping-%d: ", ping))
		c := start
		for len(s) < size-1 {
			s = append(s, c)
			c++
			if c > 122 {
				c = 65
			}
		}
		start++
		if start > 122 {
			start = 65
		}
		fmt.Fprintf(&b, "%sping data: %s\n", prefix, s)
	}
	return b.String()
}

// TestRpingPair runs sroce's rping server and client against each other on
// two loopback addresses, as "rping -s" and "rping -c" are run, and
// checks their output line for line against what rping prints.
func TestRpingPair(t *testing.T) {
	needUDPLink(t)
	for _, tc := range []struct {
		name  string
		extra []string
		size  int
	}{
		{"default", nil, 64},
		{"size 100 validate", []string{"-S", "100", "-V"}, 100},
		{"self-created QP", []string{"-q"}, 64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const count = 5
			sargs := append([]string{"-s", "-a", serverAddr.String(), "-p", "7174", "-v", "-C", "5"}, tc.extra...)
			sout, serr, sdone := runRping(sargs)
			time.Sleep(300 * time.Millisecond) // the server binds and listens
			cargs := append([]string{"-c", "-a", serverAddr.String(), "-I", clientAddr.String(), "-p", "7174", "-v", "-C", "5"}, tc.extra...)
			cout, cerr, cdone := runRping(cargs)
			ccode := wait(t, cdone, "client", cout, cerr)
			scode := wait(t, sdone, "server", sout, serr)
			if ccode != 0 || scode != 0 {
				t.Fatalf("client exit %d\n%s%s\nserver exit %d\n%s%s", ccode, cout, cerr, scode, sout, serr)
			}
			if got, want := cout.String(), pingLines("", count, tc.size); got != want {
				t.Errorf("client printed\n%s\nwant\n%s", got, want)
			}
			if got, want := sout.String(), pingLines("server ", count, tc.size); got != want {
				t.Errorf("server printed\n%s\nwant\n%s", got, want)
			}
			// What the real rping prints on stderr when the client ends
			// the run (seen with rdma-core 44's rping).
			if got, want := serr.String(), "server DISCONNECT EVENT...\nwait for RDMA_READ_ADV state 10\n"; got != want {
				t.Errorf("server stderr %q, want %q", got, want)
			}
			if got, want := cerr.String(), "client DISCONNECT EVENT...\n"; got != want {
				t.Errorf("client stderr %q, want %q", got, want)
			}
		})
	}
}

// TestRpingNoServer: a client whose server does not listen is REJECTED
// (reason 8) and exits 1, where rping's CM thread exit(-1)s.
func TestRpingNoServer(t *testing.T) {
	needUDPLink(t)
	// A listener-less device at the server address: a server on another
	// port.
	sout, serr, sdone := runRping([]string{"-s", "-a", serverAddr.String(), "-p", "7175"})
	time.Sleep(300 * time.Millisecond)
	cout, cerr, cdone := runRping([]string{"-c", "-a", serverAddr.String(), "-I", clientAddr.String(), "-p", "7176", "-C", "1"})
	if code := wait(t, cdone, "client", cout, cerr); code != exitFail {
		t.Fatalf("client exit %d, want %d\n%s%s", code, exitFail, cout, cerr)
	}
	if !strings.Contains(cerr.String(), "cma event RDMA_CM_EVENT_REJECTED, error 8") {
		t.Fatalf("client stderr %q", cerr)
	}
	// Now a client for the server, which ends it.
	cout, cerr, cdone = runRping([]string{"-c", "-a", serverAddr.String(), "-I", clientAddr.String(), "-p", "7175", "-C", "1"})
	if code := wait(t, cdone, "client", cout, cerr); code != 0 {
		t.Fatalf("client exit %d\n%s%s", code, cout, cerr)
	}
	if code := wait(t, sdone, "server", sout, serr); code != 0 {
		t.Fatalf("server exit %d\n%s%s", code, sout, serr)
	}
}

// TestRpingUsage: a bad command line is named on stderr with the usage,
// status 2; -h and --version answer on stdout.
func TestRpingUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-x"}, "unknown flag -x"},
		{[]string{"--bogus"}, "unknown flag --bogus"},
		{nil, "give -s (server) or -c (client)"},
		{[]string{"-c", "-S", "10"}, `invalid value "10" for -S: invalid size 10 (valid range is 26 to 65535)`},
		{[]string{"-s", "--count", "-1"}, `invalid value "-1" for --count: invalid count -1`},
		{[]string{"-c", "-p"}, "flag -p needs a value"},
		{[]string{"-c", "-p", "70000"}, `invalid value "70000" for -p: not a port number`},
		{[]string{"-s", "-t", "4"}, "-t (type of service) is not supported by sroce"},
		{[]string{"-s", "extra"}, `rping takes no arguments, not ["extra"]`},
	} {
		out, errw, done := runRping(c.args)
		code := wait(t, done, "rping", out, errw)
		if code != exitUsage || out.String() != "" || !strings.HasPrefix(errw.String(), "sroce rping: "+c.want+"\n") ||
			!strings.Contains(errw.String(), "usage: sroce rping -s|-c") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2 and %q", c.args, code, out, errw, c.want)
		}
	}
	for _, args := range [][]string{{"-h"}, {"--help"}, {"-s", "--help"}} {
		out, errw, done := runRping(args)
		if code := wait(t, done, "rping", out, errw); code != exitOK || errw.String() != "" ||
			!strings.Contains(out.String(), "\nflags:\n  -s, --server ") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, code, out, errw)
		}
	}
	out, errw, done := runRping([]string{"--version"})
	if code := wait(t, done, "rping", out, errw); code != exitOK || out.String() != buildinfo.Get().String()+"\n" {
		t.Errorf("--version: exit %d, stdout %q", code, out)
	}
}

// TestRpingXDPNamespaces runs the server and the client in two network
// namespaces joined by a veth pair, over AF_XDP, as on two hosts.
func TestRpingXDPNamespaces(t *testing.T) {
	ns := nsutil.NewTestPair(t, nsutil.PairConfig{Prefix: "cmA"})
	t.Setenv("SROCE_LINK", "xdp")
	srv := nsutil.DefaultAddrA.Addr().String()
	in := func(n *nsutil.Namespace, args []string) (*testpair.Buffer, *testpair.Buffer, <-chan int) {
		return testpair.Go(func(out, errw io.Writer) int {
			code := -1
			if err := n.Do(func() error { code = Main(context.Background(), args, out, errw); return nil }); err != nil {
				fmt.Fprintln(errw, err)
			}
			return code
		})
	}
	sout, serr, sdone := in(ns.A, []string{"-s", "-a", srv, "-v", "-V", "-S", "1000"})
	time.Sleep(500 * time.Millisecond)
	cout, cerr, cdone := in(ns.B, []string{"-c", "-a", srv, "-v", "-V", "-C", "10", "-S", "1000"})
	if code := wait(t, cdone, "client", cout, cerr); code != 0 {
		t.Fatalf("client exit %d\n%s%s", code, cout, cerr)
	}
	if code := wait(t, sdone, "server", sout, serr); code != 0 {
		t.Fatalf("server exit %d\n%s%s", code, sout, serr)
	}
	if got, want := cout.String(), pingLines("", 10, 1000); got != want {
		t.Errorf("client printed\n%s", got)
	}
}

// TestRpingPersistentServer: a -P server serves one client after another
// until it is stopped.
func TestRpingPersistentServer(t *testing.T) {
	needUDPLink(t)
	ctx, cancel := context.WithCancel(context.Background())
	sout, serr := &testpair.Buffer{}, &testpair.Buffer{}
	sdone := make(chan int, 1)
	go func() {
		sdone <- Main(ctx, []string{"-s", "-P", "-a", serverAddr.String(), "-p", "7177", "-v"}, sout, serr)
	}()
	time.Sleep(300 * time.Millisecond)
	for i := 0; i < 3; i++ {
		cout, cerr, cdone := runRping([]string{"-c", "-a", serverAddr.String(), "-I", clientAddr.String(), "-p", "7177", "-C", "2", "-v", "-V"})
		if code := wait(t, cdone, "client", cout, cerr); code != 0 {
			t.Fatalf("client %d: exit %d\n%s%s\nserver:\n%s%s", i, code, cout, cerr, sout, serr)
		}
	}
	cancel()
	wait(t, sdone, "server", sout, serr)
	if n := strings.Count(sout.String(), "server ping data: rdma-ping-1: "); n != 3 {
		t.Fatalf("the server printed %d second pings for 3 clients:\n%s", n, sout)
	}
}
