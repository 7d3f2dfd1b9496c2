package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/sroce/sroce/client"
	"github.com/sroce/sroce/daemon"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/roce/iface"
)

// sample is one line of a metric of the text exposition.
type sample struct {
	name   string
	labels map[string]string
	value  string
}

var (
	typeLine   = regexp.MustCompile(`^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge)$`)
	helpLine   = regexp.MustCompile(`^# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) [^\n]*$`)
	sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (-?[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?)$`)
	labelName  = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)
)

// parseExposition parses the Prometheus text format strictly: HELP lines
// at most once per metric, a TYPE line once per metric before its samples, label values with only the escapes
// \\, \" and \n, no series twice.
func parseExposition(text string) ([]sample, error) {
	typed := map[string]bool{}
	helped := map[string]bool{}
	series := map[string]bool{}
	var out []sample
	for i, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		if m := typeLine.FindStringSubmatch(line); m != nil {
			if typed[m[1]] {
				return nil, fmt.Errorf("line %d: a second TYPE for %s", i+1, m[1])
			}
			typed[m[1]] = true
			continue
		}
		if m := helpLine.FindStringSubmatch(line); m != nil {
			if helped[m[1]] {
				return nil, fmt.Errorf("line %d: a second HELP for %s", i+1, m[1])
			}
			helped[m[1]] = true
			continue
		}
		m := sampleLine.FindStringSubmatch(line)
		if m == nil {
			return nil, fmt.Errorf("line %d: not a sample: %q", i+1, line)
		}
		if !typed[m[1]] {
			return nil, fmt.Errorf("line %d: %s has no TYPE before it", i+1, m[1])
		}
		s := sample{name: m[1], labels: map[string]string{}, value: m[3]}
		rest := m[2]
		for rest != "" {
			eq := strings.Index(rest, `="`)
			if eq < 0 || !labelName.MatchString(rest[:eq]) {
				return nil, fmt.Errorf("line %d: bad label in %q", i+1, rest)
			}
			name := rest[:eq]
			rest = rest[eq+2:]
			var v strings.Builder
			j := 0
			for ; j < len(rest) && rest[j] != '"'; j++ {
				if rest[j] == '\n' {
					return nil, fmt.Errorf("line %d: a raw newline in a label value", i+1)
				}
				if rest[j] == '\\' {
					j++
					switch {
					case j < len(rest) && rest[j] == '\\':
						v.WriteByte('\\')
					case j < len(rest) && rest[j] == '"':
						v.WriteByte('"')
					case j < len(rest) && rest[j] == 'n':
						v.WriteByte('\n')
					default:
						return nil, fmt.Errorf("line %d: a bad escape in %q", i+1, rest)
					}
					continue
				}
				v.WriteByte(rest[j])
			}
			if j == len(rest) {
				return nil, fmt.Errorf("line %d: an unterminated label value", i+1)
			}
			if _, dup := s.labels[name]; dup {
				return nil, fmt.Errorf("line %d: label %s twice", i+1, name)
			}
			s.labels[name] = v.String()
			rest = rest[j+1:]
			if rest != "" {
				if rest[0] != ',' {
					return nil, fmt.Errorf("line %d: %q after a label", i+1, rest)
				}
				rest = rest[1:]
			}
		}
		key := s.name + "{" + m[2] + "}"
		if series[key] {
			return nil, fmt.Errorf("line %d: series %s twice", i+1, key)
		}
		series[key] = true
		out = append(out, s)
	}
	return out, nil
}

// TestMetricsPrivacy checks the daemon's metrics with a client holding a
// PD and an MR: by default per device only (clients, QPs, MRs, bytes), no
// uid, comm or pid label; with --metrics-clients per uid and program name
// too, never the pid. The exposition parses.
func TestMetricsPrivacy(t *testing.T) {
	port, err := iface.Open(context.Background(), "lo", iface.Options{Mode: iface.ModeUDP, Addr: netip.MustParseAddr("127.0.0.83")})
	if err != nil {
		t.Fatal(err)
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
	x, err := client.Open(socket, "sroce_lo")
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
	comm, _ := os.ReadFile("/proc/self/comm")
	me := strings.TrimSpace(string(comm))
	pid := strconv.Itoa(os.Getpid())

	for _, perClient := range []bool{false, true} {
		var b bytes.Buffer
		writeMetrics(&b, srv, []*iface.Port{port}, perClient)
		samples, err := parseExposition(b.String())
		if err != nil {
			t.Fatalf("--metrics-clients=%v: %v\n%s", perClient, err, b.String())
		}
		got := map[string]string{}
		for _, s := range samples {
			for k, v := range s.labels {
				if k == "pid" || k == "client" || v == pid && k != "uid" {
					t.Errorf("--metrics-clients=%v: %s tells a pid or client number: %v", perClient, s.name, s.labels)
				}
				if !perClient && (k == "uid" || k == "comm") {
					t.Errorf("without --metrics-clients: %s has label %s=%q", s.name, k, v)
				}
			}
			if perClient && s.labels["comm"] != "" {
				if s.labels["uid"] != strconv.Itoa(os.Getuid()) || s.labels["comm"] != me || s.labels["device"] != "sroce_lo" {
					t.Errorf("%s labels %v, want uid %d, comm %q, device sroce_lo", s.name, s.labels, os.Getuid(), me)
				}
				got[s.name] = s.value
			}
			if len(s.labels) == 1 && s.labels["device"] == "sroce_lo" {
				got[s.name] = s.value
			}
		}
		want := map[string]string{"sroce_clients": "1", "sroce_device_mrs": "1", "sroce_device_registered_bytes": "65536"}
		if perClient {
			want["sroce_client_contexts"], want["sroce_client_mrs"], want["sroce_client_registered_bytes"] = "1", "1", "65536"
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("--metrics-clients=%v: %s = %q, want %s\n%s", perClient, k, got[k], v, b.String())
			}
		}
	}
}

// TestClientMetricsEscaping checks that any program name keeps the
// exposition valid, and that clients of one uid, program and device make
// one series.
func TestClientMetricsEscaping(t *testing.T) {
	odd := "a\"b\\c\nd\xff"
	clients := []daemon.ClientStat{
		{ID: 1, PID: 10, UID: 1000, Comm: odd, Device: "sroce_x", QPs: 2, MRs: 1, Bytes: 4096},
		{ID: 2, PID: 11, UID: 1000, Comm: odd, Device: "sroce_x", QPs: 3},
		{ID: 3, PID: 12, UID: 1001, Comm: "cm", Device: ""},
	}
	var b strings.Builder
	writeClientMetrics(&b, clients, []string{"sroce_x", "sroce_y"}, true)
	samples, err := parseExposition(b.String())
	if err != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	found := false
	for _, s := range samples {
		if s.name == "sroce_client_qps" && s.labels["uid"] == "1000" {
			if found || s.labels["comm"] != "a\"b\\c\nd\uFFFD" || s.value != "5" {
				t.Errorf("sroce_client_qps %v = %s, want one series of comm %q with 5", s.labels, s.value, odd)
			}
			found = true
		}
		if s.name == "sroce_clients" && s.labels["device"] == "sroce_y" && s.value != "0" {
			t.Errorf("sroce_clients of a device without clients: %s", s.value)
		}
	}
	if !found {
		t.Errorf("no sroce_client_qps for uid 1000:\n%s", b.String())
	}
}
