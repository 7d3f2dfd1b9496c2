package iface

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/sroce/sroce/internal/nsutil"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/verbs"
)

// mqPrefix names the namespaces of the multi-queue tests.
const mqPrefix = "mqQ"

// mqPorts opens ports with queues queues each on the two ends of a veth
// pair with vethQueues rx and tx queues per end. The returned function
// closes both ports and the pair.
func mqPorts(tb testing.TB, vethQueues, queues int, engine roce.EngineMode) (a, b *Port, done func()) {
	tb.Helper()
	nsutil.Skip(tb)
	pair, err := nsutil.NewPair(nsutil.PairConfig{Prefix: mqPrefix, Veth: nsutil.VethConfig{Queues: vethQueues}})
	if err != nil {
		tb.Fatal(err)
	}
	open := func(ns *nsutil.Namespace, ifname string) *Port {
		var p *Port
		if err := ns.Do(func() (err error) {
			p, err = Open(context.Background(), ifname, Options{Mode: ModeXDP, Queues: queues, Engine: engine})
			return err
		}); err != nil {
			pair.Close()
			tb.Fatal(err)
		}
		return p
	}
	a = open(pair.A, pair.Veth.NameA)
	b = open(pair.B, pair.Veth.NameB)
	return a, b, func() {
		a.Close()
		b.Close()
		pair.Close()
	}
}

// mqSide is one end of an RC connection: the QP, its CQ and its memory.
type mqSide struct {
	qp *roce.QP
	cq *roce.CQ
	mr *roce.MR
}

// mqConn is a connected pair of RC QPs, x on port A and y on port B.
type mqConn struct{ x, y mqSide }

// rcPairs creates n connected RC QP pairs between a and b, each QP with
// its own CQ and bufSize bytes of memory. skewB extra QPs created on b
// first shift b's QP numbers, so that a pair's QPs belong to engines of
// different numbers on the two sides.
func rcPairs(tb testing.TB, a, b *Port, n, skewB, bufSize int) []mqConn {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mk := func(p *Port) mqSide {
		pd, err := p.Device().AllocPD()
		if err != nil {
			tb.Fatal(err)
		}
		cq, err := p.Device().CreateCQ(1024, nil)
		if err != nil {
			tb.Fatal(err)
		}
		m, err := pd.RegMR(make([]byte, bufSize), mr.AccessLocalWrite|mr.AccessRemoteWrite)
		if err != nil {
			tb.Fatal(err)
		}
		q, err := pd.CreateQP(&roce.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
			Cap: verbs.QPCap{MaxSendWR: 256, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			tb.Fatal(err)
		}
		return mqSide{qp: q, cq: cq, mr: m}
	}
	for i := 0; i < skewB; i++ {
		mk(b)
	}
	ia, ib := a.DefaultGIDIndex(), b.DefaultGIDIndex()
	ga, _ := a.GID(ia)
	gb, _ := b.GID(ib)
	conns := make([]mqConn, n)
	for i := range conns {
		c := &conns[i]
		c.x, c.y = mk(a), mk(b)
		connectRC(ctx, tb, a, c.x.qp, ia, gb, c.y.qp.QPN())
		connectRC(ctx, tb, b, c.y.qp, ib, ga, c.x.qp.QPN())
	}
	return conns
}

// writeRounds has every pair WRITE rounds messages of size bytes from the
// first half of one side's buffer into the second half of the other's,
// each with a pattern of the pair, the direction and the round, both ways,
// all pairs at once; after each round it checks the data landed.
func writeRounds(t *testing.T, conns []mqConn, rounds, size int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 2*len(conns))
	run := func(i int, from, to mqSide, dir byte) {
		defer wg.Done()
		half := len(to.mr.Buf()) / 2
		if size > half {
			errs <- fmt.Errorf("%d bytes do not fit half of %d", size, len(to.mr.Buf()))
			return
		}
		var wc [1]verbs.WC
		for r := 0; r < rounds; r++ {
			fill := byte(i*31) ^ byte(r*7) ^ dir
			src := from.mr.Buf()[:size]
			for k := range src {
				src[k] = fill + byte(k)
			}
			if err := from.qp.PostSend(&verbs.SendWR{WRID: uint64(r), Opcode: verbs.WROpRDMAWrite, Flags: verbs.Signaled,
				SGL: []mr.SGE{from.mr.SGE(0, size)}, RemoteAddr: to.mr.Addr() + uint64(half), RKey: to.mr.RKey()}); err != nil {
				errs <- fmt.Errorf("pair %d: %v", i, err)
				return
			}
			n, err := from.cq.WaitTimeout(wc[:], 10*time.Second)
			if err != nil || n != 1 || wc[0].Status != verbs.WCSuccess {
				errs <- fmt.Errorf("pair %d direction %d round %d: %d completions (%v), status %v", i, dir, r, n, err, wc[0].Status)
				return
			}
			// The completion means the peer acknowledged: its memory
			// holds the data. Taking the peer's engine locks
			// (Counters) orders this read after the placement for
			// the race detector.
			to.qp.PD().Device().Counters()
			got := to.mr.Buf()[half : half+size]
			for k := range got {
				if got[k] != fill+byte(k) {
					errs <- fmt.Errorf("pair %d direction %d round %d: byte %d is %#x, want %#x", i, dir, r, k, got[k], fill+byte(k))
					return
				}
			}
			// And the next round's placement after this read.
			to.qp.PD().Device().Counters()
		}
	}
	for i, c := range conns {
		wg.Add(2)
		go run(i, c.x, c.y, 0)
		go run(i, c.y, c.x, 0x80)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// busyEngines counts the engines that read frames from their link.
func busyEngines(st []roce.EngineStats) int {
	n := 0
	for _, s := range st {
		if s.RxFrames > 0 {
			n++
		}
	}
	return n
}

// engineRunning reports whether a goroutine of an engine loop is alive.
func engineRunning() bool {
	buf := make([]byte, 1<<20)
	n := runtime.Stack(buf, true)
	return bytes.Contains(buf[:n], []byte("roce.(*engine).run"))
}

// TestMultiQueueSpread runs 8 RC pairs between two 4-queue ports on a
// 4-queue veth pair. QPs of the same number are on the same engine at
// both ends and veth delivers a frame on the queue it was sent on, so
// every frame arrives at its QP's own engine: the data must be right,
// all four engines must carry frames, and nothing is handed over. Closing
// the ports must stop every engine loop.
func TestMultiQueueSpread(t *testing.T) {
	if engineRunning() {
		t.Fatal("an engine loop runs before the test")
	}
	a, b, done := mqPorts(t, 4, 4, roce.EngineAuto)
	defer done()
	if a.Queues() != 4 || b.Queues() != 4 || a.Device().Engines() != 4 {
		t.Fatalf("queues: A %d, B %d, A's engines %d", a.Queues(), b.Queues(), a.Device().Engines())
	}
	conns := rcPairs(t, a, b, 8, 0, 32768)
	owners := map[int]bool{}
	for _, c := range conns {
		owners[c.x.qp.Engine()] = true
		if c.x.qp.Engine() != c.y.qp.Engine() {
			t.Fatalf("QP %d on engine %d, its peer %d on engine %d", c.x.qp.QPN(), c.x.qp.Engine(), c.y.qp.QPN(), c.y.qp.Engine())
		}
	}
	if len(owners) != 4 {
		t.Errorf("8 QPs on %d engines, want 4", len(owners))
	}
	writeRounds(t, conns, 20, 12000)
	for name, p := range map[string]*Port{"A": a, "B": b} {
		st := p.Device().EngineStats()
		t.Logf("%s: %+v", name, st)
		if n := busyEngines(st); n != 4 {
			t.Errorf("%s: %d engines received frames, want 4", name, n)
		}
		if v, ok := p.Stat("queue3_rx_frames"); !ok || v < st[3].RxFrames || v == 0 {
			t.Errorf("%s: counter queue3_rx_frames %d (%v), engine 3 received %d", name, v, ok, st[3].RxFrames)
		}
		for i, s := range st {
			if s.HandedOff != 0 || s.HandoffFull != 0 {
				t.Errorf("%s engine %d handed %d frames over (%d dropped), want none", name, i, s.HandedOff, s.HandoffFull)
			}
		}
	}
	done()
	deadline := time.Now().Add(5 * time.Second)
	for engineRunning() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if engineRunning() {
		t.Error("an engine loop still runs 5s after both ports closed")
	}
}

// TestMultiQueueHandoff shifts B's QP numbers by one, so that each pair's
// QPs are on engines of different numbers: every frame arrives at B on
// the queue of A's engine, which is the wrong engine, and the same the
// other way. The engines must hand the frames over to their owners, and
// every pair must still move verified data.
func TestMultiQueueHandoff(t *testing.T) {
	a, b, done := mqPorts(t, 4, 4, roce.EngineAuto)
	defer done()
	conns := rcPairs(t, a, b, 6, 1, 32768)
	for _, c := range conns {
		if c.x.qp.Engine() == c.y.qp.Engine() {
			t.Fatalf("QP %d and its peer %d on engine %d: nothing to hand over", c.x.qp.QPN(), c.y.qp.QPN(), c.x.qp.Engine())
		}
	}
	writeRounds(t, conns, 20, 12000)
	for name, p := range map[string]*Port{"A": a, "B": b} {
		st := p.Device().EngineStats()
		t.Logf("%s: %+v", name, st)
		var handed, adopted uint64
		for _, s := range st {
			handed += s.HandedOff
			adopted += s.Adopted
		}
		if handed == 0 || adopted == 0 {
			t.Errorf("%s: %d frames handed over, %d adopted; want both above 0", name, handed, adopted)
		}
		if n := busyEngines(st); n < 2 {
			t.Errorf("%s: %d engines received frames, want several", name, n)
		}
	}
}

// TestMultiQueueModes runs pairs over two engines in each engine mode
// (with spin, four loops spin on the two devices): the modes apply per
// engine, and inline mode (the posting goroutine drives its QP's engine)
// must stay correct with several.
func TestMultiQueueModes(t *testing.T) {
	for _, m := range []roce.EngineMode{roce.EngineInline, roce.EngineSleep, roce.EngineAdaptive, roce.EngineSpin} {
		t.Run(m.String(), func(t *testing.T) {
			a, b, done := mqPorts(t, 2, 2, m)
			defer done()
			if a.Device().Engine() != m {
				t.Fatalf("engine mode %v, want %v", a.Device().Engine(), m)
			}
			conns := rcPairs(t, a, b, 4, 1, 16384)
			writeRounds(t, conns, 10, 8000)
		})
	}
}

// TestMultiQueueOptions checks the queue count's defaults and refusals.
func TestMultiQueueOptions(t *testing.T) {
	nsutil.Skip(t)
	pair, err := nsutil.NewPair(nsutil.PairConfig{Prefix: mqPrefix, Veth: nsutil.VethConfig{Queues: 4}})
	if err != nil {
		t.Fatal(err)
	}
	defer pair.Close()
	err = pair.A.Do(func() error {
		want := min(4, runtime.GOMAXPROCS(0))
		p, err := Open(context.Background(), pair.Veth.NameA, Options{Mode: ModeXDP})
		if err != nil {
			return err
		}
		if p.Queues() != want {
			t.Errorf("default: %d queues, want %d (4 queues, %d CPUs)", p.Queues(), want, runtime.GOMAXPROCS(0))
		}
		p.Close()
		// Auto mode must not fall back to the UDP link for a bad count.
		for _, o := range []Options{{Queues: 5}, {Mode: ModeXDP, Queues: 2, Queue: 1}, {Mode: ModeUDP, Queues: 2}, {Queues: -1}} {
			if _, err := Open(context.Background(), pair.Veth.NameA, o); !errors.Is(err, ErrQueues) {
				t.Errorf("mode %q, %d queues, queue %d: %v", o.Mode, o.Queues, o.Queue, err)
			} else {
				t.Log(err)
			}
		}
		p, err = Open(context.Background(), pair.Veth.NameA, Options{Mode: ModeXDP, Queue: 2})
		if err != nil {
			return err
		}
		if p.Queues() != 1 {
			t.Errorf("queue 2: %d queues, want 1", p.Queues())
		}
		return p.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
}

// BenchmarkMultiQueueWrite measures the aggregate RDMA WRITE bandwidth and
// message rate of 8 QP pairs between two ports on a 4-queue veth pair,
// with the ports on 1, 2 and 4 queues: run with -bench MultiQueue to see
// them side by side (MB/s and msgs/s). Each pair keeps 32 WRITEs in
// flight.
func BenchmarkMultiQueueWrite(b *testing.B) {
	for _, size := range []int{65536, 8} {
		for _, q := range []int{1, 2, 4} {
			b.Run(fmt.Sprintf("size=%d/queues=%d", size, q), func(b *testing.B) {
				benchWrite(b, q, size)
			})
		}
	}
}

func benchWrite(b *testing.B, queues, size int) {
	pa, pb, done := mqPorts(b, 4, queues, roce.EngineAuto)
	defer done()
	const pairs, depth = 8, 32
	conns := rcPairs(b, pa, pb, pairs, 0, max(size, 4096))
	per := max(b.N/pairs, 1)
	b.SetBytes(int64(size))
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failed error
	for i := range conns {
		c := conns[i]
		wg.Add(1)
		go func() {
			defer wg.Done()
			wcs := make([]verbs.WC, depth)
			wr := verbs.SendWR{Opcode: verbs.WROpRDMAWrite, Flags: verbs.Signaled,
				SGL: []mr.SGE{c.x.mr.SGE(0, size)}, RemoteAddr: c.y.mr.Addr(), RKey: c.y.mr.RKey()}
			posted, completed := 0, 0
			for completed < per {
				for posted < per && posted-completed < depth {
					wr.WRID = uint64(posted)
					if err := c.x.qp.PostSend(&wr); err != nil {
						mu.Lock()
						failed = err
						mu.Unlock()
						return
					}
					posted++
				}
				n, err := c.x.cq.WaitTimeout(wcs, 10*time.Second)
				if err != nil {
					mu.Lock()
					failed = fmt.Errorf("%d of %d WRITEs completed: %v", completed, per, err)
					mu.Unlock()
					return
				}
				for _, wc := range wcs[:n] {
					if wc.Status != verbs.WCSuccess {
						mu.Lock()
						failed = fmt.Errorf("WRITE completed with %v", wc.Status)
						mu.Unlock()
						return
					}
				}
				completed += n
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	b.StopTimer()
	if failed != nil {
		b.Fatal(failed)
	}
	msgs := float64(per * pairs)
	b.ReportMetric(msgs/el.Seconds(), "msgs/s")
	busy := busyEngines(pa.Device().EngineStats())
	b.ReportMetric(float64(busy), "busy-engines")
}
