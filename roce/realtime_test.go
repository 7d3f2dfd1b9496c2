package roce_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/roce/memlink"
	"github.com/sroce/sroce/verbs"
)

// TestRealTimeConcurrent runs the devices' real-time loops while several
// goroutines per QP post, poll and query at once: the handoffs between
// application goroutines and the loop must be race-free (go test -race).
func TestRealTimeConcurrent(t *testing.T) { forEachEngine(t, testRealTimeConcurrent) }

func testRealTimeConcurrent(t *testing.T, engine roce.EngineMode) {
	clock := roce.SystemClock()
	router := memlink.NewRouter(clock, 3, memlink.Impairments{})
	var nodes []*node
	for i := 0; i < 2; i++ {
		mac := net.HardwareAddr{2, 0, 0, 0, 1, byte(i)}
		port := router.NewPort(mac, 9000)
		gid := bth.GIDFromAddr(netip.AddrFrom4([4]byte{10, 1, 0, byte(i + 1)}))
		dev, err := roce.Open(port, &roce.Options{Clock: clock, GIDs: []bth.GID{gid}, Engine: engine})
		if err != nil {
			t.Fatal(err)
		}
		if err := dev.Start(); err != nil {
			t.Fatal(err)
		}
		defer dev.Close()
		pd, _ := dev.AllocPD()
		n := &node{dev: dev, port: port, pd: pd, gid: gid}
		copy(n.mac[:], mac)
		nodes = append(nodes, n)
	}
	b := &testbed{t: t, nodes: nodes, rules: newPeerRules(t)}
	const pairs, msgs, size = 4, 400, 3000
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for p := 0; p < pairs; p++ {
		a, c := nodes[0], nodes[1]
		a.scq, _ = a.dev.CreateCQ(1024, nil)
		a.rcq, _ = a.dev.CreateCQ(1024, nil)
		c.scq, _ = c.dev.CreateCQ(1024, nil)
		c.rcq, _ = c.dev.CreateCQ(1024, nil)
		o := rcOpts{maxWR: 64, maxSGE: 1}
		o.defaults()
		qa := b.createQP(a, o, nil)
		qc := b.createQP(c, o, nil)
		b.connect(qa, a, qc.QPN(), c, o, 100, 200)
		b.connect(qc, c, qa.QPN(), a, o, 200, 100)
		scq, rcq := a.scq, c.rcq
		src, sbuf := a.reg(t, 64*size, 0, 1)
		dst, dbuf := c.reg(t, 64*size, 0, 2)
		wg.Add(2)
		go func() { // sender: posts, waits for completions
			defer wg.Done()
			var wcs [16]verbs.WC
			posted, done := 0, 0
			for done < msgs {
				for posted < msgs && posted-done < 32 {
					slot := posted % 64
					binary.BigEndian.PutUint32(sbuf[slot*size:], uint32(posted))
					wrs := []verbs.SendWR{{WRID: uint64(posted), Opcode: verbs.WROpSendWithImm, Imm: uint32(posted),
						Flags: verbs.Signaled, SGL: []mr.SGE{src.SGE(slot*size, size)}}}
					if _, err := qa.PostSendList(wrs); err != nil {
						errs <- err
						return
					}
					posted++
				}
				n, err := scq.Wait(ctx, wcs[:])
				if err != nil {
					errs <- fmt.Errorf("sender wait: %v", err)
					return
				}
				for _, w := range wcs[:n] {
					if w.Status != verbs.WCSuccess || w.WRID != uint64(done) {
						errs <- fmt.Errorf("send completion %+v", w)
						return
					}
					done++
				}
			}
		}()
		go func() { // receiver: keeps receives posted, checks data
			defer wg.Done()
			var wcs [16]verbs.WC
			posted, done := 0, 0
			for done < msgs {
				for posted < msgs && posted-done < 64 {
					slot := posted % 64
					if err := qc.PostRecv(&verbs.RecvWR{WRID: uint64(posted), SGL: []mr.SGE{dst.SGE(slot*size, size)}}); err != nil {
						errs <- err
						return
					}
					posted++
				}
				n, err := rcq.Wait(ctx, wcs[:])
				if err != nil {
					errs <- fmt.Errorf("receiver wait: %v", err)
					return
				}
				for _, w := range wcs[:n] {
					slot := done % 64
					if w.Status != verbs.WCSuccess || w.WRID != uint64(done) || w.Imm != uint32(done) ||
						binary.BigEndian.Uint32(dbuf[slot*size:]) != uint32(done) {
						errs <- fmt.Errorf("receive %d: %+v", done, w)
						return
					}
					done++
				}
			}
		}()
	}
	// Control-path calls race with the loops.
	stop := make(chan struct{})
	var qwg sync.WaitGroup
	qwg.Add(1)
	go func() {
		defer qwg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, n := range nodes {
				n.dev.Counters()
				n.dev.QueryPort()
			}
			time.Sleep(100 * time.Microsecond)
		}
	}()
	wg.Wait()
	close(stop)
	qwg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if nodes[0].dev.Counter(verbs.CntSentPkts) == 0 {
		t.Fatal("nothing sent")
	}
}

// TestCompChannelRealTime waits for completions through a completion
// channel, as an event-driven verbs program does.
func TestCompChannelRealTime(t *testing.T) { forEachEngine(t, testCompChannelRealTime) }

func testCompChannelRealTime(t *testing.T, engine roce.EngineMode) {
	clock := roce.SystemClock()
	router := memlink.NewRouter(clock, 3, memlink.Impairments{Delay: 50 * time.Microsecond})
	var nodes []*node
	for i := 0; i < 2; i++ {
		mac := net.HardwareAddr{2, 0, 0, 0, 2, byte(i)}
		port := router.NewPort(mac, 1500)
		gid := bth.GIDFromAddr(netip.AddrFrom4([4]byte{10, 2, 0, byte(i + 1)}))
		dev, _ := roce.Open(port, &roce.Options{Clock: clock, GIDs: []bth.GID{gid}, Engine: engine})
		dev.Start()
		defer dev.Close()
		pd, _ := dev.AllocPD()
		n := &node{dev: dev, port: port, pd: pd, gid: gid}
		n.scq, _ = dev.CreateCQ(64, nil)
		n.rcq, _ = dev.CreateCQ(64, nil)
		copy(n.mac[:], mac)
		nodes = append(nodes, n)
	}
	b := &testbed{t: t, nodes: nodes, rules: newPeerRules(t)}
	a, c := nodes[0], nodes[1]
	ch := a.dev.CreateCompChannel()
	a.scq, _ = a.dev.CreateCQ(64, ch)
	qa, _ := b.pairQPs(rcOpts{})
	lm, _ := a.reg(t, 4096, 0, 1)
	rm, _ := c.reg(t, 4096, 0, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := 0; i < 20; i++ {
		a.scq.ReqNotify(false)
		qa.PostSend(&verbs.SendWR{WRID: uint64(i), Opcode: verbs.WROpRDMAWrite, Flags: verbs.Signaled, SGL: []mr.SGE{lm.SGE(0, 4096)}, RemoteAddr: rm.Addr(), RKey: rm.RKey()})
		cq, err := ch.GetEvent(ctx)
		if err != nil || cq != a.scq {
			t.Fatalf("%v %v", cq, err)
		}
		ch.AckEvents(cq, 1)
		var wc [2]verbs.WC
		if n := cq.Poll(wc[:]); n != 1 || wc[0].WRID != uint64(i) || wc[0].Status != verbs.WCSuccess {
			t.Fatalf("%d %+v", n, wc[0])
		}
	}
}

// startNode opens device i on router with a real-time loop.
func startNode(t testing.TB, router *memlink.Router, clock roce.Clock, i, mtu int) *node {
	mac := net.HardwareAddr{2, 0, 0, 0, 3, byte(i)}
	port := router.NewPort(mac, mtu)
	gid := bth.GIDFromAddr(netip.AddrFrom4([4]byte{10, 3, 0, byte(i + 1)}))
	return openNode(t, port, port, gid, roce.Options{Clock: clock}, 4096)
}

// openNode opens and starts a device over link, whose frames go through
// port, with gid, a PD and two CQs of cqe entries; the device closes when
// the test ends.
func openNode(t testing.TB, link roce.Link, port *memlink.Port, gid bth.GID, opts roce.Options, cqe int) *node {
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
	pd, _ := dev.AllocPD()
	n := &node{dev: dev, port: port, pd: pd, gid: gid}
	n.scq, _ = dev.CreateCQ(cqe, nil)
	n.rcq, _ = dev.CreateCQ(cqe, nil)
	copy(n.mac[:], port.HardwareAddr())
	return n
}

// linkedPair opens two devices in mode on a new real-time router whose
// seed also numbers their MACs and subnet, each over the link wrap makes
// of its port, and returns the testbed of the two.
func linkedPair(t *testing.T, seed byte, mode roce.EngineMode, cqe int, wrap func(*memlink.Port) roce.Link) *testbed {
	return linkedPairOn(t, roce.SystemClock(), seed, mode, cqe, wrap)
}

// linkedPairOn is linkedPair on clock.
func linkedPairOn(t *testing.T, clock roce.Clock, seed byte, mode roce.EngineMode, cqe int, wrap func(*memlink.Port) roce.Link) *testbed {
	router := memlink.NewRouter(clock, uint64(seed), memlink.Impairments{})
	var nodes []*node
	for i := 0; i < 2; i++ {
		port := router.NewPort(net.HardwareAddr{2, 0, 0, 0, seed, byte(i)}, 1500)
		gid := bth.GIDFromAddr(netip.AddrFrom4([4]byte{10, seed, 0, byte(i + 1)}))
		nodes = append(nodes, openNode(t, wrap(port), port, gid, roce.Options{Clock: clock, Engine: mode}, cqe))
	}
	return &testbed{t: t, nodes: nodes, rules: newPeerRules(t)}
}

// forEachEngine runs a real-time test once per engine mode.
func forEachEngine(t *testing.T, f func(*testing.T, roce.EngineMode)) {
	for _, m := range []roce.EngineMode{roce.EngineSleep, roce.EngineSpin, roce.EngineAdaptive, roce.EngineInline} {
		t.Run(m.String(), func(t *testing.T) { f(t, m) })
	}
}
