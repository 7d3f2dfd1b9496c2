package perftest

// Plumbing shared by the pingpong and perftest commands: the device named
// by -d on its network interface (a sroce daemon's when one serves the
// interface, else one opened in the tool's process; see hca.go), the source
// GID, completion waits bounded by a stall limit, and failures reported in
// one sentence.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/rdma"
	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/roce/iface"
	"github.com/sroce/sroce/tools/device"
	"github.com/sroce/sroce/tools/oob"
	"github.com/sroce/sroce/verbs"
)

// Environment variables the tools read. They tune what the reference tools
// have no option for, so that the command lines stay the tools' own.
const (
	// envStall is how long a run waits without any completion before it
	// gives up (a Go duration, default defaultStall).
	envStall = "SROCE_STALL_TIMEOUT"
	// envStep bounds each message of the TCP exchange (a Go duration,
	// default defaultStep).
	envStep = "SROCE_EXCHANGE_TIMEOUT"
	// envAccept bounds a server's wait for its client (a Go duration,
	// default defaultAccept).
	envAccept = "SROCE_ACCEPT_TIMEOUT"
)

// Limits of a tool run.
const (
	// defaultStall is how long a run waits for the next completion. The
	// tools' RC QPs retry forever (retry_cnt 7 and rnr_retry 7, as
	// rdma_rxe treats them), so without this limit a peer that vanished
	// mid-run would hang the tool; perftest's own server gives up after a
	// minute without messages in the same way.
	defaultStall = 60 * time.Second
	// defaultStep bounds each message of the TCP exchange once connected.
	defaultStep = 30 * time.Second
	// defaultAccept bounds a server's wait for a client (the reference
	// servers wait as long as they run).
	defaultAccept = 10 * time.Minute
	// openTimeout bounds opening the device on the interface.
	openTimeout = 15 * time.Second
	// resolveTimeout bounds resolving the peer's MAC address.
	resolveTimeout = device.ResolveTimeout
)

// toolRun is one run of a tool command: where it prints, the device it
// runs on, and what it is waiting for.
//
// Every wait of a run is bounded (the limits above) and ends, when its
// limit passes or SIGINT or SIGTERM arrives, with one sentence naming what
// it waited for and the state of the run's QP.
type toolRun struct {
	e     *env
	name  string // the subcommand, e.g. "write-bw"
	h     hca
	stall time.Duration
	steps oob.Timeouts

	// ctx is cancelled, with a *signalError as its cause, when SIGINT or
	// SIGTERM arrives during the run (see watchSignals).
	ctx context.Context
	// phase says what the run is doing while it waits, e.g. "waiting for
	// a client to connect on TCP port 18515".
	phase string
	// watch is the QP whose state a failed wait describes (nil before
	// the QPs exist).
	watch rdma.QP
}

// newToolRun returns a run of the command name that prints to e, with the
// limits taken from the environment.
func newToolRun(ctx context.Context, e *env, name string) (*toolRun, error) {
	t := &toolRun{e: e, name: name, stall: defaultStall,
		steps: oob.Timeouts{Step: defaultStep, Accept: defaultAccept}, ctx: ctx}
	for _, v := range []struct {
		name string
		dst  []*time.Duration
	}{
		{envStall, []*time.Duration{&t.stall}},
		{envStep, []*time.Duration{&t.steps.Step, &t.steps.Connect}},
		{envAccept, []*time.Duration{&t.steps.Accept}},
	} {
		s := os.Getenv(v.name)
		if s == "" {
			continue
		}
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("%s=%q is not a positive duration such as 30s", v.name, s)
		}
		for _, p := range v.dst {
			*p = d
		}
	}
	return t, nil
}

// signalError is the cause of a run's context when a signal ended it.
type signalError struct{ sig os.Signal }

// Error returns "interrupted by SIGTERM" or "interrupted by SIGINT".
func (e *signalError) Error() string {
	name := e.sig.String()
	switch e.sig {
	case syscall.SIGINT:
		name = "SIGINT"
	case syscall.SIGTERM:
		name = "SIGTERM"
	}
	return "interrupted by " + name
}

// watchSignals makes SIGINT and SIGTERM cancel t.ctx until the returned
// function is called. Every wait of the run watches t.ctx, so that a
// signal ends the run with a sentence on what it was waiting for.
func (t *toolRun) watchSignals() (stop func()) {
	ctx, cancel := context.WithCancelCause(t.ctx)
	t.ctx = ctx
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case sig := <-ch:
			cancel(&signalError{sig})
		case <-done:
		}
	}()
	return func() {
		signal.Stop(ch)
		close(done)
		cancel(nil)
	}
}

// interrupted returns the signal that ended the run, or nil.
func (t *toolRun) interrupted() *signalError {
	var se *signalError
	if errors.As(context.Cause(t.ctx), &se) {
		return se
	}
	return nil
}

// waitingFor notes what the run waits for next (format and args make a
// phrase such as "waiting for a client to connect on TCP port 18515").
func (t *toolRun) waitingFor(format string, args ...any) {
	t.phase = fmt.Sprintf(format, args...)
}

// watchedState describes the watched QP, or says that there is none yet.
func (t *toolRun) watchedState() string {
	if t.watch == nil {
		return "no QP yet"
	}
	return t.qpState(t.watch)
}

// fail prints one sentence about why the run failed and returns
// exitProblem.
func (t *toolRun) fail(format string, args ...any) int {
	msg := fmt.Sprintf(format, args...)
	fmt.Fprintf(t.e.Stderr, "sroce %s: %s\n", t.name, strings.TrimSuffix(msg, "\n"))
	return exitProblem
}

// failErr is fail for an error. A wait that a signal interrupted or that
// timed out is described with what the run was doing and the state of
// its QP.
func (t *toolRun) failErr(err error) int {
	if se := t.interrupted(); se != nil {
		msg := fmt.Sprintf("%s while %s", se, t.phase)
		// oob names the message it was exchanging: "exchanging the key
		// message: interrupted by SIGTERM".
		if text := errText(err); strings.HasPrefix(text, "exchanging ") && strings.HasSuffix(text, ": "+se.Error()) {
			msg += ", " + strings.TrimSuffix(text, ": "+se.Error())
		}
		return t.fail("%s (%s)", msg, t.watchedState())
	}
	if errors.Is(err, oob.ErrTimeout) {
		return t.fail("%s (%s)", errText(err), t.watchedState())
	}
	return t.fail("%s", errText(err))
}

// open opens the device named by the -d value spec; peer, the server a
// client connects to, chooses the interface when spec is empty (see
// package device); queues is the queue count (0: SROCE_QUEUES, else the
// default).
func (t *toolRun) open(ctx context.Context, spec, peer string, queues int) error {
	d, err := device.Resolve(ctx, spec, peer)
	if err != nil {
		return err
	}
	d.Queues = queues
	mode, err := device.LinkMode()
	if err != nil {
		return err
	}
	t.waitingFor("opening the device on %s", d.Ifname)
	ctx, cancel := context.WithTimeout(ctx, openTimeout)
	defer cancel()
	t.h, err = openHCA(d.Ifname, func() (*iface.Port, error) { return device.Open(ctx, d, mode) })
	return err
}

// Bounds of linger.
const (
	minQuiet  = 20 * time.Millisecond
	maxLinger = 2 * time.Second
)

// linger keeps the device answering after a run that succeeded, until no
// packet has arrived for a quiet period. The peer may still be
// retransmitting its last request because the ACK for it was lost (a run
// ends on this side when the data is seen, which can be before the peer
// has its ACK); a QP destroyed at once would leave those retransmissions
// unanswered and the peer's last work request without a completion. This
// is RC's TIME_WAIT. The quiet period is twice the longest retransmit
// timeout of the RC QPs (the tools give both sides the same), at least
// minQuiet; the whole wait is bounded by maxLinger.
func (t *toolRun) linger(qps []rdma.QP) {
	var longest time.Duration
	for _, q := range qps {
		if q == nil || q.Type() != verbs.QPTypeRC {
			continue
		}
		attr, err := q.Query()
		if err != nil || attr.Timeout == 0 {
			continue
		}
		longest = max(longest, time.Duration(4096<<min(attr.Timeout, 31))*time.Nanosecond)
	}
	if longest == 0 {
		return
	}
	quiet := max(2*longest, minQuiet)
	end := time.Now().Add(maxLinger)
	tick := min(quiet/4, 10*time.Millisecond)
	last := t.h.received()
	calm := time.Now()
	t.waitingFor("answering the peer's last packets after the run")
	for now := time.Now(); now.Before(end) && now.Sub(calm) < quiet && t.ctx.Err() == nil; now = time.Now() {
		time.Sleep(tick)
		if c := t.h.received(); c != last {
			last, calm = c, time.Now()
		}
	}
}

// close releases the device.
func (t *toolRun) close() {
	if t.h != nil {
		t.h.Close()
	}
}

// ifname returns the interface the device runs on.
func (t *toolRun) ifname() string { return t.h.ifname() }

// usableGID reports whether GID index i exists and can be a source on
// this port (on the UDP link only the bound address can).
func (t *toolRun) usableGID(i int) bool {
	g, err := t.h.gid(i)
	if err != nil {
		return false
	}
	if src := t.h.sourceOnly(); src.IsValid() && g.Addr().Unmap() != src {
		return false
	}
	return true
}

// gid returns the GID at index i, with an error naming the valid indexes.
func (t *toolRun) gid(i int) (bth.GID, error) {
	if i < 0 || i >= roce.GIDTableLen {
		return bth.GID{}, fmt.Errorf("GID index %d is out of range (0..%d)", i, roce.GIDTableLen-1)
	}
	return t.h.gid(i)
}

// ahAttr returns the path from GID index sgid to the peer's GID.
func (t *toolRun) ahAttr(ctx context.Context, dgid bth.GID, sgid int) (verbs.AHAttr, error) {
	if dgid == (bth.GID{}) {
		return verbs.AHAttr{}, errors.New("the peer announced no GID: RoCE needs one (run the peer with -g or -x)")
	}
	ctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	return t.h.ahAttr(ctx, dgid, sgid)
}

// randomPSN returns a random initial packet sequence number, as the tools
// draw it (lrand48() & 0xffffff).
func randomPSN() uint32 { return rand.Uint32() & 0xffffff }

// errStall is returned when no completion came within the stall limit.
var errStall = errors.New("no completion arrived")

// completions waits for work completions of one CQ, by polling or, with
// events, on its completion channel, and gives up after the stall limit
// without a completion, when the device is lost or when the run's context
// is cancelled (by a signal: the error is then its cause).
type completions struct {
	spin  bool // poll busily instead of blocking (hca.spins)
	ctx   context.Context
	cq    rdma.CQ
	stall time.Duration
	h     hca
	buf   []verbs.WC
}

// newCompletions creates a CQ of n entries on dev, with a completion
// channel when events is set, and its waiter.
func (t *toolRun) newCompletions(n int, events bool) (*completions, error) {
	c := &completions{ctx: t.ctx, stall: t.stall, h: t.h, buf: make([]verbs.WC, 64)}
	// Without events perftest polls its CQ busily; see hca.spins for
	// where sroce's tools do.
	c.spin = !events && t.h.spins()
	create := t.h.CreateCQ
	if events {
		create = t.h.CreateEventCQ
	}
	cq, err := create(min(n, roce.MaxCQE))
	if err != nil {
		return nil, fmt.Errorf("cannot create a CQ of %d entries: %w", n, err)
	}
	c.cq = cq
	return c, nil
}

// poll returns the completions that are ready, without waiting; the slice
// is valid until the next call.
func (c *completions) poll() []verbs.WC {
	n := c.cq.Poll(c.buf)
	return c.buf[:n]
}

// wait returns at least one completion, waiting up to the stall limit;
// the slice is valid until the next call.
func (c *completions) wait() ([]verbs.WC, error) { return c.waitUntil(time.Time{}) }

// waitUntil is wait that also gives up at end, unless end is zero,
// returning no completion and no error: the end of a -D run, which no
// completion outstanding may hold up.
func (c *completions) waitUntil(end time.Time) ([]verbs.WC, error) {
	if wcs := c.poll(); len(wcs) > 0 {
		return wcs, nil
	}
	if c.spin {
		return c.spinUntil(end)
	}
	deadline := time.Now().Add(c.stall)
	for {
		if err := c.lost(); err != nil {
			return nil, err
		}
		if c.ctx.Err() != nil {
			return nil, context.Cause(c.ctx)
		}
		if !end.IsZero() && !time.Now().Before(end) {
			return nil, nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil, errStall
		}
		slice := min(left, 30*time.Millisecond)
		if !end.IsZero() {
			slice = max(min(slice, time.Until(end)), time.Millisecond)
		}
		n, err := c.cq.WaitTimeout(c.buf, slice)
		if n > 0 {
			return c.buf[:n], nil
		}
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("waiting for a completion: %w", err)
		}
	}
}

// spinUntil is waitUntil by polling: the clock, the port and the context
// are looked at every spinCheck polls, and the scheduler gets a turn then.
func (c *completions) spinUntil(end time.Time) ([]verbs.WC, error) {
	const spinCheck = 64
	deadline := time.Now().Add(c.stall)
	for i := 1; ; i++ {
		if wcs := c.poll(); len(wcs) > 0 {
			return wcs, nil
		}
		if i%spinCheck != 0 {
			continue
		}
		if err := c.lost(); err != nil {
			return nil, err
		}
		if c.ctx.Err() != nil {
			return nil, context.Cause(c.ctx)
		}
		now := time.Now()
		if !end.IsZero() && !now.Before(end) {
			return nil, nil
		}
		if now.After(deadline) {
			return nil, errStall
		}
		c.h.yield()
	}
}

// lost returns why the device became unusable, or nil.
func (c *completions) lost() error { return c.h.lost() }

// syncMemory orders this goroutine after every packet the device has
// processed so far and returns how many it received: memory read after
// syncMemory holds what those packets wrote (remote WRITEs, READ
// responses, atomics). See hca.received.
func (t *toolRun) syncMemory() uint64 { return t.h.received() }

// statusText describes a work completion status as perftest's error
// messages do: "status 12 (transport retry counter exceeded)".
func statusText(s verbs.WCStatus) string {
	return fmt.Sprintf("status %d (%s)", int(s), s)
}
