// Package testbed is the engine's test bed, shared by every test that
// drives roce devices: two or more devices over memlink's in-memory
// Ethernet, in virtual time (New, driven by memlink.Sim) or on a running
// loop (Pair, OpenNode), the connection defaults the engine's tests agree
// on (RC), and the rdma_rxe rules checker (Rules) that sees every frame
// the devices send. roce's own tests (package roce_test) and the daemon's
// conformance test use it; tests inside package roce cannot, since this
// package imports roce.
package testbed

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/roce/memlink"
	"github.com/sroce/sroce/verbs"
)

// AllAccess is every access flag of a memory region or a QP.
const AllAccess = mr.AccessLocalWrite | mr.AccessRemoteWrite | mr.AccessRemoteRead | mr.AccessRemoteAtomic

// Node is one device on the simulated Ethernet.
type Node struct {
	Dev  *roce.Device
	Port *memlink.Port
	PD   *roce.PD
	SCQ  *roce.CQ // send completions
	RCQ  *roce.CQ // receive completions
	GID  bth.GID
	MAC  [6]byte
	WCs  []verbs.WC // completions polled so far (Poll)
}

// Bed is two or more devices behind a router. A bed from New runs in
// virtual time: nothing moves until Run (or Sim) steps the devices and
// advances Clock. A bed from Pair or FromNodes runs its devices' loops in
// the clock's time and has no Sim.
type Bed struct {
	T      testing.TB
	Clock  *memlink.VirtualClock
	Router *memlink.Router
	Sim    *memlink.Sim
	Nodes  []*Node
	Rules  *Rules // checks every frame sent against rdma_rxe's rules
}

// Options shape a bed from New; the zero value is two IPv4 devices on
// a 9000-byte link without impairments.
type Options struct {
	Imp     memlink.Impairments
	Seed    uint64 // the router's; 0 picks one (the failure message has it)
	LinkMTU int    // default 9000
	Nodes   int    // default 2
	IPv6    bool
	CQE     int // entries of each CQ, default 4096
	// Link, when set, wraps node i's router port in another Link.
	Link func(i int, p *memlink.Port) roce.Link
}

// SetTap makes fn see every frame sent, after the rules check it.
func (b *Bed) SetTap(fn func(from *memlink.Port, f []byte)) {
	b.Router.SetTap(func(from *memlink.Port, f []byte) {
		b.Rules.Frame(f)
		if fn != nil {
			fn(from, f)
		}
	})
}

// New opens the devices of a bed in virtual time: node i has MAC
// 02:00:00:00:00:0i+1 and address 10.0.0.i+1 (fd00::i+1 with IPv6), a PD
// and two CQs. The devices close when the test ends.
func New(t testing.TB, o Options) *Bed {
	t.Helper()
	if o.LinkMTU == 0 {
		o.LinkMTU = 9000
	}
	if o.Nodes == 0 {
		o.Nodes = 2
	}
	if o.CQE == 0 {
		o.CQE = 4096
	}
	clock := new(memlink.VirtualClock)
	router := memlink.NewRouter(clock, o.Seed, o.Imp)
	b := &Bed{T: t, Clock: clock, Router: router, Rules: NewRules(t)}
	b.Sim = &memlink.Sim{Clock: clock, Router: router}
	b.SetTap(nil)
	for i := 0; i < o.Nodes; i++ {
		mac := net.HardwareAddr{0x02, 0, 0, 0, 0, byte(i + 1)}
		port := router.NewPort(mac, o.LinkMTU)
		addr := netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)})
		if o.IPv6 {
			addr = netip.MustParseAddr(fmt.Sprintf("fd00::%d", i+1))
		}
		gid := bth.GIDFromAddr(addr)
		var link roce.Link = port
		if o.Link != nil {
			link = o.Link(i, port)
		}
		dev, err := roce.Open(link, &roce.Options{Name: fmt.Sprintf("sroce%d", i), Clock: clock,
			GIDs: []bth.GID{gid}, Rand: rand.NewPCG(router.Seed(), uint64(i))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { dev.Close() })
		n := newNode(t, dev, port, gid, o.CQE)
		b.Nodes = append(b.Nodes, n)
		b.Sim.Nodes = append(b.Sim.Nodes, dev)
	}
	return b
}

// newNode gives dev a PD and two CQs of cqe entries.
func newNode(t testing.TB, dev *roce.Device, port *memlink.Port, gid bth.GID, cqe int) *Node {
	t.Helper()
	pd, err := dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	scq, err := dev.CreateCQ(cqe, nil)
	if err != nil {
		t.Fatal(err)
	}
	rcq, err := dev.CreateCQ(cqe, nil)
	if err != nil {
		t.Fatal(err)
	}
	n := &Node{Dev: dev, Port: port, PD: pd, SCQ: scq, RCQ: rcq, GID: gid}
	copy(n.MAC[:], port.HardwareAddr())
	return n
}

// OpenNode opens and starts a device over link, whose frames go through
// port, with gid, a PD and two CQs of cqe entries; the device closes when
// the test ends.
func OpenNode(t testing.TB, link roce.Link, port *memlink.Port, gid bth.GID, opts roce.Options, cqe int) *Node {
	t.Helper()
	opts.GIDs = []bth.GID{gid}
	dev, err := roce.Open(link, &opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := dev.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	return newNode(t, dev, port, gid, cqe)
}

// FromNodes is a bed of nodes whose loops run (OpenNode): it has no Sim.
// When router is not nil, the rules checker sees its frames.
func FromNodes(t testing.TB, router *memlink.Router, nodes ...*Node) *Bed {
	b := &Bed{T: t, Router: router, Nodes: nodes, Rules: NewRules(t)}
	if router != nil {
		b.SetTap(nil)
	}
	return b
}

// Pair opens two started devices in mode on a new router reading clock
// (roce.SystemClock for real time, a *memlink.VirtualClock to hold time
// still), whose seed also numbers their MACs (02:00:00:00:seed:i) and
// subnet (10.seed.0.i+1), each over the link wrap makes of its port
// (nil: the port itself).
func Pair(t testing.TB, clock roce.Clock, seed byte, mode roce.EngineMode, cqe int, wrap func(*memlink.Port) roce.Link) *Bed {
	t.Helper()
	router := memlink.NewRouter(clock, uint64(seed), memlink.Impairments{})
	var nodes []*Node
	for i := 0; i < 2; i++ {
		port := router.NewPort(net.HardwareAddr{2, 0, 0, 0, seed, byte(i)}, 1500)
		gid := bth.GIDFromAddr(netip.AddrFrom4([4]byte{10, seed, 0, byte(i + 1)}))
		var link roce.Link = port
		if wrap != nil {
			link = wrap(port)
		}
		nodes = append(nodes, OpenNode(t, link, port, gid, roce.Options{Clock: clock, Engine: mode}, cqe))
	}
	b := FromNodes(t, router, nodes...)
	if vc, ok := clock.(*memlink.VirtualClock); ok {
		b.Clock = vc
	}
	return b
}

// AHTo returns the path from n to peer.
func (n *Node) AHTo(peer *Node) verbs.AHAttr {
	return verbs.AHAttr{DGID: peer.GID, DMAC: peer.MAC, HopLimit: 64}
}

// RC is a connection's settings; zero fields take the defaults (Defaults).
type RC struct {
	MTU        verbs.MTU
	PSNA, PSNB bth.PSN // first PSNs of the two ends of PairQPs
	Timeout    uint8
	Retry, RNR uint8
	MinRNR     uint8
	RdAtomic   uint8
	NoAccess   bool // the QPs grant no remote access
	MaxWR      uint32
	MaxSGE     uint32
	MaxInline  uint32
	SigAll     bool
	QPType     verbs.QPType
	SRQA, SRQB *roce.SRQ // PairQPs's ends' SRQs
}

// Defaults fills the zero fields of o: path MTU 1024, local ACK timeout
// 14 (67 ms), 7 retries and RNR retries, minimum RNR timer 1, 16 READs
// and atomics in flight each way, 1024 WRs and 8 SGEs per queue, RC.
func (o *RC) Defaults() {
	if o.MTU == 0 {
		o.MTU = verbs.MTU1024
	}
	if o.Timeout == 0 {
		o.Timeout = 14
	}
	if o.Retry == 0 {
		o.Retry = 7
	}
	if o.RNR == 0 {
		o.RNR = 7
	}
	if o.MinRNR == 0 {
		o.MinRNR = 1
	}
	if o.RdAtomic == 0 {
		o.RdAtomic = 16
	}
	if o.MaxWR == 0 {
		o.MaxWR = 1024
	}
	if o.MaxSGE == 0 {
		o.MaxSGE = 8
	}
	if o.QPType == 0 {
		o.QPType = verbs.QPTypeRC
	}
}

// Cap is the QP capacity o asks for.
func (o *RC) Cap() verbs.QPCap {
	return verbs.QPCap{MaxSendWR: o.MaxWR, MaxRecvWR: o.MaxWR, MaxSendSGE: o.MaxSGE, MaxRecvSGE: o.MaxSGE,
		MaxInlineData: o.MaxInline}
}

// ConnectAttr is what takes a QP to RTS toward the QP dqpn at ah with o's
// settings, sending from sqPSN and expecting rqPSN.
func (o *RC) ConnectAttr(ah verbs.AHAttr, dqpn bth.QPN, sqPSN, rqPSN bth.PSN) *roce.ConnectAttr {
	acc := AllAccess
	if o.NoAccess {
		acc = 0
	}
	return &roce.ConnectAttr{Access: acc, AH: ah, PathMTU: o.MTU, DestQPN: dqpn,
		RQPSN: rqPSN, MaxDestRdAtomic: o.RdAtomic, MinRNRTimer: o.MinRNR, SQPSN: sqPSN, Timeout: o.Timeout,
		RetryCnt: o.Retry, RNRRetry: o.RNR, MaxRdAtomic: o.RdAtomic}
}

// CreateQP creates an unconnected QP on n (o's defaults must be filled).
func (b *Bed) CreateQP(n *Node, o RC, srq *roce.SRQ) *roce.QP {
	b.T.Helper()
	q, err := n.PD.CreateQP(&roce.QPInitAttr{Type: o.QPType, SendCQ: n.SCQ, RecvCQ: n.RCQ, SRQ: srq,
		SigAll: o.SigAll, Cap: o.Cap()})
	if err != nil {
		b.T.Fatal(err)
	}
	return q
}

// Connect moves q (on n) to RTS toward the peer QP rqpn on peer, and
// tells the rules checker.
func (b *Bed) Connect(q *roce.QP, n *Node, rqpn bth.QPN, peer *Node, o RC, sqPSN, rqPSN bth.PSN) {
	b.T.Helper()
	if err := q.Connect(o.ConnectAttr(n.AHTo(peer), rqpn, sqPSN, rqPSN)); err != nil {
		b.T.Fatal(err)
	}
	b.Rules.Connected(QPAddr{n.GID.Addr(), q.QPN()}, QPAddr{peer.GID.Addr(), rqpn}, o.MTU.Bytes())
}

// PairQPs creates a connected pair of QPs between nodes 0 and 1.
func (b *Bed) PairQPs(o RC) (qa, qb *roce.QP) {
	b.T.Helper()
	o.Defaults()
	a, c := b.Nodes[0], b.Nodes[1]
	qa = b.CreateQP(a, o, o.SRQA)
	qb = b.CreateQP(c, o, o.SRQB)
	b.Connect(qa, a, qb.QPN(), c, o, o.PSNA, o.PSNB)
	b.Connect(qb, c, qa.QPN(), a, o, o.PSNB, o.PSNA)
	return qa, qb
}

// Reg registers a buffer of size bytes filled with a pattern that seed
// starts; access 0 is AllAccess.
func (n *Node) Reg(t testing.TB, size int, access mr.Access, seed byte) (*roce.MR, []byte) {
	t.Helper()
	buf := make([]byte, size)
	for i := range buf {
		buf[i] = seed + byte(i*7) + byte(i>>8)
	}
	if access == 0 {
		access = AllAccess
	}
	m, err := n.PD.RegMR(buf, access)
	if err != nil {
		t.Fatal(err)
	}
	return m, buf
}

// Poll collects completions from both CQs of n into WCs.
func (n *Node) Poll() int {
	var tmp [64]verbs.WC
	total := 0
	for _, cq := range []*roce.CQ{n.SCQ, n.RCQ} {
		for {
			k := cq.Poll(tmp[:])
			if k == 0 {
				break
			}
			n.WCs = append(n.WCs, tmp[:k]...)
			total += k
		}
	}
	return total
}

// Run advances the simulation until cond holds, for at most 600 s of
// virtual time.
func (b *Bed) Run(cond func() bool) {
	b.T.Helper()
	b.RunLimit(cond, 600*time.Second)
}

// RunLimit is Run for at most limit of virtual time.
func (b *Bed) RunLimit(cond func() bool, limit time.Duration) {
	b.T.Helper()
	err := b.Sim.RunUntil(func() bool {
		for _, n := range b.Nodes {
			n.Poll()
		}
		return cond()
	}, limit)
	if err != nil {
		b.T.Fatalf("%v (router seed %d, virtual time %v)", err, b.Router.Seed(), b.Clock.Now())
	}
}

// WaitWCs runs until n has at least k completions and returns them all,
// clearing the list.
func (b *Bed) WaitWCs(n *Node, k int) []verbs.WC {
	b.T.Helper()
	b.Run(func() bool { return len(n.WCs) >= k })
	w := n.WCs
	n.WCs = nil
	return w
}
