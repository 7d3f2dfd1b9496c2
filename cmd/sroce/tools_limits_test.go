package main

// Hostile clients against a waiting perftest server: whoever connects
// first is the peer, and nothing it sends may make the server allocate
// more than its own command line asks for, or crash it.

import (
	"context"
	"encoding/binary"
	"io"
	"math"
	"net"
	"net/netip"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/internal/testpair"
	"github.com/sroce/sroce/tools/oob"
	"github.com/sroce/sroce/verbs"
)

// startServer runs "sroce cmd -d lo@server -p port args..." and waits
// until it listens.
func startServer(t *testing.T, cmd string, args ...string) (int, <-chan testpair.Result) {
	t.Helper()
	port := pairs.Port(t)
	all := append([]string{cmd, "-d", "lo@" + pairs.Server.String(), "-p", strconv.Itoa(port)}, args...)
	_, done := pairs.Start(all)
	deadline := time.Now().Add(20 * time.Second)
	for !testpair.Listening(port) {
		select {
		case r := <-done:
			t.Fatalf("%q ended before listening: %v", all, r)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%q does not listen after 20s", all)
		}
		// wall clock: waits for a real process to listen
		time.Sleep(5 * time.Millisecond)
	}
	return port, done
}

// waitTool returns the result of a tool, failing the test after a minute.
func waitTool(t *testing.T, done <-chan testpair.Result) testpair.Result {
	t.Helper()
	select {
	case r := <-done:
		return r
	case <-time.After(time.Minute):
		t.Fatal("the tool did not end within a minute")
	}
	return testpair.Result{}
}

// TestToolPeerSysDataLimits: a client announces a huge page or cache line
// size, which the server would multiply into its buffer size (2 x QPs x
// page size). The server refuses it, naming the field and the limit, and
// exits 1 without allocating.
func TestToolPeerSysDataLimits(t *testing.T) {
	t.Setenv(envStep, "5s")
	for _, tc := range []struct {
		name         string
		cycle, cache uint32
		want         string
	}{
		{"cycle buffer 2 GiB", math.MaxInt32, 64, "peer sent a cycle buffer size beyond this side's limit: a page size of 2147483647 bytes, above the limit of 1048576 bytes"},
		{"cycle buffer 64 MiB", 64 << 20, 64, "a page size of 67108864 bytes, above the limit of 1048576 bytes"},
		{"cache line 1 GiB", 4096, 1 << 30, "peer sent a cache line size beyond this side's limit: a cache line of 1073741824 bytes, above the limit of 4096 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			port, done := startServer(t, "write-bw", "-q", "4")
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			nc, err := net.Dial("tcp", net.JoinHostPort(pairs.Server.String(), strconv.Itoa(port)))
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			nc.SetDeadline(time.Now().Add(30 * time.Second))
			buf := make([]byte, 16)
			version := append([]byte(oob.PerftestVersion), make([]byte, 12)...)
			for _, msg := range [][]byte{version, binary.BigEndian.AppendUint32(nil, tc.cycle), binary.BigEndian.AppendUint32(nil, tc.cache)} {
				if _, err := nc.Write(msg); err != nil {
					t.Fatal(err)
				}
				if _, err := io.ReadFull(nc, buf[:len(msg)]); err != nil {
					t.Fatalf("reading the server's answer: %v", err)
				}
			}
			nc.Write([]byte("3\x00"))
			r := waitTool(t, done)
			runtime.ReadMemStats(&after)
			wantFailure(t, tc.name, r, tc.want)
			if grew := after.TotalAlloc - before.TotalAlloc; grew > 32<<20 {
				t.Errorf("the server allocated %d MiB", grew>>20)
			}
		})
	}
}

// TestToolPeerReportLimits: a unidirectional write_bw client reports its
// result, and the server checks its memory with the reported size and
// count. A size beyond what perftest takes, one beyond the server's own
// buffers, and an absurd count each end the run with one sentence, not a
// crash or a loop.
func TestToolPeerReportLimits(t *testing.T) {
	t.Setenv(envStep, "5s")
	for _, tc := range []struct {
		name string
		test oob.Test
		rep  oob.BWReport
		want string
	}{
		{"size beyond perftest's -s", oob.WriteBW, oob.BWReport{Size: math.MaxUint64, Iters: 20},
			"a message size of 18446744073709551615 bytes, above the limit of 2147483647 bytes"},
		{"size beyond the server's buffers", oob.WriteBW, oob.BWReport{Size: 1 << 30, Iters: 20},
			"data check failed: the peer reported 1073741824-byte messages, larger than the 65536 bytes this side's buffers were set up for"},
		{"iterations beyond -n times -q", oob.AtomicBW, oob.BWReport{Size: 8, Iters: 1 << 62},
			"an iteration count of 4611686018427387904, above the limit of 1638400000000"},
		// The largest count that passes sets no loop's length: the
		// server's check of its atomic slots ends at once.
		{"largest iteration count", oob.AtomicBW, oob.BWReport{Size: 8, Iters: oob.MaxReportIters},
			"after the peer's 1638400000000 atomics, expected"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"-s", "65536", "-n", "20"}
			cmd, size := "write-bw", uint64(65536)
			if tc.test == oob.AtomicBW {
				args, cmd, size = []string{"-n", "20", "-l", "4"}, "atomic-bw", 8
			}
			port, done := startServer(t, cmd, args...)
			ctx := context.Background()
			c, err := oob.DialPerftest(ctx, net.JoinHostPort(pairs.Server.String(), strconv.Itoa(port)), oob.Timeouts{Step: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			go func() {
				defer c.Close()
				if _, err := c.Prologue(ctx, oob.LocalSysData(), verbs.MTU1024); err != nil {
					return
				}
				gid := bth.GIDFromAddr(netip.MustParseAddr(pairs.Client.String()))
				key := oob.KeyMsg{OutReads: 1, QPN: 0x77, PSN: 0x1000, RKey: 0x1234, VAddr: 0x10000, GID: gid}
				c.Run(ctx, oob.Flow{Test: tc.test, Sizes: []uint64{size}}, []oob.KeyMsg{key}, oob.Hooks{
					Connect: func([]oob.KeyMsg) error { return nil },
					Run:     func(uint64) (oob.BWReport, error) { return tc.rep, nil },
				})
			}()
			r := waitTool(t, done)
			wantFailure(t, tc.name, r, tc.want)
			if strings.Contains(r.Stderr, "panic") {
				t.Errorf("the server panicked: %s", r.Stderr)
			}
		})
	}
}
