package main

// sroce daemon: owns sroce devices on network interfaces and serves them
// to other processes (the drop-in libibverbs that "sroce run" loads, and
// Go programs through package client).

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/sroce/sroce/daemon"
	"github.com/sroce/sroce/roce/iface"
	"github.com/sroce/sroce/roce/tracesock"
	"github.com/sroce/sroce/tools/device"
)

const daemonAbout = `
Daemon opens a sroce device on each interface given with -d (named
sroce_<interface>, as "sroce devinfo" prints it) and serves the devices to
local processes over a unix socket: programs run with "sroce run" (the
drop-in libibverbs) and Go programs using package client do RDMA on them.

The socket is /run/sroce/sroce.sock as root and $XDG_RUNTIME_DIR/sroce.sock
otherwise; --socket or SROCE_SOCKET choose another. --link picks the link
of every device: xdp (AF_XDP, needs root), udp (a UDP socket on port 4791,
no privileges) or auto (xdp when permitted). Each client's objects are
freed when it exits or is killed; a client that breaks the protocol is
disconnected and the reason logged. --max-qps, --max-mrs and --max-reg
bound what one client (connection) may hold; --limit-user bounds what the
clients of one uid hold together, --limit-total what all clients hold:
connections, descriptors and mappings in the daemon, QPs, MRs, registered
bytes and queue memory. A request over a budget fails with the kernel's
errno (ENOMEM, EMFILE; EAGAIN for a connection over the cap, which is then
closed) and the client stays connected. The totals follow the host
(vm.max_map_count, RLIMIT_NOFILE, MemTotal); one uid may take a quarter.

--metrics ADDR serves Prometheus metrics at http://ADDR/metrics: every
device's counters (those "sroce stat" names) and each client's QPs, MRs and
registered bytes. Logs are structured (--log-format text or json) on
standard error. SIGINT or SIGTERM stops the daemon: clients are
disconnected and everything freed.`

// repeated is a flag that may be given several times.
type repeated []string

func (r *repeated) String() string     { return strings.Join(*r, ",") }
func (r *repeated) Set(s string) error { *r = append(*r, s); return nil }

// runDaemon implements "sroce daemon".
func runDaemon(e *env, args []string) int {
	// The descriptor budget follows RLIMIT_NOFILE: take all the service
	// was given.
	raiseErr := daemon.RaiseNoFile()
	defTotal := daemon.DefaultTotal(daemon.ReadHost())
	defUser := daemon.DefaultUser(defTotal)
	f := newFlags(e, "daemon", "sroce daemon -d IF [-d IF ...] [--link auto|xdp|udp] [--socket PATH] [--metrics ADDR]", daemonAbout)
	var ifs repeated
	f.Var(&ifs, "d", "network `interface` to serve, or IF@ADDR to bind the UDP link to ADDR (repeatable)")
	link := f.String("link", "auto", "link of the devices: `auto`, xdp or udp")
	socket := f.String("socket", "", "unix socket to listen on (default: SROCE_SOCKET, or the place for this user)")
	metrics := f.String("metrics", "", "serve Prometheus metrics on this `address` (host:port)")
	engine := f.String("engine", "", "engine mode: auto, sleep, spin, adaptive or inline (default: SROCE_ENGINE, else auto)")
	queues := f.Int("queues", 0, "receive queues of each interface the devices use, one engine each (default: SROCE_QUEUES, else the queue count capped by the CPUs)")
	logFormat := f.String("log-format", "text", "log format: `text` or json")
	verbose := f.Bool("v", false, "log every client request that fails")
	spin := f.Duration("spin", 0, "how long a client's bridge keeps polling its rings after the last work before it sleeps (default 50µs with four CPUs or more, else none; 0: the default; negative: never spin)")
	maxQPs := f.Int("max-qps", daemon.DefaultLimits.QPs, "QPs one client may hold")
	maxMRs := f.Int("max-mrs", daemon.DefaultLimits.MRs, "MRs and MWs one client may hold")
	maxReg := f.Uint64("max-reg", daemon.DefaultLimits.RegBytes, "bytes one client may register")
	var limUser, limTotal budgetFlag
	f.Var(&limUser, "limit-user", "what the clients of one uid may hold together, with --limit-total's `keys`; a key left out is a quarter of the total's (here: "+defUser.String()+")")
	f.Var(&limTotal, "limit-total", "what all clients may hold together, as `KEY=N[,KEY=N...]` with keys conns, fds, maps, qps, mrs (counts), "+
		"reg and queue (bytes, with K, M or G suffixes); a key left out follows the host: "+
		fmt.Sprintf("maps = vm.max_map_count less max(%d, an eighth), fds = RLIMIT_NOFILE (soft raised to hard) less max(%d, a sixteenth), ", daemon.MapsReserve, daemon.FDsReserve)+
		fmt.Sprintf("conns = a quarter of fds up to %d, qps = fds up to %d, mrs = maps, queue = a quarter of MemTotal, reg = half of MemTotal; ", daemon.MaxConns, daemon.MaxQPs)+
		"queue counts the shared rings, the engine's queues and 512 bytes per PD and AH, 2 KiB per CM ID "+
		"(here: "+defTotal.String()+")")
	pos, status, ok := f.parse(args)
	if !ok {
		return status
	}
	if len(pos) != 0 {
		return f.usageError("daemon takes no arguments")
	}
	if len(ifs) == 0 {
		return f.usageError("give at least one interface with -d")
	}
	for _, l := range []struct {
		name string
		v    int
	}{{"max-qps", *maxQPs}, {"max-mrs", *maxMRs}} {
		if l.v <= 0 {
			return f.usageError(fmt.Sprintf("--%s %d: want a positive number", l.name, l.v))
		}
	}
	if *maxReg == 0 {
		return f.usageError("--max-reg 0: want a positive number")
	}
	mode, err := iface.ParseMode(*link)
	if err != nil {
		return f.usageError(err.Error())
	}
	if *engine != "" {
		os.Setenv(device.EnvEngine, *engine)
	}
	em, err := device.Engine()
	if err != nil {
		return f.usageError(err.Error())
	}
	if *queues < 0 {
		return f.usageError(fmt.Sprintf("--queues %d: want a positive number", *queues))
	}
	if *queues == 0 {
		if *queues, err = device.Queues(); err != nil {
			return f.usageError(err.Error())
		}
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	var h slog.Handler
	switch *logFormat {
	case "text":
		h = slog.NewTextHandler(e.Stderr, &slog.HandlerOptions{Level: level})
	case "json":
		h = slog.NewJSONHandler(e.Stderr, &slog.HandlerOptions{Level: level})
	default:
		return f.usageError(fmt.Sprintf("--log-format %q: want text or json", *logFormat))
	}
	log := slog.New(h)
	if raiseErr != nil {
		log.Warn("the descriptor limit stays as it was; the descriptor budget follows it", "err", raiseErr)
	}

	var devs []daemon.Device
	var ports []*iface.Port
	defer func() {
		for _, p := range ports {
			p.Close()
		}
	}()
	for _, arg := range ifs {
		spec, err := device.ParseSpec(arg)
		if err != nil || spec.Ifname == "" {
			return f.usageError(fmt.Sprintf("-d %q: want an interface name, or IF@ADDR for the UDP link's address", arg))
		}
		name := spec.Ifname
		p, err := iface.Open(context.Background(), name, iface.Options{Mode: mode, Engine: em, Addr: spec.Addr, Queues: *queues})
		if err != nil {
			fmt.Fprintf(e.Stderr, "sroce daemon: %s: %v\n", name, err)
			return exitProblem
		}
		ports = append(ports, p)
		devs = append(devs, p)
		log.Info("device ready", "device", p.Device().Name(), "interface", name, "link", p.LinkMode(),
			"reason", p.Reason(), "engine", p.Device().Engine().String(), "queues", p.Queues())
		// "sroce trace" attaches to the device here.
		if ts, err := tracesock.Serve(p.Device()); err != nil {
			log.Warn("no live trace", "device", p.Device().Name(), "err", err)
		} else {
			log.Info("live trace", "device", p.Device().Name(), "socket", ts.Path())
		}
	}
	srv, err := daemon.New(devs, daemon.Options{Logger: log, SpinFor: *spin,
		Limits: daemon.Limits{QPs: *maxQPs, MRs: *maxMRs, RegBytes: *maxReg},
		User:   limUser.b, Total: limTotal.b})
	if err != nil {
		fmt.Fprintf(e.Stderr, "sroce daemon: %v\n", err)
		return exitUsage
	}
	bs := srv.Budgets()
	log.Info("budgets", "user", bs.User.String(), "total", bs.Total.String())
	path := *socket
	if path == "" {
		path = daemon.DefaultSocket()
	}
	ln, err := daemon.Listen(path)
	if err != nil {
		fmt.Fprintf(e.Stderr, "sroce daemon: %v\n", err)
		return exitProblem
	}
	defer os.Remove(path)
	log.Info("listening", "socket", path)

	if *metrics != "" {
		mln, err := net.Listen("tcp", *metrics)
		if err != nil {
			fmt.Fprintf(e.Stderr, "sroce daemon: --metrics: %v\n", err)
			srv.Close()
			return exitProblem
		}
		mux := http.NewServeMux()
		mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain; version=0.0.4")
			writeMetrics(w, srv, ports)
		})
		hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go hs.Serve(mln)
		defer hs.Close()
		log.Info("metrics", "url", "http://"+mln.Addr().String()+"/metrics")
	}

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sig)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	lost := make(chan string, len(ports))
	for _, p := range ports {
		go func() {
			<-p.Lost()
			lost <- p.Ifname()
		}()
	}
	code := exitOK
wait:
	for {
		select {
		case s := <-sig:
			log.Info("stopping", "signal", s.String())
			break wait
		case err := <-served:
			log.Error("serving stopped", "err", err)
			code = exitProblem
			break wait
		case name := <-lost:
			// The interface went away: its device is gone, the others
			// carry on.
			left := srv.Remove(name)
			for _, p := range ports {
				if p.Ifname() == name {
					p.Close()
				}
			}
			if left == 0 {
				log.Error("the last interface went away; stopping", "interface", name)
				code = exitProblem
				break wait
			}
		}
	}
	if err := srv.Close(); err != nil {
		log.Error("closing", "err", err)
		code = exitProblem
	}
	return code
}

// writeMetrics writes the Prometheus text exposition of the daemon's
// devices and clients.
func writeMetrics(w interface{ Write([]byte) (int, error) }, srv *daemon.Server, ports []*iface.Port) {
	var b strings.Builder
	seen := map[string]bool{}
	for _, p := range ports {
		dev := p.Device().Name()
		stats := append(p.Counters(), p.LinkStats()...)
		for _, c := range srv.CMStats("sroce_" + p.Ifname()) {
			stats = append(stats, iface.Stat{Name: c.Name, Value: c.Value})
		}
		for _, st := range stats {
			name := "sroce_" + metricName(st.Name)
			if !seen[name] {
				typ := "counter"
				if st.Name == "cm_half_open" || st.Name == "cm_conns" {
					typ = "gauge"
				}
				fmt.Fprintf(&b, "# TYPE %s %s\n", name, typ)
				seen[name] = true
			}
			fmt.Fprintf(&b, "%s{device=%q} %d\n", name, dev, st.Value)
		}
	}
	writeBudgets(&b, srv.Budgets())
	clients := srv.Clients()
	sort.Slice(clients, func(i, j int) bool { return clients[i].ID < clients[j].ID })
	b.WriteString("# TYPE sroce_clients gauge\n")
	fmt.Fprintf(&b, "sroce_clients %d\n", len(clients))
	for _, g := range []struct {
		name string
		val  func(daemon.ClientStat) uint64
	}{
		{"sroce_client_qps", func(c daemon.ClientStat) uint64 { return uint64(c.QPs) }},
		{"sroce_client_mrs", func(c daemon.ClientStat) uint64 { return uint64(c.MRs) }},
		{"sroce_client_registered_bytes", func(c daemon.ClientStat) uint64 { return c.Bytes }},
	} {
		fmt.Fprintf(&b, "# TYPE %s gauge\n", g.name)
		for _, c := range clients {
			fmt.Fprintf(&b, "%s{client=\"%d\",pid=\"%d\",comm=%q,device=%q} %d\n", g.name, c.ID, c.PID, c.Comm, c.Device, g.val(c))
		}
	}
	w.Write([]byte(b.String()))
}

// budgetFlag is --limit-user or --limit-total: a daemon.Budget.
type budgetFlag struct{ b daemon.Budget }

func (f *budgetFlag) String() string {
	if f == nil || f.b == (daemon.Budget{}) {
		return ""
	}
	return f.b.String()
}

func (f *budgetFlag) Set(s string) error {
	b, err := daemon.ParseBudget(s)
	if err != nil {
		return err
	}
	// Repeated, the later keys win.
	for r, v := range b {
		if v != 0 {
			f.b[r] = v
		}
	}
	return nil
}

// writeBudgets writes the budgets' counters and usage.
func writeBudgets(b *strings.Builder, st daemon.BudgetStats) {
	keys := daemon.ResourceKeys()
	b.WriteString("# HELP sroce_accept_retries_total Accepts that failed (EMFILE, ENFILE, ENOMEM, ENOBUFS, ...) and were retried after a backoff.\n")
	b.WriteString("# TYPE sroce_accept_retries_total counter\n")
	fmt.Fprintf(b, "sroce_accept_retries_total %d\n", st.AcceptRetries)
	b.WriteString("# HELP sroce_connections_refused_total Connections closed right after accept: their uid, or the daemon, was at its connection or descriptor budget.\n")
	b.WriteString("# TYPE sroce_connections_refused_total counter\n")
	fmt.Fprintf(b, "sroce_connections_refused_total %d\n", st.ConnsRefused)
	b.WriteString("# HELP sroce_budget_refused_total Requests and connections refused because a budget (one uid's or the daemon's) was reached, by resource.\n")
	b.WriteString("# TYPE sroce_budget_refused_total counter\n")
	for i, k := range keys {
		fmt.Fprintf(b, "sroce_budget_refused_total{resource=%q} %d\n", k, st.Refused[i])
	}
	b.WriteString("# HELP sroce_budget_used What all clients hold now, by resource (bytes for reg and queue).\n")
	b.WriteString("# TYPE sroce_budget_used gauge\n")
	for i, k := range keys {
		fmt.Fprintf(b, "sroce_budget_used{resource=%q} %d\n", k, st.Used[i])
	}
	b.WriteString("# HELP sroce_budget_limit The budgets: of one uid (scope user) and of the daemon (scope total), by resource.\n")
	b.WriteString("# TYPE sroce_budget_limit gauge\n")
	for i, k := range keys {
		fmt.Fprintf(b, "sroce_budget_limit{scope=\"user\",resource=%q} %d\n", k, st.User[i])
		fmt.Fprintf(b, "sroce_budget_limit{scope=\"total\",resource=%q} %d\n", k, st.Total[i])
	}
}

// metricName makes a counter name a valid Prometheus metric name.
func metricName(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' {
			return r
		}
		return '_'
	}, s)
}
