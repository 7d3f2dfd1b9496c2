package roce_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	tb "github.com/sroce/sroce/internal/testbed"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/roce/memlink"
	"github.com/sroce/sroce/verbs"
)

// The benchmarks run two devices in one process over the in-memory router
// without loss. The stepped variants drive both devices from the benchmark
// goroutine, so they measure the CPU cost of the whole path (requester,
// both loops, responder, completer) on one core; the real-time variants
// run each device's loop in its own goroutine.

// report adds packets per second, GB/s and allocations per packet for a
// run that started at start with memory statistics m0 and sent-packet
// count s0.
func report(b *testing.B, devs []*roce.Device, start time.Time, m0 *runtime.MemStats, s0 uint64, bytes float64) {
	el := time.Since(start).Seconds()
	var m1 runtime.MemStats
	runtime.ReadMemStats(&m1)
	pkts := sentPkts(devs) - s0
	b.ReportMetric(float64(pkts)/el, "pkts/s")
	if bytes > 0 {
		b.ReportMetric(bytes/el/1e9, "GB/s")
	}
	b.ReportMetric(float64(m1.Mallocs-m0.Mallocs)/float64(max(pkts, 1)), "allocs/pkt")
}

func sentPkts(devs []*roce.Device) uint64 {
	var n uint64
	for _, d := range devs {
		n += d.Counter(verbs.CntSentPkts)
	}
	return n
}

// stepAll steps the devices until they are idle.
func stepAll(b *testbed) {
	now := b.Clock.Now()
	for busy := true; busy; {
		busy = false
		for _, n := range b.Nodes {
			if n.Dev.Step(now) {
				busy = true
			}
		}
	}
}

func benchWrite(b *testing.B, size int, mtu verbs.MTU, depth int) {
	tb := newBed(b, bedOpts{})
	qa, _ := tb.PairQPs(rcOpts{MTU: mtu, MaxWR: 256})
	a, c := tb.Nodes[0], tb.Nodes[1]
	lm, _ := a.Reg(b, size, 0, 1)
	rm, _ := c.Reg(b, size, 0, 2)
	wr := verbs.SendWR{Opcode: verbs.WROpRDMAWrite, Flags: verbs.Signaled, SGL: []mr.SGE{lm.SGE(0, size)},
		RemoteAddr: rm.Addr(), RKey: rm.RKey()}
	var wcs [64]verbs.WC
	posted, done := 0, 0
	run := func(n int) {
		for done < n {
			for posted < n && posted-done < depth {
				wr.WRID = uint64(posted)
				if err := qa.PostSend(&wr); err != nil {
					b.Fatal(err)
				}
				posted++
			}
			stepAll(tb)
			for {
				k := a.SCQ.Poll(wcs[:])
				if k == 0 {
					break
				}
				for _, w := range wcs[:k] {
					if w.Status != verbs.WCSuccess {
						b.Fatal(w.Status)
					}
				}
				done += k
			}
		}
	}
	run(depth * 4) // warm up: buffers, rings
	posted, done = 0, 0
	devs := []*roce.Device{a.Dev, c.Dev}
	var m0 runtime.MemStats
	runtime.ReadMemStats(&m0)
	s0 := sentPkts(devs)
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	run(b.N)
	b.StopTimer()
	report(b, devs, start, &m0, s0, float64(b.N)*float64(size))
}

// BenchmarkRCWrite: RDMA WRITE throughput, 16 messages in flight.
func BenchmarkRCWrite(b *testing.B) {
	for _, size := range []int{4 << 10, 64 << 10} {
		for _, mtu := range []verbs.MTU{verbs.MTU1024, verbs.MTU4096} {
			b.Run(fmt.Sprintf("%dKiB/mtu%d", size>>10, mtu.Bytes()), func(b *testing.B) {
				benchWrite(b, size, mtu, 16)
			})
		}
	}
}

// BenchmarkRCWrite8B: small-message rate, 64 WRITEs of 8 bytes in flight.
func BenchmarkRCWrite8B(b *testing.B) {
	benchWrite(b, 8, verbs.MTU1024, 64)
}

// BenchmarkSendPingPong: one 8-byte SEND each way per iteration; ns/op is
// the round trip.
func BenchmarkSendPingPong(b *testing.B) {
	b.Run("stepped", func(b *testing.B) {
		tb := newBed(b, bedOpts{})
		qa, qc := tb.PairQPs(rcOpts{MaxWR: 64, MaxInline: 64})
		a, c := tb.Nodes[0], tb.Nodes[1]
		lm, _ := a.Reg(b, 64, 0, 1)
		rm, _ := c.Reg(b, 64, 0, 2)
		sa := verbs.SendWR{Opcode: verbs.WROpSend, Flags: verbs.Signaled | verbs.Inline, InlineData: make([]byte, 8)}
		sc := sa
		ra := verbs.RecvWR{SGL: []mr.SGE{lm.SGE(0, 64)}}
		rc := verbs.RecvWR{SGL: []mr.SGE{rm.SGE(0, 64)}}
		var wcs [8]verbs.WC
		wait := func(cq *roce.CQ) {
			for {
				if cq.Poll(wcs[:1]) == 1 {
					if wcs[0].Status != verbs.WCSuccess {
						b.Fatal(wcs[0].Status)
					}
					return
				}
				stepAll(tb)
			}
		}
		round := func() {
			must(qc.PostRecv(&rc))
			must(qa.PostRecv(&ra))
			must(qa.PostSend(&sa))
			wait(c.RCQ)
			must(qc.PostSend(&sc))
			wait(a.RCQ)
			wait(a.SCQ)
			wait(c.SCQ)
		}
		for i := 0; i < 100; i++ {
			round()
		}
		devs := []*roce.Device{a.Dev, c.Dev}
		var m0 runtime.MemStats
		runtime.ReadMemStats(&m0)
		s0 := sentPkts(devs)
		b.ReportAllocs()
		b.ResetTimer()
		start := time.Now()
		for i := 0; i < b.N; i++ {
			round()
		}
		b.StopTimer()
		report(b, devs, start, &m0, s0, 0)
	})
	b.Run("realtime", func(b *testing.B) {
		rt := newRealTimePair(b, verbs.MTU1024)
		a, c := rt.Nodes[0], rt.Nodes[1]
		qa, qc := rt.qa, rt.qc
		lm, _ := a.Reg(b, 64, 0, 1)
		rm, _ := c.Reg(b, 64, 0, 2)
		sa := verbs.SendWR{Opcode: verbs.WROpSend, Flags: verbs.Inline, InlineData: make([]byte, 8)}
		sc := sa
		ra := verbs.RecvWR{SGL: []mr.SGE{lm.SGE(0, 64)}}
		rc := verbs.RecvWR{SGL: []mr.SGE{rm.SGE(0, 64)}}
		// The echo side runs in its own goroutine, blocked in Wait.
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			var wcs [4]verbs.WC
			for {
				n, err := c.RCQ.Wait(ctx, wcs[:1])
				if err != nil {
					return
				}
				for range n {
					qc.PostRecv(&rc)
					qc.PostSend(&sc)
				}
			}
		}()
		for i := 0; i < 8; i++ {
			qc.PostRecv(&rc)
			qa.PostRecv(&ra)
		}
		var wcs [4]verbs.WC
		round := func() {
			must(qa.PostSend(&sa))
			if _, err := a.RCQ.Wait(ctx, wcs[:1]); err != nil {
				b.Fatal(err)
			}
			must(qa.PostRecv(&ra))
		}
		for i := 0; i < 100; i++ {
			round()
		}
		devs := []*roce.Device{a.Dev, c.Dev}
		var m0 runtime.MemStats
		runtime.ReadMemStats(&m0)
		s0 := sentPkts(devs)
		b.ReportAllocs()
		b.ResetTimer()
		start := time.Now()
		for i := 0; i < b.N; i++ {
			round()
		}
		b.StopTimer()
		report(b, devs, start, &m0, s0, 0)
	})
}

type realTimePair struct {
	Nodes  []*node
	qa, qc *roce.QP
}

// newRealTimePair starts two devices with real-time loops and connects an
// RC pair.
func newRealTimePair(b testing.TB, mtu verbs.MTU) *realTimePair {
	rt := &realTimePair{}
	clock := roce.SystemClock()
	router := memlink.NewRouter(clock, 1, memlink.Impairments{})
	for i := 0; i < 2; i++ {
		rt.Nodes = append(rt.Nodes, startNode(b, router, clock, i, 9000))
	}
	bed := &testbed{tb.FromNodes(b, router, rt.Nodes...)}
	rt.qa, rt.qc = bed.PairQPs(rcOpts{MTU: mtu, MaxWR: 256, MaxInline: 64})
	return rt
}

// BenchmarkRCWriteRealTime: WRITE throughput with both loops running in
// real time (two cores).
func BenchmarkRCWriteRealTime(b *testing.B) {
	for _, size := range []int{4 << 10, 64 << 10} {
		b.Run(fmt.Sprintf("%dKiB/mtu4096", size>>10), func(b *testing.B) {
			rt := newRealTimePair(b, verbs.MTU4096)
			a, c := rt.Nodes[0], rt.Nodes[1]
			lm, _ := a.Reg(b, size, 0, 1)
			rm, _ := c.Reg(b, size, 0, 2)
			wr := verbs.SendWR{Opcode: verbs.WROpRDMAWrite, Flags: verbs.Signaled, SGL: []mr.SGE{lm.SGE(0, size)},
				RemoteAddr: rm.Addr(), RKey: rm.RKey()}
			var wcs [64]verbs.WC
			posted, done := 0, 0
			devs := []*roce.Device{a.Dev, c.Dev}
			var m0 runtime.MemStats
			runtime.ReadMemStats(&m0)
			s0 := sentPkts(devs)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			for done < b.N {
				for posted < b.N && posted-done < 32 {
					if err := rt.qa.PostSend(&wr); err != nil {
						b.Fatal(err)
					}
					posted++
				}
				k, err := a.SCQ.WaitTimeout(wcs[:], 10*time.Second)
				if err != nil {
					b.Fatal(err)
				}
				done += k
			}
			b.StopTimer()
			report(b, devs, start, &m0, s0, float64(b.N)*float64(size))
		})
	}
}
