package main

// Running a tool's server and client in this process, each on its own
// device: the UDP link on loopback, bound to two addresses of lo that no
// other test uses (127.77.0.1 and 127.77.0.2), so that nothing else on the
// host competes for UDP port 4791 on them.

import (
	"bytes"
	"fmt"
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

// Loopback addresses of the in-process tool pairs.
var (
	pairServerAddr = netip.MustParseAddr("127.77.0.1")
	pairClientAddr = netip.MustParseAddr("127.77.0.2")
)

// syncBuffer is a bytes.Buffer that one goroutine writes while another
// reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// toolResult is what one side of a tool pair did.
type toolResult struct {
	code           int
	stdout, stderr string
}

// String summarizes r for test failures.
func (r toolResult) String() string {
	return fmt.Sprintf("exit %d\n--- stdout:\n%s--- stderr:\n%s", r.code, r.stdout, r.stderr)
}

// nextPairPort hands each pair its own TCP port for the exchange.
var nextPairPort atomic.Int32

// pairPort returns an unused TCP port for a pair's exchange.
func pairPort(t *testing.T) int {
	t.Helper()
	for {
		p := 19000 + int(nextPairPort.Add(1))
		ln, err := net.Listen("tcp", ":"+strconv.Itoa(p))
		if err == nil {
			ln.Close()
			return p
		}
		if p > 19900 {
			t.Fatal("no free TCP port for the exchange")
		}
	}
}

// startTool runs "sroce args..." in a goroutine and returns its live
// stdout and a channel that delivers the result.
func startTool(args []string) (*syncBuffer, <-chan toolResult) {
	out, errOut := &syncBuffer{}, &syncBuffer{}
	done := make(chan toolResult, 1)
	go func() {
		code := run(args, &env{Stdin: strings.NewReader(""), Stdout: out, Stderr: errOut})
		done <- toolResult{code, out.String(), errOut.String()}
	}()
	return out, done
}

// listening reports whether a TCP socket listens on port, from
// /proc/net/tcp and tcp6 (connecting to find out would take the server's
// only accept).
func listening(port int) bool {
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

// runToolPair runs command cmd as server with serverArgs and, once the
// server printed ready (or, with ready empty, listens), as client with
// clientArgs, each on its own loopback address, and returns both results.
// The -d and -p options and the client's host operand are added here.
func runToolPair(t *testing.T, cmd, ready string, serverArgs, clientArgs []string) (server, client toolResult) {
	t.Helper()
	portNum := pairPort(t)
	port := strconv.Itoa(portNum)
	sargs := append([]string{cmd, "-d", "lo@" + pairServerAddr.String(), "-p", port}, serverArgs...)
	cargs := append([]string{cmd, "-d", "lo@" + pairClientAddr.String(), "-p", port}, clientArgs...)
	cargs = append(cargs, pairServerAddr.String())
	sout, sdone := startTool(sargs)
	deadline := time.Now().Add(20 * time.Second)
	for !(ready != "" && strings.Contains(sout.String(), ready) || ready == "" && listening(portNum)) {
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
	_, cdone := startTool(cargs)
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

// Environment variables of the tools' limits (see package tools/perftest).
const (
	envStall  = "SROCE_STALL_TIMEOUT"
	envStep   = "SROCE_EXCHANGE_TIMEOUT"
	envAccept = "SROCE_ACCEPT_TIMEOUT"
)
