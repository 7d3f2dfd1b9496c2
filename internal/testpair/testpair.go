// Package testpair runs an RDMA tool's server and client in the test's own
// process, each on its own device: the UDP link on loopback, bound to two
// addresses of lo that no other test uses, so that nothing else on the host
// competes for UDP port 4791 on them. The tests of cmd/sroce (through the
// command line) and of tools/perftest (through the package) share it;
// Buffer also collects the output of tools run as processes (tests/netns).
package testpair

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Buffer is a bytes.Buffer that one goroutine writes while another reads
// it.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Result is what one side of a tool pair did.
type Result struct {
	Code           int // exit status
	Stdout, Stderr string
}

// String summarizes r for test failures.
func (r Result) String() string {
	return fmt.Sprintf("exit %d\n--- stdout:\n%s--- stderr:\n%s", r.Code, r.Stdout, r.Stderr)
}

// Pairs runs tool pairs. Set its fields before the first use; one Pairs
// serves all the tests of a package, in parallel too.
type Pairs struct {
	// Run runs the tool named by args[0] ("write-bw", "rc-pingpong") with
	// the rest of args as its command line, writing to stdout and stderr,
	// and returns its exit status, as "sroce args..." would.
	Run func(args []string, stdout, stderr io.Writer) int
	// Server and Client are the loopback addresses of the two sides.
	Server, Client netip.Addr
	// FirstPort is where the TCP ports of the exchanges are taken from:
	// FirstPort+1 to FirstPort+900, a range no other package's tests use.
	FirstPort int

	next atomic.Int32
}

// Port returns an unused TCP port for a pair's exchange.
func (p *Pairs) Port(t testing.TB) int {
	t.Helper()
	for {
		port := p.FirstPort + int(p.next.Add(1))
		ln, err := net.Listen("tcp", ":"+strconv.Itoa(port))
		if err == nil {
			ln.Close()
			return port
		}
		if port > p.FirstPort+900 {
			t.Fatal("no free TCP port for the exchange")
		}
	}
}

// Go runs run in a goroutine with two fresh Buffers as its stdout and
// stderr, and returns them and a channel that delivers its exit status.
func Go(run func(stdout, stderr io.Writer) int) (stdout, stderr *Buffer, done <-chan int) {
	out, errOut := &Buffer{}, &Buffer{}
	ch := make(chan int, 1)
	go func() { ch <- run(out, errOut) }()
	return out, errOut, ch
}

// Start runs the tool args in a goroutine and returns its live stdout and
// a channel that delivers the result.
func (p *Pairs) Start(args []string) (*Buffer, <-chan Result) {
	out, errOut := &Buffer{}, &Buffer{}
	done := make(chan Result, 1)
	go func() {
		code := p.Run(args, out, errOut)
		done <- Result{code, out.String(), errOut.String()}
	}()
	return out, done
}

// Listening reports whether a TCP socket listens on port, from
// /proc/net/tcp and tcp6 (connecting to find out would take the server's
// only accept).
func Listening(port int) bool {
	want := fmt.Sprintf(":%04X ", port)
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			fields := strings.Fields(line)
			if len(fields) > 3 && strings.HasSuffix(fields[1]+" ", want) && fields[3] == "0A" {
				return true
			}
		}
	}
	return false
}

// RunPair runs command cmd as server with serverArgs and, once the server
// printed ready (or, with ready empty, listens), as client with clientArgs,
// each on its own loopback address, and returns both results. The -d and
// -p options and the client's host operand are added here.
func (p *Pairs) RunPair(t *testing.T, cmd, ready string, serverArgs, clientArgs []string) (server, client Result) {
	t.Helper()
	portNum := p.Port(t)
	port := strconv.Itoa(portNum)
	sargs := append([]string{cmd, "-d", "lo@" + p.Server.String(), "-p", port}, serverArgs...)
	cargs := append([]string{cmd, "-d", "lo@" + p.Client.String(), "-p", port}, clientArgs...)
	cargs = append(cargs, p.Server.String())
	sout, sdone := p.Start(sargs)
	deadline := time.Now().Add(20 * time.Second)
	for !(ready != "" && strings.Contains(sout.String(), ready) || ready == "" && Listening(portNum)) {
		select {
		case r := <-sdone:
			t.Fatalf("server %q ended before it was ready: %v", sargs, r)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("server %q not ready after 20s; stdout so far:\n%s", sargs, sout.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	_, cdone := p.Start(cargs)
	timeout := time.After(2 * time.Minute)
	for got := 0; got < 2; got++ {
		select {
		case server = <-sdone:
			sdone = nil
		case client = <-cdone:
			cdone = nil
		case <-timeout:
			t.Fatalf("%s pair did not finish within 2 minutes", cmd)
		}
	}
	return server, client
}
