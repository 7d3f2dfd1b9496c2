package netns

// The sroce command end to end: "sroce demo" as a newcomer runs it (over
// AF_XDP and over the UDP link, on a clean and on a lossy veth, and
// interrupted with Ctrl-C), plus devinfo and stat inside a namespace. The
// binary is built once from cmd/sroce.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sroce/sroce/internal/nsutil"
)

// srBuild builds cmd/sroce into the test's temporary directory (the build
// cache makes every build after the first a link).
func srBuild(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "sroce")
	out, err := exec.Command("go", "build", "-o", bin, "../../cmd/sroce").CombinedOutput()
	if err != nil {
		t.Fatalf("go build ./cmd/sroce: %v\n%s", err, out)
	}
	return bin
}

// srDemo runs "sroce demo args..." and returns its output and exit status.
func srDemo(t *testing.T, args ...string) (stdout, stderr string, code, pid int) {
	t.Helper()
	bin := srBuild(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"demo"}, args...)...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if cmd.ProcessState == nil {
		t.Fatalf("sroce demo: %v", err)
	}
	return o.String(), e.String(), cmd.ProcessState.ExitCode(), cmd.Process.Pid
}

// srNoLeftovers checks that a finished sroce process left no namespace.
func srNoLeftovers(t *testing.T, pid int) {
	t.Helper()
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatal(err)
	}
	if p := fmt.Sprintf("sroce-demo-%d-", pid); strings.Contains(string(out), p) {
		t.Errorf("namespaces of sroce demo (pid %d) left behind:\n%s", pid, out)
	}
}

// srCounter reads a row of the demo's counter table: the values of A and B.
func srCounter(t *testing.T, out, row string) (a, b uint64) {
	t.Helper()
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(row) + `\s+(\d+)\s+(\d+)$`)
	m := re.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no %q row in:\n%s", row, out)
	}
	a, _ = strconv.ParseUint(m[1], 10, 64)
	b, _ = strconv.ParseUint(m[2], 10, 64)
	return a, b
}

func TestSroceDemo(t *testing.T) {
	laneParallel(t, 9*time.Second, needHost)
	srSkip(t)
	for _, c := range []struct {
		name  string
		args  []string
		want  string // in the description
		lossy bool
	}{
		{"xdp", []string{"--mode", "xdp"}, "one sroce engine in each over AF_XDP", false},
		{"udp", []string{"--mode", "udp"}, "one sroce engine in each over the UDP link", false},
		{"auto-mtu9000", []string{"--mtu", "9000"}, "path MTU 4096", false},
		{"xdp-loss2", []string{"--mode", "xdp", "--netem", "loss 2%"}, "link impaired in both directions: loss 2%", true},
		{"udp-loss2", []string{"--mode", "udp", "--netem", "loss 2%"}, "link impaired in both directions: loss 2%", true},
		{"xdp-reorder", []string{"--mode", "xdp", "--netem", "delay 1ms reorder 25%", "--size", "20000", "--burst", "16"}, "reorder 25%", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"--size", "50000", "--iters", "3", "--burst", "64"}, c.args...)
			out, errOut, code, pid := srDemo(t, args...)
			srNoLeftovers(t, pid)
			if code != 0 {
				t.Fatalf("sroce demo %q: exit %d\n%s\n%s", args, code, out, errOut)
			}
			for _, want := range []string{c.want, "data and immediate verified", "3 swaps and 1 refused compare verified",
				"All operations completed and every byte was verified."} {
				if !strings.Contains(out, want) {
					t.Errorf("output lacks %q:\n%s", want, out)
				}
			}
			retrA, _ := srCounter(t, out, "retransmitted (retransmit_pkts)")
			sentA, _ := srCounter(t, out, "packets sent (sent_pkts)")
			_, rcvdB := srCounter(t, out, "packets received (rcvd_pkts)")
			if c.lossy && retrA == 0 {
				t.Errorf("no retransmissions on a lossy link:\n%s", out)
			}
			if !c.lossy && (retrA != 0 || sentA != rcvdB) {
				t.Errorf("clean link: A sent %d, B received %d, %d retransmitted:\n%s", sentA, rcvdB, retrA, out)
			}
			if testing.Verbose() {
				t.Logf("\n%s", out)
			}
		})
	}
}

// TestSroceDemoInterrupt sends SIGINT to a running demo: it must remove
// its namespaces (and with them the XDP programs) and exit with 130.
func TestSroceDemoInterrupt(t *testing.T) {
	srSkip(t)
	bin := srBuild(t)
	cmd := exec.Command(bin, "demo", "--size", "1048576", "--burst", "4096", "--iters", "1000")
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	// Wait until the demo is busy (namespaces exist).
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, _ := exec.Command("ip", "netns", "list").Output()
		if strings.Contains(string(out), fmt.Sprintf("sroce-demo-%d-", pid)) {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatalf("the demo created no namespaces:\n%s\n%s", o.String(), e.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		t.Fatal("the demo did not exit within 20s of SIGINT")
	}
	if code := cmd.ProcessState.ExitCode(); code != 130 {
		t.Errorf("exit status %d after SIGINT, want 130\n%s\n%s", code, o.String(), e.String())
	}
	if !strings.Contains(e.String(), "interrupted") {
		t.Errorf("stderr does not say it was interrupted: %q", e.String())
	}
	srNoLeftovers(t, pid)
}

// TestSroceDevinfoStat runs devinfo and stat on a veth end inside a
// namespace: the GID table as rxe builds it, the link mode, the counters.
func TestSroceDevinfoStat(t *testing.T) {
	srSkip(t)
	bin := srBuild(t)
	pair, err := nsutil.NewPair(nsutil.PairConfig{Prefix: srPrefix, IPv6: true})
	if err != nil {
		t.Fatal(err)
	}
	defer pair.Close()
	ctx := context.Background()
	out, err := pair.A.Exec(ctx, bin, "devinfo", "-d", pair.Veth.NameA)
	if err != nil {
		t.Fatal(err)
	}
	mac := pair.Veth.MACA
	guid := fmt.Sprintf("%02x%02x:%02xff:fe%02x:%02x%02x", mac[0]^2, mac[1], mac[2], mac[3], mac[4], mac[5])
	for _, want := range []string{
		"hca_id:\tsroce_" + pair.Veth.NameA + "\n",
		"\tnode_guid:\t\t\t" + guid + "\n",
		"\tlink_mode:\t\t\tXDP (copy)",
		"\tzero_copy:\t\t\tno (",
		"\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n",
		"\t\t\tactive_mtu:\t\t1024 (3)\n",
		"\t\t\tGID[  1]:\t\t::ffff:10.47.0.1, RoCE v2\n",
		"\t\t\tGID[  2]:\t\tfd00:5352::1, RoCE v2\n",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("devinfo lacks %q:\n%s", want, out)
		}
	}
	if !regexp.MustCompile(`\t\t\tGID\[  0\]:\t\tfe80::[0-9a-f:]+, RoCE v2\n`).Match(out) {
		t.Errorf("devinfo has no default GID:\n%s", out)
	}
	out, err = pair.A.Exec(ctx, bin, "stat", "-d", pair.Veth.NameA, "--mode", "xdp")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"XDP (copy), PORT_ACTIVE, active_mtu 1024", "engine counters:", "  link_downed ", "link counters (AF_XDP socket):", "  rx_dropped "} {
		if !strings.Contains(string(out), want) {
			t.Errorf("stat lacks %q:\n%s", want, out)
		}
	}
	// A down interface: devinfo says PORT_DOWN, stat too.
	if err := pair.A.SetLinkUp(pair.Veth.NameA, false); err != nil {
		t.Fatal(err)
	}
	out, err = pair.A.Exec(ctx, bin, "devinfo", "-d", pair.Veth.NameA, "--mode", "udp")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "state:\t\t\tPORT_DOWN (1)") {
		t.Errorf("devinfo on a down interface:\n%s", out)
	}
	srNoXDP(t, pair.A)
}

// TestSroceUnprivileged runs the command as an ordinary user (nobody): the
// demo falls back to loopback with the UDP link and says so, and AF_XDP
// asked for explicitly fails with one sentence.
func TestSroceUnprivileged(t *testing.T) {
	srSkip(t) // root is needed to become nobody
	bin := srBuild(t)
	// Let nobody reach the binary: open up the directories t.TempDir made.
	for d := filepath.Dir(bin); d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	run := func(args ...string) (string, string, int) {
		cmd := exec.Command(bin, args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		cmd.Dir = "/"
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		cmd.Run()
		return o.String(), e.String(), cmd.ProcessState.ExitCode()
	}
	out, errOut, code := run("demo", "--size", "3000", "--iters", "2", "--burst", "8")
	if strings.Contains(errOut, "address already in use") {
		t.Skipf("port 4791 is taken on loopback: %s", errOut)
	}
	if code != 0 || !strings.Contains(out, "Not root: two sroce engines on the loopback interface (127.0.0.1 and 127.0.0.2) over the UDP link.") ||
		!strings.Contains(out, "every byte was verified") {
		t.Errorf("demo as nobody: exit %d\n%s\n%s", code, out, errOut)
	}
	// Without root, --netem's loss is the engines' own impairment.
	out, errOut, code = run("demo", "--netem", "loss 2%", "--size", "3000", "--iters", "2", "--burst", "8")
	if code != 0 || !strings.Contains(out, "both engines drop 2% of the frames they send") ||
		!strings.Contains(errOut, `sroce demo: not root, so --netem "loss 2%" is done by the engines' own impairment (--loss 2)`) {
		t.Errorf("demo --netem as nobody: exit %d\n%s\n%s", code, out, errOut)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"demo", "--mode", "xdp"}, "sroce demo: --mode xdp needs root:"},
		{[]string{"devinfo", "-d", "lo", "--mode", "xdp"}, "sroce devinfo: AF_XDP on lo needs root (CAP_NET_ADMIN, CAP_NET_RAW, CAP_BPF); the UDP link works without\n"},
	} {
		out, errOut, code := run(c.args...)
		if code != 1 || out != "" || !strings.HasPrefix(errOut, c.want) || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%q as nobody: exit %d, stdout %q, stderr %q; want one line starting %q", c.args, code, out, errOut, c.want)
		}
	}
}
