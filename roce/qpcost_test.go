package roce_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/verbs"
)

// qpCostPairs creates n connected RC QP pairs between the first two nodes
// of tb with maxWR work requests per queue, without the peer-rules
// bookkeeping of pairQPs, so that only the devices' memory is counted.
func qpCostPairs(tb testing.TB, bed *testbed, n int, maxWR uint32) (qa, qb []*roce.QP) {
	o := rcOpts{MaxWR: maxWR, MaxSGE: 1}
	o.Defaults()
	a, c := bed.Nodes[0], bed.Nodes[1]
	capa := verbs.QPCap{MaxSendWR: maxWR, MaxRecvWR: maxWR, MaxSendSGE: 1, MaxRecvSGE: 1}
	qa, qb = make([]*roce.QP, n), make([]*roce.QP, n)
	for i := range n {
		var err error
		if qa[i], err = a.PD.CreateQP(&roce.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: a.SCQ, RecvCQ: a.RCQ, Cap: capa}); err != nil {
			tb.Fatal(err)
		}
		if qb[i], err = c.PD.CreateQP(&roce.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: c.SCQ, RecvCQ: c.RCQ, Cap: capa}); err != nil {
			tb.Fatal(err)
		}
	}
	for i := range n {
		for _, s := range [2]struct {
			q, peer *roce.QP
			n, p    *node
		}{{qa[i], qb[i], a, c}, {qb[i], qa[i], c, a}} {
			if err := s.q.Connect(&roce.ConnectAttr{Access: allAccess, AH: s.n.AHTo(s.p), PathMTU: o.MTU,
				DestQPN: s.peer.QPN(), MaxDestRdAtomic: o.RdAtomic, MinRNRTimer: o.MinRNR, Timeout: o.Timeout,
				RetryCnt: o.Retry, RNRRetry: o.RNR, MaxRdAtomic: o.RdAtomic}); err != nil {
				tb.Fatal(err)
			}
		}
	}
	return qa, qb
}

// BenchmarkQPCost creates connected RC QP pairs at 128 work requests per
// queue and reports the heap each QP keeps (B/QP, measured after a
// garbage collection) and the allocations creating and connecting one QP
// takes (allocs/QP). ns/op is the time for all pairs.
func BenchmarkQPCost(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("pairs=%d", n), func(b *testing.B) {
			var bytes, allocs float64
			for range b.N {
				b.StopTimer()
				bed := newBed(b, bedOpts{})
				var m0, m1 runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&m0)
				b.StartTimer()
				qa, qb := qpCostPairs(b, bed, n, 128)
				b.StopTimer()
				runtime.GC()
				runtime.ReadMemStats(&m1)
				bytes += float64(m1.HeapAlloc-m0.HeapAlloc) / float64(2*n)
				allocs += float64(m1.Mallocs-m0.Mallocs) / float64(2*n)
				runtime.KeepAlive(qa)
				runtime.KeepAlive(qb)
				for _, nd := range bed.Nodes {
					nd.Dev.Close()
				}
				b.StartTimer()
			}
			b.ReportMetric(bytes/float64(b.N), "B/QP")
			b.ReportMetric(allocs/float64(b.N), "allocs/QP")
		})
	}
}

// TestManyQPsStartTogether starts a SEND on each of 10,000 RC QP pairs in
// both directions at the same instant. Virtual time advances with the
// work the loops do (costPerPkt for every packet sent or received), as a
// real clock would while the loops drain the burst, so the test sees what
// a real-time run sees: the RTO of 67 ms must cover only the round trip,
// not the time the receiving loop takes to work through a backlog.
func TestManyQPsStartTogether(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 QP pairs: skipped in short mode")
	}
	const n = 10000
	const costPerPkt = 2 * time.Microsecond
	bed := newBed(t, bedOpts{CQE: n + 64})
	qa, qb := qpCostPairs(t, bed, n, 4)
	for i := range n {
		for _, q := range [2]*roce.QP{qa[i], qb[i]} {
			if err := q.PostRecv(&verbs.RecvWR{WRID: uint64(i)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := range n {
		for _, q := range [2]*roce.QP{qa[i], qb[i]} {
			if err := q.PostSend(&verbs.SendWR{WRID: uint64(i), Opcode: verbs.WROpSend, Flags: verbs.Signaled}); err != nil {
				t.Fatal(err)
			}
		}
	}
	pkts := func() uint64 {
		var s uint64
		for _, nd := range bed.Nodes {
			s += nd.Dev.Counter(verbs.CntSentPkts) + nd.Dev.Counter(verbs.CntRcvdPkts)
		}
		return s
	}
	seen := pkts()
	start := bed.Clock.Now()
	for {
		busy := false
		for _, nd := range bed.Nodes {
			if nd.Dev.Step(bed.Clock.Now()) {
				busy = true
			}
			nd.Poll()
		}
		p := pkts()
		bed.Clock.Advance(costPerPkt*time.Duration(p-seen) + time.Microsecond)
		seen = p
		if len(bed.Nodes[0].WCs)+len(bed.Nodes[1].WCs) == 4*n {
			break
		}
		if !busy && bed.Clock.Now().Sub(start) > 10*time.Second {
			t.Fatalf("%d completions of %d after %v", len(bed.Nodes[0].WCs)+len(bed.Nodes[1].WCs), 4*n, bed.Clock.Now().Sub(start))
		}
	}
	for _, nd := range bed.Nodes {
		for _, wc := range nd.WCs {
			if wc.Status != verbs.WCSuccess {
				t.Fatalf("%v", wc)
			}
		}
		if k := nd.Dev.Counter(verbs.CntTimeouts); k != 0 {
			t.Errorf("%s: %d retransmit timeouts, %d packets retransmitted, in %v", nd.Dev.Name(), k,
				nd.Dev.Counter(verbs.CntRetransmitPkts), bed.Clock.Now()-start)
		}
	}
	t.Logf("burst drained in %v of virtual time", bed.Clock.Now()-start)
}
