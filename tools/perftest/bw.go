package perftest

// The bandwidth loops of the perftest tools, after perftest 4.5's
// run_iter_bw (a side that posts: WRITE, READ, atomics, SEND clients, both
// sides of -b for WRITE, READ and atomics), run_iter_bw_server (the
// receiving side of send-bw) and run_iter_bi (both sides of send-bw -b):
// each QP keeps up to tx_depth work requests outstanding, every cq_mod-th
// one (and the last) asks for a completion, addresses cycle through the
// cycle buffer, and the times of posts and completions make the report.

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/tools/oob"
	"github.com/sroce/sroce/verbs"
)

// Duration states of -D, as perftest's alarm handler moves them.
const (
	durStart  = iota // warming up for the margin
	durSample        // counting
	durStop          // the last margin
	durEnd           // over
)

// durationClock is perftest's -D state machine: margin seconds of warm-up,
// duration-2*margin seconds of counting, margin seconds more.
type durationClock struct {
	pt      *perftest
	on      bool
	started bool
	begin   time.Time
	state   int
	// Ticks at which counting started and stopped.
	sampleStart, sampleEnd uint64
	counted                uint64
}

// newDurationClock returns the clock of a run; it starts with start.
func (pt *perftest) newDurationClock() *durationClock {
	return &durationClock{pt: pt, on: pt.p.DurationMode}
}

// start starts the clock (at the first post, or a server's first receive).
func (d *durationClock) start() {
	if !d.on || d.started {
		return
	}
	d.started, d.begin = true, time.Now()
	d.update()
}

// update moves the state along with the time.
func (d *durationClock) update() {
	if !d.on || !d.started {
		return
	}
	margin := time.Duration(d.pt.p.Margin) * time.Second
	total := time.Duration(d.pt.p.Duration) * time.Second
	el := time.Since(d.begin)
	if d.state == durStart && el >= margin {
		d.state, d.sampleStart = durSample, d.pt.now()
	}
	if d.state == durSample && el >= total-margin {
		d.state, d.sampleEnd = durStop, d.pt.now()
	}
	if d.state == durStop && el >= total {
		d.state = durEnd
	}
}

// end returns when a -D run that has started ends, or the zero time.
func (d *durationClock) end() time.Time {
	if !d.on || !d.started {
		return time.Time{}
	}
	return d.begin.Add(time.Duration(d.pt.p.Duration) * time.Second)
}

// sampling reports whether completions count now.
func (d *durationClock) sampling() bool { return d.on && d.state == durSample }

// ended reports whether a -D run is over.
func (d *durationClock) ended() bool { return d.on && d.state == durEnd }

// bwRun is the state of one BW run of one size.
type bwRun struct {
	pt     *perftest
	size   uint64
	iters  uint64 // per QP; 0 with -D
	total  uint64 // iters times QPs
	peak   bool
	dur    *durationClock
	cqMod  uint64
	list   int
	sends  bool // this side posts work requests
	recvs  bool // this side receives (send tests)
	waitRx bool // -b server: no sends before the first receive

	scnt, ccnt []uint64
	rcnt       []uint64 // receives completed per QP
	rposted    []uint64 // receives posted per QP
	totS, totC uint64
	totR       uint64
	posted     []uint64
	completed  []uint64
	firstRx    uint64

	wrs []verbs.SendWR
	sge [][1]mr.SGE
}

// runBW runs one size of a BW test on this side and returns its report.
func (pt *perftest) runBW(size uint64) (oob.BWReport, error) {
	p := pt.p
	r := &bwRun{pt: pt, size: size, iters: p.Iters, total: p.Iters * uint64(p.NumQPs),
		peak: !p.NoPeak, dur: pt.newDurationClock(), cqMod: uint64(max(p.CQMod, 1)), list: max(p.PostList, 1)}
	n := p.NumQPs
	r.sends = pt.client() || p.Duplex
	r.recvs = pt.verb == oob.VerbSend && (!pt.client() || p.Duplex)
	r.waitRx = p.Duplex && pt.verb == oob.VerbSend && !pt.client()
	r.scnt, r.ccnt = make([]uint64, n), make([]uint64, n)
	r.rcnt, r.rposted = make([]uint64, n), make([]uint64, n)
	for i := range r.rposted {
		r.rposted[i] = uint64(p.RxDepth)
	}
	arr := uint64(1)
	if r.peak && !p.DurationMode {
		arr = max(r.total, 1)
	}
	r.posted, r.completed = make([]uint64, arr), make([]uint64, arr)
	r.wrs = make([]verbs.SendWR, r.list)
	r.sge = make([][1]mr.SGE, r.list)
	if err := r.loop(); err != nil {
		return oob.BWReport{}, err
	}
	if pt.verb == oob.VerbRead && r.sends {
		pt.checkReadData(size, r.iters)
	}
	return r.report(), nil
}

// report computes this side's row.
func (r *bwRun) report() oob.BWReport {
	p := r.pt.p
	in := oob.BWInput{Size: r.size, Iters: r.iters, QPs: p.NumQPs, Posted: r.posted, Completed: r.completed,
		NoPeak: !r.peak, CQMod: int(r.cqMod), PostList: r.list, TicksPerSec: 1e9, Gbits: p.ReportGbits}
	if p.DurationMode {
		in.Iters, in.Duration, in.NoPeak = r.dur.counted, true, true
		in.Posted, in.Completed = []uint64{r.dur.sampleStart}, []uint64{r.dur.sampleEnd}
	}
	if in.NoPeak && in.Completed[0] <= in.Posted[0] {
		in.Completed[0] = in.Posted[0] + 1 // a run faster than the clock
	}
	return oob.NewBWReport(in)
}

// done reports whether the run is complete.
func (r *bwRun) done() bool {
	if r.dur.on {
		return r.dur.ended()
	}
	if r.sends && (r.totS < r.total || r.totC < r.total) {
		return false
	}
	if r.recvs && r.totR < r.total {
		return false
	}
	return true
}

// canPost reports whether QP q may post its next list now.
func (r *bwRun) canPost(q int) bool {
	if !r.sends || (r.waitRx && r.totR == 0) {
		return false
	}
	if r.dur.on {
		if r.dur.ended() {
			return false
		}
	} else if r.scnt[q] >= r.iters {
		return false
	}
	return r.scnt[q]-r.ccnt[q]+uint64(r.list) <= uint64(r.pt.p.TxDepth)
}

// loop posts and completes until the run is over.
func (r *bwRun) loop() error {
	pt := r.pt
	if r.sends && !r.waitRx {
		r.dur.start()
	}
	if !r.peak {
		r.posted[0] = pt.now()
	}
	for {
		r.dur.update()
		blocked := true
		for q := range pt.qps {
			for r.canPost(q) {
				if err := r.post(q); err != nil {
					return err
				}
				blocked = false
			}
		}
		if r.done() {
			break
		}
		var wcs []verbs.WC
		if blocked {
			// A -D run ends on time, as perftest's loop, which never
			// blocks, leaves at END_STATE with work requests still
			// outstanding: a peer that stops answering near the end
			// cannot hold it up. Before the end, a peer silent for the
			// stall limit fails the run.
			var err error
			if wcs, err = pt.cq.waitUntil(r.dur.end()); err != nil {
				r.dur.update()
				if r.dur.ended() {
					break
				}
				return r.stalled(err)
			}
		} else {
			wcs = pt.cq.poll()
		}
		for i := range wcs {
			if err := r.complete(&wcs[i]); err != nil {
				return err
			}
		}
		if r.dur.on {
			r.dur.update()
		}
	}
	if !r.peak {
		if r.recvs && !r.sends {
			r.posted[0] = r.firstRx
		}
		r.completed[0] = pt.now()
	}
	return nil
}

// stalled describes a wait that gave up.
func (r *bwRun) stalled(err error) error {
	if r.sends {
		return r.pt.stallError(err, "completions", r.totC, r.total)
	}
	return r.pt.stallError(err, "messages", r.totR, r.total)
}

// post posts QP q's next list of work requests.
func (r *bwRun) post(q int) error {
	pt := r.pt
	for j := 0; j < r.list; j++ {
		seq := r.scnt[q] + uint64(j)
		signaled := seq%r.cqMod == r.cqMod-1 || (!r.dur.on && seq == r.iters-1)
		r.wrs[j] = pt.sendWR(q, seq, r.size, signaled, r.sge[j][:])
	}
	if r.peak && !r.dur.on {
		r.posted[r.totS] = pt.now()
	}
	if n, err := pt.qps[q].PostSendList(r.wrs); err != nil {
		return runErrorf("Couldn't post send: qp %d scnt=%d: %v", q, r.scnt[q]+uint64(n), err)
	}
	r.scnt[q] += uint64(r.list)
	r.totS += uint64(r.list)
	return nil
}

// sendWR builds the seq-th work request of QP q for size-byte messages,
// at the addresses perftest would use; sge is its scatter/gather list.
func (pt *perftest) sendWR(q int, seq, size uint64, signaled bool, sge []mr.SGE) verbs.SendWR {
	peer := pt.peer[q]
	off := pt.slotOf(seq, size) * pt.incr(size)
	wr := verbs.SendWR{WRID: wrID(q, seq), SGL: sge[:1]}
	if signaled {
		wr.Flags = verbs.Signaled
	}
	switch pt.verb {
	case oob.VerbSend:
		wr.Opcode = verbs.WROpSend
		sge[0] = pt.mr.SGE(pt.areaOff(q), int(size))
		if pt.p.Conn == oob.UD {
			wr.AH, wr.RemoteQPN, wr.RemoteQKey = pt.ahs[q], bth.QPN(peer.QPN), oob.DefQKey
		}
	case oob.VerbWrite, oob.VerbRead:
		wr.Opcode = verbs.WROpRDMAWrite
		if pt.verb == oob.VerbRead {
			wr.Opcode = verbs.WROpRDMARead
		}
		sge[0] = pt.mr.SGE(pt.areaOff(q)+off, int(size))
		wr.RemoteAddr, wr.RKey = peer.VAddr+uint64(off), peer.RKey
	case oob.VerbAtomic:
		wr.Opcode = verbs.WROpAtomicFetchAdd
		wr.CompareAdd = 1 // ATOMIC_ADD_VALUE
		if pt.p.Atomic == oob.CmpAndSwap {
			wr.Opcode, wr.CompareAdd, wr.Swap = verbs.WROpAtomicCmpSwp, 0, 0 // ATOMIC_SWAP_VALUE
		}
		sge[0] = pt.res.SGE(pt.resultOff(q, seq), 8)
		wr.RemoteAddr, wr.RKey = peer.VAddr+uint64(off), peer.RKey
	}
	return wr
}

// resultOff returns where the seq-th atomic of QP q puts the value it
// fetches: a ring of slots, one per work request that can be outstanding,
// so that each value stays until its completion has been looked at.
func (pt *perftest) resultOff(q int, seq uint64) int {
	per := max(pt.p.TxDepth+pt.p.PostList, 1)
	return 8 * (q*per + int(seq%uint64(per)))
}

// complete handles one work completion.
func (r *bwRun) complete(wc *verbs.WC) error {
	pt := r.pt
	q, seq := splitWRID(wc.WRID)
	if wc.Status != verbs.WCSuccess {
		return pt.completionError(wc, r.totS, r.totC)
	}
	if q >= len(pt.qps) {
		return runErrorf("completion for unknown wr_id %#x", wc.WRID)
	}
	if wc.Opcode == verbs.WCRecv {
		return r.received(q, int(seq), wc)
	}
	done := seq + 1
	if done <= r.ccnt[q] {
		return nil
	}
	if pt.verb == oob.VerbAtomic {
		for s := r.ccnt[q]; s < done; s++ {
			val := pt.resultValue(q, s)
			pt.checkAtomicResult(q, pt.slotOf(s, r.size), val)
		}
	}
	delta := done - r.ccnt[q]
	r.ccnt[q] = done
	r.totC += delta
	if r.peak && !r.dur.on {
		r.completed[min(r.totC, r.total)-1] = pt.now()
	}
	if r.dur.sampling() {
		r.dur.counted += delta
	}
	return nil
}

// resultValue returns the value the seq-th atomic of QP q fetched.
func (pt *perftest) resultValue(q int, seq uint64) uint64 {
	return binary.NativeEndian.Uint64(pt.res.Buf()[pt.resultOff(q, seq):])
}

// received handles a receive completion of QP q into slot.
func (r *bwRun) received(q, slot int, wc *verbs.WC) error {
	pt := r.pt
	if r.totR == 0 {
		r.firstRx = pt.now()
		r.dur.start()
	}
	pt.checkRecv(q, pt.recv.message(q, slot, r.size), r.size, pt.recv.dataLen(wc.ByteLen))
	r.rcnt[q]++
	r.totR++
	if r.dur.sampling() && !r.sends {
		r.dur.counted++
	}
	if r.dur.on || r.rposted[q]+1 <= r.iters {
		if err := pt.recv.post(q, slot); err != nil {
			return runErrorf("Couldn't post recv Qp=%d rcnt=%d: %v", q, r.rcnt[q], err)
		}
		r.rposted[q]++
	}
	return nil
}

// recvRing holds the receive buffers of a send test: per QP a few slots of
// the largest message (plus the GRH room for UD), which the receives
// posted share round robin. Each completed receive is checked and posted
// again into the same slot.
type recvRing struct {
	pt     *perftest
	mr     *region
	slot   int // bytes per slot
	nslots int // slots per QP
	size   uint64
	next   []int // per QP: the slot of the next receive postAll posts
}

// maxRecvRing bounds the memory of the receive slots of one QP.
const maxRecvRing = 16 << 20

// newRecvRing registers the receive buffers.
func (pt *perftest) newRecvRing() (*recvRing, error) {
	p := pt.p
	msg := int(p.Size)
	if p.Conn == oob.UD {
		msg += oob.UDAddition
	}
	r := &recvRing{pt: pt, slot: pt.roundCache(max(msg, 1))}
	r.nslots = max(1, min(p.RxDepth, maxRecvRing/r.slot))
	r.next = make([]int, p.NumQPs)
	m, err := register(pt.h, pt.pd, p.NumQPs*r.nslots*r.slot, mr.AccessLocalWrite)
	if err != nil {
		return nil, fmt.Errorf("Couldn't allocate MR: %w", err)
	}
	r.mr = m
	return r, nil
}

// postAll posts rx_depth receives of size-byte messages on every QP
// (perftest's ctx_set_recv_wqes).
func (r *recvRing) postAll(size uint64) error {
	r.size = size
	for q := range r.pt.qps {
		for j := 0; j < r.pt.p.RxDepth; j++ {
			if err := r.post(q, r.next[q]); err != nil {
				return fmt.Errorf("Couldn't post recv Qp = %d: counter=%d: %w", q, j, err)
			}
			r.next[q] = (r.next[q] + 1) % r.nslots
		}
	}
	return nil
}

// post posts one receive of QP q into slot.
func (r *recvRing) post(q, slot int) error {
	n := int(r.size)
	if r.pt.p.Conn == oob.UD {
		n += oob.UDAddition
	}
	wr := verbs.RecvWR{WRID: wrID(q, uint64(slot)), SGL: []mr.SGE{r.mr.SGE((q*r.nslots+slot)*r.slot, n)}}
	return r.pt.qps[q].PostRecv(&wr)
}

// message returns the data of a message received in slot of QP q (behind
// the GRH room for UD).
func (r *recvRing) message(q, slot int, size uint64) []byte {
	off := (q*r.nslots + slot) * r.slot
	if r.pt.p.Conn == oob.UD {
		off += oob.UDAddition
	}
	return r.mr.Buf()[off : off+int(size)]
}

// dataLen returns the message length of a receive completion (UD
// completions count the GRH room too).
func (r *recvRing) dataLen(byteLen uint32) uint32 {
	if r.pt.p.Conn == oob.UD && byteLen >= oob.UDAddition {
		return byteLen - oob.UDAddition
	}
	return byteLen
}
