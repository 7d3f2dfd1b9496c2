package main

// sroce daemon: owns sroce devices on network interfaces and serves them
// to other processes (the drop-in libibverbs that "sroce run" loads, and
// Go programs through package client).

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"os/user"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sroce/sroce/daemon"
	"github.com/sroce/sroce/internal/buildinfo"
	"github.com/sroce/sroce/internal/sockpath"
	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/roce/iface"
	"github.com/sroce/sroce/roce/netif"
	"github.com/sroce/sroce/roce/tracesock"
	"github.com/sroce/sroce/tools/device"
)

var daemonAbout = `
Daemon opens a sroce device on each interface given with -d (named
sroce_<interface>, as "sroce devinfo" prints it) and serves the devices to
local processes over a unix socket: programs run with "sroce run" (the
drop-in libibverbs) and Go programs using package client do RDMA on them.

The socket is /run/sroce/sroce.sock as root; a user's own daemon listens at
$XDG_RUNTIME_DIR/sroce.sock, else /run/user/UID/sroce.sock, else
$TMPDIR/sroce-UID/sroce.sock (a directory of the user's, mode 0700), where
that user's programs look first; --socket or SROCE_SOCKET choose another.
A socket left by a daemon that was killed is replaced; one a daemon
listens on is refused, naming it. Each client's objects are freed when
it exits or is killed; a client that breaks the protocol is disconnected
and the reason logged. --max-qps, --max-mrs and --max-reg
bound what one client (connection) may hold; --limit-user bounds what the
clients of one uid hold together, --limit-total what all clients hold:
connections, descriptors and mappings in the daemon, QPs, MRs, registered
bytes and queue memory. A request over a budget fails with the kernel's
errno (ENOMEM, EMFILE; EAGAIN for a connection over the cap, which is then
closed) and the client stays connected. The totals follow the host
(vm.max_map_count, RLIMIT_NOFILE, MemTotal); one uid may take a quarter.

--link picks the link of every device:
` + linkKindList() + `

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
structured (--log-format text or json, --log-level) on standard error or
in --log-file.

SIGINT or SIGTERM stops the daemon: every client's contexts get
IBV_EVENT_DEVICE_FATAL, the clients are disconnected, everything is freed,
the sockets are removed, and the daemon exits 0. SIGHUP reopens the log
file and rereads --config (interfaces, log level and format, the
per-client limits apply at once, other keys at the next start, and the
log says which), without dropping clients. --config FILE holds
KEY = VALUE lines whose keys are the long flag names (interface for -d);
the command line overrides it. Under systemd (NOTIFY_SOCKET) the daemon
says READY=1 once its devices are up and its socket listens, RELOADING=1
around SIGHUP, STOPPING=1 when it stops, and STATUS= lines.

Nothing else stops it. An interface that goes down or loses its carrier
moves its device's port to DOWN (clients get IBV_EVENT_PORT_ERR, then
IBV_EVENT_PORT_ACTIVE when the link is back; QPs live on, as on rxe). An
interface that is deleted takes its device away (its clients get
IBV_EVENT_DEVICE_FATAL and are disconnected); when an interface of that
name comes back, the device is served again. An interface that is down
when the daemon starts is served with its port DOWN. With no device left
the daemon waits for its interfaces.

The socket is mode 0666 (every local user may connect, as to
/dev/infiniband/uverbs*; --socket-mode and --socket-group narrow it, e.g.
0660 and the group rdma) and the directories the daemon creates for it
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
	// A reader of the logs that goes away (a closed pipe) must not kill
	// the daemon at its next log line: that would leave its socket and
	// its clients' objects behind. Writes to it fail instead.
	signal.Ignore(syscall.SIGPIPE)
	// Signals are caught from the start: a SIGTERM that comes while the
	// devices open or right after the socket appears is acted on once the
	// daemon serves, never the default death that would leave the socket.
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sig)
	// The descriptor budget follows RLIMIT_NOFILE: take all the service
	// was given.
	raiseErr := daemon.RaiseNoFile()
	defTotal := daemon.DefaultTotal(daemon.ReadHost())
	defUser := daemon.DefaultUser(defTotal)
	// The configuration file's values are the flags' defaults: the
	// command line overrides them.
	cfgPath := configFlag(args)
	cfg, cfgErr := readDaemonConfig(cfgPath)
	if cfgErr != nil {
		cfg, _ = readDaemonConfig("")
	}
	var numErr error
	f := newFlags(e, "daemon", "sroce daemon -d IF [-d IF ...] [--link "+linkModes+"] [--socket PATH] [--config FILE] [--metrics ADDR]", daemonAbout)
	var ifs repeated
	f.Var(&ifs, "device", "network interface `IF` to serve, or IF@ADDR to bind the UDP link to ADDR (repeatable)")
	f.Short('d', "device")
	configGiven := f.String("config", "", "read the configuration from `FILE` (docs/operating.md); the flags override it, SIGHUP rereads it")
	link := f.String("link", cfg.str("link", "auto"), "`MODE` of the devices' link: "+linkModeHelp)
	socket := f.String("socket", cfg.str("socket", ""), "unix socket `PATH` to listen on (default: SROCE_SOCKET, else /run/sroce/sroce.sock as root, else the place of this user's daemon)")
	socketGroup := f.String("socket-group", cfg.str("socket-group", ""), "the socket's owner `GROUP` (name or number; default: the daemon's)")
	socketMode := f.String("socket-mode", cfg.str("socket-mode", "0666"), "the socket's `MODE`, in octal (0666: every local user, as rdma-core's udev rules give uverbs devices)")
	metrics := f.String("metrics", cfg.str("metrics", ""), "serve Prometheus metrics on `ADDR` (host:port)")
	metricsClients := f.Bool("metrics-clients", cfg.str("metrics-clients", "false") == "true", "label the metrics of clients with their uid and program name (comm), one series per uid, program and device")
	engine := f.String("engine", cfg.str("engine", ""), "engine `MODE`: auto, sleep, spin, adaptive or inline (default: SROCE_ENGINE, else auto)")
	queues := f.Int("queues", cfg.num("queues", 0, &numErr), "receive queues of each interface the devices use, one engine each (default: SROCE_QUEUES, else the queue count capped by the CPUs)")
	logFormat := f.String("log-format", cfg.str("log-format", "text"), "log `FORMAT`: text or json")
	logFile := f.String("log-file", cfg.str("log-file", ""), "append the log to `FILE` (default: standard error); SIGHUP reopens it")
	logLevel := f.String("log-level", cfg.str("log-level", "info"), "log `LEVEL`: debug, info, warn or error")
	verbose := f.Bool("verbose", false, "log every client request that fails (--log-level debug)")
	f.Short('v', "verbose")
	spinDef, err := time.ParseDuration(cfg.str("spin", "0s"))
	if err != nil && numErr == nil {
		numErr = fmt.Errorf("%s: spin = %q: want a duration", cfgPath, cfg.str("spin", ""))
	}
	spin := f.Duration("spin", spinDef, "how long a client's bridge keeps polling its rings after the last work before it sleeps (default 50µs with four CPUs or more, else none; 0: the default; negative: never spin)")
	maxQPs := f.Int("max-qps", cfg.num("max-qps", daemon.DefaultLimits.QPs, &numErr), "QPs one client may hold")
	maxMRs := f.Int("max-mrs", cfg.num("max-mrs", daemon.DefaultLimits.MRs, &numErr), "MRs and MWs one client may hold")
	regDef, err := strconv.ParseUint(cfg.str("max-reg", strconv.FormatUint(daemon.DefaultLimits.RegBytes, 10)), 10, 64)
	if err != nil && numErr == nil {
		numErr = fmt.Errorf("%s: max-reg = %q: want a number of bytes", cfgPath, cfg.str("max-reg", ""))
	}
	maxReg := f.Uint64("max-reg", regDef, "`BYTES` one client may register")
	var limUser, limTotal budgetFlag
	for _, l := range []struct {
		key string
		b   *budgetFlag
	}{{"limit-user", &limUser}, {"limit-total", &limTotal}} {
		if v, ok := cfg.vals[l.key]; ok {
			if err := l.b.Set(v); err != nil && numErr == nil {
				numErr = fmt.Errorf("%s: %s: %w", cfgPath, l.key, err)
			}
		}
	}
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
	if cfgErr != nil {
		return f.usageError(cfgErr.Error())
	}
	if numErr != nil {
		return f.usageError(numErr.Error())
	}
	if len(pos) != 0 {
		return f.usageError("daemon takes no arguments")
	}
	if *configGiven != cfgPath {
		// The file's values became the flags' defaults before parsing,
		// from --config as configFlag found it; an abbreviation of the
		// flag would slip past that.
		return f.usageError(badValue("--config", *configGiven, "give it as --config FILE or --config=FILE"))
	}
	given := givenKeys(f.IsSet)
	if len(ifs) == 0 {
		ifs = cfg.ifs
	}
	if len(ifs) == 0 {
		return f.usageError("give at least one interface with -d (or interface = IF in --config)")
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
	sockOpts, msg := parseSocketOptions(*socketGroup, *socketMode)
	if msg != "" {
		return f.usageError(msg)
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
	if *queues == 0 {
		if *queues, err = device.Queues(); err != nil {
			return f.usageError(err.Error())
		}
	}
	// specOf parses an interface given with -d or in the configuration;
	// a down interface is served with its port DOWN, as an rxe device on
	// a down netdev is.
	specOf := func(arg string) (ifaceSpec, string) {
		spec, err := device.ParseSpec(arg)
		if err != nil || spec.Ifname == "" {
			return ifaceSpec{}, badValue("--device", arg, "want an interface name, or IF@ADDR for the UDP link's address")
		}
		return ifaceSpec{spec.Ifname, iface.Options{Mode: mode, Engine: em, Addr: spec.Addr, Queues: *queues, AllowDown: true}}, ""
	}
	var specs []ifaceSpec
	for _, arg := range ifs {
		s, msg := specOf(arg)
		if msg != "" {
			return f.usageError(msg)
		}
		if slices.ContainsFunc(specs, func(o ifaceSpec) bool { return o.name == s.name }) {
			return f.usageError(badValue("--device", arg, "interface "+s.name+" is given twice"))
		}
		specs = append(specs, s)
	}
	if *metrics != "" {
		if msg := checkListenAddr("--metrics", *metrics); msg != "" {
			return f.usageError(msg)
		}
	}
	if *verbose {
		*logLevel = "debug"
	}
	level, err := parseLevel(*logLevel)
	if err != nil {
		return f.usageError("--log-level: " + err.Error())
	}
	if *logFormat != "text" && *logFormat != "json" {
		return f.usageError(badValue("--log-format", *logFormat, "want text or json"))
	}
	sink, err := openLogSink(*logFile, e.Stderr)
	if err != nil {
		fmt.Fprintf(e.Stderr, "sroce daemon: %v\n", err)
		return exitProblem
	}
	defer sink.Close()
	var levelVar slog.LevelVar
	levelVar.Set(level)
	lh := newLogHandler(sink, &levelVar, *logFormat == "json")
	log := slog.New(lh)
	bi := buildinfo.Get()
	log.Info("starting", "version", bi.Version, "revision", bi.ShortRevision(), "go", bi.GoVersion)
	if raiseErr != nil {
		log.Warn("the descriptor limit stays as it was; the descriptor budget follows it", "err", raiseErr)
	}
	notify := newNotifier(log)
	// The metrics endpoint listens before the devices open: a bad
	// address fails at once, and /readyz tells when they are up.
	var obs *observer
	if *metrics != "" {
		if obs, err = listenMetrics(*metrics, log); err != nil {
			fmt.Fprintf(e.Stderr, "sroce daemon: %v\n", err)
			notify.send("STATUS=" + err.Error())
			return exitProblem
		}
		defer obs.close()
	}

	var devs []daemon.Device
	// ports are the devices served now, by the wait loop below; the
	// metrics handler reads them under portsMu.
	var (
		ports   []*iface.Port
		claims  = map[*iface.Port]*daemon.Claim{} // each port's hold on its interface
		portsMu sync.Mutex
	)
	// closePort closes a port and lets its interface go.
	closePort := func(p *iface.Port) {
		p.Close()
		portsMu.Lock()
		c := claims[p]
		delete(claims, p)
		portsMu.Unlock()
		c.Release()
	}
	defer func() {
		portsMu.Lock()
		ps := slices.Clone(ports)
		portsMu.Unlock()
		for _, p := range ps {
			closePort(p)
		}
	}()
	// opts are each interface's options, to open it again when it comes
	// back after being deleted; an interface that is not in it (any more)
	// is not served.
	opts := map[string]iface.Options{}
	wanted := func() []string { // the interfaces to serve, for /readyz
		var w []string
		for name := range opts {
			w = append(w, name)
		}
		slices.Sort(w)
		return w
	}
	for _, s := range specs {
		opts[s.name] = s.opts
		p, claim, err := openServed(log, s.name, s.opts)
		if err == nil {
			claims[p] = claim
		}
		if err != nil {
			fmt.Fprintf(e.Stderr, "sroce daemon: %s: %v\n", s.name, err)
			notify.send("STATUS=" + s.name + ": " + err.Error())
			return exitProblem
		}
		ports = append(ports, p)
		devs = append(devs, p)
	}
	engines := 0
	for _, p := range ports {
		engines += p.Queues()
	}
	if n, ok := daemonProcs(em, engines); ok {
		log.Info("the daemon runs its Go code on one CPU per engine (GOMAXPROCS unset, engines that never spin)", "gomaxprocs", n)
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
	ln, err := daemon.ListenWith(path, sockOpts)
	if err != nil {
		fmt.Fprintf(e.Stderr, "sroce daemon: %v\n", err)
		notify.send("STATUS=" + err.Error())
		srv.Close()
		return exitProblem
	}
	// Every way out removes the socket (a SIGKILL leaves it: the next
	// daemon replaces it, seeing no one listens).
	defer os.Remove(path)
	portsMu.Lock()
	for _, c := range claims {
		c.SetSocket(path)
	}
	portsMu.Unlock()
	log.Info("listening", "socket", path, "mode", fmt.Sprintf("%04o", sockOpts.Mode), "group", groupName(sockOpts))

	obs.attach(srv, *metricsClients, wanted(), func() []*iface.Port {
		portsMu.Lock()
		defer portsMu.Unlock()
		return slices.Clone(ports)
	}, path)

	served := make(chan error, 1)
	go func() {
		obs.setListening(true)
		err := srv.Serve(ln)
		obs.setListening(false)
		served <- err
	}()
	done := make(chan struct{})
	defer close(done)
	statusLine := func() string {
		portsMu.Lock()
		defer portsMu.Unlock()
		names := make([]string, 0, len(ports))
		for _, p := range ports {
			names = append(names, p.Device().Name())
		}
		if len(names) == 0 {
			return "STATUS=no device (waiting for the interfaces); socket " + path
		}
		return fmt.Sprintf("STATUS=serving %s on %s", strings.Join(names, ", "), path)
	}
	notify.send("READY=1", statusLine(), fmt.Sprintf("MAINPID=%d", os.Getpid()))
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
	// serve adds the device of interface name; drop removes it.
	serve := func(name string) error {
		p, claim, err := openServed(log, name, opts[name])
		if err == nil {
			if err = srv.Add(p); err != nil {
				p.Close()
				claim.Release()
			}
		}
		if err != nil {
			return err
		}
		claim.SetSocket(path)
		portsMu.Lock()
		ports = append(ports, p)
		claims[p] = claim
		portsMu.Unlock()
		watchLost(p)
		return nil
	}
	drop := func(name string) {
		left := srv.Remove(name)
		portsMu.Lock()
		var gone []*iface.Port
		ports = slices.DeleteFunc(ports, func(q *iface.Port) bool {
			if q.Ifname() == name {
				gone = append(gone, q)
				return true
			}
			return false
		})
		portsMu.Unlock()
		for _, p := range gone {
			closePort(p)
		}
		log.Info("interface no longer served", "interface", name, "devices_left", left)
	}
	// reload rereads the configuration file and applies what may change
	// while clients stay: interfaces (unless -d gave them), the log's
	// level, format and file, the per-client limits for new requests.
	reload := func() {
		if err := sink.Reopen(*logFile); err != nil {
			log.Error("reopening the log file failed; the log stays where it was", "file", *logFile, "err", err)
		} else if *logFile != "" {
			log.Info("log file reopened", "file", *logFile)
		}
		if cfgPath == "" {
			log.Info("reloaded: no configuration file (--config) to reread")
			return
		}
		nc, err := readDaemonConfig(cfgPath)
		if err != nil {
			log.Error("rereading the configuration failed; nothing changed", "err", err)
			return
		}
		changed := changedKeys(cfg, nc)
		var applied, restart, overridden []string
		lim := srv.Limits()
		for _, k := range changed {
			if given[k] {
				overridden = append(overridden, k)
				continue
			}
			if !configKeys[k] {
				restart = append(restart, k)
				continue
			}
			v := nc.vals[k]
			var err error
			switch k {
			case "interface":
				err = reloadInterfaces(log, nc.ifs, opts, specOf, serve, drop)
				obs.setWant(wanted())
			case "log-level":
				var l slog.Level
				if l, err = parseLevel(nc.str(k, "info")); err == nil {
					levelVar.Set(l)
				}
			case "log-format":
				switch nc.str(k, "text") {
				case "text", "json":
					lh.useJSON.Store(nc.str(k, "text") == "json")
				default:
					err = fmt.Errorf("log-format %q: want text or json", v)
				}
			case "log-file":
				if err = sink.Reopen(v); err == nil {
					*logFile = v
				}
			case "max-qps", "max-mrs":
				var n int
				if n, err = strconv.Atoi(nc.str(k, "0")); err == nil && n <= 0 {
					err = fmt.Errorf("%s = %q: want a positive number", k, v)
				}
				if err == nil && k == "max-qps" {
					lim.QPs = n
				} else if err == nil {
					lim.MRs = n
				}
			case "max-reg":
				var n uint64
				if n, err = strconv.ParseUint(nc.str(k, "0"), 10, 64); err == nil && n == 0 {
					err = fmt.Errorf("max-reg = %q: want a positive number", v)
				}
				if err == nil {
					lim.RegBytes = n
				}
			}
			if err != nil {
				log.Error("configuration: not applied", "key", k, "value", v, "err", err)
				continue
			}
			applied = append(applied, k)
		}
		srv.SetLimits(lim)
		cfg = nc
		log.Info("configuration reread", "file", cfgPath, "applied", strings.Join(applied, ","),
			"needs_restart", strings.Join(restart, ","), "overridden_by_flags", strings.Join(overridden, ","))
		if len(restart) > 0 {
			log.Warn("configuration: these changes take effect when the daemon restarts", "keys", strings.Join(restart, ","))
		}
	}
	code := exitOK
wait:
	for {
		select {
		case s := <-sig:
			if s == syscall.SIGHUP {
				notify.send("RELOADING=1", monotonicUsec())
				log.Info("reloading", "signal", s.String())
				reload()
				notify.send("READY=1", statusLine())
				continue
			}
			log.Info("stopping", "signal", s.String())
			notify.send("STOPPING=1", "STATUS=stopping: telling the clients and freeing their objects")
			break wait
		case err := <-served:
			log.Error("serving stopped", "err", err)
			code = exitProblem
			break wait
		case p := <-lost:
			portsMu.Lock()
			ours := slices.Contains(ports, p)
			ports = slices.DeleteFunc(ports, func(q *iface.Port) bool { return q == p })
			portsMu.Unlock()
			if !ours {
				continue // closed by a reload
			}
			name := p.Ifname()
			left := srv.Remove(name)
			closePort(p)
			log.Warn("interface gone: its device is closed until the interface is back", "interface", name,
				"err", p.Err(), "devices_left", left)
			if left == 0 {
				log.Warn("no device left; waiting for the interfaces to come back")
			}
			notify.send(statusLine())
			awaitBack(name)
		case name := <-back:
			if _, want := opts[name]; !want {
				continue // no longer configured
			}
			if err := serve(name); err != nil {
				fails[name]++
				log.Warn("interface back, but its device did not open; waiting for it again", "interface", name, "err", err)
				awaitBack(name)
				continue
			}
			delete(fails, name)
			notify.send(statusLine())
		}
	}
	if err := srv.Close(); err != nil {
		log.Error("closing", "err", err)
		code = exitProblem
	}
	log.Info("stopped", "socket_removed", path)
	return code
}

// reloadInterfaces serves the interfaces of a reread configuration: the
// new ones are opened, those no longer listed closed (their clients told,
// as when an interface is deleted).
func reloadInterfaces(log *slog.Logger, ifs []string, opts map[string]iface.Options,
	specOf func(string) (ifaceSpec, string), serve func(string) error, drop func(string)) error {
	want := map[string]iface.Options{}
	for _, arg := range ifs {
		s, msg := specOf(arg)
		if msg != "" {
			return errors.New(msg)
		}
		want[s.name] = s.opts
	}
	var errs []error
	for name := range opts {
		if _, ok := want[name]; !ok {
			delete(opts, name)
			drop(name)
		}
	}
	for name, o := range want {
		if _, ok := opts[name]; ok {
			continue
		}
		opts[name] = o
		if err := serve(name); err != nil {
			delete(opts, name)
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			continue
		}
		log.Info("interface added by the configuration", "interface", name)
	}
	return errors.Join(errs...)
}

// ifaceSpec is an interface to serve and the options of its device.
type ifaceSpec struct {
	name string
	opts iface.Options
}

// parseSocketOptions parses --socket-group (a group name or number) and
// --socket-mode (octal); a bad value is a usage message.
func parseSocketOptions(group, mode string) (daemon.SocketOptions, string) {
	var o daemon.SocketOptions
	m, err := strconv.ParseUint(mode, 8, 32)
	if err != nil || m > 0o777 || m == 0 {
		return o, badValue("--socket-mode", mode, "want an octal mode such as 0666 or 0660")
	}
	o.Mode = fs.FileMode(m)
	if group == "" {
		return o, ""
	}
	if n, err := strconv.Atoi(group); err == nil && n >= 0 {
		o.GID, o.SetGroup = n, true
		return o, ""
	}
	g, err := user.LookupGroup(group)
	if err != nil {
		return o, badValue("--socket-group", group, "no such group")
	}
	n, err := strconv.Atoi(g.Gid)
	if err != nil {
		return o, badValue("--socket-group", group, "its group id is "+g.Gid)
	}
	o.GID, o.SetGroup = n, true
	return o, ""
}

// groupName names the socket's group for the log.
func groupName(o daemon.SocketOptions) string {
	if !o.SetGroup {
		return "the daemon's"
	}
	if g, err := user.LookupGroupId(strconv.Itoa(o.GID)); err == nil {
		return g.Name
	}
	return strconv.Itoa(o.GID)
}

// openServed claims the interface for this daemon (a second daemon on it
// is refused, naming the holder) and opens the port of a device the
// daemon serves, and its live trace socket.
func openServed(log *slog.Logger, name string, opts iface.Options) (*iface.Port, *daemon.Claim, error) {
	claim, err := daemon.ClaimInterface(name, opts.Addr)
	if err != nil {
		return nil, nil, err
	}
	opts.StrictAuto = true
	p, err := iface.Open(context.Background(), name, opts)
	if err != nil {
		claim.Release()
		return nil, nil, err
	}
	log.Info("device ready", "device", p.Device().Name(), "interface", name, "link", p.LinkMode(),
		"reason", p.Reason(), "engine", p.Device().Engine().String(), "queues", p.Queues())
	if (opts.Mode == iface.ModeAuto || opts.Mode == "") && p.LinkMode() == iface.LinkUDP {
		if ifc, err := net.InterfaceByName(name); err == nil && ifc.Flags&net.FlagLoopback == 0 {
			log.Warn("AF_XDP is not permitted here: serving over the UDP link (port 4791), which only peers with a UDP link or a kernel that delivers RoCEv2 to it; give the daemon CAP_NET_RAW, CAP_NET_ADMIN, CAP_BPF and CAP_SYS_ADMIN, or --link udp to say so",
				"device", p.Device().Name(), "interface", name, "reason", p.Reason())
		}
	}
	// "sroce trace" attaches to the device here.
	if ts, err := tracesock.Serve(p.Device()); err != nil {
		log.Warn("no live trace", "device", p.Device().Name(), "err", err)
	} else {
		log.Info("live trace", "device", p.Device().Name(), "socket", ts.Path())
	}
	return p, claim, nil
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

// daemonProcs sets the number of CPUs the daemon's Go code may run on at
// once to the number of engines of the ports it serves now (at least
// one), when the
// engines never spin (em resolves to inline or sleep: fewer than four
// CPUs, or chosen) and the environment does not set GOMAXPROCS, and
// reports the number it set. The data path of an engine is serial
// anyway; a second processor only lets the runtime hand a woken
// goroutine to another thread, and on two CPUs, where the programs poll
// their CQs on both, every such hand-off waits for a CPU. Measured on
// two CPUs through two daemons: ib_send_lat 8 B typical 36-38 us with
// two processors, 13-19 us with one; ib_write_bw 8 B 400-440 k msg/s
// against 520-555 k.
func daemonProcs(em roce.EngineMode, engines int) (int, bool) {
	if os.Getenv("GOMAXPROCS") != "" {
		return 0, false
	}
	if m := em.Resolve(); m != roce.EngineInline && m != roce.EngineSleep {
		return 0, false
	}
	n := max(engines, 1)
	if n >= runtime.GOMAXPROCS(0) {
		return 0, false
	}
	runtime.GOMAXPROCS(n)
	return n, true
}
