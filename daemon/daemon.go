// Package daemon is the sroce daemon: it owns sroce devices (one per
// network interface, each a roce.Device with its engine) and serves them
// to local processes over a unix socket, so that programs in other
// processes, through the drop-in libibverbs of shim/ or the Go client,
// do RDMA on them.
//
// The protocol is package ctl's (daemon/ctl/sroce_ctl.h). One connection is
// one device context: every PD, MR, CQ, QP, SRQ, AH, MW and completion
// channel it creates belongs to it, and when the connection ends (the
// process exits, is killed, or misbehaves and is disconnected) the daemon
// moves its QPs to the error state, destroys them, deregisters its MRs and
// unmaps its memory, and frees the rest, as the kernel does when a process
// closes its uverbs file. Other connections carry on.
//
// Work requests and completions move through rings in memfds the daemon
// creates and shares (package ring); a bridge goroutine per connection
// takes the WQEs the client publishes, posts them to the roce QPs, and
// copies the QPs' completions into the client's CQ rings. It spins while
// there is work and for a while after, then sleeps, telling the client
// through the context page that the next post must ring the doorbell.
//
// A client's registered memory reaches the daemon as a memfd: the shim
// moves the pages of ibv_reg_mr's range onto one and passes it, and the
// daemon maps it (see shim/ for the limits this brings).
//
// The daemon also runs the RDMA connection manager (package rdmacm) on its
// devices, one QP1 agent per device shared by every client, and serves the
// CM operations of the protocol (cm.go) to the drop-in librdmacm: a
// connection's CM IDs and event channels are its own, limited in number,
// and destroyed with it (connections disconnected, listeners released).
package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sroce/sroce/daemon/ctl"
	"github.com/sroce/sroce/internal/sockfile"
	"github.com/sroce/sroce/internal/sockpath"
	"github.com/sroce/sroce/roce/iface"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/monotime"
	"github.com/sroce/sroce/rdmacm"
	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/verbs"
)

// Device is a device the daemon serves: a roce.Device on a network
// interface, with what the interface tells (iface.Port implements it).
type Device interface {
	// Device returns the running engine.
	Device() *roce.Device
	// Ifname and Ifindex name the interface.
	Ifname() string
	Ifindex() int
	// NodeGUID is the GUID rxe derives from the interface's MAC.
	NodeGUID() [8]byte
	// State is the port state.
	State() verbs.PortState
	// ActiveMTU is the path MTU of the port.
	ActiveMTU() verbs.MTU
	// MTU is the interface MTU.
	MTU() int
	// AHAttr resolves the destination MAC of a path to dgid.
	AHAttr(ctx context.Context, dgid bth.GID, sgidIndex int) (verbs.AHAttr, error)
}

// Limits bound what one connection may hold, so that one client cannot
// exhaust the daemon.
type Limits struct {
	QPs      int    // QPs per connection
	CQs      int    // CQs per connection
	MRs      int    // MRs and MWs per connection
	RegBytes uint64 // bytes registered per connection
	Objects  int    // PDs, AHs, SRQs, completion and CM event channels per connection
	CMIDs    int    // RDMA CM IDs per connection (connection requests count)
}

// DefaultLimits are the limits when Options.Limits is zero.
var DefaultLimits = Limits{QPs: 4096, CQs: 4096, MRs: 16384, RegBytes: 64 << 30, Objects: 16384, CMIDs: 1024}

// Options configures a Server.
type Options struct {
	// Logger receives the daemon's structured log; nil means slog's
	// default.
	Logger *slog.Logger
	// Clock is the daemon's time, as roce.Options.Clock is a device's:
	// the uptime it reports and the spacing of its warnings. Nil means
	// roce.SystemClock(); a test passes a memlink.VirtualClock and moves
	// it. (Waits on other processes and sockets stay on the wall clock.)
	Clock roce.Clock
	// Limits per connection; zero fields take DefaultLimits'.
	Limits Limits
	// Total bounds what all clients together may make the daemon hold;
	// zero entries take DefaultTotal(ReadHost())'s.
	Total Budget
	// User bounds what the clients of one uid may hold together; zero
	// entries take DefaultUser(total)'s: a quarter of the total.
	User Budget
	// SpinFor is how long a connection's bridge keeps polling its rings
	// after the last work before it sleeps (negative: never spin). The
	// default is 50µs where the engine spins too (roce.EngineAuto
	// resolves to adaptive: four CPUs or more), else no spin: on fewer
	// CPUs a spinning bridge takes the CPU the program and the engine
	// need (ib_send_lat through two daemons on two CPUs: 91-94 µs with
	// 50µs of spin, 47-53 µs without).
	SpinFor time.Duration
	// DevNodeDir is where the daemon makes an entry for each device it
	// serves, as programs such as UCX look for one (see devnode.go); the
	// daemon command gives DevNodeDir. Empty: no entries.
	DevNodeDir string
}

// defaultSpin is Options.SpinFor's default in this process.
func defaultSpin() time.Duration {
	if roce.EngineAuto.Resolve() == roce.EngineAdaptive {
		return 50 * time.Microsecond
	}
	return -1
}

// Server serves devices to local clients.
type Server struct {
	devs   []*served
	log    *slog.Logger
	limits atomic.Pointer[Limits] // SetLimits changes them for new requests
	spin   time.Duration
	cm     *rdmacm.CM // the RDMA CM of every device that can run one; nil if none
	budget *budgets
	nodes  devNodes
	// refusing holds a slot for each refused connection being answered
	// (at most refusingMax at once; beyond, they are closed unanswered).
	refusing chan struct{}

	// resMu lets one QUERY_RES at a time walk the clients' tables.
	resMu sync.Mutex

	mu      sync.Mutex
	conns   map[*conn]struct{}
	closed  bool
	lns     []*net.UnixListener
	wg      sync.WaitGroup
	nextID  uint64
	clock   roce.Clock
	started monotime.Time // on clock
	ctx     context.Context
	cancel  context.CancelFunc
}

// served is one device with its name and the owners of its objects, to
// route asynchronous events.
type served struct {
	name string
	dev  Device

	mu     sync.Mutex
	owners map[any]owner // *roce.QP, *roce.CQ, *roce.SRQ -> owner
	xrcds  map[xrcdKey]*sharedXRCD
}

type owner struct {
	c      *conn
	handle uint32
}

// New returns a server for devs, named sroce_<interface>.
func New(devs []Device, opts Options) (*Server, error) {
	s := &Server{log: opts.Logger, spin: opts.SpinFor, conns: make(map[*conn]struct{})}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.clock = opts.Clock
	if s.clock == nil {
		s.clock = roce.SystemClock()
	}
	s.started = s.clock.Now()
	if s.log == nil {
		s.log = slog.Default()
	}
	s.SetLimits(opts.Limits)
	if s.spin == 0 {
		s.spin = defaultSpin()
	}
	total, user := opts.Total, opts.User
	defTotal := DefaultTotal(ReadHost())
	for r := range total {
		if total[r] == 0 {
			total[r] = defTotal[r]
		}
	}
	defUser := DefaultUser(total)
	for r := range user {
		if user[r] == 0 {
			user[r] = defUser[r]
		}
	}
	s.budget = newBudgets(user, total, s.log, s.clock)
	s.refusing = make(chan struct{}, refusingMax)
	s.nodes = devNodes{dir: opts.DevNodeDir, log: s.log}
	seen := map[string]bool{}
	for _, d := range devs {
		sd := &served{name: "sroce_" + d.Ifname(), dev: d, owners: make(map[any]owner)}
		if seen[sd.name] {
			s.nodes.close()
			return nil, fmt.Errorf("interface %s given twice", d.Ifname())
		}
		seen[sd.name] = true
		s.nodes.add(sd.name, d.NodeGUID())
		s.devs = append(s.devs, sd)
		s.wg.Add(1)
		go s.asyncEvents(sd)
	}
	s.startCM()
	return s, nil
}

// withDefaults returns l with its zero fields DefaultLimits'.
func (l Limits) withDefaults() Limits {
	def := DefaultLimits
	if l.QPs <= 0 {
		l.QPs = def.QPs
	}
	if l.CQs <= 0 {
		l.CQs = def.CQs
	}
	if l.MRs <= 0 {
		l.MRs = def.MRs
	}
	if l.RegBytes == 0 {
		l.RegBytes = def.RegBytes
	}
	if l.Objects <= 0 {
		l.Objects = def.Objects
	}
	if l.CMIDs <= 0 {
		l.CMIDs = def.CMIDs
	}
	return l
}

// SetLimits sets the per-connection limits (zero fields: DefaultLimits')
// for the requests that come from now on: what a client holds already
// stays, even over a lower limit.
func (s *Server) SetLimits(l Limits) {
	l = l.withDefaults()
	s.limits.Store(&l)
}

// Limits returns the per-connection limits in force.
func (s *Server) Limits() Limits { return *s.limits.Load() }

// startCM starts the RDMA CM on every device that can run one (an
// rdmacm.Port: iface.Port is one). Without it the daemon serves verbs
// only, and CM requests fail with ENODEV.
func (s *Server) startCM() {
	var ports []rdmacm.Port
	for _, sd := range s.devs {
		if p, ok := sd.dev.(rdmacm.Port); ok {
			ports = append(ports, p)
		}
	}
	if len(ports) == 0 {
		return
	}
	c, err := rdmacm.New(rdmacm.Config{}, ports...)
	if err != nil {
		s.log.Warn("the RDMA CM did not start; CM requests will fail", "err", err)
		return
	}
	s.cm = c
}

// SocketMode is the default mode of the daemon's socket: every local user
// may connect, as every user may open /dev/infiniband/uverbs* on a stock
// rdma-core host (its udev rules give them 0666); what a client may do is
// bounded by its own connection's objects and limits. SocketDirMode is
// the mode of the socket's directory when Listen creates it.
const (
	SocketMode    = 0o666
	SocketDirMode = 0o755
)

// SocketOptions are the owner group and mode of the daemon's socket.
type SocketOptions struct {
	Mode     fs.FileMode // 0: SocketMode
	GID      int         // the socket's group, with SetGroup
	SetGroup bool        // without: the daemon's group
}

// Listen creates the socket at path and returns its listener. A socket
// file nobody listens on (a daemon that was killed) is replaced; one a
// daemon listens on is refused, naming it. The socket's file has its mode
// (and group) from the moment it appears at path, and the directories
// Listen creates have SocketDirMode, whatever the umask (directories that
// exist keep their mode). A user's socket in the temporary directory
// (sockpath.TempDir) gets a directory of its own, mode 0700. Closing the
// listener leaves the file: the caller removes path.
func Listen(path string) (*net.UnixListener, error) {
	return ListenWith(path, SocketOptions{})
}

// ListenWith is Listen with the socket's mode and group.
func ListenWith(path string, o SocketOptions) (*net.UnixListener, error) {
	gid := -1
	if o.SetGroup {
		gid = o.GID
	}
	if o.Mode == 0 {
		o.Mode = SocketMode
	}
	if filepath.Dir(path) == sockpath.TempDir() {
		if err := sockpath.PrepareTempDir(); err != nil {
			return nil, fmt.Errorf("the socket's directory: %w", err)
		}
	} else if err := sockfile.MkdirAll(filepath.Dir(path), SocketDirMode); err != nil {
		return nil, fmt.Errorf("creating the socket's directory: %w", err)
	}
	if _, err := os.Lstat(path); err == nil {
		if sockpath.Listening(path) {
			return nil, fmt.Errorf("a daemon already listens on %s%s; stop it first, or give this one another socket (--socket)", path, holderOf(path))
		}
	}
	return sockfile.ListenOwned("unixpacket", path, o.Mode, gid, true)
}

// holderOf names the process listening at path (", pid N (comm)"), or "".
func holderOf(path string) string {
	c, err := net.DialTimeout("unixpacket", path, time.Second)
	if err != nil {
		return ""
	}
	defer c.Close()
	return peerName(c.(*net.UnixConn))
}

// peerName is ", pid N (comm)" of the process at the other end of uc, or "".
func peerName(uc *net.UnixConn) string {
	raw, err := uc.SyscallConn()
	if err != nil {
		return ""
	}
	var cred *unix.Ucred
	raw.Control(func(fd uintptr) { cred, err = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) })
	if err != nil || cred.Pid == 0 {
		return ""
	}
	comm := ""
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", cred.Pid)); err == nil {
		comm = " (" + strings.TrimSpace(string(b)) + ")"
	}
	return fmt.Sprintf(", pid %d%s", cred.Pid, comm)
}

// Serve accepts clients on ln until Close. It returns nil after Close,
// and an error only if ln was closed by someone else: a failing accept
// (EMFILE, ENFILE, ENOMEM, ENOBUFS or any other error) is counted, logged
// at most every 10 s, and retried after a backoff from 5 ms doubling to
// 1 s, reset by the next success. A connection over its uid's budget or
// the daemon's is closed right after accept, its HELLO answered with
// EAGAIN.
func (s *Server) Serve(ln *net.UnixListener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errors.New("daemon: server closed")
	}
	s.lns = append(s.lns, ln)
	s.mu.Unlock()
	var backoff time.Duration
	for {
		uc, err := ln.AcceptUnix()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				return fmt.Errorf("daemon: accepting a client: the listener was closed: %w", err)
			}
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.budget.acceptRetries.Add(1)
			s.budget.warn(noUID, "accepting a client failed; retrying", "err", err, "in", backoff)
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-s.ctx.Done():
				t.Stop()
			}
			continue
		}
		backoff = 0
		c, err := s.newConn(uc)
		if err != nil {
			s.log.Warn("client refused", "err", err)
			uc.Close()
			continue
		}
		if err := c.charge(connCost); err != nil {
			s.budget.connsRefused.Add(1)
			s.budget.warn(c.uid, "client connection refused", "pid", c.pid, "comm", c.comm, "err", err)
			s.refuse(uc, int32(errnoOf(err)))
			continue
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			uc.Close()
			c.release(connCost)
			continue
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			c.serve()
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
		}()
	}
}

// connCost is what a connection holds from accept: itself and its socket.
var connCost = cost{ResConns: 1, ResFDs: 1}

// refusingMax bounds the refused connections answered at once.
const refusingMax = 64

// refuseWait bounds how long a refused connection's HELLO is waited for.
const refuseWait = time.Second

// refuse closes a connection refused after accept. If a slot is free it
// first answers the client's first request (HELLO) with errno, so that
// the program is told why (its HELLO was sent with the connect and is
// read from the socket before the close, which would otherwise reset the
// connection under the reply).
func (s *Server) refuse(uc *net.UnixConn, errno int32) {
	select {
	case s.refusing <- struct{}{}:
	default:
		uc.Close()
		return
	}
	go func() {
		defer func() { <-s.refusing }()
		defer uc.Close()
		buf := make([]byte, ctl.MaxMsg+1)
		oob := make([]byte, unix.CmsgSpace(ctl.MaxFDs*4))
		uc.SetDeadline(time.Now().Add(refuseWait))
		n, oobn, _, _, err := uc.ReadMsgUnix(buf, oob)
		if fds, _ := parseFDs(oob[:oobn]); len(fds) > 0 {
			closeFDs(fds)
		}
		if err != nil {
			return
		}
		h, _, err := ctl.Parse(buf[:n])
		if err != nil {
			return
		}
		uc.Write(ctl.Append(nil, ctl.Hdr{Op: h.Op, Seq: h.Seq, Err: errno}))
	}()
}

// Close stops accepting, disconnects every client (freeing what they
// held) and waits for the connections to end. It does not close the
// devices.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.nodes.close()
	s.cancel()
	for _, ln := range s.lns {
		ln.Close()
	}
	// The clients are told, as when a device goes (Remove): their
	// contexts get DEVICE_FATAL before the connection ends, and the
	// objects they held are freed after.
	told := 0
	for c := range s.conns {
		if c.dev != nil {
			c.asyncEvent(uint32(verbs.EventDeviceFatal), 0)
			told++
		}
		c.uc.Close()
	}
	s.mu.Unlock()
	if told > 0 {
		s.log.Info("stopping: clients told (DEVICE_FATAL) and disconnected, their objects being freed", "clients", told)
	}
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		return errors.New("daemon: clients still being cleaned up after 10 s")
	}
	if s.cm != nil {
		s.cm.Close()
	}
	return nil
}

// devices returns the served devices now.
func (s *Server) devices() []*served {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.devs
}

// Remove stops serving the device on interface ifname (its interface was
// deleted, or its link failed): each of its clients gets
// IBV_EVENT_DEVICE_FATAL on its asynchronous event channel and is then
// disconnected, which frees its objects, and new clients no longer see the
// device. Add serves it again once the interface is back. It reports how
// many devices are left; the server goes on serving with none.
func (s *Server) Remove(ifname string) int {
	s.mu.Lock()
	var gone *served
	kept := s.devs[:0:0]
	for _, d := range s.devs {
		if d.dev.Ifname() == ifname && gone == nil {
			gone = d
			continue
		}
		kept = append(kept, d)
	}
	s.devs = kept
	clients := 0
	if gone != nil {
		for c := range s.conns {
			if c.dev == gone {
				c.asyncEvent(uint32(verbs.EventDeviceFatal), 0)
				c.uc.Close()
				clients++
			}
		}
	}
	n := len(s.devs)
	s.mu.Unlock()
	if gone != nil {
		s.nodes.remove(gone.name)
		s.log.Warn("device removed: its interface went away; its clients were told (DEVICE_FATAL) and disconnected",
			"device", gone.name, "clients", clients, "devices_left", n)
	}
	return n
}

// ClientStat describes one connected client.
type ClientStat struct {
	ID     uint64
	PID    int32
	UID    uint32
	Comm   string
	Device string
	QPs    int
	MRs    int
	Bytes  uint64 // registered
}

// Clients returns the connected clients.
func (s *Server) Clients() []ClientStat {
	s.mu.Lock()
	cs := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		cs = append(cs, c)
	}
	s.mu.Unlock()
	out := make([]ClientStat, 0, len(cs))
	for _, c := range cs {
		out = append(out, c.stat())
	}
	return out
}

// asyncEvents routes the device's asynchronous events to the connections
// that own the objects; port events (PORT_ERR, PORT_ACTIVE, GID_CHANGE:
// no object) go to every connection of the device, with the port number
// as the handle, as ibv_get_async_event gives element.port_num. It ends
// when the device or the server closes.
func (s *Server) asyncEvents(sd *served) {
	defer s.wg.Done()
	dev := sd.dev.Device()
	for {
		ev, err := dev.GetAsyncEvent(s.ctx)
		if err != nil {
			return // the device or the server closed
		}
		var obj any
		switch {
		case ev.QP != nil:
			obj = ev.QP
		case ev.CQ != nil:
			obj = ev.CQ
		case ev.SRQ != nil:
			obj = ev.SRQ
		}
		if obj == nil {
			s.log.Info("port event", "device", sd.name, "event", ev.Type.String())
			s.mu.Lock()
			for c := range s.conns {
				if c.dev == sd {
					c.asyncEvent(uint32(ev.Type), 1)
				}
			}
			s.mu.Unlock()
			continue
		}
		sd.mu.Lock()
		o, ok := sd.owners[obj]
		sd.mu.Unlock()
		if !ok {
			continue
		}
		// A ring the engine found corrupt (the client broke the
		// ring's rules) ends the client, as any corrupt ring does.
		switch {
		case ev.QP != nil && ev.Type == verbs.EventQPFatal && ev.QP.RecvRingFault():
			o.c.ringFault("QP", o.handle, "receive")
		case ev.QP != nil && ev.Type == verbs.EventQPFatal && ev.QP.SendRingFault():
			o.c.ringFault("QP", o.handle, "send")
		case ev.SRQ != nil && ev.Type == verbs.EventSRQErr && ev.SRQ.RingFault():
			o.c.ringFault("SRQ", o.handle, "receive")
		default:
			o.c.asyncEvent(uint32(ev.Type), o.handle)
		}
	}
}

func (sd *served) own(obj any, c *conn, h uint32) {
	sd.mu.Lock()
	sd.owners[obj] = owner{c, h}
	sd.mu.Unlock()
}

func (sd *served) disown(obj any) {
	sd.mu.Lock()
	delete(sd.owners, obj)
	sd.mu.Unlock()
}

// CMStats returns the counters of the RDMA CM's agent on device name
// ("sroce_eth0"), or nil when the CM does not run there.
func (s *Server) CMStats(name string) []rdmacm.Counter {
	if s.cm == nil {
		return nil
	}
	for _, sd := range s.devices() {
		if sd.name != name {
			continue
		}
		for _, st := range s.cm.Stats() {
			if st.Device == sd.dev.Device().Name() {
				return st.List()
			}
		}
	}
	return nil
}

// Inspector is what a Device may also tell about itself for QUERY_STATS
// (iface.Port implements it).
type Inspector interface {
	LinkMode() string
	Reason() string
	PathMTU() int
	Err() error
	Counters() []iface.Stat
	LinkStats() []iface.Stat
}

// stats answers QUERY_STATS of a context on device sd: the device's
// counters and how many contexts it has, never who they are. name is the
// device the request names: sd's own, or empty for it; another device is
// refused with EINVAL, as uverbs refuses an object of another context.
func (s *Server) stats(sd *served, name string) ([]byte, []int, error) {
	if name != "" && name != sd.name {
		return nil, nil, unix.EINVAL
	}
	st := ctl.Stats{Device: sd.name, Interface: sd.dev.Ifname(), PortState: "PORT_ACTIVE",
		ActiveMTU: sd.dev.ActiveMTU().Bytes(), Seconds: s.clock.Now().Sub(s.started).Seconds()}
	if sd.dev.State() != verbs.PortActive {
		st.PortState = "PORT_DOWN"
	}
	s.mu.Lock()
	for c := range s.conns {
		if c.dev == sd {
			st.Clients++
		}
	}
	s.mu.Unlock()
	if in, ok := sd.dev.(Inspector); ok {
		st.LinkMode, st.Reason, st.ActiveMTU = in.LinkMode(), in.Reason(), in.PathMTU()
		if err := in.Err(); err != nil && !errors.Is(err, iface.ErrClosed) {
			st.PortErr = err.Error()
		}
		for _, c := range in.Counters() {
			st.Engine = append(st.Engine, ctl.Counter{Name: c.Name, Value: c.Value})
		}
		for _, c := range in.LinkStats() {
			st.Link = append(st.Link, ctl.Counter{Name: c.Name, Value: c.Value})
		}
	} else {
		for name, v := range sd.dev.Device().Counters() {
			st.Engine = append(st.Engine, ctl.Counter{Name: name, Value: v})
		}
		sort.Slice(st.Engine, func(i, j int) bool { return st.Engine[i].Name < st.Engine[j].Name })
	}
	for _, c := range s.CMStats(sd.name) {
		st.CM = append(st.CM, ctl.Counter{Name: c.Name, Value: c.Value})
	}
	b, err := json.Marshal(&st)
	if err != nil || len(b) > ctl.MaxMsg-ctl.HdrSize {
		return nil, nil, unix.EOVERFLOW
	}
	return b, nil, nil
}
