// Live tracing: a device reports what its engine does (work requests
// posted, frames sent and received, timers, retransmissions, completions,
// QP state changes) to whoever subscribes. Nobody subscribed costs one
// atomic load (Device.tracing) at each place that would report. Events go
// into each subscription's bounded buffer under short locks; a full buffer
// drops the event and counts it, so the engine never waits for a
// subscriber. Subscriptions may be closed at any time, from any goroutine;
// closing the device ends them all.

package roce

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/monotime"
	"github.com/sroce/sroce/qp"
	"github.com/sroce/sroce/verbs"
)

// TraceKind says what a TraceEvent reports.
type TraceKind uint8

// Trace event kinds.
const (
	// TracePostSend: a send work request was posted (QPN, WRID,
	// WROpcode, Length); for a QP whose send queue is a client's ring
	// (AttachSendRing), reported when the engine takes the request.
	TracePostSend TraceKind = iota + 1
	// TracePostRecv: a receive work request was posted (QPN, WRID,
	// Length: the room of its scatter list).
	TracePostRecv
	// TraceTx: the device handed a frame to the link (Frame, FrameLen);
	// Dropped when the device's Impairment dropped it instead.
	TraceTx
	// TraceRx: the device read a frame from the link (Frame, FrameLen).
	TraceRx
	// TraceTimerArmed: a QP timer (Timer) was set to fire at Deadline.
	TraceTimerArmed
	// TraceTimerFired: a QP timer (Timer) expired.
	TraceTimerFired
	// TraceTimerStopped: the retransmit timer stopped because everything
	// sent was acknowledged.
	TraceTimerStopped
	// TraceRetransmit: a requester went back to PSN to send again, for
	// Reason.
	TraceRetransmit
	// TraceCompletion: a completion was written to a CQ (QPN, WRID,
	// WCOpcode, Status, Length: the byte count of a receive).
	TraceCompletion
	// TraceQPState: a QP moved from FromState to ToState.
	TraceQPState
	// TraceLost: Lost events were dropped here because the subscriber
	// did not take them fast enough.
	TraceLost
)

var traceKindNames = [...]string{"", "post_send", "post_recv", "tx", "rx", "timer_armed", "timer_fired",
	"timer_stopped", "retransmit", "completion", "qp_state", "lost"}

// String returns the kind's name: "post_send", "tx", "completion", ...
func (k TraceKind) String() string {
	if k > 0 && int(k) < len(traceKindNames) {
		return traceKindNames[k]
	}
	return "unknown"
}

// TraceEvent is one thing the engine did. Which fields are set depends on
// Kind.
type TraceEvent struct {
	Kind TraceKind
	// Time is the device clock's reading (Device.Clock) when it happened.
	Time monotime.Time
	QPN  bth.QPN
	WRID uint64
	// WROpcode is the posted request's opcode (TracePostSend).
	WROpcode verbs.WROpcode
	// WCOpcode and Status describe a completion.
	WCOpcode verbs.WCOpcode
	Status   verbs.WCStatus
	// Length is the message length of a post or a receive completion.
	Length uint32
	// Timer and Deadline: which timer, and when an armed one fires.
	Timer    qp.Timer
	Deadline monotime.Time
	// Reason and PSN: why a retransmission happens and the PSN it
	// starts from.
	Reason qp.RetryReason
	PSN    bth.PSN
	// FromState and ToState: a QP state change.
	FromState, ToState verbs.QPState
	// Frame is the frame of TraceTx and TraceRx, cut to the
	// subscription's SnapLen; FrameLen is its whole length. Frame is
	// shared between subscribers: read it, never change it.
	Frame    []byte
	FrameLen int
	// Dropped marks a TraceTx frame the device's Impairment dropped.
	Dropped bool
	// Lost is the number of events dropped (TraceLost).
	Lost uint64
}

// Trace buffer defaults and limits (TraceOptions).
const (
	DefaultTraceEvents = 4096
	DefaultTraceBytes  = 4 << 20
	// MaxTraceSnap is the largest frame a trace carries whole: a 9000-byte
	// MTU plus Ethernet and VLAN headers.
	MaxTraceSnap = 9216
)

// TraceOptions sizes a subscription (Device.Subscribe). Zero values take
// the defaults.
type TraceOptions struct {
	// Events bounds the events waiting to be taken (DefaultTraceEvents).
	Events int
	// Bytes bounds the frame bytes waiting to be taken
	// (DefaultTraceBytes).
	Bytes int
	// SnapLen cuts frames to this many bytes (MaxTraceSnap, which keeps
	// every frame whole).
	SnapLen int
}

// ErrTraceClosed is returned by Subscription.Next once the subscription
// was closed and its events were taken.
var ErrTraceClosed = errors.New("roce: trace subscription closed")

// tracer is the device's list of subscriptions.
type tracer struct {
	mu     sync.Mutex
	subs   []*Subscription
	closed bool // the device closed: no more subscriptions
}

// Subscription receives a device's trace events (Device.Subscribe).
type Subscription struct {
	dev     *Device
	snap    int
	maxEv   int
	maxB    int
	clock0  monotime.Time
	wall0   time.Time
	wake    chan struct{}
	mu      sync.Mutex
	ring    []TraceEvent
	head, n int
	bytes   int
	lost    uint64        // dropped since the last event buffered
	lastT   monotime.Time // time of the last event dropped
	dropped uint64        // dropped in all
	closed  bool
	devGone bool
}

// Subscribe starts receiving the device's trace events. The engine never
// waits for the subscriber: when its buffer is full, events are dropped,
// counted (Dropped) and reported in place as a TraceLost event. Close the
// subscription when done; closing the device closes it too.
func (d *Device) Subscribe(o *TraceOptions) (*Subscription, error) {
	s := &Subscription{dev: d, snap: MaxTraceSnap, maxEv: DefaultTraceEvents, maxB: DefaultTraceBytes,
		wake: make(chan struct{}, 1)}
	if o != nil {
		if o.Events > 0 {
			s.maxEv = o.Events
		}
		if o.Bytes > 0 {
			s.maxB = o.Bytes
		}
		if o.SnapLen > 0 && o.SnapLen < MaxTraceSnap {
			s.snap = o.SnapLen
		}
	}
	s.ring = make([]TraceEvent, s.maxEv)
	s.clock0, s.wall0 = d.clock.Now(), time.Now()
	d.tr.mu.Lock()
	if d.tr.closed {
		d.tr.mu.Unlock()
		return nil, ErrClosed
	}
	d.tr.subs = append(d.tr.subs, s)
	d.tracing.Store(true)
	d.tr.mu.Unlock()
	return s, nil
}

// Wall converts a device clock reading of this subscription's events to
// wall-clock time.
func (s *Subscription) Wall(t monotime.Time) time.Time { return s.wall0.Add(t.Sub(s.clock0)) }

// Dropped returns how many events were dropped because the buffer was
// full.
func (s *Subscription) Dropped() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dropped
}

// DeviceClosed reports whether the subscription ended because its device
// closed.
func (s *Subscription) DeviceClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.devGone
}

// Close detaches the subscription; events still buffered can be taken
// with Next until it returns ErrTraceClosed. It may be called more than
// once, from any goroutine.
func (s *Subscription) Close() {
	s.dev.detach(s)
	s.end(false)
}

// end marks the subscription closed.
func (s *Subscription) end(devGone bool) {
	s.mu.Lock()
	if !s.closed {
		s.closed, s.devGone = true, devGone
	}
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// detach removes s from the device's list.
func (d *Device) detach(s *Subscription) {
	d.tr.mu.Lock()
	for i, x := range d.tr.subs {
		if x == s {
			d.tr.subs = append(d.tr.subs[:i], d.tr.subs[i+1:]...)
			break
		}
	}
	d.tracing.Store(len(d.tr.subs) > 0)
	d.tr.mu.Unlock()
}

// closeTraces ends every subscription when the device closes.
func (d *Device) closeTraces() {
	d.tr.mu.Lock()
	subs := d.tr.subs
	d.tr.subs = nil
	d.tr.closed = true
	d.tracing.Store(false)
	d.tr.mu.Unlock()
	for _, s := range subs {
		s.end(true)
	}
}

// Poll takes the next event without waiting.
func (s *Subscription) Poll() (TraceEvent, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.take()
}

// take pops an event; a lost-events mark before it comes out first.
func (s *Subscription) take() (TraceEvent, bool) {
	if s.n == 0 {
		if s.lost > 0 {
			ev := TraceEvent{Kind: TraceLost, Lost: s.lost, Time: s.lastT}
			s.lost = 0
			return ev, true
		}
		return TraceEvent{}, false
	}
	e := &s.ring[s.head]
	if e.Lost > 0 && e.Kind != TraceLost {
		ev := TraceEvent{Kind: TraceLost, Lost: e.Lost, Time: e.Time}
		e.Lost = 0
		return ev, true
	}
	ev := *e
	*e = TraceEvent{}
	s.head = (s.head + 1) % len(s.ring)
	s.n--
	s.bytes -= len(ev.Frame)
	return ev, true
}

// Next waits for the next event, at most until ctx is done. After Close
// (or the device's) it returns what was buffered, then ErrTraceClosed.
func (s *Subscription) Next(ctx context.Context) (TraceEvent, error) {
	for {
		s.mu.Lock()
		ev, ok := s.take()
		closed := s.closed
		s.mu.Unlock()
		if ok {
			return ev, nil
		}
		if closed {
			return TraceEvent{}, ErrTraceClosed
		}
		select {
		case <-s.wake:
		case <-ctx.Done():
			return TraceEvent{}, ctx.Err()
		}
	}
}

// push buffers ev (its Frame already copied) or counts it lost.
func (s *Subscription) push(ev *TraceEvent) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	if s.n == len(s.ring) || s.bytes+len(ev.Frame) > s.maxB {
		s.lost++
		s.dropped++
		s.lastT = ev.Time
		s.mu.Unlock()
		return
	}
	i := (s.head + s.n) % len(s.ring)
	s.ring[i] = *ev
	s.ring[i].Lost = s.lost
	s.lost = 0
	s.n++
	s.bytes += len(ev.Frame)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// emit gives ev to every subscriber; callers checked d.tracing. frame, if
// not nil, is copied once, cut to the largest snap length asked for.
func (d *Device) emit(ev *TraceEvent, frame []byte) {
	d.tr.mu.Lock()
	defer d.tr.mu.Unlock()
	if frame != nil {
		snap := 0
		for _, s := range d.tr.subs {
			snap = max(snap, s.snap)
		}
		ev.FrameLen = len(frame)
		ev.Frame = append([]byte(nil), frame[:min(len(frame), snap)]...)
	}
	full := ev.Frame
	for _, s := range d.tr.subs {
		if len(full) > s.snap {
			ev.Frame = full[:s.snap]
		} else {
			ev.Frame = full
		}
		s.push(ev)
	}
}

// traceFrame reports a frame sent or received.
func (d *Device) traceFrame(k TraceKind, frame []byte, t monotime.Time, dropped bool) {
	ev := TraceEvent{Kind: k, Time: t, Dropped: dropped}
	d.emit(&ev, frame)
}

// tracePost reports a send request posted at t.
func (q *QP) tracePost(wr *verbs.SendWR, t monotime.Time) {
	ev := TraceEvent{Kind: TracePostSend, Time: t, QPN: q.qp.QPN(), WRID: wr.WRID,
		WROpcode: wr.Opcode, Length: sendLength(wr)}
	q.dev.emit(&ev, nil)
}

// traceRecv reports a posted receive request.
func (q *QP) traceRecv(wr *verbs.RecvWR) {
	var n uint64
	for i := range wr.SGL {
		n += uint64(wr.SGL[i].Length)
	}
	ev := TraceEvent{Kind: TracePostRecv, Time: q.dev.clock.Now(), QPN: q.qp.QPN(), WRID: wr.WRID,
		Length: uint32(min(n, 1<<32-1))}
	q.dev.emit(&ev, nil)
}

// sendLength is a send request's message length.
func sendLength(wr *verbs.SendWR) uint32 {
	if wr.Flags&verbs.Inline != 0 && wr.InlineData != nil {
		return uint32(len(wr.InlineData))
	}
	var n uint64
	for i := range wr.SGL {
		n += uint64(wr.SGL[i].Length)
	}
	return uint32(min(n, 1<<32-1))
}

// traceCompletion reports a completion written to a CQ.
func (d *Device) traceCompletion(wc *verbs.WC) {
	ev := TraceEvent{Kind: TraceCompletion, Time: d.clock.Now(), QPN: wc.QPNum, WRID: wc.WRID,
		WCOpcode: wc.Opcode, Status: wc.Status, Length: wc.ByteLen}
	d.emit(&ev, nil)
}

// QPTrace implements qp.Tracer: the QP's timers, retries and states.
func (e *env) QPTrace(q *qp.QP, t *qp.Trace) {
	d := e.d
	ev := TraceEvent{Time: d.clock.Now(), QPN: q.QPN(), Timer: t.Timer}
	switch t.Kind {
	case qp.TraceTimerArmed:
		ev.Kind, ev.Deadline = TraceTimerArmed, t.At
	case qp.TraceTimerFired:
		ev.Kind = TraceTimerFired
	case qp.TraceTimerStopped:
		ev.Kind = TraceTimerStopped
	case qp.TraceRetry:
		ev.Kind, ev.Reason, ev.PSN = TraceRetransmit, t.Reason, t.PSN
	case qp.TraceState:
		ev.Kind, ev.FromState, ev.ToState = TraceQPState, t.From, t.To
	case qp.TracePosted:
		ev.Kind, ev.WRID, ev.WROpcode, ev.Length = TracePostSend, t.WRID, t.Opcode, t.Length
	default:
		return
	}
	d.emit(&ev, nil)
}

// Impairment makes a device drop frames it would transmit, on purpose:
// loss for demonstrations and tests on hosts without netem. The drops are
// decided by a generator seeded with Seed, so the same traffic loses the
// same frames.
type Impairment struct {
	// Loss is the share of frames dropped, in percent (0 to 100).
	Loss float64
	// Seed seeds the choice of frames.
	Seed uint64
}

// impairState is an active Impairment.
type impairState struct {
	loss float64 // share in [0, 1]
	rng  *rand.Rand
}

// drop decides the fate of the next frame.
func (im *impairState) drop() bool { return im.rng.Float64() < im.loss }

// SetImpairment makes the device drop frames it transmits as im says; a
// zero Loss removes the impairment. Dropped frames still count as sent
// (the QPs sent them); Impaired tells how many were dropped.
func (d *Device) SetImpairment(im Impairment) error {
	if !(im.Loss >= 0 && im.Loss <= 100) {
		return ErrInvalid
	}
	for i, e := range d.eng {
		e.mu.Lock()
		e.impair = nil
		if im.Loss != 0 {
			// Engine 0 draws from the seed itself, so that a one-engine
			// device loses the same frames whatever the engine count.
			seed := im.Seed + uint64(i)*0x9e3779b97f4a7c15
			e.impair = &impairState{loss: im.Loss / 100, rng: rand.New(rand.NewPCG(seed, seed^0x5eed))}
		}
		e.mu.Unlock()
	}
	return nil
}

// Impaired returns how many frames the Impairment dropped.
func (d *Device) Impaired() uint64 {
	var n uint64
	for _, e := range d.eng {
		e.mu.Lock()
		n += e.impairDropped
		e.mu.Unlock()
	}
	return n
}
