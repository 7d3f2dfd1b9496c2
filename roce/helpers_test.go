package roce_test

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

// node is one device on the simulated Ethernet.
type node struct {
	dev  *roce.Device
	port *memlink.Port
	pd   *roce.PD
	scq  *roce.CQ
	rcq  *roce.CQ
	gid  bth.GID
	mac  [6]byte
	wcs  []verbs.WC // completions polled so far
}

// testbed is two or more devices behind a router, in virtual time.
type testbed struct {
	t      testing.TB
	clock  *memlink.VirtualClock
	router *memlink.Router
	sim    *memlink.Sim
	nodes  []*node
	rules  *peerRules // checks every frame sent against rdma_rxe's rules
}

// setTap makes fn see every frame sent, after the peer rules check it.
func (b *testbed) setTap(fn func(from *memlink.Port, f []byte)) {
	b.router.SetTap(func(from *memlink.Port, f []byte) {
		b.rules.frame(f)
		if fn != nil {
			fn(from, f)
		}
	})
}

type bedOpts struct {
	imp     memlink.Impairments
	seed    uint64
	linkMTU int
	nodes   int
	ipv6    bool
	cqe     int
	// link, when set, wraps node i's router port in another Link.
	link func(i int, p *memlink.Port) roce.Link
}

func newBed(t testing.TB, o bedOpts) *testbed {
	t.Helper()
	if o.linkMTU == 0 {
		o.linkMTU = 9000
	}
	if o.nodes == 0 {
		o.nodes = 2
	}
	if o.cqe == 0 {
		o.cqe = 4096
	}
	clock := new(memlink.VirtualClock)
	router := memlink.NewRouter(clock, o.seed, o.imp)
	b := &testbed{t: t, clock: clock, router: router, rules: newPeerRules(t)}
	b.sim = &memlink.Sim{Clock: clock, Router: router}
	b.setTap(nil)
	for i := 0; i < o.nodes; i++ {
		mac := net.HardwareAddr{0x02, 0, 0, 0, 0, byte(i + 1)}
		port := router.NewPort(mac, o.linkMTU)
		addr := netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)})
		if o.ipv6 {
			addr = netip.MustParseAddr(fmt.Sprintf("fd00::%d", i+1))
		}
		gid := bth.GIDFromAddr(addr)
		var link roce.Link = port
		if o.link != nil {
			link = o.link(i, port)
		}
		dev, err := roce.Open(link, &roce.Options{Name: fmt.Sprintf("sroce%d", i), Clock: clock,
			GIDs: []bth.GID{gid}, Rand: rand.NewPCG(router.Seed(), uint64(i))})
		if err != nil {
			t.Fatal(err)
		}
		pd, err := dev.AllocPD()
		if err != nil {
			t.Fatal(err)
		}
		scq, err := dev.CreateCQ(o.cqe, nil)
		if err != nil {
			t.Fatal(err)
		}
		rcq, err := dev.CreateCQ(o.cqe, nil)
		if err != nil {
			t.Fatal(err)
		}
		n := &node{dev: dev, port: port, pd: pd, scq: scq, rcq: rcq, gid: gid}
		copy(n.mac[:], mac)
		b.nodes = append(b.nodes, n)
		b.sim.Nodes = append(b.sim.Nodes, dev)
	}
	t.Cleanup(func() {
		for _, n := range b.nodes {
			n.dev.Close()
		}
	})
	return b
}

// ah returns the path from n to peer.
func (n *node) ahTo(peer *node) verbs.AHAttr {
	return verbs.AHAttr{DGID: peer.gid, DMAC: peer.mac, HopLimit: 64}
}

type rcOpts struct {
	mtu        verbs.MTU
	psnA, psnB bth.PSN
	timeout    uint8
	retry, rnr uint8
	minRNR     uint8
	rdAtomic   uint8
	noAccess   bool
	maxWR      uint32
	maxSGE     uint32
	maxInline  uint32
	sigAll     bool
	qpType     verbs.QPType
	srqA, srqB *roce.SRQ
}

func (o *rcOpts) defaults() {
	if o.mtu == 0 {
		o.mtu = verbs.MTU1024
	}
	if o.timeout == 0 {
		o.timeout = 14
	}
	if o.retry == 0 {
		o.retry = 7
	}
	if o.rnr == 0 {
		o.rnr = 7
	}
	if o.minRNR == 0 {
		o.minRNR = 1
	}
	if o.rdAtomic == 0 {
		o.rdAtomic = 16
	}
	if o.maxWR == 0 {
		o.maxWR = 1024
	}
	if o.maxSGE == 0 {
		o.maxSGE = 8
	}
	if o.qpType == 0 {
		o.qpType = verbs.QPTypeRC
	}
}

// createQP creates an unconnected QP on n.
func (b *testbed) createQP(n *node, o rcOpts, srq *roce.SRQ) *roce.QP {
	b.t.Helper()
	q, err := n.pd.CreateQP(&roce.QPInitAttr{Type: o.qpType, SendCQ: n.scq, RecvCQ: n.rcq, SRQ: srq,
		SigAll: o.sigAll,
		Cap: verbs.QPCap{MaxSendWR: o.maxWR, MaxRecvWR: o.maxWR, MaxSendSGE: o.maxSGE, MaxRecvSGE: o.maxSGE,
			MaxInlineData: o.maxInline}})
	if err != nil {
		b.t.Fatal(err)
	}
	return q
}

// connect moves q (on n) to RTS toward the peer QP rq on peer.
func (b *testbed) connect(q *roce.QP, n *node, rqpn bth.QPN, peer *node, o rcOpts, sqPSN, rqPSN bth.PSN) {
	b.t.Helper()
	acc := mr.AccessRemoteWrite | mr.AccessRemoteRead | mr.AccessRemoteAtomic | mr.AccessLocalWrite
	if o.noAccess {
		acc = 0
	}
	if err := q.Connect(&roce.ConnectAttr{Access: acc, AH: n.ahTo(peer), PathMTU: o.mtu, DestQPN: rqpn,
		RQPSN: rqPSN, MaxDestRdAtomic: o.rdAtomic, MinRNRTimer: o.minRNR, SQPSN: sqPSN, Timeout: o.timeout,
		RetryCnt: o.retry, RNRRetry: o.rnr, MaxRdAtomic: o.rdAtomic}); err != nil {
		b.t.Fatal(err)
	}
	b.rules.connected(qpAddr{n.gid.Addr(), q.QPN()}, qpAddr{peer.gid.Addr(), rqpn}, o.mtu.Bytes())
}

// pairQPs creates a connected pair of QPs between nodes 0 and 1.
func (b *testbed) pairQPs(o rcOpts) (qa, qb *roce.QP) {
	b.t.Helper()
	o.defaults()
	a, c := b.nodes[0], b.nodes[1]
	qa = b.createQP(a, o, o.srqA)
	qb = b.createQP(c, o, o.srqB)
	b.connect(qa, a, qb.QPN(), c, o, o.psnA, o.psnB)
	b.connect(qb, c, qa.QPN(), a, o, o.psnB, o.psnA)
	return qa, qb
}

// reg registers a buffer of size bytes filled with pattern bytes.
func (n *node) reg(t testing.TB, size int, access mr.Access, seed byte) (*roce.MR, []byte) {
	t.Helper()
	buf := make([]byte, size)
	for i := range buf {
		buf[i] = seed + byte(i*7) + byte(i>>8)
	}
	if access == 0 {
		access = allAccess
	}
	m, err := n.pd.RegMR(buf, access)
	if err != nil {
		t.Fatal(err)
	}
	return m, buf
}

// poll collects completions from both CQs of n.
func (n *node) poll() int {
	var tmp [64]verbs.WC
	total := 0
	for _, cq := range []*roce.CQ{n.scq, n.rcq} {
		for {
			k := cq.Poll(tmp[:])
			if k == 0 {
				break
			}
			n.wcs = append(n.wcs, tmp[:k]...)
			total += k
		}
	}
	return total
}

// run advances the simulation until cond holds.
func (b *testbed) run(cond func() bool) {
	b.t.Helper()
	b.runLimit(cond, 600*time.Second)
}

func (b *testbed) runLimit(cond func() bool, limit time.Duration) {
	b.t.Helper()
	err := b.sim.RunUntil(func() bool {
		for _, n := range b.nodes {
			n.poll()
		}
		return cond()
	}, limit)
	if err != nil {
		b.t.Fatalf("%v (router seed %d, virtual time %v)", err, b.router.Seed(), b.clock.Now())
	}
}

// waitWCs runs until n has at least k completions and returns them all,
// clearing the list.
func (b *testbed) waitWCs(n *node, k int) []verbs.WC {
	b.t.Helper()
	b.run(func() bool { return len(n.wcs) >= k })
	w := n.wcs
	n.wcs = nil
	return w
}

const allAccess = mr.AccessLocalWrite | mr.AccessRemoteWrite | mr.AccessRemoteRead | mr.AccessRemoteAtomic

type (
	bthPSN = bth.PSN
	bthQPN = bth.QPN
)
