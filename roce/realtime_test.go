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
	tb "github.com/sroce/sroce/internal/testbed"
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
		n := &node{Dev: dev, Port: port, PD: pd, GID: gid}
		copy(n.MAC[:], mac)
		nodes = append(nodes, n)
	}
	b := &testbed{tb.FromNodes(t, router, nodes...)}
	const pairs, msgs, size = 4, 400, 3000
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for p := 0; p < pairs; p++ {
		a, c := nodes[0], nodes[1]
		a.SCQ, _ = a.Dev.CreateCQ(1024, nil)
		a.RCQ, _ = a.Dev.CreateCQ(1024, nil)
		c.SCQ, _ = c.Dev.CreateCQ(1024, nil)
		c.RCQ, _ = c.Dev.CreateCQ(1024, nil)
		o := rcOpts{MaxWR: 64, MaxSGE: 1}
		o.Defaults()
		qa := b.CreateQP(a, o, nil)
		qc := b.CreateQP(c, o, nil)
		b.Connect(qa, a, qc.QPN(), c, o, 100, 200)
		b.Connect(qc, c, qa.QPN(), a, o, 200, 100)
		scq, rcq := a.SCQ, c.RCQ
		src, sbuf := a.Reg(t, 64*size, 0, 1)
		dst, dbuf := c.Reg(t, 64*size, 0, 2)
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
				n.Dev.Counters()
				n.Dev.QueryPort()
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
	if nodes[0].Dev.Counter(verbs.CntSentPkts) == 0 {
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
		n := &node{Dev: dev, Port: port, PD: pd, GID: gid}
		n.SCQ, _ = dev.CreateCQ(64, nil)
		n.RCQ, _ = dev.CreateCQ(64, nil)
		copy(n.MAC[:], mac)
		nodes = append(nodes, n)
	}
	b := &testbed{tb.FromNodes(t, router, nodes...)}
	a, c := nodes[0], nodes[1]
	ch := a.Dev.CreateCompChannel()
	a.SCQ, _ = a.Dev.CreateCQ(64, ch)
	qa, _ := b.PairQPs(rcOpts{})
	lm, _ := a.Reg(t, 4096, 0, 1)
	rm, _ := c.Reg(t, 4096, 0, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := 0; i < 20; i++ {
		a.SCQ.ReqNotify(false)
		qa.PostSend(&verbs.SendWR{WRID: uint64(i), Opcode: verbs.WROpRDMAWrite, Flags: verbs.Signaled, SGL: []mr.SGE{lm.SGE(0, 4096)}, RemoteAddr: rm.Addr(), RKey: rm.RKey()})
		cq, err := ch.GetEvent(ctx)
		if err != nil || cq != a.SCQ {
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
	port := router.NewPort(net.HardwareAddr{2, 0, 0, 0, 3, byte(i)}, mtu)
	gid := bth.GIDFromAddr(netip.AddrFrom4([4]byte{10, 3, 0, byte(i + 1)}))
	return tb.OpenNode(t, port, port, gid, roce.Options{Clock: clock}, 4096)
}

// linkedPair opens two devices in mode on a new real-time router (see
// testbed.Pair).
func linkedPair(t *testing.T, seed byte, mode roce.EngineMode, cqe int, wrap func(*memlink.Port) roce.Link) *testbed {
	return &testbed{tb.Pair(t, roce.SystemClock(), seed, mode, cqe, wrap)}
}

// forEachEngine runs a real-time test once per engine mode.
func forEachEngine(t *testing.T, f func(*testing.T, roce.EngineMode)) {
	for _, m := range []roce.EngineMode{roce.EngineSleep, roce.EngineSpin, roce.EngineAdaptive, roce.EngineInline} {
		t.Run(m.String(), func(t *testing.T) { f(t, m) })
	}
}
