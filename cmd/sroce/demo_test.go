package main

import (
	"strings"
	"testing"
	"time"

	"github.com/sroce/sroce/internal/nsutil"
)

// TestDemoFlags checks that bad command lines print the usage on stderr
// and exit with status 2, before anything is created.
func TestDemoFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--bogus"},
		{"extra"},
		{"--size", "0"},
		{"--size", "x"},
		{"--iters", "0"},
		{"--burst", "0"},
		{"--mtu", "100"},
		{"--mode", "tcp"},
		{"--timeout", "-1s"},
		{"--netem", "jitter 5"},
		{"--netem", "reorder 25%"},
		{"--netem", "loss 200%"},
		{"--netem", ""},
	} {
		if args[0] == "--netem" && args[1] == "" {
			continue // an empty --netem is no impairment
		}
		code, out, errOut := runSroce(t, nil, append([]string{"demo"}, args...)...)
		if code != exitUsage || out != "" || !strings.Contains(errOut, "usage: sroce demo") {
			t.Errorf("demo %q: exit %d, stdout %q, stderr %q", args, code, out, errOut)
		}
		if first, _, _ := strings.Cut(errOut, "\n"); !strings.HasPrefix(first, "sroce demo: ") {
			t.Errorf("demo %q: first line %q is not a sentence about the problem", args, first)
		}
	}
	code, out, _ := runSroce(t, nil, "demo", "-h")
	if code != exitOK || !strings.Contains(out, "Without root it runs the same over the loopback interface") {
		t.Errorf("demo -h: exit %d, %q", code, out)
	}
}

func TestParseNetem(t *testing.T) {
	good := map[string]nsutil.Netem{
		"loss 2%":                      {Loss: 2},
		"loss 2":                       {Loss: 2},
		"delay 1ms reorder 25% loss 1": {Delay: time.Millisecond, Reorder: 25, Loss: 1},
		"delay 10ms 2ms":               {Delay: 10 * time.Millisecond, Jitter: 2 * time.Millisecond},
		"duplicate 1% corrupt 0.1%":    {Duplicate: 1, Corrupt: 0.1},
		"limit 5000 loss 0.5%":         {Limit: 5000, Loss: 0.5},
	}
	for in, want := range good {
		got, err := parseNetem(in)
		if err != nil || got != want {
			t.Errorf("parseNetem(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "loss", "loss x", "loss -1%", "delay", "delay soon", "reorder 5%", "limit 0", "rate 1mbit"} {
		if _, err := parseNetem(in); err == nil {
			t.Errorf("parseNetem(%q) succeeded", in)
		}
	}
}

// TestDemoRun runs a short demo for real: over AF_XDP between namespaces
// as root, else over loopback with the UDP link. -v must show the packets
// of every operation.
func TestDemoRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two engines")
	}
	code, out, errOut := runSroce(t, nil, "demo", "--size", "3000", "--iters", "2", "--burst", "8", "-v")
	if code != exitOK {
		if strings.Contains(errOut, "address already in use") {
			t.Skipf("port 4791 is taken on loopback: %s", errOut)
		}
		t.Fatalf("demo: exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{
		"RC_SEND_FIRST", "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE", "RC_RDMA_READ_REQUEST", "RC_RDMA_READ_RESPONSE_LAST",
		"RC_FETCH_ADD", "RC_COMPARE_SWAP", "RC_ATOMIC_ACKNOWLEDGE", "RC_ACKNOWLEDGE", "icrc=ok",
		"SEND A->B", "data and immediate verified", "WRITE burst A->B: 8 x 3000 bytes", "packets sent (sent_pkts)",
		"every byte was verified",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "icrc=BAD") {
		t.Errorf("a packet with a bad ICRC:\n%s", out)
	}
	if nsutil.Available() == nil && len(nsutil.Live()) != 0 {
		t.Errorf("namespaces left: %v", nsutil.Live())
	}
}

// TestDevinfoFlags and TestStatFlags check usage errors (status 2) and a
// missing interface (status 1, one sentence).
func TestDevinfoStatFlags(t *testing.T) {
	for _, cmd := range []string{"devinfo", "stat"} {
		for _, args := range [][]string{{"--bogus"}, {"extra"}, {"--mode", "tcp"}, {"-d"}} {
			code, out, errOut := runSroce(t, nil, append([]string{cmd}, args...)...)
			if code != exitUsage || out != "" || !strings.Contains(errOut, "usage: sroce "+cmd) {
				t.Errorf("%s %q: exit %d, stdout %q, stderr %q", cmd, args, code, out, errOut)
			}
		}
		code, out, errOut := runSroce(t, nil, cmd, "-d", "nosuchif0")
		if code != exitProblem || out != "" || errOut != "sroce "+cmd+": there is no network interface named \"nosuchif0\"\n" {
			t.Errorf("%s -d nosuchif0: exit %d, stdout %q, stderr %q", cmd, code, out, errOut)
		}
	}
	code, _, errOut := runSroce(t, nil, "stat", "--for", "-1s")
	if code != exitUsage || !strings.Contains(errOut, `invalid value "-1s" for --for: must not be negative`) {
		t.Errorf("stat --for -1s: exit %d, %q", code, errOut)
	}
}

// TestDevinfoLoopback describes the loopback interface: rxe's GID table
// (default GID from the all-zero MAC, then 127.0.0.1, then ::1).
func TestDevinfoLoopback(t *testing.T) {
	code, out, errOut := runSroce(t, nil, "devinfo", "-d", "lo", "-v")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		"hca_id:\tsroce_lo\n",
		"\tnode_guid:\t\t\t0200:00ff:fe00:0000\n",
		"\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n",
		"\t\t\tactive_mtu:\t\t4096 (5)\n",
		"\t\t\tGID[  0]:\t\tfe80::200:ff:fe00:0, RoCE v2\n",
		"\t\t\tGID[  1]:\t\t::ffff:127.0.0.1, RoCE v2\n",
		"\tmax_qp_wr:\t\t\t16384\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("devinfo lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(out, "link_mode:\t\t\tUDP, bound to 127.0.0.1") && !strings.Contains(out, "link_mode:\t\t\tunavailable") {
		t.Errorf("devinfo link mode:\n%s", out)
	}
	code, out, _ = runSroce(t, nil, "devinfo", "-l")
	if code != exitOK || !strings.Contains(out, "    lo ") {
		t.Errorf("devinfo -l: exit %d\n%s", code, out)
	}
}

// TestStatLoopback opens a fresh device on lo and prints its counters as
// JSON and as a table.
func TestStatLoopback(t *testing.T) {
	code, out, errOut := runSroce(t, nil, "stat", "-d", "lo", "--json")
	if code != exitOK {
		if strings.Contains(errOut, "address already in use") {
			t.Skipf("port 4791 is taken on loopback: %s", errOut)
		}
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{`"device": "sroce_lo"`, `"link_mode": "UDP"`, `"sent_pkts": 0`, `"link_downed": 0`, `"rx_packets": 0`, `"port_state": "PORT_ACTIVE"`} {
		if !strings.Contains(out, want) {
			t.Errorf("stat --json lacks %s:\n%s", want, out)
		}
	}
	code, out, _ = runSroce(t, nil, "stat", "-d", "lo", "--for", "50ms")
	if code != exitOK || !strings.Contains(out, "engine counters:\n  sent_pkts") || !strings.Contains(out, "open for 0.05s") {
		t.Errorf("stat: exit %d\n%s", code, out)
	}
}
