package netns

// The daemon's metrics endpoint over AF_XDP: a daemon in a namespace
// serving its veth end, scraped from inside the namespace, follows its
// port when the interface goes down and comes back: /readyz turns 503
// naming the port, sroce_port_state says DOWN, and both recover.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/sroce/sroce/internal/nsutil"
)

// httpGetIn fetches http://addr/path from inside namespace ns: status and
// body, or an error.
func httpGetIn(ns *nsutil.Namespace, addr, path string) (int, string, error) {
	var c net.Conn
	if err := ns.Do(func() error {
		var err error
		c, err = net.DialTimeout("tcp", addr, 2*time.Second)
		return err
	}); err != nil {
		return 0, "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", path, addr)
	r, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, "", err
	}
	defer r.Body.Close()
	b, err := io.ReadAll(io.LimitReader(r.Body, 4<<20))
	return r.StatusCode, string(b), err
}

// TestMetricsPortStateXDP starts a daemon over AF_XDP with --metrics,
// takes its interface down and up, and checks /readyz, sroce_port_state
// and sroce_link_downed_total follow; every scrape parses and lints clean.
func TestMetricsPortStateXDP(t *testing.T) {
	nsutil.Skip(t)
	pair, err := nsutil.NewPair(nsutil.PairConfig{Prefix: "ob", Seed: 11})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pair.Close() })
	bin := buildSroce(t)
	ifname := pair.Veth.NameA
	const addr = "127.0.0.1:19220"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := pair.A.Command(context.Background(), bin, "daemon", "-d", ifname, "--link", "xdp",
		"--socket", filepath.Join(t.TempDir(), "d.sock"), "--metrics", addr)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p := startTool(t, cmd, pair.A.Start)
	t.Cleanup(func() {
		p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
		}
	})
	dev := "sroce_" + ifname

	// await waits until /readyz answers code with a body containing want.
	await := func(what string, code int, want string) {
		t.Helper()
		var got int
		var body string
		err := waitFor(ctx, what, func() (bool, error) {
			if p.exited() {
				return false, fmt.Errorf("the daemon ended:\n%v", p.wait(ctx))
			}
			got, body, _ = httpGetIn(pair.A, addr, "/readyz")
			return got == code && strings.Contains(body, want), nil
		})
		if err != nil {
			t.Fatalf("%v (last /readyz: %d %q)\n%s", err, got, body, p.stderr.String())
		}
	}
	// scrape returns the value of a series of the exposition, which must
	// parse and lint clean.
	scrape := func() func(name string, labels ...string) float64 {
		t.Helper()
		code, body, err := httpGetIn(pair.A, addr, "/metrics")
		if err != nil || code != http.StatusOK {
			t.Fatalf("/metrics: %d %v", code, err)
		}
		parser := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := parser.TextToMetricFamilies(strings.NewReader(body))
		if err != nil {
			t.Fatalf("the exposition does not parse: %v", err)
		}
		var list []*dto.MetricFamily
		for _, f := range fams {
			list = append(list, f)
		}
		problems, err := promlint.NewWithMetricFamilies(list).Lint()
		if err != nil || len(problems) > 0 {
			t.Fatalf("promlint: %v %v", err, problems)
		}
		return func(name string, labels ...string) float64 {
			t.Helper()
		series:
			for _, m := range fams[name].GetMetric() {
				have := map[string]string{}
				for _, l := range m.GetLabel() {
					have[l.GetName()] = l.GetValue()
				}
				for i := 0; i+1 < len(labels); i += 2 {
					if have[labels[i]] != labels[i+1] {
						continue series
					}
				}
				if m.Counter != nil {
					return m.Counter.GetValue()
				}
				return m.Gauge.GetValue()
			}
			t.Fatalf("no series %s%v", name, labels)
			return 0
		}
	}

	await("the daemon ready", http.StatusOK, "ready")
	v := scrape()
	if v("sroce_port_state", "device", dev, "state", "ACTIVE") != 1 || v("sroce_port_state", "device", dev, "state", "DOWN") != 0 {
		t.Errorf("sroce_port_state of the ACTIVE port: ACTIVE %v, DOWN %v", v("sroce_port_state", "device", dev, "state", "ACTIVE"), v("sroce_port_state", "device", dev, "state", "DOWN"))
	}
	if v("sroce_port_info", "device", dev, "interface", ifname, "link_layer", "Ethernet") != 1 {
		t.Errorf("no sroce_port_info for %s", ifname)
	}
	downed := v("sroce_link_downed_total", "device", dev, "port", "1")
	// veth reports 10 Gbit/s (ethtool), read in the daemon's namespace.
	if got := v("sroce_port_speed_bytes_per_second", "device", dev, "port", "1"); got != 10000*1e6/8 {
		t.Errorf("sroce_port_speed_bytes_per_second of a veth = %v, want %v", got, 10000*1e6/8)
	}

	if err := pair.A.SetLinkUp(ifname, false); err != nil {
		t.Fatal(err)
	}
	await("/readyz 503 with the interface down", http.StatusServiceUnavailable, dev+"'s port is DOWN")
	v = scrape()
	if v("sroce_port_state", "device", dev, "state", "DOWN") != 1 || v("sroce_port_state", "device", dev, "state", "ACTIVE") != 0 {
		t.Errorf("sroce_port_state with the interface down: DOWN %v, ACTIVE %v", v("sroce_port_state", "device", dev, "state", "DOWN"), v("sroce_port_state", "device", dev, "state", "ACTIVE"))
	}
	if got := v("sroce_link_downed_total", "device", dev, "port", "1"); got != downed+1 {
		t.Errorf("sroce_link_downed_total %v after the interface went down, want %v", got, downed+1)
	}
	if code, _, err := httpGetIn(pair.A, addr, "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz with the port down: %d %v", code, err)
	}

	if err := pair.A.SetLinkUp(ifname, true); err != nil {
		t.Fatal(err)
	}
	await("/readyz 200 with the interface back", http.StatusOK, "ready")
	if v := scrape(); v("sroce_port_state", "device", dev, "state", "ACTIVE") != 1 {
		t.Errorf("sroce_port_state with the interface back: not ACTIVE")
	}
}
