package roce

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/monotime"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/qp"
	"github.com/sroce/sroce/roce/linkcap"
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
	MaxInlineData = MaxSGE * sgeBytes // 512: rdma_rxe's, the room of MaxSGE scatter entries
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

// Device is an RDMA device over one or more Links: the GID table, the QP
// number space, PDs, MRs, CQs, SRQs and QPs, and one engine per link that
// moves packets between its link and the QPs it owns.
//
// Each engine's loop runs either in real time (Run, or Start) or step by
// step under a caller's control (Step), never both. An engine holds its
// own lock (the engine lock) while it processes a batch; control
// operations on a QP (modify, query, destroy) take the lock of the QP's
// engine only, and the device-wide operations (create, register, query)
// take the device lock, which no engine holds while it processes packets.
// The QP table and the GID table are read by the engines without a lock.
// Posting work requests and polling CQs take neither.
type Device struct {
	name    string
	clock   Clock
	mac     [6]byte
	linkMTU int
	portMTU verbs.MTU
	attr    verbs.DeviceAttr
	// icrcBlind is set for links that cannot show a received frame's IP
	// header as it was on the wire (linkcap.ICRCBlind).
	icrcBlind bool
	// linkLoopback: the link delivers frames to the device's own
	// addresses itself (linkcap.DeliversToSelf).
	linkLoopback bool
	// groups joins the multicast groups of mcast on the interface: link
	// 0's GroupJoiner, or nil.
	groups GroupJoiner

	// eng holds the engines, one per link; a QP belongs to one of them.
	eng []*engine

	mu      sync.Mutex // the device lock: tables and object counts
	mrt     *mr.Table
	rng     *rand.Rand
	gids    [GIDTableLen]bth.GID
	gidSnap atomic.Pointer[gidTable]  // what the engines read, replaced on change
	host    atomic.Pointer[hostGroup] // the devices of its host (JoinHost), or nil
	qps     []atomic.Pointer[QP]      // by QPN - firstQPN
	gsi     atomic.Pointer[QP]        // QP1
	// live lists the QPs that exist, QP1 included, in no order (each
	// QP's liveIx is its place), so that what looks at every QP does not
	// scan the whole table.
	live    []*QP
	nextQPN int
	nsrq    int // SRQs created, to spread them over the engines
	// xrcSRQs holds the XRC SRQs by number (read by the engines without
	// the device lock); nextSRQN is the next number to try, under mu.
	xrcSRQs  sync.Map // uint32 -> *SRQ
	nextSRQN uint32
	nxrcd    int // XRC domains opened, to spread them over the engines
	cnt      verbs.Counters
	closed   atomic.Bool // set under mu
	// portDown: PortDown was called and PortUp not since.
	portDown bool
	// mcast holds the multicast groups, their QPs and their memberships
	// on the link (mcast.go), changed under mu and mcMu, read by the
	// engines under mcMu; mcTotal counts the attachments, under mu.
	mcMu    sync.RWMutex
	mcast   map[bth.GID]mcGroup
	mcTotal int

	events eventQueue

	// Tracing: tracing is set while someone subscribes (trace.go);
	// closedCh is closed by Close.
	tracing  atomic.Bool
	tr       tracer
	closedCh chan struct{}
	onClose  []func() // run by Close, under mu to add

	running atomic.Bool
	mode    EngineMode    // resolved: never EngineAuto
	spinFor time.Duration // adaptive mode's spin after the last activity
	stop    context.CancelFunc
	done    chan struct{}
}

// gidTable is a snapshot of the GID table: the entries by index and the
// addresses of the non-empty ones.
type gidTable struct {
	gids  [GIDTableLen]bth.GID
	addrs []netip.Addr
}

// Open creates a device on link. The device is idle until Run, Start or
// Step drives it.
func Open(link Link, opts *Options) (*Device, error) {
	return OpenLinks([]Link{link}, opts)
}

// MaxEngines bounds the links (engines) of one device.
const MaxEngines = 64

// OpenLinks creates a device with one engine per link, such as one AF_XDP
// socket per receive queue of a multi-queue interface. The links must
// share the interface: its MTU, hardware address and the facts of its
// Caps (linkcap.DeliversToSelf, linkcap.ICRCBlind) are link 0's, and the
// device joins multicast groups through link 0. A link that claims a
// capability without its interface is refused (OpsOf). A QP
// belongs to the engine of its QP number modulo len(links) (a QP on a
// shared receive queue, to the SRQ's engine); a frame that arrives on
// another engine's link is handed to the owner. With one link it is Open.
func OpenLinks(links []Link, opts *Options) (*Device, error) {
	if len(links) == 0 || len(links) > MaxEngines {
		return nil, fmt.Errorf("roce: %d links, a device takes 1 to %d", len(links), MaxEngines)
	}
	if opts == nil {
		opts = &Options{}
	}
	link := links[0]
	d := &Device{name: opts.Name, clock: opts.Clock, linkMTU: link.MTU()}
	if d.name == "" {
		d.name = "sroce0"
	}
	if d.clock == nil {
		d.clock = SystemClock()
	}
	copy(d.mac[:], link.HardwareAddr())
	ops := make([]LinkOps, len(links))
	for i, l := range links {
		o, err := OpsOf(l)
		if err != nil {
			return nil, err
		}
		ops[i] = o
	}
	// The facts about the interface are link 0's, as its MTU and address.
	d.groups = ops[0].Groups
	d.icrcBlind = ops[0].Caps&linkcap.ICRCBlind != 0
	d.linkLoopback = ops[0].Caps&linkcap.DeliversToSelf != 0
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
	d.qps = make([]atomic.Pointer[QP], MaxQP)
	d.mcast = make(map[bth.GID]mcGroup)
	d.nextQPN = firstQPN
	ipID := uint16(d.rng.Uint32())
	d.mode = resolveEngine(opts.Engine)
	if d.mode > EngineInline {
		return nil, fmt.Errorf("roce: unknown engine mode %d", opts.Engine)
	}
	if d.mode == EngineInline {
		for _, o := range ops {
			if o.Caps&linkcap.WaitReady == 0 {
				d.mode = EngineSleep
			}
		}
	}
	d.spinFor = opts.SpinFor
	if d.spinFor <= 0 {
		d.spinFor = DefaultSpinFor
	}
	for i, l := range links {
		if l.MTU() != d.linkMTU {
			return nil, fmt.Errorf("roce: link %d has MTU %d, link 0 %d", i, l.MTU(), d.linkMTU)
		}
		d.eng = append(d.eng, newEngine(d, i, l, ops[i], opts, ipID))
	}
	if len(links) > 1 {
		for _, e := range d.eng {
			e.initInbox(len(links))
		}
	}
	d.events.init()
	d.closedCh = make(chan struct{})
	d.attr = verbs.DeviceAttr{
		MaxQP: MaxQP, MaxQPWR: MaxQPWR, MaxSGE: MaxSGE, MaxInlineData: MaxInlineData,
		MaxCQ: 1 << 16, MaxCQE: MaxCQE, MaxMR: mr.DefaultMaxMR, MaxPD: 1 << 16,
		MaxQPRdAtom: qp.MaxRdAtomic, MaxQPInitRdAtom: qp.MaxRdAtomic, MaxSRQ: 1 << 16,
		MaxSRQWR: MaxSRQWR, MaxMsgSize: qp.MaxMsgSize, PhysPortCnt: 1,
		AtomicCapability: "ATOMIC_HCA",
		MaxMcastGrp:      MaxMcastGrp, MaxMcastQPAttach: MaxMcastQPAttach, MaxTotalMcastQPAttach: MaxTotalMcastQPAttach,
	}
	return d, nil
}

// Name returns the device name.
func (d *Device) Name() string { return d.name }

// Link returns the link of the device's first engine.
func (d *Device) Link() Link { return d.eng[0].link }

// Links returns the links of the device's engines, by engine.
func (d *Device) Links() []Link {
	ls := make([]Link, len(d.eng))
	for i, e := range d.eng {
		ls[i] = e.link
	}
	return ls
}

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
	return d.gidSnap.Load().gids[index], nil
}

// refreshGIDs publishes a new snapshot of the GID table; callers hold the
// device lock (or own the device still).
func (d *Device) refreshGIDs() {
	t := &gidTable{gids: d.gids}
	for _, g := range d.gids {
		if !g.IsZero() {
			t.addrs = append(t.addrs, g.Addr())
		}
	}
	d.gidSnap.Store(t)
}

// Counters returns a snapshot of the device's counters by name: the sums
// over its engines.
func (d *Device) Counters() map[string]uint64 {
	c := d.sumCounters()
	return c.Map()
}

// Counter returns one counter. It costs what Counters does, less the
// map: a look at each QP.
func (d *Device) Counter(c verbs.Counter) uint64 {
	s := d.sumCounters()
	return s[c]
}

// gsiCount is 1 when QP1 exists, else 0 (under the device lock).
func (d *Device) gsiCount() int {
	if d.gsi.Load() != nil {
		return 1
	}
	return 0
}

// liveQPs returns the QPs that exist now, QP1 included.
func (d *Device) liveQPs() []*QP {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]*QP(nil), d.live...)
}

// sumCounters adds up the device's (with its destroyed QPs'), its live
// QPs' and its engines' counters.
func (d *Device) sumCounters() verbs.Counters {
	d.mu.Lock()
	sum := d.cnt
	for _, q := range d.live {
		q.mu.Lock()
		for i, v := range q.cnt {
			sum[i] += v
		}
		q.mu.Unlock()
	}
	d.mu.Unlock()
	for _, e := range d.eng {
		e.mu.Lock()
		for i, v := range e.cnt {
			sum[i] += v
		}
		e.mu.Unlock()
	}
	return sum
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

// Close stops the loops started by Start, sends what is left in the
// transmit batches, closes the links and refuses further work. Objects
// are not destroyed; their memory is simply no longer touched.
func (d *Device) Close() error {
	d.mu.Lock()
	if d.closed.Load() {
		d.mu.Unlock()
		return ErrClosed
	}
	d.closed.Store(true)
	stop, done := d.stop, d.done
	d.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
	// Frames still in the transmit batches (an inline post's held frames)
	// may belong to UD or UC sends that have already completed: send
	// them before the links go, and give back the buffers links lent.
	for _, e := range d.eng {
		e.mu.Lock()
		e.flushTx()
		e.returnTx()
		e.mu.Unlock()
	}
	d.mu.Lock()
	d.leaveAllGroups()
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
	var errs []error
	for _, e := range d.eng {
		errs = append(errs, e.link.Close())
	}
	return errors.Join(errs...)
}

// OnClose makes Close call f once the device is closed (its trace
// subscriptions ended), before Close returns; on a closed device f runs at
// once. f must not wait long: Close waits for it.
func (d *Device) OnClose(f func()) {
	d.mu.Lock()
	if !d.closed.Load() {
		d.onClose = append(d.onClose, f)
		d.mu.Unlock()
		return
	}
	d.mu.Unlock()
	f()
}

// Closed returns a channel that is closed when the device closes.
func (d *Device) Closed() <-chan struct{} { return d.closedCh }

// Run is the device loop in real time: one goroutine per engine, each
// waiting for frames from its link, the earliest timer of its QPs, posted
// work or frames handed over by another engine, and processing them. How
// they wait is the device's EngineMode; spinning modes lock each
// goroutine to its OS thread. Engine 0 runs on the calling goroutine. Run
// returns when ctx is done or a link fails (the other engines stop then
// too), once every engine's goroutine has ended.
func (d *Device) Run(ctx context.Context) error {
	if !d.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer d.running.Store(false)
	if len(d.eng) == 1 {
		return d.eng[0].run(ctx)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make([]error, len(d.eng))
	var wg sync.WaitGroup
	for i, e := range d.eng[1:] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i+1] = e.run(ctx)
			cancel()
		}()
	}
	errs[0] = d.eng[0].run(ctx)
	cancel()
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// Step runs every engine's loop once at virtual time now without
// blocking: each takes posted work, reads the frames its link has ready,
// fires the timers due at now and transmits what its QPs have to send. It
// reports whether it did anything; callers repeat it until it reports
// false, then advance time to the earliest of NextDeadline and the links'
// next delivery.
func (d *Device) Step(now monotime.Time) bool {
	did := false
	for _, e := range d.eng {
		e.mu.Lock()
		if d.closed.Load() {
			e.mu.Unlock()
			return false
		}
		if busy, _ := e.step(now, 0, holdNone); busy {
			did = true
		}
		e.mu.Unlock()
	}
	return did
}

// NextDeadline returns the earliest QP timer, if any.
func (d *Device) NextDeadline() (monotime.Time, bool) {
	var dl monotime.Time
	found := false
	for _, e := range d.eng {
		e.mu.Lock()
		t, ok := e.nextDeadline()
		e.mu.Unlock()
		if ok && (!found || t < dl) {
			dl, found = t, true
		}
	}
	return dl, found
}
