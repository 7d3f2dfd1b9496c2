package oob

// Test helpers: captured transcripts of the real tools and a scripted fake
// peer that plays one side of a transcript (or any script) over loopback
// TCP.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// segment is one TCP segment of a transcript.
type segment struct {
	fromClient bool
	data       []byte
}

// loadTranscript reads testdata/real-<name>.txt.
func loadTranscript(t testing.TB, name string) []segment {
	t.Helper()
	f, err := os.Open("testdata/real-" + name + ".txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var segs []segment
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		dir, hx, ok := strings.Cut(line, " ")
		b, err := hex.DecodeString(hx)
		if !ok || err != nil || (dir != "C" && dir != "S") {
			t.Fatalf("bad transcript line %q", line)
		}
		segs = append(segs, segment{fromClient: dir == "C", data: b})
	}
	return segs
}

// step is one action of a fake peer.
type step struct {
	send   []byte // write these bytes
	expect []byte // read len(expect) bytes and compare (unless ignore)
	n      int    // read n bytes, compare nothing (when expect is nil)
	ignore bool   // with expect: read but do not compare
	eof    bool   // read until EOF (the other side must close)
	close  bool   // close the connection
	sleep  time.Duration
}

// runPeer plays steps on nc and returns the first mismatch or I/O error.
func runPeer(nc net.Conn, steps []step) error {
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(20 * time.Second))
	for i, s := range steps {
		switch {
		case s.sleep > 0:
			time.Sleep(s.sleep)
		case s.close:
			return nil
		case s.send != nil:
			if _, err := nc.Write(s.send); err != nil {
				return fmt.Errorf("step %d: write: %v", i, err)
			}
		case s.eof:
			b, err := io.ReadAll(nc)
			if err != nil && !errors.Is(err, net.ErrClosed) && !isReset(err) {
				return fmt.Errorf("step %d: waiting for EOF: %v", i, err)
			}
			if len(b) > 0 {
				return fmt.Errorf("step %d: got %q before EOF", i, b)
			}
		default:
			n := s.n
			if s.expect != nil {
				n = len(s.expect)
			}
			b := make([]byte, n)
			if _, err := io.ReadFull(nc, b); err != nil {
				return fmt.Errorf("step %d: read %d bytes: %v", i, n, err)
			}
			if s.expect != nil && !s.ignore && !bytes.Equal(b, s.expect) {
				return fmt.Errorf("step %d: got\n%q, want\n%q", i, b, s.expect)
			}
		}
	}
	return nil
}

func isReset(err error) bool {
	return err != nil && strings.Contains(err.Error(), "connection reset")
}

// loopback returns a listener on 127.0.0.1 and its address.
func loopback(t *testing.T) (net.Listener, string) {
	t.Helper()
	ln, err := Listen(context.Background(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln, ln.Addr().String()
}

// fakeServer accepts one connection on a new loopback listener and plays
// steps on it; the returned channel yields the peer's error.
func fakeServer(t *testing.T, steps []step) (string, <-chan error) {
	t.Helper()
	ln, addr := loopback(t)
	errc := make(chan error, 1)
	go func() {
		nc, err := ln.Accept()
		ln.Close()
		if err != nil {
			errc <- err
			return
		}
		errc <- runPeer(nc, steps)
	}()
	return addr, errc
}

// fakeClient dials addr (retrying while the listener comes up) and plays
// steps.
func fakeClient(addr string, steps []step) <-chan error {
	errc := make(chan error, 1)
	go func() {
		var nc net.Conn
		var err error
		for i := 0; i < 100; i++ {
			if nc, err = net.Dial("tcp", addr); err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			errc <- err
			return
		}
		errc <- runPeer(nc, steps)
	}()
	return errc
}

// waitPeer returns the fake peer's result.
func waitPeer(t *testing.T, errc <-chan error) {
	t.Helper()
	select {
	case err := <-errc:
		if err != nil {
			t.Errorf("fake peer: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("fake peer did not finish")
	}
}

// wantKind checks that err is an ExchangeError of kind and prints its
// message for the log.
func wantKind(t *testing.T, err, kind error) {
	t.Helper()
	if !errors.Is(err, kind) {
		t.Fatalf("got error %v, want %v", err, kind)
	}
	var ee *ExchangeError
	if !errors.As(err, &ee) {
		t.Fatalf("error %v is not an *ExchangeError", err)
	}
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("error message has several lines: %q", err)
	}
	t.Logf("error: %v", err)
}

// shortTimeouts makes a silent peer fail fast.
var shortTimeouts = Timeouts{Connect: 2 * time.Second, Step: 300 * time.Millisecond, PeerRun: 600 * time.Millisecond}
