package main

// The daemon's HTTP endpoint (--metrics ADDR): /metrics in Prometheus's
// exposition (client_golang's registry: the daemon's collector, build
// info, the process and Go runtime collectors), /healthz and /readyz.
// It listens before the devices open, so that a bad address is reported
// at once and a service manager or prober sees the daemon come up.

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sroce/sroce/daemon"
	"github.com/sroce/sroce/internal/buildinfo"
	"github.com/sroce/sroce/roce/iface"
	"github.com/sroce/sroce/verbs"
)

// observer serves the daemon's metrics and health endpoints. Its methods
// do nothing on a nil observer (no --metrics).
type observer struct {
	ln  net.Listener
	hs  *http.Server
	reg *prometheus.Registry

	mu     sync.Mutex
	srv    *daemon.Server
	ports  func() []*iface.Port
	want   []string // the interfaces given with -d
	socket string

	listening atomic.Bool // the control socket accepts clients
}

// listenMetrics listens on addr and serves the endpoints; /metrics gives
// the build information and the process's until attach.
func listenMetrics(addr string, log *slog.Logger) (*observer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics: %w", err)
	}
	o := &observer{ln: ln, reg: prometheus.NewRegistry()}
	bi := buildinfo.Get()
	rev := bi.Revision
	if rev == "" {
		rev = "unknown"
	}
	o.reg.MustRegister(
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewGoCollector(),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sroce_build_info",
			Help:        "The sroce that runs: module version, VCS revision and Go version; always 1.",
			ConstLabels: prometheus.Labels{"version": bi.Version, "revision": rev, "goversion": bi.GoVersion}},
			func() float64 { return 1 }),
	)
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(o.reg, promhttp.HandlerOpts{
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn), ErrorHandling: promhttp.ContinueOnError,
		MaxRequestsInFlight: 4, Timeout: 10 * time.Second}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if err := o.ready(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "not ready: %v\n", err)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	o.hs = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: time.Minute, MaxHeaderBytes: 16 << 10}
	go o.hs.Serve(ln)
	log.Info("metrics", "url", "http://"+ln.Addr().String()+"/metrics")
	return o, nil
}

// attach adds the server's collector once it runs: want are the
// interfaces the daemon was given, ports the devices it serves now,
// socket its control socket.
func (o *observer) attach(srv *daemon.Server, perClient bool, want []string, ports func() []*iface.Port, socket string) {
	if o == nil {
		return
	}
	o.reg.MustRegister(srv.Collector(perClient))
	o.mu.Lock()
	o.srv, o.want, o.ports, o.socket = srv, slices.Clone(want), ports, socket
	o.mu.Unlock()
}

// setWant sets the interfaces the daemon is to serve (a reload changed
// them).
func (o *observer) setWant(want []string) {
	if o == nil {
		return
	}
	o.mu.Lock()
	o.want = slices.Clone(want)
	o.mu.Unlock()
}

// setListening says whether the control socket accepts clients.
func (o *observer) setListening(on bool) {
	if o != nil {
		o.listening.Store(on)
	}
}

// close stops serving.
func (o *observer) close() {
	if o != nil {
		o.hs.Close()
	}
}

// ready returns nil when every configured device is served with its port
// ACTIVE and the control socket accepts clients; otherwise an error
// saying what is not.
func (o *observer) ready() error {
	o.mu.Lock()
	srv, want, portsFn, socket := o.srv, o.want, o.ports, o.socket
	o.mu.Unlock()
	if srv == nil {
		return errors.New("the daemon is starting: its devices are not open yet")
	}
	var problems []string
	served := map[string]*iface.Port{}
	for _, p := range portsFn() {
		served[p.Ifname()] = p
	}
	for _, name := range want {
		p := served[name]
		switch {
		case p == nil:
			problems = append(problems, fmt.Sprintf("device sroce_%s is not served (interface %s is gone; waiting for it)", name, name))
		case p.State() != verbs.PortActive:
			problems = append(problems, fmt.Sprintf("device sroce_%s's port is DOWN (interface %s is down or has no carrier)", name, name))
		}
	}
	if !o.listening.Load() {
		problems = append(problems, "the control socket "+socket+" does not accept clients")
	} else if st, err := os.Stat(socket); err != nil || st.Mode().Type() != os.ModeSocket {
		problems = append(problems, "the control socket "+socket+" is missing")
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}
