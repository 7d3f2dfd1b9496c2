// Engine modes: how each engine's loop (Run) waits for work, and who else
// may run it. The mode is the device's and applies to every engine alone.
// Whatever the mode, one goroutine at a time runs an engine's step under
// the engine lock; the modes differ in what a goroutine does when the step
// found nothing to do. In inline mode a post drives the engine of its QP
// and a poll drives every engine.
//
//	sleep     Run blocks in the link until a frame, the earliest QP timer
//	          or a doorbell; posting wakes it.
//	spin      Run never blocks: it polls the link and the doorbells, and
//	          posting wakes nobody. A core stays busy while the device
//	          runs; every 64 empty polls the loop yields its processor and
//	          its CPU to whoever waits for them.
//	adaptive  spin for SpinFor after the last activity, then sleep.
//	inline    Run sleeps as in sleep mode, but the goroutine that posts a
//	          work request or polls an empty CQ runs a step itself: it
//	          transmits on post and receives and completes on poll, so a
//	          round trip crosses no goroutine boundary. Run takes over
//	          whenever nobody drives.
//
// The need-wakeup rule: Run sets parked before it blocks in the link and
// checks the doorbells after; ring appends a doorbell and wakes the link
// only when parked is set. One of the two always sees the other.

package roce

import (
	"fmt"
	"runtime"
	"time"

	"github.com/sroce/sroce/monotime"
)

// EngineMode says how a device's loop waits for work (Options.Engine).
type EngineMode uint8

// Engine modes.
const (
	// EngineAuto is inline when the process may use fewer than four CPUs
	// (GOMAXPROCS, which follows the machine, the affinity mask and a
	// container's quota) and adaptive otherwise: a spinning loop needs a
	// core of its own beside the application's, and two such processes
	// on two cores starve each other.
	EngineAuto EngineMode = iota
	// EngineSleep blocks in the link whenever there is nothing to do.
	EngineSleep
	// EngineSpin busy-polls and never blocks; it yields its processor
	// and its CPU every few dozen empty polls.
	EngineSpin
	// EngineAdaptive spins for Options.SpinFor after the last activity,
	// then blocks like EngineSleep.
	EngineAdaptive
	// EngineInline lets posting and polling goroutines run the loop
	// themselves; Run blocks like EngineSleep when nobody drives.
	EngineInline
)

var engineNames = [...]string{"auto", "sleep", "spin", "adaptive", "inline"}

// String returns the mode's name as ParseEngineMode takes it.
func (m EngineMode) String() string {
	if int(m) < len(engineNames) {
		return engineNames[m]
	}
	return fmt.Sprintf("EngineMode(%d)", int(m))
}

// ParseEngineMode reads a mode name: auto, sleep, spin, adaptive or inline.
func ParseEngineMode(s string) (EngineMode, error) {
	for i, n := range engineNames {
		if s == n {
			return EngineMode(i), nil
		}
	}
	return 0, fmt.Errorf("roce: unknown engine mode %q (auto, sleep, spin, adaptive or inline)", s)
}

// DefaultSpinFor is how long an adaptive loop spins after its last
// activity when Options.SpinFor is zero: a little more than a round trip
// between two hosts through a software switch.
const DefaultSpinFor = 200 * time.Microsecond

// autoSpinCPUs is the fewest CPUs on which EngineAuto spins.
const autoSpinCPUs = 4

// Resolve returns the mode EngineAuto stands for in this process, or m
// itself.
func (m EngineMode) Resolve() EngineMode { return resolveEngine(m) }

// Spins reports whether the loop of mode m (resolved) polls busily, always
// (spin) or after activity (adaptive): it then holds a CPU, and gives it
// up every few dozen empty polls (YieldCPU).
func (m EngineMode) Spins() bool {
	m = m.Resolve()
	return m == EngineSpin || m == EngineAdaptive
}

// resolveEngine picks the mode for EngineAuto.
func resolveEngine(m EngineMode) EngineMode {
	if m != EngineAuto {
		return m
	}
	if runtime.GOMAXPROCS(0) < autoSpinCPUs {
		return EngineInline
	}
	return EngineAdaptive
}

// Engine returns the mode the device runs in (never EngineAuto).
func (d *Device) Engine() EngineMode { return d.mode }

// spins reports whether the loop polls instead of blocking, now is the
// current time and last the time of its last activity.
func (e *engine) spins(now, last monotime.Time) bool {
	switch e.d.mode {
	case EngineSpin:
		return true
	case EngineAdaptive:
		return now.Sub(last) < e.d.spinFor
	}
	return false
}

// kick wakes the loop if it is blocked in the link (or about to be).
func (e *engine) kick() {
	if e.parked.Load() {
		e.link.Wake()
	}
}

// quietClockEvery is how many polls in a row quiet may answer without
// reading the clock for the timers.
const quietClockEvery = 16

// quiet reports, with the lock held and from cheap checks only, that a
// poll's step would find nothing to do: no frame on the link, no doorbell,
// nothing to send or held, and (looked at every quietClockEvery polls) no
// timer due. A busily polling application then costs a few loads per
// poll instead of a step.
func (e *engine) quiet() bool {
	if e.txN > 0 || len(e.loopQ) > 0 || len(e.runq) > 0 || e.dbRung.Load() || e.waiter.Ready() || e.inboxReady() {
		return false
	}
	if e.quietPolls++; e.quietPolls < quietClockEvery {
		return true
	}
	e.quietPolls = 0
	return len(e.timers) == 0 || e.timers[0].deadline > e.d.clock.Now()
}

// txHoldMax bounds how long frames of inline posts wait for their batch.
const txHoldMax = 50 * time.Microsecond

// Progress runs one step of each engine's loop on the calling goroutine
// when the device runs inline and no other goroutine is running that
// engine, and reports whether it did anything. In other modes, or while
// the loops are busy elsewhere, it does nothing: the loops make progress
// by themselves. A program that waits for memory an RDMA WRITE will fill
// (as perftest's write_lat does) calls it while it waits; posting and
// polling call it already. Like a poll, it may keep the ACKs its step
// makes for the program's next post (at most txHoldMax).
func (d *Device) Progress() bool { return d.progressAll(stepPoll) }

// Flush is Progress for a caller that posts on behalf of others and does
// not answer what it receives (the daemon's bridge): it sends the frames
// posts held back for their batch, and its step holds nothing back.
func (d *Device) Flush() bool { return d.progressAll(stepFlush) }

func (d *Device) progressAll(k stepKind) bool {
	did := false
	for _, e := range d.eng {
		if _, busy := e.progress(k); busy {
			did = true
		}
	}
	return did
}

// txHold says what a step may leave in its transmit batch (see step).
type txHold uint8

const (
	holdNone  txHold = iota // send everything
	holdBatch               // frames wait for their batch until txDue
	holdACKs                // a poll's own ACKs wait for the next post
)

// stepKind says who runs an inline step.
type stepKind uint8

const (
	stepPoll  stepKind = iota // a poll of a CQ, or Progress
	stepPost                  // a post
	stepFlush                 // Flush
)

// progress is Progress of one engine for a poll, a post or a flush; it
// reports whether it ran a step (ran) and whether the step did anything.
// Batching on the post side: the first post after a poll transmits at
// once (a latency-bound program posts, then polls); further posts before
// the next poll leave their frames in the transmit batch, which the poll,
// a full batch or txHoldMax sends (a throughput-bound program posts many,
// then polls), so that one kernel kick carries many frames.
func (e *engine) progress(k stepKind) (ran, busy bool) {
	d := e.d
	post := k == stepPost
	if !post {
		e.polled.Store(true)
	}
	if d.mode != EngineInline || !e.running.Load() || !e.mu.TryLock() {
		return false, false
	}
	if d.closed.Load() {
		e.mu.Unlock()
		return false, false
	}
	if !post && e.quiet() {
		e.mu.Unlock()
		return true, false
	}
	now := d.clock.Now()
	// A post holds its frames unless a CQ was polled since the last post.
	hold := holdNone
	switch {
	case k == stepPoll:
		hold = holdACKs
	case post && !e.polled.Swap(false):
		hold = holdBatch
	}
	busy, more := e.step(now, 0, hold)
	dl, ok := e.nextDeadline()
	if e.txDue != 0 && (!ok || e.txDue < dl) {
		dl, ok = e.txDue, true
	}
	e.mu.Unlock()
	// The blocked loop does not know what this step left behind: more to
	// send than one step's budget, held frames, or a timer earlier than
	// its wake-up. dbRung keeps the need-wakeup rule: a loop that planned
	// its wait before this step and has not parked yet sees it after
	// setting parked and goes round again instead of sleeping through
	// the held frames' due time. A step that did its work and left none
	// wakes nobody: the loop, woken, would find nothing to do, and on
	// few CPUs the wake-up costs the program polling the CQ its CPU.
	if more || (ok && dl < monotime.Time(e.parkUntil.Load())) {
		e.dbRung.Store(true)
		e.kick()
	}
	return true, busy
}
