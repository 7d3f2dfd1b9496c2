// Package memlink is an in-memory Ethernet for testing sroce devices: a
// Router with ports that implement roce.Link, forwarding frames by
// destination MAC address after a configurable delay, and dropping,
// duplicating, reordering and corrupting them at configured rates. The
// impairments come from a seeded random source, so a failing run replays
// exactly from its seed.
//
// The router reads time from a Clock. With a VirtualClock, tests advance
// time themselves (see Sim) and nothing waits in real time; with a system
// clock the ports block in ReadBatch like a real link.
//
// Frames are copied into buffers the router recycles, so steady traffic
// allocates nothing.
package memlink

import (
	"errors"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/monotime"
	"github.com/sroce/sroce/roce/linkcap"
)

// Clock tells the router the time (the same interface as roce.Clock).
type Clock interface {
	Now() monotime.Time
}

// VirtualClock is a clock that moves only when told to.
type VirtualClock struct{ t atomic.Int64 }

// Now returns the current virtual time.
func (c *VirtualClock) Now() monotime.Time { return monotime.Time(c.t.Load()) }

// Set moves the clock to t; it never moves backwards.
func (c *VirtualClock) Set(t monotime.Time) {
	for {
		old := c.t.Load()
		if int64(t) <= old || c.t.CompareAndSwap(old, int64(t)) {
			return
		}
	}
}

// Advance moves the clock forward by d.
func (c *VirtualClock) Advance(d time.Duration) { c.t.Add(int64(d)) }

// Impairments configures what the router does to frames. Rates are
// probabilities per frame and per destination, in [0, 1].
type Impairments struct {
	Loss      float64 // drop the frame
	Duplicate float64 // deliver it twice
	Reorder   float64 // hold it back by up to ReorderDelay so later frames overtake it
	Corrupt   float64 // flip one bit after the Ethernet header
	// Delay is the one-way latency of every frame; Jitter adds a uniform
	// random [0, Jitter) on top.
	Delay  time.Duration
	Jitter time.Duration
	// ReorderDelay bounds the extra delay of a reordered frame; zero means
	// 20 microseconds.
	ReorderDelay time.Duration
	// Rate, if positive, is the bandwidth in bytes per second at which
	// each port takes frames in, as a slow receiver or a bottleneck link
	// ahead of it: frames to a port are serialized one after another at
	// this rate (the whole frame, Ethernet header included) before Delay
	// and Jitter apply.
	Rate int64
	// Queue, with a Rate, bounds the bytes waiting for a port's
	// bandwidth: a frame that would take the backlog above Queue is
	// dropped (tail drop, counted in Stats.QueueDrops). Zero means
	// unbounded.
	Queue int
}

// Stats counts what the router did.
type Stats struct {
	Sent       uint64 // frames written to the router
	Delivered  uint64 // frames read by ports
	Lost       uint64
	Duplicated uint64
	Reordered  uint64
	Corrupted  uint64
	Oversize   uint64 // frames above the port MTU, dropped
	QueueDrops uint64 // frames dropped at a port's full rate-limited queue (Impairments.Queue)
	NoRoute    uint64 // frames for an unknown MAC address
}

// ErrClosed is returned by a closed port.
var ErrClosed = errors.New("memlink: port closed")

// Router connects ports.
type Router struct {
	mu    sync.Mutex
	clock Clock
	seed  uint64
	rng   *rand.Rand
	imp   Impairments
	ports []*Port
	free  [][]byte
	seq   uint64
	stats Stats
	tap   func(from *Port, frame []byte)
}

// SetTap installs fn, which sees every frame written to the router before
// the impairments apply, as a capture would on the sender's wire. fn runs
// with the router locked and must not keep the frame.
func (r *Router) SetTap(fn func(from *Port, frame []byte)) {
	r.mu.Lock()
	r.tap = fn
	r.mu.Unlock()
}

// NewRouter returns a router reading time from clock. A seed of 0 picks a
// random one; Seed reports it, so a failure can be replayed.
func NewRouter(clock Clock, seed uint64, imp Impairments) *Router {
	for seed == 0 {
		seed = rand.Uint64()
	}
	return &Router{clock: clock, seed: seed, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), imp: imp}
}

// Seed returns the seed of the impairment random source.
func (r *Router) Seed() uint64 { return r.seed }

// SetImpairments changes the impairments from now on.
func (r *Router) SetImpairments(imp Impairments) {
	r.mu.Lock()
	r.imp = imp
	r.mu.Unlock()
}

// Stats returns the router's counters.
func (r *Router) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stats
}

// NewPort attaches a port with the given Ethernet address and interface
// MTU (the largest IP datagram).
func (r *Router) NewPort(mac net.HardwareAddr, mtu int) *Port {
	p := &Port{r: r, mtu: mtu, wake: make(chan struct{}, 1)}
	copy(p.mac[:], mac)
	r.mu.Lock()
	r.ports = append(r.ports, p)
	r.mu.Unlock()
	return p
}

// NextDelivery returns the earliest time a frame becomes readable at some
// port, if any frame is in flight.
func (r *Router) NextDelivery() (monotime.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var t monotime.Time
	ok := false
	for _, p := range r.ports {
		if p.pending() > 0 {
			if at := p.next().at; !ok || at < t {
				t, ok = at, true
			}
		}
	}
	return t, ok
}

// InFlight returns the number of frames not yet read.
func (r *Router) InFlight() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, p := range r.ports {
		n += p.pending()
	}
	return n
}

func (r *Router) getBuf(n int) []byte {
	if k := len(r.free); k > 0 {
		b := r.free[k-1]
		r.free = r.free[:k-1]
		if cap(b) >= n {
			return b[:n]
		}
	}
	return make([]byte, n, max(n, 9216+64))
}

// enqueue schedules a copy of frame for p.
func (r *Router) enqueue(p *Port, frame []byte, now monotime.Time) {
	imp := &r.imp
	if imp.Loss > 0 && r.rng.Float64() < imp.Loss {
		r.stats.Lost++
		return
	}
	copies := 1
	if imp.Duplicate > 0 && r.rng.Float64() < imp.Duplicate {
		copies = 2
		r.stats.Duplicated++
	}
	for c := 0; c < copies; c++ {
		at := now
		if imp.Rate > 0 {
			// The frame waits behind the backlog of the port's
			// bandwidth, then takes its own serialization time.
			start := max(now, p.busyUntil)
			if imp.Queue > 0 {
				backlog := float64(start.Sub(now)) * float64(imp.Rate) / float64(time.Second)
				if backlog+float64(len(frame)) > float64(imp.Queue) {
					r.stats.QueueDrops++
					continue
				}
			}
			p.busyUntil = start.Add(time.Duration(float64(len(frame)) * float64(time.Second) / float64(imp.Rate)))
			at = p.busyUntil
		}
		at = at.Add(imp.Delay)
		if imp.Jitter > 0 {
			at = at.Add(time.Duration(r.rng.Int64N(int64(imp.Jitter))))
		}
		if imp.Reorder > 0 && r.rng.Float64() < imp.Reorder {
			rd := imp.ReorderDelay
			if rd <= 0 {
				rd = 20 * time.Microsecond
			}
			at = at.Add(1 + time.Duration(r.rng.Int64N(int64(rd))))
			r.stats.Reordered++
		}
		if c == 1 {
			at = at.Add(time.Duration(r.rng.Int64N(int64(5*time.Microsecond))) + 1)
		}
		b := r.getBuf(len(frame))
		copy(b, frame)
		if imp.Corrupt > 0 && len(b) > 14 && r.rng.Float64() < imp.Corrupt {
			i := 14 + r.rng.IntN(len(b)-14)
			b[i] ^= 1 << r.rng.UintN(8)
			r.stats.Corrupted++
		}
		r.seq++
		p.push(inflight{at: at, seq: r.seq, buf: b})
	}
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

type inflight struct {
	at  monotime.Time
	seq uint64
	buf []byte
}

// Port is one attachment to the router; it implements roce.Link.
//
// Frames in flight to the port wait in two queues, both under the router's
// lock: a FIFO for frames whose delivery times come in order (all of them,
// when nothing reorders or delays irregularly), and a min-heap by delivery
// time for the others.
type Port struct {
	r      *Router
	mac    [6]byte
	mtu    int
	fifo   []inflight // delivery times non-decreasing
	fhead  int
	q      []inflight // min-heap by (at, seq)
	wake   chan struct{}
	closed bool
	timer  *time.Timer
	// busyUntil is when the frames already accepted have passed the
	// port's bandwidth (Impairments.Rate).
	busyUntil monotime.Time
}

func (p *Port) less(i, j int) bool {
	a, b := &p.q[i], &p.q[j]
	return a.at < b.at || a.at == b.at && a.seq < b.seq
}

// pending reports the number of frames in flight to p.
func (p *Port) pending() int { return len(p.fifo) - p.fhead + len(p.q) }

// next returns the earliest frame in flight; pending must be non-zero.
func (p *Port) next() *inflight {
	if p.fhead == len(p.fifo) {
		return &p.q[0]
	}
	f := &p.fifo[p.fhead]
	if len(p.q) > 0 && (p.q[0].at < f.at || p.q[0].at == f.at && p.q[0].seq < f.seq) {
		return &p.q[0]
	}
	return f
}

func (p *Port) push(f inflight) {
	if n := len(p.fifo); n == p.fhead || p.fifo[n-1].at <= f.at {
		if p.fhead > 0 && p.fhead == n {
			p.fifo, p.fhead = p.fifo[:0], 0
		}
		p.fifo = append(p.fifo, f)
		return
	}
	p.q = append(p.q, f)
	j := len(p.q) - 1
	for j > 0 {
		i := (j - 1) / 2
		if !p.less(j, i) {
			break
		}
		p.q[i], p.q[j] = p.q[j], p.q[i]
		j = i
	}
}

func (p *Port) pop() inflight {
	if p.fhead < len(p.fifo) && p.next() == &p.fifo[p.fhead] {
		f := p.fifo[p.fhead]
		p.fifo[p.fhead] = inflight{}
		p.fhead++
		if p.fhead == len(p.fifo) {
			p.fifo, p.fhead = p.fifo[:0], 0
		} else if p.fhead >= 256 && p.fhead*2 >= len(p.fifo) {
			// Slide the frames still in flight to the front, so that a
			// queue that never empties does not grow forever.
			k := copy(p.fifo, p.fifo[p.fhead:])
			clear(p.fifo[k:])
			p.fifo, p.fhead = p.fifo[:k], 0
		}
		return f
	}
	f := p.q[0]
	n := len(p.q) - 1
	p.q[0] = p.q[n]
	p.q[n] = inflight{}
	p.q = p.q[:n]
	i := 0
	for {
		j := 2*i + 1
		if j >= n {
			break
		}
		if k := j + 1; k < n && p.less(k, j) {
			j = k
		}
		if !p.less(j, i) {
			break
		}
		p.q[i], p.q[j] = p.q[j], p.q[i]
		i = j
	}
	return f
}

// ReadBatch implements roce.Link: it returns the frames whose delivery
// time has come, waiting up to timeout (in real time) for one.
func (p *Port) ReadBatch(bufs [][]byte, sizes []int, timeout time.Duration) (int, error) {
	r := p.r
	var deadline time.Time
	for {
		r.mu.Lock()
		if p.closed {
			r.mu.Unlock()
			return 0, ErrClosed
		}
		now := r.clock.Now()
		n := 0
		for n < len(bufs) && p.pending() > 0 && p.next().at <= now {
			f := p.pop()
			sizes[n] = copy(bufs[n], f.buf)
			r.free = append(r.free, f.buf[:0])
			r.stats.Delivered++
			n++
		}
		var next time.Duration = -1
		due := false // a frame is ready (for a caller that takes none)
		if p.pending() > 0 {
			next = p.next().at.Sub(now)
			due = next <= 0
		}
		r.mu.Unlock()
		if n > 0 || timeout <= 0 || due {
			return n, nil
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(timeout)
		}
		wait := time.Until(deadline)
		if wait <= 0 {
			return 0, nil
		}
		if next >= 0 && next < wait {
			wait = next
		}
		if p.timer == nil {
			p.timer = time.NewTimer(wait)
		} else {
			p.timer.Reset(wait)
		}
		select {
		case <-p.wake:
			p.timer.Stop()
			// Woken: by a frame, or by Wake (work was posted).
			r.mu.Lock()
			ready := p.pending() > 0 && p.next().at <= r.clock.Now()
			r.mu.Unlock()
			if !ready {
				return 0, nil
			}
		case <-p.timer.C:
		}
	}
}

// Caps implements roce.Link: the in-memory port waits without reading
// (roce.ReadyWaiter) and receives every group's frames.
func (p *Port) Caps() linkcap.Caps { return linkcap.WaitReady }

// WaitReady implements roce.ReadyWaiter: it waits up to timeout until a
// frame is ready for ReadBatch, or Wake is called, and takes nothing.
func (p *Port) WaitReady(timeout time.Duration) error {
	_, err := p.ReadBatch(nil, nil, timeout)
	return err
}

// Ready implements roce.ReadyWaiter: it reports whether a frame is due.
func (p *Port) Ready() bool {
	r := p.r
	r.mu.Lock()
	defer r.mu.Unlock()
	return !p.closed && p.pending() > 0 && p.next().at <= r.clock.Now()
}

// WriteBatch implements roce.Link: frames go to the port with their
// destination MAC address, or to every other port for broadcast and
// multicast addresses.
func (p *Port) WriteBatch(frames [][]byte) (int, error) {
	r := p.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if p.closed {
		return 0, ErrClosed
	}
	now := r.clock.Now()
	for _, f := range frames {
		r.stats.Sent++
		if r.tap != nil {
			r.tap(p, f)
		}
		if len(f) < bth.EthernetLen {
			r.stats.NoRoute++
			continue
		}
		dst := bth.Ethernet(f).DstMAC()
		group := dst[0]&1 != 0 // the I/G bit: broadcast or multicast
		found := false
		for _, q := range r.ports {
			if q == p || q.closed {
				continue
			}
			if !group && dst != q.mac {
				continue
			}
			found = true
			if len(f) > q.mtu+bth.EthernetLen+bth.VLANTagLen {
				r.stats.Oversize++
				continue
			}
			r.enqueue(q, f, now)
		}
		if !found {
			r.stats.NoRoute++
		}
	}
	return len(frames), nil
}

// Wake implements roce.Link.
func (p *Port) Wake() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// MTU implements roce.Link.
func (p *Port) MTU() int { return p.mtu }

// HardwareAddr implements roce.Link.
func (p *Port) HardwareAddr() net.HardwareAddr { return net.HardwareAddr(p.mac[:]) }

// Close implements roce.Link.
func (p *Port) Close() error {
	r := p.r
	r.mu.Lock()
	p.closed = true
	for _, f := range p.q {
		r.free = append(r.free, f.buf[:0])
	}
	for _, f := range p.fifo[p.fhead:] {
		r.free = append(r.free, f.buf[:0])
	}
	p.q, p.fifo, p.fhead = nil, nil, 0
	r.mu.Unlock()
	p.Wake()
	return nil
}

// Stepper is a device driven in virtual time (roce.Device implements it).
type Stepper interface {
	Step(now monotime.Time) bool
	NextDeadline() (monotime.Time, bool)
}

// Sim drives devices and a router in virtual time: it steps every device
// until none has work at the current instant, then jumps the clock to the
// earliest frame delivery or device timer.
type Sim struct {
	Clock  *VirtualClock
	Router *Router
	Nodes  []Stepper
	// Idle is called, if set, whenever the devices are idle at the
	// current instant, before time advances; tests use it to poll CQs and
	// post more work. It reports whether it did something.
	Idle func() bool
}

// ErrStuck is returned when nothing can happen any more: no frame in
// flight, no timer pending, and the condition not met.
var ErrStuck = errors.New("memlink: simulation stuck: no frames in flight and no timers")

// ErrTimeLimit is returned when the virtual time limit passes first.
var ErrTimeLimit = errors.New("memlink: virtual time limit reached")

// settle steps the devices until they are idle at the current instant.
func (s *Sim) settle() {
	now := s.Clock.Now()
	for i := 0; i < 1_000_000; i++ {
		busy := false
		for _, n := range s.Nodes {
			if n.Step(now) {
				busy = true
			}
		}
		if !busy && s.Idle != nil && s.Idle() {
			busy = true
		}
		if !busy {
			return
		}
	}
}

// RunUntil advances virtual time until done reports true, checking after
// every quiet instant. It fails if nothing is left to happen or limit
// virtual time passes.
func (s *Sim) RunUntil(done func() bool, limit time.Duration) error {
	end := s.Clock.Now().Add(limit)
	for {
		s.settle()
		if done() {
			return nil
		}
		next, ok := s.next()
		if !ok {
			return ErrStuck
		}
		if next > end {
			s.Clock.Set(end)
			s.settle()
			if done() {
				return nil
			}
			return ErrTimeLimit
		}
		s.Clock.Set(next)
	}
}

// RunFor advances virtual time by d, processing everything due on the way.
func (s *Sim) RunFor(d time.Duration) {
	end := s.Clock.Now().Add(d)
	for {
		s.settle()
		next, ok := s.next()
		if !ok || next > end {
			s.Clock.Set(end)
			s.settle()
			return
		}
		s.Clock.Set(next)
	}
}

// next returns the earliest instant after now at which something happens.
func (s *Sim) next() (monotime.Time, bool) {
	now := s.Clock.Now()
	var t monotime.Time
	ok := false
	consider := func(x monotime.Time) {
		if x <= now {
			x = now + 1
		}
		if !ok || x < t {
			t, ok = x, true
		}
	}
	if s.Router != nil {
		if x, has := s.Router.NextDelivery(); has {
			consider(x)
		}
	}
	for _, n := range s.Nodes {
		if x, has := n.NextDeadline(); has {
			consider(x)
		}
	}
	return t, ok
}
