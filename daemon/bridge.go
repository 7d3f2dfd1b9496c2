package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"math/bits"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/sroce/sroce/daemon/ctl"
	"github.com/sroce/sroce/qp"
	"github.com/sroce/sroce/verbs"
	"golang.org/x/sys/unix"
)

// bridge answers one connection's doorbells: a QP whose doorbell rang
// and whose send ring has new WQEs is handed to the engine (which takes
// the WQEs from the ring where they lie), and a QP in the error state is
// told about new receives to flush. The engine writes completions into
// the client's CQ rings itself.
//
// The bridge takes no connection-wide lock: the objects it serves are in
// its own table (targets), read without a lock, and each is served under
// the object's own lock (target.mu), which its destroy and resize take
// too. The engine's Flush runs with no lock held.
//
// The bridge reads nothing of the rings but a QP's send producer index,
// to know whether to ring the engine: the engine takes the WQEs from the
// rings itself, reads each once and checks it (a ring that breaks the
// rules disconnects the client, ringFault). Nothing ever waits in the
// bridge: the client's ring full is the engine's queue full.
type bridge struct {
	c       *conn
	page    *ctl.CtxPage
	done    chan struct{}
	exited  chan struct{}
	spinFor time.Duration
	stopped atomic.Bool

	// The objects the bridge serves, indexed by their doorbell number
	// (target.bell): replaced whole under tmu when one comes or goes,
	// read without a lock.
	targets atomic.Pointer[[]*target]
	tmu     sync.Mutex
	free    []uint32 // doorbell numbers given back, under tmu

	// ahs are the connection's address handles by handle, for UD sends:
	// written by CREATE_AH and DESTROY_AH, read by the engine as it takes
	// a UD send (resolveAH). ahMu guards only the map and is never held
	// while anything else is called. (A sync.Map boxed each uint32 key
	// past 255: an allocation per UD send.)
	ahMu sync.RWMutex
	ahs  map[uint32]*ahObj

	// passes counts the bridge's passes; only its goroutine uses it.
	passes uint64

	// strays counts doorbell bits that named no object of the client.
	strays atomic.Uint64
}

// target is an object whose rings the bridge serves: a QP (its send ring
// and its own receive ring) or an SRQ.
type target struct {
	// mu is the object's data path lock: the bridge serves the object
	// under it, and its destroy (dead) and an SRQ's resize take it.
	mu   sync.Mutex
	dead bool
	qp   *qpObj
	srq  *srqObj
	bell uint32 // the object's doorbell number (its index in targets)
	pass uint64 // the bridge's pass that served it last (bridge only)
}

func newBridge(c *conn) *bridge {
	b := &bridge{c: c, page: (*ctl.CtxPage)(unsafe.Pointer(&c.ctxPage.mem[0])),
		done: make(chan struct{}), exited: make(chan struct{}), spinFor: c.s.spin}
	go b.run()
	return b
}

// add makes a target of a QP or an SRQ and gives it a doorbell number;
// it fails with ENOMEM when every number is taken.
func (b *bridge) add(q *qpObj, s *srqObj) (*target, error) {
	b.tmu.Lock()
	defer b.tmu.Unlock()
	old := b.tab()
	var bell uint32
	if n := len(b.free); n > 0 {
		bell, b.free = b.free[n-1], b.free[:n-1]
	} else {
		bell = uint32(max(len(old), 1)) // 0 names nothing
		if bell >= ctl.CtxBells {
			return nil, unix.ENOMEM
		}
	}
	t := &target{qp: q, srq: s, bell: bell}
	tab := make([]*target, max(len(old), int(bell)+1))
	copy(tab, old)
	tab[bell] = t
	b.targets.Store(&tab)
	return t, nil
}

// remove forgets t, which its owner marked dead under t.mu: the bridge
// serves it no more, and its number may name another object later.
func (b *bridge) remove(t *target) {
	b.tmu.Lock()
	defer b.tmu.Unlock()
	old := b.tab()
	if int(t.bell) >= len(old) || old[t.bell] != t {
		return
	}
	tab := append([]*target(nil), old...)
	tab[t.bell] = nil
	b.targets.Store(&tab)
	b.free = append(b.free, t.bell)
}

// tab returns the table of targets.
func (b *bridge) tab() []*target {
	if p := b.targets.Load(); p != nil {
		return *p
	}
	return nil
}

// wake makes a sleeping bridge look at its rings, as the client's
// doorbell does.
func (b *bridge) wake() {
	v := uint64(1)
	unix.Write(b.c.doorbellFD, (*[8]byte)(unsafe.Pointer(&v))[:])
}

// stop ends the bridge and waits for it (bounded: a pass is short); a
// second stop only waits.
func (b *bridge) stop() {
	if !b.stopped.Swap(true) {
		close(b.done)
	}
	b.wake()
	select {
	case <-b.exited:
	case <-time.After(5 * time.Second):
		b.c.s.log.Error("a client's bridge did not stop within 5 s", "client", b.c.id)
	}
}

// run is the bridge's goroutine. An idle bridge costs nothing: it sleeps
// on the doorbell with no deadline, after telling the client so
// (NeedWakeup) and looking at the rings once more. The client stores its
// producer index, then loads NeedWakeup; the bridge stores NeedWakeup,
// then loads the producer indices (both sequentially consistent): one of
// the two sees the other's store, so a post is never left unseen. stop
// and a corrupt receive ring the engine found (ringFault) wake it through the
// doorbell too.
//
// The spin (spinFor) is timed on the wall clock, not the daemon's Clock:
// it bounds the CPU the bridge burns polling, which only real time
// measures, and a virtual clock that tests move by hand would make it
// spin until they did.
func (b *bridge) run() {
	defer close(b.exited)
	defer b.c.contain("bridge")
	last := time.Now()
	for !b.stopped.Load() {
		work, err := b.pass(false)
		if err != nil {
			b.fail(err)
			return
		}
		if work {
			last = time.Now()
			continue
		}
		if b.spinFor > 0 && time.Since(last) < b.spinFor {
			continue
		}
		// Sleep: ask for the doorbell, look once more (a post may have
		// come before the client saw the request), then wait for it.
		atomic.StoreUint32(&b.page.NeedWakeup, 1)
		work, err = b.pass(true)
		if err != nil {
			b.fail(err)
			return
		}
		if !work && !b.stopped.Load() && !b.sleep() {
			return // the doorbell closed: the connection is ending
		}
		atomic.StoreUint32(&b.page.NeedWakeup, 0)
		last = time.Now()
	}
}

// sleep waits for the client's doorbell and reports whether the doorbell
// is still open. The eventfd is read with a raw system call from inside
// the poller's wait (RawConn.Read): a read through os.File enters the
// runtime's system call path, which wakes the runtime's monitor thread
// whenever it sleeps, and it sleeps whenever the daemon is idle, so every
// doorbell cost a second thread wake-up (a third of all the daemons'
// wake-ups in ib_send_lat through two daemons).
func (b *bridge) sleep() bool {
	var v uint64
	var errno unix.Errno
	read := func(fd uintptr) bool {
		_, _, errno = unix.RawSyscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(&v)), 8)
		return errno != unix.EAGAIN
	}
	if err := b.c.doorbellRC.Read(read); err != nil {
		return false
	}
	return errno == 0 || errno == unix.EINTR
}

// fail disconnects a client whose rings broke the rules.
func (b *bridge) fail(err error) {
	b.c.s.log.Warn("client disconnected: its rings are corrupt", "client", b.c.id, "pid", b.c.pid, "reason", err.Error())
	b.c.uc.Close()
}

// pass serves the objects whose doorbells rang, once, and reports
// whether there was work. The doorbell
// words of the context page are exchanged with 0, those up to the
// highest doorbell number given out, or (all, before the bridge sleeps)
// every one, so that bits no object owns are counted and cleared.
// Completions need no pass: the engine writes them into the client's CQ
// rings itself. Only the bridge's goroutine runs it.
func (b *bridge) pass(all bool) (bool, error) {
	c := b.c
	if err := c.ringErr.Load(); err != nil {
		return false, *err
	}
	b.passes++
	work := false
	tab := b.tab()
	words := (len(tab) + 63) / 64
	if all {
		words = ctl.CtxBellWords
	}
	for i := 0; i < words; i++ {
		bw := &b.page.Bells[i]
		if atomic.LoadUint64(bw) == 0 {
			continue
		}
		for v := atomic.SwapUint64(bw, 0); v != 0; v &= v - 1 {
			n := i*64 + bits.TrailingZeros64(v)
			if n >= len(tab) || tab[n] == nil {
				// An object made since the table was loaded? Its
				// number reached the client after the table that
				// holds it was stored.
				if tab = b.tab(); n >= len(tab) || tab[n] == nil {
					b.strays.Add(1)
					continue
				}
			}
			work = b.serveOnce(tab[n]) || work
		}
	}
	if work {
		// Transmit now, with no lock held: an inline engine holds frames
		// of consecutive posts for a batch until someone polls, and
		// nobody polls the engine's CQs here.
		c.dev.dev.Device().Flush()
	}
	return work, nil
}

// serveOnce serves t unless this pass has already.
func (b *bridge) serveOnce(t *target) bool {
	if t.pass == b.passes {
		return false
	}
	t.pass = b.passes
	return b.serve(t)
}

// kick rings t's doorbell from the daemon's side: the bridge serves t on
// its next pass.
func (b *bridge) kick(t *target) {
	atomic.OrUint64(&b.page.Bells[t.bell/64], 1<<(t.bell%64))
	b.wake()
}

// serve tells the engine what waits in t's rings, under t's lock, and
// reports whether there was something.
func (b *bridge) serve(t *target) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.dead {
		return false
	}
	if h := panicHook.Load(); h != nil {
		(*h)(b.c, "bridge")
	}
	o := t.qp
	if o == nil {
		// An SRQ: the engine takes receives from its ring where the
		// client wrote them, when a message needs one.
		return false
	}
	if o.rq != nil {
		o.qp.RecvPosted() // a QP in the error state flushes them
	}
	return b.sends(o)
}

// sends rings the engine's doorbell for o when the client published
// send WQEs on o's ring since the bridge last looked; o's target lock is
// held. The engine takes them from the ring where they lie
// (roce.QP.AttachSendRing): it loads the producer index itself, checks
// and reads each WQE once, and gives its slot back when the request
// completes, so the ring full is the engine's queue full and nothing
// waits here. A ring that breaks the rules is the engine's to find: it
// raises EventQPFatal, and the client is disconnected (ringFault).
func (b *bridge) sends(o *qpObj) bool {
	p := o.sq.Prod()
	if p == o.sqSeen {
		return false
	}
	o.sqSeen = p
	o.qp.SendRung()
	return true
}

// resolveAH returns the resolver of o's UD sends' address handles: the
// connection's handles of o's protection domain.
func (b *bridge) resolveAH(o *qpObj) qp.AHResolver {
	return func(h uint32) *verbs.AH {
		b.ahMu.RLock()
		ah := b.ahs[h]
		b.ahMu.RUnlock()
		if ah != nil && ah.pd == o.pd {
			return ah.ah
		}
		return nil
	}
}

// setAH makes handle h name o for UD sends; a nil o forgets h.
func (b *bridge) setAH(h uint32, o *ahObj) {
	b.ahMu.Lock()
	defer b.ahMu.Unlock()
	if o == nil {
		delete(b.ahs, h)
		return
	}
	if b.ahs == nil {
		b.ahs = make(map[uint32]*ahObj)
	}
	b.ahs[h] = o
}

// ringFault disconnects the client whose ring the engine found corrupt
// (a QP's send or receive ring or an SRQ's ring: SendRingFault,
// RecvRingFault, RingFault); the engine
// reads it no more. The bridge does the disconnecting on its next pass.
func (c *conn) ringFault(what string, h uint32, which string) {
	err := misbehaved("%s %d's %s ring is corrupt (a producer index beyond its limit, or an entry with more SGEs or inline bytes than its slot holds)", what, h, which)
	c.ringErr.CompareAndSwap(nil, &err)
	if c.br != nil {
		c.br.wake()
	}
}

// panicHook, when a test sets it, runs at points of a connection's work
// ("request" before each request is handled, "bridge" when the bridge
// serves a QP), so that a test can make them panic.
var panicHook atomic.Pointer[func(c *conn, where string)]

// contain, deferred at the top of a goroutine or callback that works for
// c, recovers a panic there: it is logged with the client's identity and
// the stack (the first one of the connection at error level, later ones
// at debug), and the connection ends (its socket closes, and the
// connection's goroutine frees what it held), while the daemon, its other
// clients and the engine go on. where names the goroutine in the log.
func (c *conn) contain(where string) {
	v := recover()
	if v == nil {
		return
	}
	c.panicked(where, v)
}

// panicked logs a recovered panic of c's and ends the connection.
func (c *conn) panicked(where string, v any) {
	lvl := slog.LevelDebug
	if c.panics.Add(1) == 1 {
		lvl = slog.LevelError
	}
	c.s.log.Log(context.Background(), lvl, "a client's connection panicked; disconnecting the client",
		"client", c.id, "pid", c.pid, "uid", c.uid, "comm", c.comm, "in", where,
		"panic", fmt.Sprint(v), "stack", string(debug.Stack()))
	c.uc.Close()
}

// contained runs f, containing a panic as contain does.
func (c *conn) contained(where string, f func()) {
	defer c.contain(where)
	f()
}

// guarded returns f wrapped so that a panic in it is contained (nil stays
// nil): for callbacks the engine runs on c's behalf on its own goroutine.
func (c *conn) guarded(where string, f func()) func() {
	if f == nil {
		return nil
	}
	return func() { c.contained(where, f) }
}

// drop ends the bridge's service of t: once it returns the bridge no
// longer touches t's rings, whose memory may go.
func (b *bridge) drop(t *target) {
	if t == nil {
		return
	}
	t.mu.Lock()
	t.dead = true
	t.mu.Unlock()
	b.remove(t)
}

// drainSends rings the engine for what waits in t's send ring now, on
// the caller's goroutine (a destroy: what the client posted before goes
// out first).
func (b *bridge) drainSends(t *target) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.dead || t.qp == nil {
		return
	}
	b.sends(t.qp)
}
