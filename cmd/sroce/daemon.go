package main

// sroce daemon: owns sroce devices on network interfaces and serves them
// to other processes (the drop-in libibverbs that "sroce run" loads, and
// Go programs through package client).

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sroce/sroce/daemon"
	"github.com/sroce/sroce/internal/buildinfo"
	"github.com/sroce/sroce/internal/sockpath"
	"github.com/sroce/sroce/roce/iface"
	"github.com/sroce/sroce/roce/netif"
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
device's counters (those "sroce stat" names, as sroce_NAME_total), its
link's (sroce_link_NAME_total), port state, MTU and speed, the RDMA CM's,
the budgets, build information, the process's and the Go runtime's and,
per device, its clients and their QPs, MRs and registered bytes in
total. Who the clients are is the operator's to ask: --metrics-clients
adds the same per uid and program name (comm), never pids. The same
address answers /healthz (200 while the process serves) and /readyz (200
when every device given is up and the socket listens, else 503 and why);
it listens before the devices open. docs/metrics.md lists the metrics.
"sroce resource" lists the objects the clients hold. A client asks
QUERY_STATS ("sroce stat") about the device it opened only. Logs are
structured (--log-format text or json) on standard error. SIGINT or SIGTERM stops the daemon: clients are
disconnected and everything freed.

Nothing else stops it. An interface that goes down or loses its carrier
moves its device's port to DOWN (clients get IBV_EVENT_PORT_ERR, then
IBV_EVENT_PORT_ACTIVE when the link is back; QPs live on, as on rxe). An
interface that is deleted takes its device away (its clients get
IBV_EVENT_DEVICE_FATAL and are disconnected); when an interface of that
name comes back, the device is served again. An interface that is down
when the daemon starts is served with its port DOWN. With no device left
the daemon waits for its interfaces.

The socket is mode 0666 (every local user may connect, as to
/dev/infiniband/uverbs*) and the directories the daemon creates for it
0755, whatever the umask. A device's live trace socket ("sroce trace") is
the daemon's user's only (0600: a trace shows every user's packets). RDMA
CM ports below 1024 need CAP_NET_BIND_SERVICE in the client, as with the
kernel's rdma_cm (EACCES otherwise).`

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
	f.Var(&ifs, "device", "network interface `IF` to serve, or IF@ADDR to bind the UDP link to ADDR (repeatable)")
	f.Short('d', "device")
	link := f.String("link", "auto", "`MODE` of the devices' link: auto, xdp or udp")
	socket := f.String("socket", "", "unix socket to listen on (default: SROCE_SOCKET, or the place for this user)")
	metrics := f.String("metrics", "", "serve Prometheus metrics on `ADDR` (host:port)")
	metricsClients := f.Bool("metrics-clients", false, "label the metrics of clients with their uid and program name (comm), one series per uid, program and device")
	engine := f.String("engine", "", "engine `MODE`: auto, sleep, spin, adaptive or inline (default: SROCE_ENGINE, else auto)")
	queues := f.Int("queues", 0, "receive queues of each interface the devices use, one engine each (default: SROCE_QUEUES, else the queue count capped by the CPUs)")
	logFormat := f.String("log-format", "text", "log `FORMAT`: text or json")
	verbose := f.Bool("verbose", false, "log every client request that fails")
	f.Short('v', "verbose")
	spin := f.Duration("spin", 0, "how long a client's bridge keeps polling its rings after the last work before it sleeps (default 50µs with four CPUs or more, else none; 0: the default; negative: never spin)")
	maxQPs := f.Int("max-qps", daemon.DefaultLimits.QPs, "QPs one client may hold")
	maxMRs := f.Int("max-mrs", daemon.DefaultLimits.MRs, "MRs and MWs one client may hold")
	maxReg := f.Uint64("max-reg", daemon.DefaultLimits.RegBytes, "`BYTES` one client may register")
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
			return f.usageError(badValue("--"+l.name, l.v, "want a positive number"))
		}
	}
	if *maxReg == 0 {
		return f.usageError(badValue("--max-reg", 0, "want a positive number"))
	}
	mode, msg := parseLinkMode("--link", *link)
	if msg != "" {
		return f.usageError(msg)
	}
	em, msg := parseEngine(*engine)
	if msg != "" {
		return f.usageError(msg)
	}
	if *queues < 0 {
		return f.usageError(badValue("--queues", *queues, "want a positive number"))
	}
	var err error
	if *queues == 0 {
		if *queues, err = device.Queues(); err != nil {
			return f.usageError(err.Error())
		}
	}
	var specs []device.Spec
	for _, arg := range ifs {
		spec, err := device.ParseSpec(arg)
		if err != nil || spec.Ifname == "" {
			return f.usageError(badValue("--device", arg, "want an interface name, or IF@ADDR for the UDP link's address"))
		}
		if slices.ContainsFunc(specs, func(s device.Spec) bool { return s.Ifname == spec.Ifname }) {
			return f.usageError(badValue("--device", arg, "interface "+spec.Ifname+" is given twice"))
		}
		specs = append(specs, spec)
	}
	if *metrics != "" {
		if msg := checkListenAddr("--metrics", *metrics); msg != "" {
			return f.usageError(msg)
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
		return f.usageError(badValue("--log-format", *logFormat, "want text or json"))
	}
	log := slog.New(h)
	bi := buildinfo.Get()
	log.Info("starting", "version", bi.Version, "revision", bi.ShortRevision(), "go", bi.GoVersion)
	if raiseErr != nil {
		log.Warn("the descriptor limit stays as it was; the descriptor budget follows it", "err", raiseErr)
	}
	// The metrics endpoint listens before the devices open: a bad
	// address fails at once, and /readyz tells when they are up.
	var obs *observer
	if *metrics != "" {
		if obs, err = listenMetrics(*metrics, log); err != nil {
			fmt.Fprintf(e.Stderr, "sroce daemon: %v\n", err)
			return exitProblem
		}
		defer obs.close()
	}

	var devs []daemon.Device
	// ports are the devices served now, by the wait loop below; the
	// metrics handler reads them under portsMu.
	var (
		ports   []*iface.Port
		portsMu sync.Mutex
	)
	defer func() {
		portsMu.Lock()
		defer portsMu.Unlock()
		for _, p := range ports {
			p.Close()
		}
	}()
	// opts are each interface's options, to open it again when it comes
	// back after being deleted.
	opts := map[string]iface.Options{}
	var want []string // the interfaces given, for /readyz
	for _, spec := range specs {
		// A down interface is served with its port DOWN, as an rxe
		// device on a down netdev is.
		opts[spec.Ifname] = iface.Options{Mode: mode, Engine: em, Addr: spec.Addr, Queues: *queues, AllowDown: true}
		want = append(want, spec.Ifname)
		p, err := openServed(log, spec.Ifname, opts[spec.Ifname])
		if err != nil {
			fmt.Fprintf(e.Stderr, "sroce daemon: %s: %v\n", spec.Ifname, err)
			return exitProblem
		}
		ports = append(ports, p)
		devs = append(devs, p)
	}
	srv, err := daemon.New(devs, daemon.Options{Logger: log, SpinFor: *spin,
		Limits: daemon.Limits{QPs: *maxQPs, MRs: *maxMRs, RegBytes: *maxReg},
		User:   limUser.b, Total: limTotal.b, DevNodeDir: daemon.DevNodeDir})
	if err != nil {
		fmt.Fprintf(e.Stderr, "sroce daemon: %v\n", err)
		return exitProblem
	}
	bs := srv.Budgets()
	log.Info("budgets", "user", bs.User.String(), "total", bs.Total.String())
	path := *socket
	if path == "" {
		path = sockpath.Listen()
	}
	ln, err := daemon.Listen(path)
	if err != nil {
		fmt.Fprintf(e.Stderr, "sroce daemon: %v\n", err)
		srv.Close()
		return exitProblem
	}
	defer os.Remove(path)
	log.Info("listening", "socket", path)

	obs.attach(srv, *metricsClients, want, func() []*iface.Port {
		portsMu.Lock()
		defer portsMu.Unlock()
		return slices.Clone(ports)
	}, path)

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sig)
	served := make(chan error, 1)
	go func() {
		obs.setListening(true)
		err := srv.Serve(ln)
		obs.setListening(false)
		served <- err
	}()
	done := make(chan struct{})
	defer close(done)
	// A port is lost when its interface is deleted or its link fails (a
	// link that goes down or loses its carrier is a port event: the
	// device stays). Its device is removed, and opened again with the
	// same options once an interface of its name is back.
	lost := make(chan *iface.Port)
	watchLost := func(p *iface.Port) {
		go func() {
			select {
			case <-p.Lost():
				select {
				case lost <- p:
				case <-done:
				}
			case <-done:
			}
		}()
	}
	back := make(chan string)
	fails := map[string]int{} // reopenings that failed in a row, by interface
	awaitBack := func(name string) {
		pause := min(reopenPause<<min(fails[name], 8), 30*time.Second)
		go func() {
			if err := awaitInterface(done, name, pause); err == nil {
				select {
				case back <- name:
				case <-done:
				}
			}
		}()
	}
	for _, p := range ports {
		watchLost(p)
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
		case p := <-lost:
			name := p.Ifname()
			left := srv.Remove(name)
			portsMu.Lock()
			ports = slices.DeleteFunc(ports, func(q *iface.Port) bool { return q == p })
			portsMu.Unlock()
			p.Close()
			log.Warn("interface gone: its device is closed until the interface is back", "interface", name,
				"err", p.Err(), "devices_left", left)
			if left == 0 {
				log.Warn("no device left; waiting for the interfaces to come back")
			}
			awaitBack(name)
		case name := <-back:
			p, err := openServed(log, name, opts[name])
			if err == nil {
				if err = srv.Add(p); err != nil {
					p.Close()
				}
			}
			if err != nil {
				fails[name]++
				log.Warn("interface back, but its device did not open; waiting for it again", "interface", name, "err", err)
				awaitBack(name)
				continue
			}
			delete(fails, name)
			portsMu.Lock()
			ports = append(ports, p)
			portsMu.Unlock()
			watchLost(p)
		}
	}
	if err := srv.Close(); err != nil {
		log.Error("closing", "err", err)
		code = exitProblem
	}
	return code
}

// openServed opens the port of a device the daemon serves, and its live
// trace socket.
func openServed(log *slog.Logger, name string, opts iface.Options) (*iface.Port, error) {
	p, err := iface.Open(context.Background(), name, opts)
	if err != nil {
		return nil, err
	}
	log.Info("device ready", "device", p.Device().Name(), "interface", name, "link", p.LinkMode(),
		"reason", p.Reason(), "engine", p.Device().Engine().String(), "queues", p.Queues())
	// "sroce trace" attaches to the device here.
	if ts, err := tracesock.Serve(p.Device()); err != nil {
		log.Warn("no live trace", "device", p.Device().Name(), "err", err)
	} else {
		log.Info("live trace", "device", p.Device().Name(), "socket", ts.Path())
	}
	return p, nil
}

// reopenPause is how long the daemon waits after losing a port before it
// looks for its interface again: a link that failed under an interface
// that stayed is not reopened in a tight loop. Each failed reopening
// doubles it, up to 30s.
const reopenPause = 200 * time.Millisecond

// awaitInterface returns nil once interface name exists, looking first
// after pause, or an error when done closes first.
// Errors reading the kernel's notifications are retried after pause.
func awaitInterface(done <-chan struct{}, name string, pause time.Duration) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-done:
			cancel()
		case <-ctx.Done():
		}
	}()
	for {
		select {
		case <-time.After(pause):
		case <-ctx.Done():
			return ctx.Err()
		}
		h, err := netif.NewHandle()
		if err != nil {
			continue
		}
		_, err = h.WaitInterface(ctx, name, nil)
		h.Close()
		if err == nil || ctx.Err() != nil {
			return ctx.Err()
		}
	}
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
