// Engines: a device has one per link, such as one per AF_XDP receive
// queue of a multi-queue interface. Each engine has its own loop, lock,
// frame batches, run queue, timer heap and doorbells; the QP, MR and GID
// tables are the device's, read by every engine without a lock (atomic
// pointers, replaced or set by control calls under the device lock).
//
// A QP belongs to one engine, which alone runs its transport. A frame
// that arrives on engine i for a QP of engine j is checked by i (parse,
// ICRC, address) and copied into a bounded single-producer,
// single-consumer ring from i to j; j takes it on its next step. Neither
// holds the other's lock. A full ring drops the frame and counts it
// (EngineStats.HandoffFull); RC recovers by retransmission.

package roce

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/monotime"
	"github.com/sroce/sroce/roce/linkcap"
	"github.com/sroce/sroce/verbs"
)

// engine is one loop of a device over one link.
type engine struct {
	d    *Device
	idx  int
	link Link

	hostIn hostQ // frames from other devices of the host (engine 0)

	mu  sync.Mutex     // the engine lock
	cnt verbs.Counters // the counters of its QPs and frames
	st  EngineStats

	// Loop state, used under mu.
	rx      [][]byte
	rxSizes []int
	pkt     bth.Packet
	tx      [][]byte
	txView  [][]byte
	txLen   []int
	// loopQ holds frames to the device's own GIDs, which never go to the
	// link: step receives them (loopFree recycles their buffers).
	loopQ, loopFree [][]byte
	txN             int
	txHL            int
	enc             bth.Encap
	runq            []*QP
	timers          timerHeap
	ipID            uint16
	// inbox holds the frames other engines handed over, by source
	// engine (nil for itself and on a one-engine device); handed marks
	// the engines this step handed frames to, to wake after the step.
	inbox  []*handoff
	handed uint64

	// Doorbells: QPs with newly posted work, from any goroutine.
	dbMu    sync.Mutex
	db      []*QP
	dbSpare []*QP

	// impair drops transmitted frames on purpose (SetImpairment), under
	// mu; impairDropped counts them.
	impair        *impairState
	impairDropped uint64

	running atomic.Bool
	parked  atomic.Bool // the loop blocks (or is about to) in the link
	// txDue is when frames an inline post held back must be sent (0: none
	// held); polled says a CQ was polled since the last inline post.
	txDue monotime.Time
	// txReqs counts the frames in the batch other than positive ACKs: a
	// poll's step keeps the ACKs it made for the application's next post
	// (see step).
	txReqs    int
	txDueACKs bool // the held frames were ACKs only when the hold began
	heldSteps int  // steps in a row whose receive backlog held requests back (see pump)
	polled    atomic.Bool
	pw        PartialWriter // the link's non-waiting transmit, if it has one
	lender    Lender        // the link's receive in place (rx then holds the lent frames)
	// txl is the link's transmit in place: tx then holds its buffers,
	// nil where the link has them, and txSpare the lent ones no frame
	// uses yet.
	txl        Lender
	txSpare    [][]byte
	txDry      bool          // the link lent no buffer when asked
	txBlocked  bool          // the last flush left frames the link had no room for
	txStuckAt  monotime.Time // since when the link has taken none (0: it takes)
	dbRung     atomic.Bool   // db is not empty, frames were handed over, or an inline step kicked
	quietPolls int           // empty inline polls since the last clock read
	waiter     ReadyWaiter   // the link's wait without reading (inline mode)
	// parkUntil is when the blocked loop wakes by itself (clock time).
	parkUntil atomic.Int64
}

// EngineStats counts what one engine of a device moved.
type EngineStats struct {
	// RxFrames is the frames read from the engine's link, TxFrames the
	// frames it handed to the link.
	RxFrames, TxFrames uint64
	// HandedOff is the frames that arrived on this engine's link for a
	// QP of another engine and were passed on; Adopted is the frames
	// this engine took from the others.
	HandedOff, Adopted uint64
	// HandoffFull is the frames dropped because the ring to their
	// engine was full.
	HandoffFull uint64
	// QPs is the number of QPs the engine owns.
	QPs int
}

func newEngine(d *Device, idx int, link Link, ops LinkOps, opts *Options, ipID uint16) *engine {
	e := &engine{d: d, idx: idx, link: link, ipID: ipID}
	rxb, txb := opts.RxBatch, opts.TxBatch
	if rxb <= 0 {
		rxb = 64
	}
	if txb <= 0 {
		txb = 64
	}
	frame := d.frameSize()
	if ops.Caps&linkcap.LendRx != 0 && ops.Waiter != nil {
		// The loop waits without taking frames, and its steps receive
		// them where the link keeps them: rx only points at them.
		e.lender = ops.Lender
	}
	if d.mode == EngineInline || e.lender != nil {
		e.waiter = ops.Waiter
	}
	e.rx = make([][]byte, rxb)
	if e.lender == nil {
		e.rxSizes = make([]int, rxb)
		for i := range e.rx {
			e.rx[i] = make([]byte, frame)
		}
	}
	e.tx = make([][]byte, txb)
	e.txView = make([][]byte, txb)
	e.txLen = make([]int, txb)
	if ops.Caps&linkcap.LendTx != 0 && ops.Lender.TxBufSize() >= frame {
		e.txl = ops.Lender
		e.txSpare = make([][]byte, 0, lendTxBatch)
	} else {
		for i := range e.tx {
			e.tx[i] = make([]byte, frame)
		}
	}
	e.pw = ops.WriteNow
	e.runq = make([]*QP, 0, 64)
	e.polled.Store(true)
	e.db = make([]*QP, 0, 64)
	e.dbSpare = make([]*QP, 0, 64)
	return e
}

// frameSize is the size of a frame buffer: the largest frame the link
// carries, with room for a VLAN tag.
func (d *Device) frameSize() int { return d.linkMTU + bth.EthernetLen + bth.VLANTagLen + 64 }

// handoffSlots is the capacity of the ring from one engine to another.
const handoffSlots = 256

// handoff is a single-producer, single-consumer ring of frames from one
// engine to another: the producer writes slot tail and then publishes
// tail+1; the consumer reads slot head and then releases head+1. The
// indices live on separate cache lines. A slot's buffer is allocated the
// first time the producer fills it, so rings that carry little stay
// small.
type handoff struct {
	head  atomic.Uint64 // next slot the consumer takes
	_     [56]byte
	tail  atomic.Uint64 // next slot the producer fills
	_     [56]byte
	frame int // size of a slot's buffer
	bufs  [][]byte
	lens  []int
}

func (e *engine) initInbox(n int) {
	e.inbox = make([]*handoff, n)
	for i := range e.inbox {
		if i == e.idx {
			continue
		}
		e.inbox[i] = &handoff{frame: e.d.frameSize(), bufs: make([][]byte, handoffSlots), lens: make([]int, handoffSlots)}
	}
}

// handOff copies frame into the ring from e to the engine to, or counts
// it dropped when the ring is full.
func (e *engine) handOff(to *engine, frame []byte) {
	h := to.inbox[e.idx]
	t := h.tail.Load()
	if t-h.head.Load() == handoffSlots || len(frame) > h.frame {
		e.st.HandoffFull++
		return
	}
	i := t % handoffSlots
	if h.bufs[i] == nil {
		h.bufs[i] = make([]byte, h.frame)
	}
	h.lens[i] = copy(h.bufs[i], frame)
	h.tail.Store(t + 1)
	e.st.HandedOff++
	e.handed |= 1 << uint(to.idx)
}

// wakeHanded wakes the engines this step handed frames to.
func (e *engine) wakeHanded() {
	for m := e.handed; m != 0; m &= m - 1 {
		to := e.d.eng[bitIndex(m)]
		to.dbRung.Store(true)
		to.kick()
	}
	e.handed = 0
}

// bitIndex returns the index of the lowest set bit of m (not zero).
func bitIndex(m uint64) int {
	i := 0
	for m&1 == 0 {
		m >>= 1
		i++
	}
	return i
}

// handoffBudget bounds the frames an engine takes from one other engine
// in one step.
const handoffBudget = 64

// adopt receives the frames other engines handed over; it reports whether
// there were any, and whether frames remain.
func (e *engine) adopt(now monotime.Time) (did, more bool) {
	for _, h := range e.inbox {
		if h == nil {
			continue
		}
		hd, t := h.head.Load(), h.tail.Load()
		n := min(t-hd, handoffBudget)
		for k := uint64(0); k < n; k++ {
			i := (hd + k) % handoffSlots
			e.deliver(now, h.bufs[i][:h.lens[i]])
		}
		h.head.Store(hd + n)
		e.st.Adopted += n
		did = did || n > 0
		more = more || t-hd > n
	}
	return did, more
}

// inboxReady reports whether another engine handed frames over.
func (e *engine) inboxReady() bool {
	if e.hostIn.n.Load() > 0 {
		return true
	}
	for _, h := range e.inbox {
		if h != nil && h.tail.Load() != h.head.Load() {
			return true
		}
	}
	return false
}

// deliver gives a frame another engine checked to the QP it addresses.
func (e *engine) deliver(now monotime.Time, frame []byte) {
	p := &e.pkt
	if err := p.Parse(frame); err != nil {
		e.cnt[verbs.CntMalformed]++
		return
	}
	if p.BTH().DestQP() == bth.MulticastQPN {
		e.receiveMcast(now, frame, p, true)
		return
	}
	q := e.d.lookupQP(p.BTH().DestQP())
	if q == nil || q.eng != e {
		// Destroyed since: its number may be another engine's QP now.
		e.cnt[verbs.CntUnknownQPN]++
		return
	}
	e.deliverTo(now, q, p)
}

// Engines returns the number of engines (links) of the device.
func (d *Device) Engines() int { return len(d.eng) }

// EngineStats returns what each engine moved, by engine.
func (d *Device) EngineStats() []EngineStats {
	out := make([]EngineStats, len(d.eng))
	for i, e := range d.eng {
		e.mu.Lock()
		out[i] = e.st
		e.mu.Unlock()
	}
	for _, q := range d.liveQPs() {
		out[q.eng.idx].QPs++
	}
	return out
}

// Engine returns the index of the engine that runs the QP.
func (q *QP) Engine() int { return q.eng.idx }

// engineFor picks the engine of a new QP: its SRQ's (one engine consumes
// a shared receive queue), else by QP number.
func (d *Device) engineFor(qpn bth.QPN, srq *SRQ) *engine {
	if srq != nil {
		return srq.eng
	}
	return d.eng[int(qpn)%len(d.eng)]
}

// maxIdle bounds the loop's sleep when no timer is due.
const maxIdle = 100 * time.Millisecond

// yieldSpins is how many empty polls in a row a spinning loop makes
// between two yields of its processor.
const yieldSpins = 64

// YieldCPU gives the calling thread's CPU to another runnable thread, if
// one waits for it (sched_yield returns at once otherwise). A program
// that polls a CQ beside spinning loops calls it between polls, as the
// loops do.
func YieldCPU() { syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }

// run is one engine's loop in real time (see Device.Run).
func (e *engine) run(ctx context.Context) error {
	d := e.d
	if !e.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer e.running.Store(false)
	var stopping atomic.Bool
	stop := context.AfterFunc(ctx, func() {
		stopping.Store(true)
		e.link.Wake()
	})
	defer stop()
	n := 0
	idleSpins := 0
	last := d.clock.Now()
	for {
		if stopping.Load() {
			return nil
		}
		now := d.clock.Now()
		e.mu.Lock()
		if d.closed.Load() {
			e.mu.Unlock()
			return nil
		}
		// Frames an inline post held back wait for their due time, as
		// they would had the posting goroutine kept the lock.
		hold := holdNone
		if e.txDue != 0 && now < e.txDue {
			hold = holdBatch
		}
		busy, _ := e.step(now, n, hold)
		dl, ok := e.nextDeadline()
		if e.txDue != 0 && (!ok || e.txDue < dl) {
			dl, ok = e.txDue, true
		}
		blocked := e.txBlocked
		e.mu.Unlock()
		wait := time.Duration(0)
		if busy && blocked {
			// Only room in the link would let the step go on: wait for
			// it (a frame's arrival or a doorbell ends the wait early)
			// instead of spinning on the lock.
			last, wait = now, txBackoff
		} else if busy {
			last = now
			idleSpins = 0
		} else if !e.spins(now, last) {
			wait = maxIdle
			if ok {
				wait = min(wait, max(dl.Sub(d.clock.Now()), 0))
			}
		} else if idleSpins++; idleSpins%yieldSpins == 0 {
			// A spinning loop holds its processor (a P of the Go
			// runtime) until the runtime takes it away, every 10 ms:
			// where the spinners outnumber GOMAXPROCS (two devices and
			// their applications on two), the goroutine that has work
			// waits for that. Yielding now and then hands the
			// processor over at once; with one to spare it returns at
			// once. The loop is not locked to its OS thread: a locked
			// goroutine's yield hands the processor to another thread
			// and back, two thread wake-ups each time. (Measured on
			// two CPUs, BenchmarkSroce send-lat: spin 34 ms round
			// trips locked without yields, 506 us locked with them,
			// 99 us unlocked; adaptive 7 ms, 1.4 ms, 315 us.)
			runtime.Gosched()
			// The same between processes: another program's thread
			// (the peer's engine, an application woken from a wait)
			// gets this CPU at once rather than at the end of the
			// time slice. (Two CPUs, spin, BenchmarkShimTable: the
			// real ib_send_lat through two daemons 4.6 ms typical
			// without, 81 to 94 us with; ib_write_bw 8 B 18 k msg/s
			// without, 255 to 272 k with. Yielding the CPU every 1,024
			// empty polls instead: 803 us and 83 k.)
			YieldCPU()
		}
		if wait > 0 {
			e.parkUntil.Store(int64(now.Add(wait)))
			e.parked.Store(true)
			if e.dbRung.Load() {
				wait = 0
			}
		}
		var err error
		if e.waiter != nil {
			// Inline: wait without taking frames; the goroutine that holds
			// the lock next reads them.
			n = 0
			if wait > 0 {
				err = e.waiter.WaitReady(wait)
			}
		} else {
			n, err = e.link.ReadBatch(e.rx, e.rxSizes, wait)
		}
		e.parked.Store(false)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			// The link is gone: the port is down for good, counted and
			// reported once, and its connections fail.
			d.linkFailed()
			return err
		}
	}
}
