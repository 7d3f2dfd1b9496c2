// Completion queues: the device's engines append completions (push) under
// the CQ's push lock, which makes them the ring's one producer at a time
// (QPs of several engines may share a CQ); an
// application goroutine polls them, consumers being serialized by the
// CQ's poll lock. The completions live in a ring of plain CQE entries
// (package ring), memory that can later be shared with a client process;
// polling never waits for the loop. Resizing holds both locks while it
// moves the waiting completions to a new ring and swaps it in.

package roce

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sroce/sroce/ring"
	"github.com/sroce/sroce/verbs"
)

// CQ is a completion queue (struct ibv_cq). The device's engines append
// completions; any goroutine polls them. A CQ that overflows loses the
// completions that did not fit, reports an EventCQErr asynchronous event,
// and the QPs whose completions were lost move to the error state.
type CQ struct {
	dev *Device

	ring       *ring.Ring[ring.CQE] // produced under pushMu, consumed under pollMu; Resize holds both
	pushMu     sync.Mutex
	pollMu     sync.Mutex
	overflowed atomic.Bool
	armed      *atomic.Uint32 // armNone, armNext, armSolicited: armOwn, or shared memory; replaced under pushMu
	armOwn     atomic.Uint32
	notify     func() // SharedCQ.Notify: called instead of posting to ch
	shared     bool   // made by CreateSharedCQ: another process consumes the ring
	ch         *CompChannel
	nqp        int // QPs using the CQ (under the device lock)
	dead       bool
	wake       chan struct{}
	Context    any // free for the application
}

const (
	armNone uint32 = iota
	armNext
	armSolicited
)

// CreateCQ creates a completion queue that holds cqe completions
// (ibv_create_cq). ch, if not nil, receives an event each time the CQ is
// armed with ReqNotify and a completion arrives.
func (d *Device) CreateCQ(cqe int, ch *CompChannel) (*CQ, error) {
	if cqe < 1 || cqe > MaxCQE {
		return nil, ErrInvalid
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed.Load() {
		return nil, ErrClosed
	}
	r, err := ring.New[ring.CQE](ring.KindCQ, uint32(cqe), ring.Stride[ring.CQE](0))
	if err != nil {
		return nil, err
	}
	c := &CQ{dev: d, ring: r, ch: ch, wake: make(chan struct{}, 1)}
	c.armed = &c.armOwn
	return c, nil
}

// SharedCQ is the memory of a CQ that another process consumes (the
// daemon's clients): its ring, laid out as package ring says, and its arm
// word, both in memory shared with the consumer.
type SharedCQ struct {
	// Ring is the memory of the CQE ring, which CreateSharedCQ
	// initializes; the consumer attaches to it and releases entries.
	Ring []byte
	// Arm is the arm word: the consumer stores 1 (next completion) or 2
	// (next solicited or failed one), the device clears it when it
	// notifies.
	Arm *atomic.Uint32
	// Notify is called, on the loop of the engine that completed,
	// when a completion arrives on an armed CQ. It must not block.
	Notify func()
}

// CreateSharedCQ creates a CQ of cqe entries whose ring lives in m.Ring:
// the device loop writes completions straight into memory another process
// polls, with no copy and no wake-up of a goroutine in between. Poll and
// Wait must not be used on it (the other process consumes the ring).
func (d *Device) CreateSharedCQ(cqe int, m SharedCQ) (*CQ, error) {
	if cqe < 1 || cqe > MaxCQE || m.Arm == nil {
		return nil, ErrInvalid
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed.Load() {
		return nil, ErrClosed
	}
	r, err := ring.Init[ring.CQE](m.Ring, ring.KindCQ, uint32(cqe), ring.Stride[ring.CQE](0))
	if err != nil {
		return nil, err
	}
	return &CQ{dev: d, ring: r, armed: m.Arm, notify: m.Notify, shared: true, wake: make(chan struct{}, 1)}, nil
}

// Inject appends a completion the caller made: a work request that never
// reached a QP (a daemon refusing a malformed WQE from its ring completes
// it with an error this way). It reports false if the CQ is full.
func (c *CQ) Inject(wc *verbs.WC) bool {
	if c.dev.destroyed(&c.dead) {
		return false
	}
	return c.push(wc, true)
}

// destroyed reads an object's dead flag, which the device lock guards.
func (d *Device) destroyed(dead *bool) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return *dead
}

// Cqe returns the capacity of the CQ.
func (c *CQ) Cqe() int {
	c.pushMu.Lock()
	defer c.pushMu.Unlock()
	return int(c.ring.Limit())
}

// ErrRingCorrupt reports a shared CQ ring whose consumer index, which the
// other process owns, says more completions wait than the ring holds.
var ErrRingCorrupt = errors.New("roce: the consumer index of a shared CQ ring is out of range")

// Resize changes the capacity of the CQ to cqe completions
// (ibv_resize_cq), keeping the completions not yet polled, in order.
// Completions the engines produce meanwhile wait for the new ring. It
// fails with ErrInvalid if cqe is out of range or smaller than the number
// of completions waiting (as rdma_rxe does), and with ErrDestroyed after
// Destroy. A CQ made by CreateSharedCQ is resized with ResizeShared.
func (c *CQ) Resize(cqe int) error {
	if c.shared || cqe < 1 || cqe > MaxCQE {
		return ErrInvalid
	}
	r, err := ring.New[ring.CQE](ring.KindCQ, uint32(cqe), ring.Stride[ring.CQE](0))
	if err != nil {
		return err
	}
	c.pollMu.Lock()
	defer c.pollMu.Unlock()
	return c.swapRing(r, nil)
}

// ResizeShared is Resize for a CQ made by CreateSharedCQ: m.Ring is the
// memory of the new ring, which ResizeShared initializes, and m.Arm the
// new arm word, which takes the old one's value (m.Notify is not used; the
// CQ keeps its own). The consumer must not poll meanwhile: the completions
// from the old ring's consumer index on move to the new ring, which the
// consumer then polls from its start. It fails as Resize does, and with
// ErrRingCorrupt if the old ring's consumer index is out of range.
func (c *CQ) ResizeShared(cqe int, m SharedCQ) error {
	if !c.shared || m.Arm == nil || cqe < 1 || cqe > MaxCQE {
		return ErrInvalid
	}
	r, err := ring.Init[ring.CQE](m.Ring, ring.KindCQ, uint32(cqe), ring.Stride[ring.CQE](0))
	if err != nil {
		return err
	}
	return c.swapRing(r, m.Arm)
}

// swapRing moves the waiting completions to r and makes r the CQ's ring
// and arm (unless nil) the CQ's arm word, under the push lock (the caller
// keeps the consumer away).
func (c *CQ) swapRing(r *ring.Ring[ring.CQE], arm *atomic.Uint32) error {
	if c.dev.destroyed(&c.dead) {
		return ErrDestroyed
	}
	c.pushMu.Lock()
	defer c.pushMu.Unlock()
	old := c.ring
	// The consumer index of a shared ring is the other process's to
	// write: it is loaded once and checked against the producer index
	// the CQ keeps itself.
	cons := old.Cons()
	n := old.Produced() - cons
	if n > old.Limit() {
		return ErrRingCorrupt
	}
	if !old.CopyTo(r, cons, n) {
		return ErrInvalid // more completions wait than cqe
	}
	if arm != nil {
		arm.Store(c.armed.Load())
		c.armed = arm
	}
	c.ring = r
	return nil
}

// cqSink is a CQ as the QPs of the loop see it: it implements qp.CQ on an
// unexported type, so pushing completions is not part of the verbs API.
type cqSink CQ

func (s *cqSink) Push(wc verbs.WC, solicited bool) bool { return (*CQ)(s).push(&wc, solicited) }

// push appends a completion from an engine; it reports false when the CQ
// is full (the completion is lost and the CQ is in error).
func (c *CQ) push(wc *verbs.WC, solicited bool) bool {
	c.pushMu.Lock()
	e := c.ring.Next()
	if e == nil {
		c.pushMu.Unlock()
		if c.overflowed.CompareAndSwap(false, true) {
			c.dev.events.post(AsyncEvent{Type: verbs.EventCQErr, CQ: c})
		}
		return false
	}
	e.SetWC(wc)
	c.ring.Publish()
	// The arm word is disarmed under the push lock: Resize moves it. A
	// shared CQ's arm word is the consumer's to write too: each try
	// loads it once, and a consumer that keeps changing it under the
	// compare-and-swap gets no event rather than holding the engine
	// (a well-behaved one changes it once: it arms).
	notify := false
	for try := 0; try < 4; try++ {
		a := c.armed.Load()
		if !(a == armNext || (a == armSolicited && (solicited || wc.Status != verbs.WCSuccess))) {
			break
		}
		if c.armed.CompareAndSwap(a, armNone) {
			notify = true
			break
		}
	}
	c.pushMu.Unlock()
	if c.dev.tracing.Load() {
		c.dev.traceCompletion(wc)
	}
	select {
	case c.wake <- struct{}{}:
	default:
	}
	switch {
	case notify && c.notify != nil:
		c.notify()
	case notify && c.ch != nil:
		c.ch.post(c)
	}
	return true
}

// Poll moves up to len(wcs) completions into wcs and returns how many
// (ibv_poll_cq). It never blocks. On an inline device an empty CQ runs a
// step of the loop first (Device.Progress).
func (c *CQ) Poll(wcs []verbs.WC) int {
	if c.dev.mode != EngineInline {
		return c.poll(wcs)
	}
	for _, e := range c.dev.eng {
		e.polled.Store(true)
	}
	if k := c.poll(wcs); k > 0 {
		return k
	}
	if !c.dev.Progress() {
		return 0
	}
	return c.poll(wcs)
}

func (c *CQ) poll(wcs []verbs.WC) int {
	c.pollMu.Lock()
	k := min(uint32(len(wcs)), c.ring.Ready())
	cons := c.ring.Cons()
	for i := uint32(0); i < k; i++ {
		c.ring.At(cons + i).WC(&wcs[i])
	}
	c.ring.Release(k)
	c.pollMu.Unlock()
	return int(k)
}

// Len returns the number of completions waiting.
func (c *CQ) Len() int {
	c.pushMu.Lock()
	defer c.pushMu.Unlock()
	n := c.ring.Produced() - c.ring.Cons() // a shared ring's consumer index is loaded once
	return int(min(n, c.ring.Limit()))
}

// Overflowed reports whether completions were lost because the CQ was
// full.
func (c *CQ) Overflowed() bool { return c.overflowed.Load() }

// Wait blocks until at least one completion is available or ctx is done,
// then polls like Poll. It needs the device loop running (Run or Start).
func (c *CQ) Wait(ctx context.Context, wcs []verbs.WC) (int, error) {
	for {
		if n := c.Poll(wcs); n > 0 {
			return n, nil
		}
		select {
		case <-c.wake:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// WaitTimeout is Wait with a timeout instead of a context; it returns 0
// and context.DeadlineExceeded when nothing arrived in time.
func (c *CQ) WaitTimeout(wcs []verbs.WC, timeout time.Duration) (int, error) {
	if n := c.Poll(wcs); n > 0 {
		return n, nil
	}
	t := timerPool.Get().(*time.Timer)
	t.Reset(timeout)
	defer func() {
		t.Stop()
		timerPool.Put(t)
	}()
	for {
		select {
		case <-c.wake:
		case <-t.C:
			return c.Poll(wcs), context.DeadlineExceeded
		}
		if n := c.Poll(wcs); n > 0 {
			return n, nil
		}
	}
}

// timerPool recycles the timers of WaitTimeout.
var timerPool = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}}

// ReqNotify arms the CQ (ibv_req_notify_cq): the next completion, or with
// solicitedOnly the next solicited or failed completion, posts an event to
// the CQ's completion channel.
func (c *CQ) ReqNotify(solicitedOnly bool) error {
	if c.ch == nil && c.notify == nil {
		return ErrInvalid
	}
	if c.shared {
		// ResizeShared may move the arm word to new memory meanwhile.
		c.pushMu.Lock()
		defer c.pushMu.Unlock()
	}
	if solicitedOnly {
		// Arming for solicited completions leaves an armNext in place.
		c.armed.CompareAndSwap(armNone, armSolicited)
	} else {
		c.armed.Store(armNext)
	}
	return nil
}

// Destroy destroys the CQ (ibv_destroy_cq). It fails with ErrBusy while
// QPs use it.
func (c *CQ) Destroy() error {
	d := c.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	if c.dead {
		return ErrDestroyed
	}
	if c.nqp > 0 {
		return ErrBusy
	}
	c.dead = true
	return nil
}

// CompChannel delivers CQ events (struct ibv_comp_channel).
type CompChannel struct {
	mu     sync.Mutex
	q      []*CQ
	wake   chan struct{}
	unack  map[*CQ]int
	closed bool
}

// CreateCompChannel creates a completion channel (ibv_create_comp_channel).
func (d *Device) CreateCompChannel() *CompChannel {
	return &CompChannel{wake: make(chan struct{}, 1), unack: make(map[*CQ]int)}
}

func (ch *CompChannel) post(c *CQ) {
	ch.mu.Lock()
	ch.q = append(ch.q, c)
	ch.mu.Unlock()
	select {
	case ch.wake <- struct{}{}:
	default:
	}
}

// GetEvent waits for the next CQ event (ibv_get_cq_event) and returns the
// CQ. Each event must eventually be acknowledged with AckEvents.
func (ch *CompChannel) GetEvent(ctx context.Context) (*CQ, error) {
	for {
		ch.mu.Lock()
		if len(ch.q) > 0 {
			c := ch.q[0]
			ch.q = ch.q[1:]
			ch.unack[c]++
			ch.mu.Unlock()
			return c, nil
		}
		ch.mu.Unlock()
		select {
		case <-ch.wake:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// AckEvents acknowledges n events of c (ibv_ack_cq_events).
func (ch *CompChannel) AckEvents(c *CQ, n int) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.unack[c] -= n; ch.unack[c] <= 0 {
		delete(ch.unack, c)
	}
}
