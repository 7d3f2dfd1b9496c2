// Tracing: what the QP's timers and retries do, told to a Tracer for live
// traces. The QP does no I/O for it: it calls the Tracer (the device) on
// the loop goroutine, and only while Config.Tracing says someone listens,
// so an untraced QP pays one atomic load where it would report.

package qp

import (
	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/monotime"
	"github.com/sroce/sroce/verbs"
)

// TraceKind says what a Trace reports.
type TraceKind uint8

// Trace kinds.
const (
	// TraceTimerArmed: a timer was set to fire at Trace.At.
	TraceTimerArmed TraceKind = iota + 1
	// TraceTimerFired: a timer expired.
	TraceTimerFired
	// TraceTimerStopped: the retransmit timer was stopped because
	// everything sent was acknowledged.
	TraceTimerStopped
	// TraceRetry: the requester went back to Trace.PSN to send again,
	// for Trace.Reason.
	TraceRetry
	// TraceState: the QP moved from Trace.From to Trace.To.
	TraceState
	// TracePosted: the loop took a send request another process posted
	// on an attached ring (AttachSendRing): Trace.WRID, Opcode, Length.
	// (The in-process poster reports its own posts.)
	TracePosted
)

// Timer names a QP timer.
type Timer uint8

// The QP's timers.
const (
	// TimerRetransmit fires when the oldest unacknowledged request got no
	// acknowledgement within the QP's timeout.
	TimerRetransmit Timer = iota + 1
	// TimerRNR ends the wait an RNR NAK asked for.
	TimerRNR
)

// String returns "retransmit" or "RNR".
func (t Timer) String() string {
	switch t {
	case TimerRetransmit:
		return "retransmit"
	case TimerRNR:
		return "RNR"
	}
	return "unknown"
}

// RetryReason says why the requester sends packets again.
type RetryReason uint8

// Retry reasons.
const (
	// RetryTimeout: the retransmit timer expired.
	RetryTimeout RetryReason = iota + 1
	// RetrySeqNAK: the responder sent a PSN sequence error NAK.
	RetrySeqNAK
	// RetryRNR: the responder had no receive posted (RNR NAK).
	RetryRNR
	// RetryImpliedNAK: a response to a later request arrived before the
	// response of a READ or atomic request, whose response was lost.
	RetryImpliedNAK
)

// String returns the reason in a few words: "timeout", "sequence NAK",
// "RNR NAK", "implied NAK".
func (r RetryReason) String() string {
	switch r {
	case RetryTimeout:
		return "timeout"
	case RetrySeqNAK:
		return "sequence NAK"
	case RetryRNR:
		return "RNR NAK"
	case RetryImpliedNAK:
		return "implied NAK"
	}
	return "unknown"
}

// Trace is one event of a QP's timers, retries or state.
type Trace struct {
	Kind TraceKind
	// Timer is the timer of TraceTimerArmed, TraceTimerFired and
	// TraceTimerStopped.
	Timer Timer
	// At is when an armed timer fires.
	At monotime.Time
	// Reason and PSN: why a TraceRetry goes back, and the PSN it sends
	// again from.
	Reason RetryReason
	PSN    bth.PSN
	// From and To are the states of a TraceState.
	From, To verbs.QPState
	// The request of a TracePosted.
	WRID   uint64
	Opcode verbs.WROpcode
	Length uint32
}

// Tracer is told about the QP's timers, retries and state changes. A
// device's Env implements it; QPs call it on the goroutine that drives
// them, only while their Config.Tracing flag is set.
type Tracer interface {
	QPTrace(q *QP, t *Trace)
}

// tracing reports whether someone listens: one atomic load.
func (q *QP) tracing() bool { return q.traceOn != nil && q.traceOn.Load() }

// trace reports t to the tracer.
func (q *QP) trace(t Trace) {
	if q.tracer != nil {
		q.tracer.QPTrace(q, &t)
	}
}

// traceRetry reports a go-back for reason, from the PSN the requester now
// sends next.
func (q *QP) traceRetry(reason RetryReason) {
	if q.tracing() {
		q.trace(Trace{Kind: TraceRetry, Reason: reason, PSN: q.req.psn})
	}
}

// traceSetup keeps the tracer and flag of c.
func (q *QP) traceSetup(c *Config) {
	q.traceOn = c.Tracing
	if c.Tracing != nil {
		q.tracer, _ = c.Env.(Tracer)
	}
}
