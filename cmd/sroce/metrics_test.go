package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/sroce/sroce/client"
	"github.com/sroce/sroce/daemon"
	"github.com/sroce/sroce/internal/testdirs"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/roce/iface"
)

// parseMetrics parses a text exposition with Prometheus's own parser and
// lints its families with promlint; either finding fails the test.
func parseMetrics(t *testing.T, text string) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("the exposition does not parse: %v\n%s", err, text)
	}
	list := make([]*dto.MetricFamily, 0, len(fams))
	for _, f := range fams {
		list = append(list, f)
		if f.GetHelp() == "" {
			t.Errorf("%s has no HELP", f.GetName())
		}
	}
	problems, err := promlint.NewWithMetricFamilies(list).Lint()
	if err != nil {
		t.Fatalf("promlint: %v", err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	return fams
}

// value returns the value of family name's series whose labels include
// want, and whether there is one (the only one: two fail the test).
func value(t *testing.T, fams map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	t.Helper()
	f := fams[name]
	if f == nil {
		return 0, false
	}
	found, v := 0, 0.0
series:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, x := range want {
			if have[k] != x {
				continue series
			}
		}
		found++
		switch {
		case m.Counter != nil:
			v = m.Counter.GetValue()
		case m.Gauge != nil:
			v = m.Gauge.GetValue()
		case m.Untyped != nil:
			v = m.Untyped.GetValue()
		}
	}
	if found > 1 {
		t.Fatalf("%s%v: %d series, want one", name, want, found)
	}
	return v, found == 1
}

// gatherText renders a registry's families as the text exposition.
func gatherText(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatalf("gathering: %v", err)
	}
	var b bytes.Buffer
	enc := expfmt.NewEncoder(&b, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, f := range fams {
		if err := enc.Encode(f); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

// TestMetricsPrivacy checks the daemon's collector with a client holding a
// PD and an MR: by default per device only (clients, QPs, MRs, bytes), no
// uid, comm or pid label; with --metrics-clients per uid and program name
// too, never the pid. The program name is any bytes (a quote, a
// backslash, a newline, a byte that is not UTF-8) and the exposition
// still parses.
func TestMetricsPrivacy(t *testing.T) {
	socket, srv := startInProcess(t, "127.0.0.83")
	// The daemon reads the client's name from /proc/PID/comm when it
	// connects: give this process an awkward one for the while.
	orig, err := os.ReadFile("/proc/self/comm")
	if err != nil {
		t.Fatal(err)
	}
	odd := "a\"b\\c\nd\xff"
	if err := os.WriteFile("/proc/self/comm", []byte(odd), 0); err != nil {
		t.Fatal(err)
	}
	x, err := client.Open(socket, "sroce_lo")
	os.WriteFile("/proc/self/comm", bytes.TrimSpace(orig), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	pd, err := x.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	buf, err := x.Alloc(1 << 16)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pd.RegMR(buf, 0, 1<<16, mr.AccessLocalWrite); err != nil {
		t.Fatal(err)
	}
	pid := strconv.Itoa(os.Getpid())
	wantComm := "a\"b\\c\nd\uFFFD"

	for _, perClient := range []bool{false, true} {
		reg := prometheus.NewRegistry()
		reg.MustRegister(srv.Collector(perClient))
		text := gatherText(t, reg)
		fams := parseMetrics(t, text)
		for name, f := range fams {
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					k, v := l.GetName(), l.GetValue()
					if k == "pid" || k == "client" || v == pid && k != "uid" {
						t.Errorf("--metrics-clients=%v: %s tells a pid or client number: %s=%s", perClient, name, k, v)
					}
					if !perClient && (k == "uid" || k == "comm") {
						t.Errorf("without --metrics-clients: %s has label %s=%q", name, k, v)
					}
				}
			}
		}
		dev := map[string]string{"device": "sroce_lo"}
		for name, want := range map[string]float64{"sroce_clients": 1, "sroce_device_mrs": 1, "sroce_device_registered_bytes": 65536, "sroce_device_qps": 0} {
			if v, ok := value(t, fams, name, dev); !ok || v != want {
				t.Errorf("--metrics-clients=%v: %s = %v (%v), want %v", perClient, name, v, ok, want)
			}
		}
		me := map[string]string{"device": "sroce_lo", "uid": strconv.Itoa(os.Getuid()), "comm": wantComm}
		for name, want := range map[string]float64{"sroce_client_contexts": 1, "sroce_client_mrs": 1, "sroce_client_registered_bytes": 65536} {
			v, ok := value(t, fams, name, me)
			if perClient && (!ok || v != want) {
				t.Errorf("%s%v = %v (%v), want %v\n%s", name, me, v, ok, want, text)
			}
			if !perClient && fams[name] != nil {
				t.Errorf("without --metrics-clients: %s is exposed", name)
			}
		}
	}
}

// startInProcess starts a daemon in this process serving lo over the UDP
// link at addr, and returns its socket.
func startInProcess(t *testing.T, addr string) (string, *daemon.Server) {
	t.Helper()
	port, err := iface.Open(context.Background(), "lo", iface.Options{Mode: iface.ModeUDP, Addr: netip.MustParseAddr(addr)})
	if err != nil {
		t.Fatalf("opening a device on lo at %s: %v", addr, err)
	}
	t.Cleanup(func() { port.Close() })
	srv, err := daemon.New([]daemon.Device{port}, daemon.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(t.TempDir(), "sroce.sock")
	ln, err := daemon.Listen(socket)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return socket, srv
}

// liveDaemon is a sroce daemon process serving lo over the UDP link,
// with its metrics endpoint.
type liveDaemon struct {
	bin, dir, socket, metrics string
	addr                      string
	cmd                       *exec.Cmd
	mu                        sync.Mutex
	log                       bytes.Buffer
	done                      chan struct{}
}

func (d *liveDaemon) Write(p []byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.log.Write(p)
}

// buildSroce builds this command into dir.
func buildSroce(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "sroce")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("building sroce: %v\n%s", err, out)
	}
	return bin
}

// startLiveDaemon builds sroce and starts "sroce daemon -d lo@addr --link
// udp --metrics metrics" with extra flags, in a directory every user may
// enter (the binary and the socket are there), and waits until /readyz
// says it is ready. The daemon is stopped with SIGTERM at the end.
func startLiveDaemon(t *testing.T, addr, metrics string, extra ...string) *liveDaemon {
	t.Helper()
	dir := t.TempDir()
	testdirs.Searchable(dir)
	d := &liveDaemon{bin: buildSroce(t, dir), dir: dir, socket: filepath.Join(dir, "sroce.sock"), metrics: metrics, addr: addr, done: make(chan struct{})}
	args := append([]string{"daemon", "-d", "lo@" + addr, "--link", "udp", "--socket", d.socket, "--metrics", metrics}, extra...)
	d.cmd = exec.Command(d.bin, args...)
	d.cmd.Stdout, d.cmd.Stderr = d, d
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { d.cmd.Wait(); close(d.done) }()
	t.Cleanup(func() {
		d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.done:
		case <-time.After(10 * time.Second):
			d.cmd.Process.Kill()
			t.Errorf("the daemon did not stop within 10 s of SIGTERM")
			<-d.done
		}
		if t.Failed() {
			d.mu.Lock()
			t.Logf("daemon log:\n%s", d.log.String())
			d.mu.Unlock()
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, _ := d.get(t, "/readyz")
		if code == http.StatusOK {
			return d
		}
		select {
		case <-d.done:
			t.Fatalf("the daemon ended before it was ready:\n%s", d.logText())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the daemon's /readyz did not answer 200 within 20 s (last: %d):\n%s", code, d.logText())
		}
		// wall clock: waits for another process (the daemon) to serve /readyz
		time.Sleep(50 * time.Millisecond)
	}
}

func (d *liveDaemon) logText() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.log.String()
}

// get fetches path from the metrics endpoint: status code and body (0
// when it does not answer within 5 s).
func (d *liveDaemon) get(t *testing.T, path string) (int, string) {
	t.Helper()
	c := http.Client{Timeout: 5 * time.Second}
	r, err := c.Get("http://" + d.metrics + path)
	if err != nil {
		return 0, err.Error()
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(r.Body, 4<<20))
	return r.StatusCode, string(b)
}

// scrape fetches /metrics and parses and lints it.
func (d *liveDaemon) scrape(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	code, body := d.get(t, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d %s", code, body)
	}
	return parseMetrics(t, body)
}

// command returns "sroce run --socket ... -- prog args" on the daemon,
// bounded by ctx.
func (d *liveDaemon) command(ctx context.Context, prog string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, d.bin, append([]string{"run", "--socket", d.socket, "--", prog}, args...)...)
}

// needPrograms skips the test without a C compiler or the programs.
func needPrograms(t *testing.T, progs ...string) {
	t.Helper()
	needCompiler(t)
	for _, p := range progs {
		if _, err := exec.LookPath(p); err != nil {
			t.Skipf("skipping: %s is not installed (apt-get install ibverbs-utils)", p)
		}
	}
}

// gidIndex returns the index of the RoCE v2 GID of the daemon's address,
// as ibv_devinfo -v lists it through the drop-in library.
func (d *liveDaemon) gidIndex(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := d.command(ctx, "ibv_devinfo", "-v", "-d", "sroce_lo").CombinedOutput()
	if err != nil {
		t.Fatalf("ibv_devinfo -v: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`GID\[\s*(\d+)\]:\s+::ffff:` + regexp.QuoteMeta(d.addr) + `, RoCE v2`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("ibv_devinfo -v lists no RoCE v2 GID for %s:\n%s", d.addr, out)
	}
	return string(m[1])
}

// waitListen waits until a TCP port listens (a pingpong server).
func waitListen(t *testing.T, port int, srv *exec.Cmd, srvOut *bytes.Buffer) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, _ := exec.Command("ss", "-Hltn", fmt.Sprintf("sport = :%d", port)).Output()
		if len(bytes.TrimSpace(out)) > 0 {
			return
		}
		if srv.ProcessState != nil || time.Now().After(deadline) {
			t.Fatalf("the server did not listen on TCP port %d within 30 s:\n%s", port, srvOut)
		}
		// wall clock: waits for a real process to listen
		time.Sleep(50 * time.Millisecond)
	}
}

// TestMetricsScrape starts a real daemon with --metrics and
// --metrics-clients, scrapes it over HTTP and checks the exposition with
// Prometheus's parser and promlint; runs ibv_rc_pingpong through it and
// checks that the packet counters and the client series moved; and checks
// /healthz and /readyz, also once the control socket is gone.
func TestMetricsScrape(t *testing.T) {
	needPrograms(t, "ibv_rc_pingpong", "ibv_devinfo", "ss")
	d := startLiveDaemon(t, "127.0.0.84", "127.0.0.1:19200", "--metrics-clients")
	fams := d.scrape(t)
	port := map[string]string{"device": "sroce_lo", "port": "1"}
	if v, ok := value(t, fams, "sroce_port_state", map[string]string{"device": "sroce_lo", "port": "1", "state": "ACTIVE"}); !ok || v != 1 {
		t.Errorf("sroce_port_state{state=ACTIVE} = %v (%v), want 1", v, ok)
	}
	if v, ok := value(t, fams, "sroce_port_state", map[string]string{"device": "sroce_lo", "port": "1", "state": "DOWN"}); !ok || v != 0 {
		t.Errorf("sroce_port_state{state=DOWN} = %v (%v), want 0", v, ok)
	}
	if v, ok := value(t, fams, "sroce_port_mtu_bytes", port); !ok || v != 65536 {
		t.Errorf("sroce_port_mtu_bytes = %v (%v), want lo's 65536", v, ok)
	}
	if v, ok := value(t, fams, "sroce_port_active_mtu_bytes", port); !ok || v != 4096 {
		t.Errorf("sroce_port_active_mtu_bytes = %v (%v), want 4096", v, ok)
	}
	if v, ok := value(t, fams, "sroce_build_info", nil); !ok || v != 1 {
		t.Errorf("sroce_build_info = %v (%v), want 1", v, ok)
	}
	for _, f := range fams["sroce_build_info"].GetMetric() {
		for _, l := range f.GetLabel() {
			if l.GetValue() == "" {
				t.Errorf("sroce_build_info has an empty %s", l.GetName())
			}
		}
	}
	for _, name := range []string{"process_cpu_seconds_total", "process_resident_memory_bytes", "go_goroutines", "go_memstats_heap_alloc_bytes"} {
		if fams[name] == nil {
			t.Errorf("no %s (process and Go runtime collectors)", name)
		}
	}
	sent0, _ := value(t, fams, "sroce_sent_pkts_total", port)
	rcvd0, _ := value(t, fams, "sroce_rcvd_pkts_total", port)
	tx0, _ := value(t, fams, "sroce_link_tx_packets_total", port)
	txBytes0, _ := value(t, fams, "sroce_link_tx_bytes_total", port)
	rxBytes0, _ := value(t, fams, "sroce_link_rx_bytes_total", port)

	// A pingpong pair through the daemon: both ends on its device.
	gid := d.gidIndex(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const iters = 100
	args := []string{"-d", "sroce_lo", "-g", gid, "-p", "19201", "-n", strconv.Itoa(iters), "-s", "4096", "-c"}
	srv := d.command(ctx, "ibv_rc_pingpong", args...)
	var srvOut bytes.Buffer
	srv.Stdout, srv.Stderr = &srvOut, &srvOut
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	srvDone := make(chan error, 1)
	go func() { srvDone <- srv.Wait() }()
	waitListen(t, 19201, srv, &srvOut)
	// While the server waits with its QP, the client series show it.
	fams = d.scrape(t)
	if v, ok := value(t, fams, "sroce_client_qps", map[string]string{"device": "sroce_lo", "comm": "ibv_rc_pingpong", "uid": strconv.Itoa(os.Getuid())}); !ok || v != 1 {
		t.Errorf("sroce_client_qps of the waiting ibv_rc_pingpong = %v (%v), want 1", v, ok)
	}
	out, err := d.command(ctx, "ibv_rc_pingpong", append(args, "127.0.0.1")...).CombinedOutput()
	if err != nil {
		t.Fatalf("ibv_rc_pingpong client: %v\n%s\nserver:\n%s", err, out, srvOut.String())
	}
	select {
	case err := <-srvDone:
		if err != nil {
			t.Fatalf("ibv_rc_pingpong server: %v\n%s", err, srvOut.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the ibv_rc_pingpong server did not end within 30 s of its client:\n%s", srvOut.String())
	}
	if !strings.Contains(string(out), fmt.Sprintf("%d iters in", iters)) {
		t.Fatalf("the client did not report %d iterations:\n%s", iters, out)
	}
	fams = d.scrape(t)
	sent1, _ := value(t, fams, "sroce_sent_pkts_total", port)
	rcvd1, _ := value(t, fams, "sroce_rcvd_pkts_total", port)
	tx1, _ := value(t, fams, "sroce_link_tx_packets_total", port)
	// Each iteration is a 4 KiB SEND each way (one packet at a 4096 MTU)
	// and its ACKs.
	t.Logf("sent +%v rcvd +%v tx +%v", sent1-sent0, rcvd1-rcvd0, tx1-tx0)
	if sent1-sent0 < 2*iters || rcvd1-rcvd0 < 2*iters || tx1-tx0 < 2*iters {
		t.Errorf("after %d round trips: sent_pkts +%v, rcvd_pkts +%v, link tx_packets +%v; want each at least %d",
			iters, sent1-sent0, rcvd1-rcvd0, tx1-tx0, 2*iters)
	}
	// 4 KiB each way per round trip, and the headers.
	txBytes1, _ := value(t, fams, "sroce_link_tx_bytes_total", port)
	rxBytes1, _ := value(t, fams, "sroce_link_rx_bytes_total", port)
	if txBytes1-txBytes0 < 2*iters*4096 || rxBytes1-rxBytes0 < 2*iters*4096 {
		t.Errorf("after %d round trips of 4096 bytes: link tx_bytes +%v, rx_bytes +%v; want each at least %d",
			iters, txBytes1-txBytes0, rxBytes1-rxBytes0, 2*iters*4096)
	}
	if v, _ := value(t, fams, "sroce_rdma_sends_total", port); v < 2*iters {
		t.Errorf("sroce_rdma_sends_total = %v, want at least %d", v, 2*iters)
	}
	// The programs ended; the daemon frees their contexts as it sees
	// their connections close.
	for deadline := time.Now().Add(5 * time.Second); ; {
		v, ok := value(t, d.scrape(t), "sroce_clients", map[string]string{"device": "sroce_lo"})
		if ok && v == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("sroce_clients 5 s after the programs ended = %v (%v), want 0", v, ok)
			break
		}
		// wall clock: waits for the daemon process to see the programs gone
		time.Sleep(20 * time.Millisecond)
	}

	if code, body := d.get(t, "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz: %d %s", code, body)
	}
	if code, body := d.get(t, "/readyz"); code != http.StatusOK {
		t.Errorf("/readyz: %d %s", code, body)
	}
	// Without its socket the daemon serves nobody new: not ready.
	if err := os.Remove(d.socket); err != nil {
		t.Fatal(err)
	}
	code, body := d.get(t, "/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, d.socket) {
		t.Errorf("/readyz without the socket: %d %q, want 503 naming %s", code, body, d.socket)
	}
	if code, body := d.get(t, "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz without the socket: %d %s", code, body)
	}
}

// TestMetricsAddressChecked checks that a bad --metrics address is a
// usage error found before any device opens, and that an address in use
// fails at once with the listener's error.
func TestMetricsAddressChecked(t *testing.T) {
	for _, addr := range []string{"nonsense", "127.0.0.1:99999", "127.0.0.1:http-ish", "a b:1"} {
		code, _, stderr := runSroce(t, nil, "daemon", "-d", "no-such-interface-ob", "--link", "udp", "--metrics", addr)
		if code != exitUsage || !strings.Contains(stderr, "--metrics") || strings.Contains(stderr, "no-such-interface-ob") {
			t.Errorf("--metrics %q: exit %d, stderr %q; want %d naming --metrics, before the interface", addr, code, stderr, exitUsage)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:19202")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	code, _, stderr := runSroce(t, nil, "daemon", "-d", "no-such-interface-ob", "--link", "udp", "--metrics", ln.Addr().String())
	if code != exitProblem || !strings.Contains(stderr, "address already in use") || strings.Contains(stderr, "no-such-interface-ob") {
		t.Errorf("--metrics on a used port: exit %d, stderr %q; want %d, address in use, before the interface", code, stderr, exitProblem)
	}
}

// TestDaemonOutlivesItsLogReader closes the pipe the daemon logs into,
// then stops it: SIGTERM still drains it (exit 0) and no socket is left,
// where a daemon killed by SIGPIPE at its next log line would leave both.
func TestDaemonOutlivesItsLogReader(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: the daemon on lo with an address of its own needs root")
	}
	dir := t.TempDir()
	bin := buildSroce(t, dir)
	sock := filepath.Join(dir, "sroce.sock")
	cmd := exec.Command(bin, "daemon", "-d", "lo@127.0.0.90", "--link", "udp", "--socket", sock)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	r, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	lines := make(chan string, 64)
	go func() {
		s := bufio.NewScanner(r)
		for s.Scan() {
			lines <- s.Text()
			if strings.Contains(s.Text(), "msg=listening") {
				break
			}
		}
		close(lines)
	}()
	var seen []string
	for l := range lines {
		seen = append(seen, l)
	}
	if _, err := os.Stat(sock); err != nil {
		cmd.Process.Kill()
		t.Fatalf("the daemon did not listen: %v\n%s", err, strings.Join(seen, "\n"))
	}
	r.Close() // the log's reader goes away
	go func() { done <- cmd.Wait() }()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("the daemon after SIGTERM with its log's reader gone: %v, want exit 0", err)
		}
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		t.Fatal("the daemon did not end within 10 s of SIGTERM")
	}
	if _, err := os.Lstat(sock); err == nil {
		t.Error("the daemon left its socket")
	}
}
