package cm

import (
	"time"

	"github.com/sroce/sroce/monotime"
)

// Retry is the resend schedule of one CM message that waits for an answer
// (REQ, REP, DREQ, SIDR_REQ): the message is sent again each time its wait
// runs out, until the retries the REQ allowed (its max CM retries) are used
// up. It is pure: the caller passes the time, so tests run it on a virtual
// clock. The zero Retry is idle.
type Retry struct {
	active   bool
	deadline monotime.Time
	wait     time.Duration
	left     uint8
}

// Start arms r for a message sent at now: it is due again after wait, and
// may be resent maxRetries times.
func (r *Retry) Start(now monotime.Time, wait time.Duration, maxRetries uint8) {
	*r = Retry{active: true, deadline: now.Add(wait), wait: wait, left: maxRetries}
}

// Stop disarms r: the answer came.
func (r *Retry) Stop() { *r = Retry{} }

// Active reports whether r is waiting for an answer.
func (r *Retry) Active() bool { return r.active }

// Deadline returns when r is next due; meaningful only while Active.
func (r *Retry) Deadline() monotime.Time { return r.deadline }

// Left returns how many resends remain.
func (r *Retry) Left() uint8 { return r.left }

// Extend sets the deadline to now+wait and makes wait the span between
// later resends: what an MRA asks for (see MRAWait).
func (r *Retry) Extend(now monotime.Time, wait time.Duration) {
	if !r.active {
		return
	}
	r.wait = wait
	r.deadline = now.Add(wait)
}

// RetryAction is what a due Retry asks of its owner.
type RetryAction uint8

// Retry actions.
const (
	RetryNone    RetryAction = iota // not due (or not active)
	RetryResend                     // send the message again
	RetryTimeout                    // retries used up: the exchange has failed
)

// Poll returns what is due at now. A resend re-arms r for another wait; a
// timeout disarms it.
func (r *Retry) Poll(now monotime.Time) RetryAction {
	if !r.active || now.Before(r.deadline) {
		return RetryNone
	}
	if r.left == 0 {
		r.Stop()
		return RetryTimeout
	}
	r.left--
	r.deadline = now.Add(r.wait)
	return RetryResend
}
