// Package interop is the interop matrix against rdma_rxe: the table of
// sroce tools and their real counterparts (rdma-core's ibv_*_pingpong,
// perftest's ib_*), one run of a pair in either direction (the real tool
// as the server and sroce as the client, or the other way round) against
// an rdma_rxe peer (a qemu guest, or this host's own rdma_rxe in a network
// namespace), what both sides must print, and the figures they print. The
// rdma_rxe interop tests (tests/netns) and the "sroce interop" command run
// their pairs through it.
package interop

import (
	"fmt"
	"regexp"
	"strings"
)

// Case is one tool pair and the arguments both sides take (sroce's device
// flag and the real tool's are added when it runs).
type Case struct {
	Name string // the pair's name, e.g. "write-bw-64k"
	Cmd  string // sroce subcommand, e.g. "write-bw"
	Real string // the reference tool, e.g. "ib_write_bw"
	Args string // arguments common to both sides
}

// Matrix is one pair per tool, the first rows of Cases: every sroce tool
// against its counterpart, with both atomic operations and the UD
// variants. Sizes of 4096 with path MTU 1024 make every multi-packet
// message a first, middles and a last; iteration counts stay small for
// an emulated guest.
var Matrix = Cases[:12]

// Cases are the tool pairs of the full interop test: Matrix, then options
// that change the data path or the exchange, then longer runs.
var Cases = []Case{
	{"rc-pingpong", "rc-pingpong", "ibv_rc_pingpong", "-g 1 -n 10 -s 4096 -m 1024 -c"},
	{"ud-pingpong", "ud-pingpong", "ibv_ud_pingpong", "-g 1 -n 10 -s 1024 -c"},
	{"send-bw", "send-bw", "ib_send_bw", "-x 1 -n 10 -s 4096 -m 1024"},
	{"send-bw-ud", "send-bw", "ib_send_bw", "-x 1 -n 10 -s 1024 -c UD"},
	{"write-bw", "write-bw", "ib_write_bw", "-x 1 -n 10 -s 4096 -m 1024"},
	{"read-bw", "read-bw", "ib_read_bw", "-x 1 -n 10 -s 4096 -m 1024"},
	{"atomic-bw-fadd", "atomic-bw", "ib_atomic_bw", "-x 1 -n 10 -A FETCH_AND_ADD"},
	{"atomic-bw-cmpswp", "atomic-bw", "ib_atomic_bw", "-x 1 -n 10 -A CMP_AND_SWAP"},
	{"send-lat", "send-lat", "ib_send_lat", "-x 1 -n 10 -s 4096 -m 1024"},
	{"write-lat", "write-lat", "ib_write_lat", "-x 1 -n 10 -s 4096 -m 1024"},
	{"read-lat", "read-lat", "ib_read_lat", "-x 1 -n 10 -s 4096 -m 1024"},
	{"atomic-lat", "atomic-lat", "ib_atomic_lat", "-x 1 -n 10"},
	// Options that change the data path or the exchange.
	{"rc-pingpong-events", "rc-pingpong", "ibv_rc_pingpong", "-g 1 -n 10 -s 2048 -e"},
	{"send-bw-bidirectional", "send-bw", "ib_send_bw", "-x 1 -n 10 -s 4096 -m 1024 -b"},
	{"send-bw-uc", "send-bw", "ib_send_bw", "-x 1 -n 10 -s 2048 -m 1024 -c UC"},
	{"write-bw-bidirectional-qps", "write-bw", "ib_write_bw", "-x 1 -n 10 -s 4096 -m 1024 -b -q 2"},
	{"write-bw-default-gid", "write-bw", "ib_write_bw", "-n 10 -s 4096 -m 1024"},
	{"write-bw-ipv6-linklocal", "write-bw", "ib_write_bw", "-n 10 -s 4096 -m 1024 --ipv6"},
	{"rc-pingpong-ipv6-linklocal", "rc-pingpong", "ibv_rc_pingpong", "-g 0 -n 10 -s 4096"},
	{"read-bw-qps-events", "read-bw", "ib_read_bw", "-x 1 -n 10 -s 4096 -m 1024 -q 2 -e"},
	{"atomic-bw-bidirectional", "atomic-bw", "ib_atomic_bw", "-x 1 -n 10 -b"},
	{"send-lat-ud", "send-lat", "ib_send_lat", "-x 1 -n 10 -s 512 -c UD"},
	// Longer runs: thousands of packets, every UD size, -D.
	{"rc-pingpong-64k", "rc-pingpong", "ibv_rc_pingpong", "-g 1 -n 200 -s 65536 -c"},
	{"write-bw-64k", "write-bw", "ib_write_bw", "-x 1 -n 300 -s 65536 -m 1024"},
	{"atomic-bw-2000", "atomic-bw", "ib_atomic_bw", "-x 1 -n 2000"},
	{"send-bw-all-ud", "send-bw", "ib_send_bw", "-x 1 -n 10 -a -c UD"},
	{"write-bw-duration", "write-bw", "ib_write_bw", "-x 1 -D 4 -s 4096"},
}

// LossyCases are the reliable (RC) tools, both atomic operations
// included, for runs over a lossy or stalling link; sizes and counts give
// a few hundred packets each way, so that 2% loss drops several in most
// runs. UD, unreliable by design, has no place here.
var LossyCases = []Case{
	{"rc-pingpong", "rc-pingpong", "ibv_rc_pingpong", "-g 1 -n 200 -s 4096 -m 1024 -c"},
	{"send-bw", "send-bw", "ib_send_bw", "-x 1 -n 300 -s 4096 -m 1024"},
	{"write-bw", "write-bw", "ib_write_bw", "-x 1 -n 300 -s 4096 -m 1024"},
	{"read-bw", "read-bw", "ib_read_bw", "-x 1 -n 300 -s 4096 -m 1024"},
	{"atomic-bw-fadd", "atomic-bw", "ib_atomic_bw", "-x 1 -n 500 -A FETCH_AND_ADD"},
	{"atomic-bw-cmpswp", "atomic-bw", "ib_atomic_bw", "-x 1 -n 500 -A CMP_AND_SWAP"},
	{"send-lat", "send-lat", "ib_send_lat", "-x 1 -n 200 -s 4096 -m 1024"},
	{"write-lat", "write-lat", "ib_write_lat", "-x 1 -n 200 -s 4096 -m 1024"},
	{"read-lat", "read-lat", "ib_read_lat", "-x 1 -n 200 -s 4096 -m 1024"},
	{"atomic-lat-fadd", "atomic-lat", "ib_atomic_lat", "-x 1 -n 500 -A FETCH_AND_ADD"},
	{"atomic-lat-cmpswp", "atomic-lat", "ib_atomic_lat", "-x 1 -n 500 -A CMP_AND_SWAP"},
}

// Select returns the cases of from whose name or sroce subcommand is one
// of names, in from's order, and the names that matched none.
func Select(from []Case, names []string) (sel []Case, unknown []string) {
	used := make(map[string]bool)
	for _, c := range from {
		for _, n := range names {
			if c.Name == n || c.Cmd == n {
				sel = append(sel, c)
				used[n] = true
				break
			}
		}
	}
	for _, n := range names {
		if !used[n] {
			unknown = append(unknown, n)
		}
	}
	return sel, unknown
}

// Outcome is how one side of a run ended.
type Outcome struct {
	Exit           int // exit status; -1 when it was killed
	Stdout, Stderr string
}

// OK reports whether the side exited with status 0.
func (o Outcome) OK() bool { return o.Exit == 0 }

// String shows the outcome in a log.
func (o Outcome) String() string {
	return fmt.Sprintf("exit %d\n--- stdout:\n%s--- stderr:\n%s", o.Exit, o.Stdout, o.Stderr)
}

// Result lines of the tools, which both sides must print (read them, do
// not reassign them).
var (
	// PingpongResult matches ibv_*_pingpong's two result lines: bytes,
	// Mbit/s, iterations, microseconds per iteration.
	PingpongResult = regexp.MustCompile(`(?m)^(\d+) bytes in [\d.]+ seconds = ([\d.]+) Mbit/sec\n(\d+) iters in [\d.]+ seconds = ([\d.]+) usec/iter$`)
	// BWRow matches a row of perftest's BW table: bytes, iterations,
	// peak and average MB/s, Mpps.
	BWRow = regexp.MustCompile(`(?m)^ (\d+) +(\d+) +([\d.]+) +([\d.]+)\s+([\d.]+)$`)
	// LatRow matches a row of perftest's latency table: bytes,
	// iterations, minimum, maximum, typical, average, standard deviation,
	// 99th and 99.9th percentile in microseconds.
	LatRow = regexp.MustCompile(`(?m)^ (\d+) +(\d+) +([\d.]+|inf)\s+([\d.]+|inf)\s+([\d.]+|inf)\s+([\d.]+|inf)\s+(-?[\d.]+|-?nan|inf)\s+([\d.]+|inf)\s+([\d.]+|inf)\s*$`)
)

// Kind says which result lines a tool prints.
type Kind int

// Tool kinds.
const (
	KindPingpong Kind = iota // ibv_*_pingpong: bytes and iterations
	KindBW                   // ib_*_bw: a bandwidth table row
	KindLat                  // ib_*_lat: a latency table row
)

// KindOf returns the kind of a sroce subcommand.
func KindOf(cmd string) Kind {
	switch {
	case strings.HasSuffix(cmd, "pingpong"):
		return KindPingpong
	case strings.HasSuffix(cmd, "-bw"):
		return KindBW
	}
	return KindLat
}

// PrintsResult reports whether one side of a run of cmd (sroce's
// subcommand name) printed its result, and names the lines it looked for:
// pingpong and BW tools print it on both sides, latency tools on the
// sides that measure (read-lat and atomic-lat only on the client).
func PrintsResult(cmd string, out string, server bool) (bool, string) {
	switch KindOf(cmd) {
	case KindPingpong:
		return PingpongResult.MatchString(out), "the pingpong result lines"
	case KindBW:
		return BWRow.MatchString(out), "a BW table row"
	}
	if server && (strings.HasPrefix(cmd, "read") || strings.HasPrefix(cmd, "atomic")) {
		return true, ""
	}
	return LatRow.MatchString(out), "a latency table row"
}

// SideProblem says what is wrong with one side of a run of cmd (server or
// client), or returns "": it must exit 0 and print its result.
func SideProblem(cmd string, o Outcome, server bool) string {
	if !o.OK() {
		return fmt.Sprintf("exited with %d", o.Exit)
	}
	if ok, what := PrintsResult(cmd, o.Stdout, server); !ok {
		return "did not print " + what
	}
	return ""
}

// Figure returns the headline figure of a run of cmd from one side's
// output, or "" when it printed none: rate and time per iteration for a
// pingpong, average bandwidth and message rate for a BW tool (of its
// last row), typical and average latency for a latency tool.
func Figure(cmd, out string) string {
	switch KindOf(cmd) {
	case KindPingpong:
		if m := PingpongResult.FindStringSubmatch(out); m != nil {
			return fmt.Sprintf("%s Mbit/s, %s us/iter", m[2], m[4])
		}
	case KindBW:
		if ms := BWRow.FindAllStringSubmatch(out, -1); ms != nil {
			m := ms[len(ms)-1]
			return fmt.Sprintf("%s MB/s, %s Mpps", m[4], m[5])
		}
	default:
		if ms := LatRow.FindAllStringSubmatch(out, -1); ms != nil {
			m := ms[len(ms)-1]
			return fmt.Sprintf("%s us typical, %s us avg", m[5], m[6])
		}
	}
	return ""
}
