package roce_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/qp"
	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/roce/memlink"
	"github.com/sroce/sroce/verbs"
)

// slowReceiver is a path like the one between two slow guests: the
// receiving side takes about 20 MB/s and holds 64 KiB waiting for it,
// dropping what does not fit, 100 us away.
// readQueue is the receiving queue of the READ tests: the responses of
// one 64 KiB READ fit in it. A single READ is never split, so a queue that
// could not take one READ's responses would lose the tail of every READ
// whatever the window.
var readQueue = 96 << 10

var slowReceiver = memlink.Impairments{Rate: 20_000_000, Queue: 64 << 10, Delay: 100 * time.Microsecond}

// streamResult is what a stream of messages cost on the path.
type streamResult struct {
	msgs, size int
	elapsed    time.Duration // virtual time
	sent       uint64        // request packets and READ responses sent by both devices
	retrans    uint64        // request packets sent again
	dupReads   uint64        // READ requests the responder saw again
	reductions uint64
	limited    uint64
	timeouts   uint64
	queueDrops uint64
	cwndAfter  int
}

// goodput returns the message bytes delivered per second of virtual time.
func (r streamResult) goodput() float64 {
	return float64(r.msgs*r.size) / r.elapsed.Seconds()
}

func (r streamResult) String() string {
	return fmt.Sprintf("%6.2f MB/s  sent %6d  retransmitted %6d  dup READs %4d  timeouts %3d  cwnd_reductions %4d  cwnd_limited %6d  queue drops %5d  cwnd %3d",
		r.goodput()/1e6, r.sent, r.retrans, r.dupReads, r.timeouts, r.reductions, r.limited, r.queueDrops, r.cwndAfter)
}

// streamBed is a connected QP pair on a test bed, for streams of
// messages from node 0 to node 1.
type streamBed struct {
	b               *testbed
	qa              *roce.QP
	lm, rm          *roce.MR
	lbuf, rbuf      []byte
	size, depth     int
	op              verbs.WROpcode
	posted, done    int
	start           time.Duration
	startCnt        verbs.Counters
	startQueueDrops uint64
}

func newStreamBed(t testing.TB, op verbs.WROpcode, imp memlink.Impairments, window bool, size, depth int) *streamBed {
	t.Helper()
	b := newBed(t, bedOpts{Seed: 7, Imp: imp, LinkMTU: 1500})
	qa, _ := b.PairQPs(rcOpts{MTU: verbs.MTU1024, Timeout: 12, RdAtomic: 16})
	qa.SetCongestionWindow(window)
	s := &streamBed{b: b, qa: qa, size: size, depth: depth, op: op}
	s.lm, s.lbuf = b.Nodes[0].Reg(t, depth*size, 0, 1)
	s.rm, s.rbuf = b.Nodes[1].Reg(t, depth*size, 0, 2)
	return s
}

// run streams msgs more messages, depth at a time, and reports what they
// cost.
func (s *streamBed) Run(t testing.TB, msgs int) streamResult {
	t.Helper()
	b := s.b
	a, c := b.Nodes[0], b.Nodes[1]
	cnt := func(k verbs.Counter) uint64 { return a.Dev.Counter(k) + c.Dev.Counter(k) }
	var c0 [verbs.NumCounters]uint64
	for k := range c0 {
		c0[k] = cnt(verbs.Counter(k))
	}
	q0 := b.Router.Stats().QueueDrops
	end := s.posted + msgs
	post := func() bool {
		did := false
		for s.posted < end && s.posted-s.done < s.depth {
			slot := s.posted % s.depth
			wr := verbs.SendWR{WRID: uint64(s.posted), Opcode: s.op, Flags: verbs.Signaled,
				SGL:        []mr.SGE{s.lm.SGE(slot*s.size, s.size)},
				RemoteAddr: s.rm.Addr() + uint64(slot*s.size), RKey: s.rm.RKey()}
			if err := s.qa.PostSend(&wr); err != nil {
				t.Fatal(err)
			}
			s.posted++
			did = true
		}
		return did
	}
	b.Sim.Idle = post
	start := b.Clock.Now()
	post()
	b.Run(func() bool {
		for _, w := range a.WCs {
			if w.Status != verbs.WCSuccess {
				t.Fatalf("WR %d: %v", w.WRID, w.Status)
			}
			s.done++
		}
		a.WCs = a.WCs[:0]
		return s.done == end
	})
	b.Sim.Idle = nil
	if !bytes.Equal(s.lbuf, s.rbuf) {
		t.Fatalf("data differs after the stream")
	}
	d := func(k verbs.Counter) uint64 { return cnt(k) - c0[k] }
	return streamResult{msgs: msgs, size: s.size, elapsed: b.Clock.Now().Sub(start),
		sent: d(verbs.CntSentPkts), retrans: d(verbs.CntRetransmitPkts), dupReads: d(verbs.CntDupReadRequest),
		reductions: d(verbs.CntCwndReductions), limited: d(verbs.CntCwndLimited), timeouts: d(verbs.CntTimeouts),
		queueDrops: b.Router.Stats().QueueDrops - q0, cwndAfter: s.qa.CongestionWindow()}
}

// stream posts msgs messages of size bytes (RDMA WRITE or READ) from node
// 0 to node 1 over imp, depth at a time, with the congestion window on or
// off, checks the data, and reports what it cost.
func stream(t testing.TB, op verbs.WROpcode, imp memlink.Impairments, window bool, msgs, size, depth int) streamResult {
	t.Helper()
	return newStreamBed(t, op, imp, window, size, depth).Run(t, msgs)
}

// TestCwndSlowReceiverWrite: 64 KiB WRITEs, 16 in flight, to a receiver
// slower than the sender. Without the window every burst overruns the
// receiver's queue and go-back-N resends what followed each loss; with
// it the requester backs off after the first losses.
func TestCwndSlowReceiverWrite(t *testing.T) {
	msgs := 200
	if testing.Short() || raceEnabled {
		msgs = 60
	}
	off := stream(t, verbs.WROpRDMAWrite, slowReceiver, false, msgs, 64<<10, 16)
	on := stream(t, verbs.WROpRDMAWrite, slowReceiver, true, msgs, 64<<10, 16)
	t.Logf("WRITE 64 KiB x %d over a 20 MB/s receiver with a 64 KiB queue:\n  no window: %v\n  window:    %v", msgs, off, on)
	if off.reductions != 0 || off.retrans < uint64(msgs)*8 {
		t.Errorf("without the window: %d retransmitted, %d reductions; want heavy retransmission and none", off.retrans, off.reductions)
	}
	if on.reductions == 0 {
		t.Error("the window was never reduced")
	}
	if on.retrans*4 > off.retrans {
		t.Errorf("window retransmitted %d packets, without it %d: want at most a quarter", on.retrans, off.retrans)
	}
	if on.goodput() <= off.goodput() {
		t.Errorf("goodput %.2f MB/s with the window, %.2f without", on.goodput()/1e6, off.goodput()/1e6)
	}
}

// TestCwndSlowReceiverRead: 64 KiB READs, 16 in flight, whose responses
// come back through a slow receiver. The window bounds the READ response
// packets the requester asks for at once.
func TestCwndSlowReceiverRead(t *testing.T) {
	msgs := 200
	if testing.Short() || raceEnabled {
		msgs = 60
	}
	imp := slowReceiver
	imp.Queue = readQueue
	off := stream(t, verbs.WROpRDMARead, imp, false, msgs, 64<<10, 16)
	on := stream(t, verbs.WROpRDMARead, imp, true, msgs, 64<<10, 16)
	t.Logf("READ 64 KiB x %d over a 20 MB/s receiver with a %d KiB queue:\n  no window: %v\n  window:    %v", msgs, imp.Queue>>10, off, on)
	if off.reductions != 0 || off.dupReads < uint64(msgs)/4 {
		t.Errorf("without the window: %d duplicate READs, %d reductions; want many and none", off.dupReads, off.reductions)
	}
	if on.reductions == 0 {
		t.Error("the window was never reduced")
	}
	if on.dupReads*4 > off.dupReads {
		t.Errorf("window: %d duplicate READs, without it %d: want at most a quarter", on.dupReads, off.dupReads)
	}
	if on.goodput() <= off.goodput() {
		t.Errorf("goodput %.2f MB/s with the window, %.2f without", on.goodput()/1e6, off.goodput()/1e6)
	}
}

// TestCwndGrowsBack: after the losses end, clean acknowledgements grow
// the window back to the fixed limit, and a path that stays clean sees no
// reduction.
func TestCwndGrowsBack(t *testing.T) {
	for _, op := range []verbs.WROpcode{verbs.WROpRDMAWrite, verbs.WROpRDMARead} {
		imp := slowReceiver
		if op == verbs.WROpRDMARead {
			imp.Queue = readQueue
		}
		s := newStreamBed(t, op, imp, true, 64<<10, 16)
		lossy := s.Run(t, 60)
		if lossy.reductions == 0 || lossy.cwndAfter >= qp.CwndMax {
			t.Fatalf("%v: slow receiver: %v", op, lossy)
		}
		s.b.Router.SetImpairments(memlink.Impairments{Delay: 100 * time.Microsecond})
		// Above the slow-start threshold the window grows by a packet per
		// window acknowledged: back from a few dozen to CwndMax takes
		// about CwndMax²/2 packets; the stream carries twice that.
		clean := s.Run(t, qp.CwndMax*qp.CwndMax/64)
		t.Logf("%v:\n  slow receiver: %v\n  then clean:    %v", op, lossy, clean)
		if clean.reductions != 0 || clean.retrans != 0 {
			t.Errorf("%v: clean path: %d reductions, %d retransmitted", op, clean.reductions, clean.retrans)
		}
		if clean.cwndAfter != qp.CwndMax {
			t.Errorf("%v: window %d after the clean stream, want %d", op, clean.cwndAfter, qp.CwndMax)
		}
	}
}

// BenchmarkCwndSlowReceiver streams 64 KiB WRITEs and READs, 16 in
// flight, to a slow receiver (20 MB/s, 100 us away, a 64 KiB queue for
// WRITEs and 96 KiB for READs) with and without the congestion window,
// and logs goodput in virtual time and what was sent and resent:
//
//	go test ./roce/ -run '^$' -bench CwndSlowReceiver -benchtime 1x -v
func BenchmarkCwndSlowReceiver(b *testing.B) {
	const msgs = 200
	var table []string
	for _, op := range []verbs.WROpcode{verbs.WROpRDMAWrite, verbs.WROpRDMARead} {
		for _, window := range []bool{false, true} {
			name := fmt.Sprintf("%v/window=%v", op, window)
			b.Run(name, func(b *testing.B) {
				imp := slowReceiver
				if op == verbs.WROpRDMARead {
					imp.Queue = readQueue
				}
				var r streamResult
				for i := 0; i < b.N; i++ {
					r = stream(b, op, imp, window, msgs, 64<<10, 16)
				}
				b.ReportMetric(r.goodput()/1e6, "MB/s(virtual)")
				b.ReportMetric(float64(r.retrans), "retransmits")
				b.ReportMetric(float64(r.sent), "pkts")
				table = append(table, fmt.Sprintf("%-28s %v", name, r))
			})
		}
	}
	b.Logf("64 KiB x %d, 16 in flight, slow receiver:\n%s", msgs, strings.Join(table, "\n"))
}
