package perftest

// The device a tool's verbs go to: a sroce device the tool opens in its
// own process on the interface, or, when a sroce daemon serves that
// interface, the daemon's device (the daemon holds the interface's AF_XDP
// queue or UDP port, so a device of the tool's own could not open there).
// Both are reached through package rdma; hca adds what the tools need of
// the port around the verbs.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/client"
	"github.com/sroce/sroce/daemon/ctl"
	"github.com/sroce/sroce/internal/sockpath"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/rdma"
	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/roce/iface"
	"github.com/sroce/sroce/roce/netif"
	"github.com/sroce/sroce/verbs"
)

// hca is the device of a tool run.
type hca interface {
	rdma.Device
	// ifname returns the interface the device runs on.
	ifname() string
	// activeMTU returns the port's active MTU.
	activeMTU() verbs.MTU
	// gid returns the GID at index i, with an error naming the valid
	// indexes when it is empty.
	gid(i int) (bth.GID, error)
	// gidTableLen returns the length of the port's GID table.
	gidTableLen() int
	// defaultGIDIndex is the GID index a tool takes when none is given.
	defaultGIDIndex() int
	// sourceOnly returns the one address the link can send from (the UDP
	// link of a device in process), or an invalid address.
	sourceOnly() netip.Addr
	// maxRdAtomic returns the device's max_qp_rd_atom.
	maxRdAtomic() int
	// ahAttr returns the path from GID index sgid to dgid.
	ahAttr(ctx context.Context, dgid bth.GID, sgid int) (verbs.AHAttr, error)
	// counters returns the device's counters by rxe's names.
	counters() map[string]uint64
	// received returns the packets the device received since the run
	// opened it, after every one of them has been placed in memory.
	received() uint64
	// shared reports whether registered memory is shared with another
	// process (the daemon's engine), which places remote WRITEs in it
	// while this process reads.
	shared() bool
	// spins reports whether a tool waiting for completions polls its CQ
	// busily, as perftest does: on a daemon's device (the engine runs in
	// the daemon, and a poll reads the shared ring without a system
	// call); in process on an inline device (each poll runs the engine);
	// and in process in spin and adaptive modes, where the engine's loop
	// polls on a thread of its own and a tool that blocked on its CQ
	// would wait for the runtime to wake it for every completion. On few
	// CPUs the spinners (each process's loop and tool) take turns: the
	// loop gives its CPU up every 64 empty polls, and so does the tool
	// (yield). (Two CPUs, the tools in process, send_lat typical: spin
	// 205-219 us blocking, 94-124 us polling; adaptive 112-121 and 33-35
	// us.) A sleeping engine runs on the tool's processors, which polling
	// would only take from it.
	spins() bool
	// yield gives the processor away between polls: to the tool's other
	// goroutines in process, and to other threads (the daemon's, the
	// peer's, the spinning loop's) where one may be waiting for a CPU.
	yield()
	// lost returns why the device became unusable, or nil.
	lost() error
	// port returns the device in process, or nil for a daemon's.
	port() *iface.Port
}

// openHCA opens the device of interface ifname: the daemon's when a sroce
// daemon at its usual socket (SROCE_SOCKET) serves it, else one in
// process with open. A daemon that serves the interface but refuses the
// tool (a limit, another protocol version) is the run's error: a device of
// the tool's own could not open where the daemon holds the link.
func openHCA(ifname string, open func() (*iface.Port, error)) (hca, error) {
	socket := sockpath.Find()
	x, err := rdma.DaemonServes(socket, "sroce_"+ifname)
	if err != nil {
		return nil, err
	}
	if x != nil {
		return newDaemonHCA(x, socket, ifname)
	}
	p, err := open()
	if err != nil {
		return nil, err
	}
	return &localHCA{Device: rdma.InProcess(p.Device()), p: p, dev: p.Device()}, nil
}

// --- in process ------------------------------------------------------

type localHCA struct {
	rdma.Device
	p   *iface.Port
	dev *roce.Device
}

func (h *localHCA) ifname() string              { return h.p.Ifname() }
func (h *localHCA) activeMTU() verbs.MTU        { return h.p.ActiveMTU() }
func (h *localHCA) gid(i int) (bth.GID, error)  { return h.p.GID(i) }
func (h *localHCA) gidTableLen() int            { return h.dev.QueryPort().GIDTblLen }
func (h *localHCA) defaultGIDIndex() int        { return h.p.DefaultGIDIndex() }
func (h *localHCA) maxRdAtomic() int            { return h.dev.Query().MaxQPRdAtom }
func (h *localHCA) counters() map[string]uint64 { return h.dev.Counters() }
func (h *localHCA) shared() bool                { return false }
func (h *localHCA) spins() bool {
	e := h.dev.Engine()
	return e == roce.EngineInline || e.Spins()
}
func (h *localHCA) port() *iface.Port { return h.p }

// yield gives the processor to another goroutine, and where the device's
// loop spins, the CPU to another thread: there a tool and a loop spin in
// each process of a pair, more spinners than two CPUs.
func (h *localHCA) yield() {
	runtime.Gosched()
	if h.dev.Engine().Spins() {
		roce.YieldCPU()
	}
}
func (h *localHCA) Close() error { return h.p.Close() }
func (h *localHCA) sourceOnly() netip.Addr {
	if h.p.UDPLink() == nil {
		return netip.Addr{}
	}
	return h.p.LocalAddr()
}

func (h *localHCA) ahAttr(ctx context.Context, dgid bth.GID, sgid int) (verbs.AHAttr, error) {
	return h.p.AHAttr(ctx, dgid, sgid)
}

// received runs an inline engine first (nothing else receives while the
// tool watches memory); the engine places remote WRITEs, READ responses
// and atomics in MR memory under the device lock, which Counter takes, so
// memory read afterwards holds what those packets wrote.
func (h *localHCA) received() uint64 {
	h.dev.Progress()
	return h.dev.Counter(verbs.CntRcvdPkts)
}

func (h *localHCA) lost() error {
	select {
	case <-h.p.Lost():
		if err := h.p.Err(); err != nil {
			return err
		}
		return errors.New("the device was closed")
	default:
		// A tool fails when its link goes down rather than wait for it
		// (the device's QPs would wait, as on rxe).
		return h.p.DownErr()
	}
}

// --- a daemon's device -----------------------------------------------

type daemonHCA struct {
	rdma.Device
	x        *client.Context
	socket   string
	name     string
	ifn      string
	port0    ctl.PortAttr
	dev      ctl.DeviceAttr
	rcvd0    uint64 // the device's received packets when the run opened it
	rcvdLast uint64 // the last count read (received's goroutine only)
	gone     atomic.Pointer[error]
	closing  atomic.Bool
}

func newDaemonHCA(x *client.Context, socket, ifname string) (hca, error) {
	h := &daemonHCA{x: x, socket: socket, name: x.Info.Name, ifn: ifname}
	var err error
	if h.port0, err = x.QueryPort(); err == nil {
		h.dev, err = x.QueryDevice()
	}
	if err != nil {
		x.Close()
		return nil, fmt.Errorf("querying %s of the sroce daemon at %s: %w", h.name, socket, err)
	}
	h.Device = rdma.DaemonContext(x)
	h.rcvd0 = h.counters()["rcvd_pkts"]
	h.rcvdLast = h.rcvd0
	go h.watch()
	return h, nil
}

// watch reads the context's asynchronous events until the daemon goes
// away or reports the device lost, and then marks the device lost, so that
// a run waiting for completions ends at once rather than at its stall
// limit. The tools act on no other asynchronous event.
func (h *daemonHCA) watch() {
	for {
		ev, err := h.x.AsyncEvent(time.Minute)
		if h.closing.Load() {
			return
		}
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
		case errors.Is(err, io.EOF):
			err = errors.New("it closed the connection")
			h.gone.CompareAndSwap(nil, &err)
			return
		case err != nil:
			err = fmt.Errorf("its connection failed (%w)", err)
			h.gone.CompareAndSwap(nil, &err)
			return
		case verbs.EventType(ev.EventType) == verbs.EventDeviceFatal:
			err = errors.New("it reported the device lost")
			h.gone.CompareAndSwap(nil, &err)
			return
		}
	}
}

func (h *daemonHCA) Close() error {
	h.closing.Store(true)
	return h.Device.Close()
}

func (h *daemonHCA) ifname() string         { return h.ifn }
func (h *daemonHCA) activeMTU() verbs.MTU   { return verbs.MTU(h.port0.ActiveMTU) }
func (h *daemonHCA) gidTableLen() int       { return int(h.port0.GIDTblLen) }
func (h *daemonHCA) maxRdAtomic() int       { return int(h.dev.MaxQPRdAtom) }
func (h *daemonHCA) sourceOnly() netip.Addr { return netip.Addr{} }
func (h *daemonHCA) shared() bool           { return true }
func (h *daemonHCA) spins() bool            { return true }
func (h *daemonHCA) yield()                 { roce.YieldCPU() }
func (h *daemonHCA) port() *iface.Port      { return nil }

func (h *daemonHCA) gid(i int) (bth.GID, error) {
	g, err := h.x.QueryGID(i)
	if err != nil {
		return bth.GID{}, fmt.Errorf("GID index %d of %s of the sroce daemon: %w", i, h.name, err)
	}
	if !g.IsZero() {
		return g, nil
	}
	var valid []int
	for _, e := range h.gids() {
		valid = append(valid, e.Index)
	}
	return bth.GID{}, fmt.Errorf("GID index %d is empty on %s of the sroce daemon (valid indexes: %v)", i, h.name, valid)
}

// gids returns the daemon's GID table's entries that are set; entry 0 is
// the default one.
func (h *daemonHCA) gids() []netif.GIDEntry {
	var gids []netif.GIDEntry
	for i := 0; i < h.gidTableLen(); i++ {
		if g, err := h.x.QueryGID(i); err == nil && !g.IsZero() {
			gids = append(gids, netif.GIDEntry{Index: i, GID: g, Default: i == 0})
		}
	}
	return gids
}

// defaultGIDIndex picks as for a device in process (iface.DefaultGIDIndex)
// from the daemon's GID table.
func (h *daemonHCA) defaultGIDIndex() int { return iface.DefaultGIDIndex(h.gids(), netip.Addr{}) }

// ahAttr leaves the destination MAC to the daemon, which resolves it
// when the QP moves to RTR or the AH is created, as rdma-core's providers
// leave it to the kernel.
func (h *daemonHCA) ahAttr(ctx context.Context, dgid bth.GID, sgid int) (verbs.AHAttr, error) {
	if _, err := h.gid(sgid); err != nil {
		return verbs.AHAttr{}, err
	}
	if dgid.IsZero() {
		return verbs.AHAttr{}, errors.New("the destination GID is zero")
	}
	return verbs.AHAttr{DGID: dgid, SGIDIndex: uint8(sgid)}, nil
}

// counters asks the daemon; an answer that does not come leaves them
// empty (a daemon that went away is watch's to report).
func (h *daemonHCA) counters() map[string]uint64 {
	out := map[string]uint64{}
	st, err := h.x.Stats()
	if err != nil {
		return out
	}
	for _, c := range st.Engine {
		out[c.Name] = c.Value
	}
	return out
}

// received reads the daemon's counter; the fence orders this process's
// later reads of shared memory after it.
func (h *daemonHCA) received() uint64 {
	n, ok := h.counters()["rcvd_pkts"]
	if !ok {
		n = h.rcvdLast // the daemon did not answer: nothing seen to move
	}
	h.rcvdLast = n
	fence()
	if n < h.rcvd0 {
		return 0
	}
	return n - h.rcvd0
}

func (h *daemonHCA) lost() error {
	if e := h.gone.Load(); e != nil {
		return fmt.Errorf("the sroce daemon at %s serves %s no longer: %w", h.socket, h.name, *e)
	}
	return nil
}

// fenceWord is what fence swaps.
var fenceWord uint32

// fence is a full memory barrier (an atomic read-modify-write), after
// which loads of memory another process wrote see what it wrote before.
func fence() { atomic.AddUint32(&fenceWord, 1) }

// loadByte reads b[i] of memory another process writes, atomically with
// the aligned word around it (which lies in the same page: the daemon's
// buffers are whole pages).
func loadByte(b []byte, i int) byte {
	p := unsafe.Pointer(&b[i])
	off := uintptr(p) & 3
	w := (*uint32)(unsafe.Add(p, -int(off)))
	return byte(atomic.LoadUint32(w) >> (8 * off)) // little-endian, as sroce's platforms are
}

// region is a registered buffer of the tool.
type region struct {
	rdma.MR
	buf []byte
}

// register allocates n bytes the device can reach (a daemon's: memory
// shared with it) and registers them with access.
func register(h hca, pd rdma.PD, n int, access mr.Access) (*region, error) {
	buf, err := h.Alloc(max(n, 1))
	if err != nil {
		return nil, err
	}
	m, err := pd.RegMR(buf, access)
	if err != nil {
		return nil, err
	}
	return &region{MR: m, buf: buf}, nil
}

// Buf returns the registered memory.
func (r *region) Buf() []byte { return r.buf }
