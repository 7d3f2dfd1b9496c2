package roce

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/monotime"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/qp"
	"github.com/sroce/sroce/verbs"
)

// Errors returned by the device's control operations.
var (
	ErrClosed       = errors.New("roce: device closed")
	ErrRunning      = errors.New("roce: device loop already running")
	ErrInvalid      = errors.New("roce: invalid argument")
	ErrBusy         = errors.New("roce: resource in use")
	ErrNoResources  = errors.New("roce: out of resources")
	ErrBadGIDIndex  = errors.New("roce: GID index out of range or empty")
	ErrDestroyed    = errors.New("roce: object destroyed")
	ErrCQOverflow   = errors.New("roce: completion queue overflowed")
	ErrNotSupported = errors.New("roce: not supported")
)

// Device limits, as rdma_rxe reports them.
const (
	MaxQP         = 1 << 16
	MaxQPWR       = 1 << 14
	MaxSGE        = 32
	MaxInlineData = 400
	MaxCQE        = 1<<15 - 1
	MaxSRQWR      = 1 << 14
	GIDTableLen   = 16
	firstQPN      = 17 // rdma_rxe numbers QPs from 17; 0 and 1 are reserved
)

// Options configures a device.
type Options struct {
	// Name of the device, e.g. "sroce0".
	Name string
	// Clock gives the time; nil means SystemClock.
	Clock Clock
	// GIDs is the initial GID table: the IP addresses of the port.
	GIDs []bth.GID
	// Rand seeds memory keys and other random choices; nil means a random
	// seed.
	Rand rand.Source
	// RxBatch and TxBatch size the frame batches (default 64).
	RxBatch, TxBatch int
	// Engine is how the loop waits for work (see EngineMode); the zero
	// value picks by the CPUs the process may use.
	Engine EngineMode
	// SpinFor is how long an adaptive loop spins after its last activity
	// before it blocks; zero means DefaultSpinFor.
	SpinFor time.Duration
}

// Device is an RDMA device over a Link: the GID table, the QP number space,
// PDs, MRs, CQs, SRQs and QPs, and the loop that moves packets between the
// link and the QPs.
//
// The loop runs either in real time (Run, or Start) or step by step under a
// caller's control (Step), never both. It holds the device lock while it
// processes a batch; control operations (create, modify, destroy, query)
// take the same lock, so they never run concurrently with packet
// processing. Posting work requests and polling CQs do not take it.
type Device struct {
	name    string
	link    Link
	clock   Clock
	mac     [6]byte
	linkMTU int
	portMTU verbs.MTU
	attr    verbs.DeviceAttr
	// icrcBlind is set for links that cannot show a received frame's IP
	// header as it was on the wire (ICRCVerifier reporting false).
	icrcBlind bool
	// linkLoopback: the link delivers frames to the device's own
	// addresses itself (SelfDelivering).
	linkLoopback bool

	mu       sync.Mutex // the device lock
	mrt      *mr.Table
	rng      *rand.Rand
	gids     [GIDTableLen]bth.GID
	gidAddrs []netip.Addr // addresses of the non-empty GIDs
	qps      []*QP        // by QPN - firstQPN
	gsi      *QP          // QP1
	nextQPN  int
	nqp      int
	cnt      verbs.Counters
	closed   bool
	portDown bool // PortDown was called and PortUp not since

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

	// Doorbells: QPs with newly posted work, from any goroutine.
	dbMu    sync.Mutex
	db      []*QP
	dbSpare []*QP

	events eventQueue

	// Tracing: tracing is set while someone subscribes (trace.go);
	// closedCh is closed by Close.
	tracing  atomic.Bool
	tr       tracer
	closedCh chan struct{}
	onClose  []func() // run by Close, under mu to add

	// impair drops transmitted frames on purpose (SetImpairment), under
	// mu; impairDropped counts them.
	impair        *impairState
	impairDropped uint64

	running atomic.Bool
	mode    EngineMode    // resolved: never EngineAuto
	spinFor time.Duration // adaptive mode's spin after the last activity
	parked  atomic.Bool   // the loop blocks (or is about to) in the link
	// txDue is when frames an inline post held back must be sent (0: none
	// held); polled says a CQ was polled since the last inline post.
	txDue      monotime.Time
	heldSteps  int // steps in a row whose receive backlog held requests back (see pump)
	polled     atomic.Bool
	pw         PartialWriter // the link's non-waiting transmit, if it has one
	txBlocked  bool          // the last flush left frames the link had no room for
	txStuckAt  monotime.Time // since when the link has taken none (0: it takes)
	dbRung     atomic.Bool   // d.db is not empty
	quietPolls int           // empty inline polls since the last clock read
	waiter     ReadyWaiter   // the link's wait without reading (inline mode)
	// parkUntil is when the blocked loop wakes by itself (clock time).
	parkUntil atomic.Int64
	stop      context.CancelFunc
	done      chan struct{}
}

// Open creates a device on link. The device is idle until Run, Start or
// Step drives it.
func Open(link Link, opts *Options) (*Device, error) {
	if opts == nil {
		opts = &Options{}
	}
	d := &Device{name: opts.Name, link: link, clock: opts.Clock, linkMTU: link.MTU()}
	if d.name == "" {
		d.name = "sroce0"
	}
	if d.clock == nil {
		d.clock = SystemClock()
	}
	copy(d.mac[:], link.HardwareAddr())
	if v, ok := link.(ICRCVerifier); ok {
		d.icrcBlind = !v.VerifiesICRC()
	}
	if v, ok := link.(SelfDelivering); ok {
		d.linkLoopback = v.DeliversToSelf()
	}
	d.portMTU = verbs.PortMTU(d.linkMTU)
	if !d.portMTU.Valid() {
		return nil, fmt.Errorf("roce: link MTU %d is too small for RoCE", d.linkMTU)
	}
	src := opts.Rand
	if src == nil {
		src = rand.NewPCG(rand.Uint64(), rand.Uint64())
	}
	d.rng = rand.New(src)
	d.mrt = mr.NewTable(mr.Options{Rand: rand.NewPCG(d.rng.Uint64(), d.rng.Uint64())})
	if len(opts.GIDs) > GIDTableLen {
		return nil, fmt.Errorf("roce: %d GIDs, the table holds %d", len(opts.GIDs), GIDTableLen)
	}
	copy(d.gids[:], opts.GIDs)
	d.refreshGIDs()
	d.qps = make([]*QP, MaxQP)
	d.nextQPN = firstQPN
	d.ipID = uint16(d.rng.Uint32())
	rxb, txb := opts.RxBatch, opts.TxBatch
	if rxb <= 0 {
		rxb = 64
	}
	if txb <= 0 {
		txb = 64
	}
	frame := d.linkMTU + bth.EthernetLen + bth.VLANTagLen + 64
	d.rx = make([][]byte, rxb)
	d.rxSizes = make([]int, rxb)
	for i := range d.rx {
		d.rx[i] = make([]byte, frame)
	}
	d.tx = make([][]byte, txb)
	d.txView = make([][]byte, txb)
	d.txLen = make([]int, txb)
	for i := range d.tx {
		d.tx[i] = make([]byte, frame)
	}
	d.mode = resolveEngine(opts.Engine)
	if d.mode > EngineInline {
		return nil, fmt.Errorf("roce: unknown engine mode %d", opts.Engine)
	}
	d.pw, _ = link.(PartialWriter)
	if d.mode == EngineInline {
		w, ok := link.(ReadyWaiter)
		if !ok {
			d.mode = EngineSleep
		}
		d.waiter = w
	}
	d.spinFor = opts.SpinFor
	if d.spinFor <= 0 {
		d.spinFor = DefaultSpinFor
	}
	d.runq = make([]*QP, 0, 64)
	d.polled.Store(true)
	d.db = make([]*QP, 0, 64)
	d.dbSpare = make([]*QP, 0, 64)
	d.events.init()
	d.closedCh = make(chan struct{})
	d.attr = verbs.DeviceAttr{
		MaxQP: MaxQP, MaxQPWR: MaxQPWR, MaxSGE: MaxSGE, MaxInlineData: MaxInlineData,
		MaxCQ: 1 << 16, MaxCQE: MaxCQE, MaxMR: mr.DefaultMaxMR, MaxPD: 1 << 16,
		MaxQPRdAtom: qp.MaxRdAtomic, MaxQPInitRdAtom: qp.MaxRdAtomic, MaxSRQ: 1 << 16,
		MaxSRQWR: MaxSRQWR, MaxMsgSize: qp.MaxMsgSize, PhysPortCnt: 1,
		AtomicCapability: "ATOMIC_HCA",
	}
	return d, nil
}

// Name returns the device name.
func (d *Device) Name() string { return d.name }

// Link returns the device's link.
func (d *Device) Link() Link { return d.link }

// Clock returns the device's clock.
func (d *Device) Clock() Clock { return d.clock }

// Query returns the device attributes (ibv_query_device).
func (d *Device) Query() verbs.DeviceAttr { return d.attr }

// QueryPort returns the attributes of port 1 (ibv_query_port).
func (d *Device) QueryPort() verbs.PortAttr {
	d.mu.Lock()
	state := verbs.PortActive
	if d.portDown {
		state = verbs.PortDown
	}
	d.mu.Unlock()
	return verbs.PortAttr{State: state, MaxMTU: verbs.MTU4096, ActiveMTU: d.portMTU,
		GIDTblLen: GIDTableLen, PKeyTblLen: 1, LinkMTU: d.linkMTU}
}

// SetGID sets entry index of the GID table; a zero GID clears it.
func (d *Device) SetGID(index int, gid bth.GID) error {
	if index < 0 || index >= GIDTableLen {
		return ErrBadGIDIndex
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.gids[index] = gid
	d.refreshGIDs()
	return nil
}

// QueryGID returns entry index of the GID table (ibv_query_gid).
func (d *Device) QueryGID(index int) (bth.GID, error) {
	if index < 0 || index >= GIDTableLen {
		return bth.GID{}, ErrBadGIDIndex
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.gids[index], nil
}

func (d *Device) refreshGIDs() {
	d.gidAddrs = d.gidAddrs[:0]
	for _, g := range d.gids {
		if !g.IsZero() {
			d.gidAddrs = append(d.gidAddrs, g.Addr())
		}
	}
}

// Counters returns a snapshot of the device's counters by name.
func (d *Device) Counters() map[string]uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cnt.Map()
}

// Counter returns one counter.
func (d *Device) Counter(c verbs.Counter) uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cnt[c]
}

// Start runs the device loop (Run) in a goroutine until Close.
func (d *Device) Start() error {
	if d.running.Load() {
		return ErrRunning
	}
	ctx, cancel := context.WithCancel(context.Background())
	d.mu.Lock()
	d.stop = cancel
	d.done = make(chan struct{})
	done := d.done
	d.mu.Unlock()
	go func() {
		defer close(done)
		d.Run(ctx)
	}()
	return nil
}

// Close stops the loop started by Start, sends what is left in the
// transmit batch, closes the link and refuses further work. Objects are
// not destroyed; their memory is simply no longer touched.
func (d *Device) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return ErrClosed
	}
	d.closed = true
	stop, done := d.stop, d.done
	d.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
	// Frames still in the transmit batch (an inline post's held frames)
	// may belong to UD or UC sends that have already completed: send
	// them before the link goes.
	d.mu.Lock()
	d.flushTx()
	d.mu.Unlock()
	d.events.close()
	d.closeTraces()
	close(d.closedCh)
	d.mu.Lock()
	fns := d.onClose
	d.onClose = nil
	d.mu.Unlock()
	for _, f := range fns {
		f()
	}
	return d.link.Close()
}

// OnClose makes Close call f once the device is closed (its trace
// subscriptions ended), before Close returns; on a closed device f runs at
// once. f must not wait long: Close waits for it.
func (d *Device) OnClose(f func()) {
	d.mu.Lock()
	if !d.closed {
		d.onClose = append(d.onClose, f)
		d.mu.Unlock()
		return
	}
	d.mu.Unlock()
	f()
}

// Closed returns a channel that is closed when the device closes.
func (d *Device) Closed() <-chan struct{} { return d.closedCh }

// maxIdle bounds the loop's sleep when no timer is due.
const maxIdle = 100 * time.Millisecond

// Run is the device loop in real time: one goroutine that waits for frames
// from the link, the earliest QP timer, or posted work, and processes them.
// How it waits is the device's EngineMode; spinning modes lock the
// goroutine to its OS thread. It returns when ctx is done or the link
// fails.
func (d *Device) Run(ctx context.Context) error {
	if !d.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer d.running.Store(false)
	if d.mode == EngineSpin || d.mode == EngineAdaptive {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
	}
	var stopping atomic.Bool
	stop := context.AfterFunc(ctx, func() {
		stopping.Store(true)
		d.link.Wake()
	})
	defer stop()
	n := 0
	last := d.clock.Now()
	for {
		if stopping.Load() {
			return nil
		}
		now := d.clock.Now()
		d.mu.Lock()
		if d.closed {
			d.mu.Unlock()
			return nil
		}
		// Frames an inline post held back wait for their due time, as
		// they would had the posting goroutine kept the lock.
		busy := d.step(now, n, d.txDue != 0 && now < d.txDue)
		dl, ok := d.nextDeadline()
		if d.txDue != 0 && (!ok || d.txDue < dl) {
			dl, ok = d.txDue, true
		}
		blocked := d.txBlocked
		d.mu.Unlock()
		wait := time.Duration(0)
		if busy && blocked {
			// Only room in the link would let the step go on: wait for
			// it (a frame's arrival or a doorbell ends the wait early)
			// instead of spinning on the lock.
			last, wait = now, txBackoff
		} else if busy {
			last = now
		} else if !d.spins(now, last) {
			wait = maxIdle
			if ok {
				wait = min(wait, max(dl.Sub(d.clock.Now()), 0))
			}
		}
		if wait > 0 {
			d.parkUntil.Store(int64(now.Add(wait)))
			d.parked.Store(true)
			if d.dbRung.Load() {
				wait = 0
			}
		}
		var err error
		if d.waiter != nil {
			// Inline: wait without taking frames; the goroutine that holds
			// the lock next reads them.
			n = 0
			if wait > 0 {
				err = d.waiter.WaitReady(wait)
			}
		} else {
			n, err = d.link.ReadBatch(d.rx, d.rxSizes, wait)
		}
		d.parked.Store(false)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			// The link is gone: the port is down for good, counted and
			// reported once, in PortDown, and its connections fail.
			d.PortDown()
			return err
		}
	}
}

// Step runs the loop once at virtual time now without blocking: it takes
// posted work, reads the frames the link has ready, fires the timers due
// at now and transmits what the QPs have to send. It reports whether it
// did anything; callers repeat it until it reports false, then advance
// time to the earliest of NextDeadline and the link's next delivery.
func (d *Device) Step(now monotime.Time) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return false
	}
	return d.step(now, 0, false)
}

// NextDeadline returns the earliest QP timer, if any.
func (d *Device) NextDeadline() (monotime.Time, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.nextDeadline()
}
