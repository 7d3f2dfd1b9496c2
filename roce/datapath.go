// Data path. One goroutine (Run, or the caller of Step) owns everything in
// this file while holding the device lock: it reads frames from the link,
// checks them (parse, ICRC, destination address, QPN) and hands them to
// the QP they address; it fires QP timers from a heap ordered by deadline;
// it pumps the QPs that have something to send into a batch of frame
// buffers, adding the Ethernet/IP/UDP headers and the ICRC, and writes the
// batch to the link. Application goroutines only ring doorbells (a
// mutex-protected list of QPs with new work) and poll CQs.

package roce

import (
	"errors"
	"net/netip"
	"time"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/monotime"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/qp"
	"github.com/sroce/sroce/verbs"
)

// txStuckMax is how long frames may wait for a link (a PartialWriter) that
// takes none before they are dropped as a failed send.
const txStuckMax = 100 * time.Millisecond

// txBackoff is how long the loop waits on the link before it offers frames
// the link had no room for again.
const txBackoff = time.Millisecond

var errTxStuck = errors.New("roce: the link has taken no frame for 100ms")

// Budgets of one step.
const (
	pumpPerQP = 64 // packets one QP sends before the next gets a turn
	// maxHeldSteps bounds how many steps in a row a receive backlog keeps
	// the QPs from sending requests, so that a peer flooding the link
	// cannot starve them.
	maxHeldSteps = 64
	pumpPerStep  = 1024 // packets all QPs send in one step
	rxRounds     = 4    // link batches read in one step
)

// step processes n frames already in d.rx, then doorbells, more frames,
// timers and transmission. It reports whether there is more to do at once.
// With hold, frames that fill less than a batch stay in it (see
// Device.progress) until txDue, a later step without hold, or a full
// batch.
func (d *Device) step(now monotime.Time, n int, hold bool) bool {
	did := n > 0
	for i := 0; i < n; i++ {
		d.receive(now, d.rx[i][:d.rxSizes[i]])
	}
	if d.doorbells() {
		did = true
	}
	backlog := false // every round read a full batch: frames are waiting
	for round := 0; round < rxRounds; round++ {
		k, err := d.link.ReadBatch(d.rx, d.rxSizes, 0)
		if err != nil || k == 0 {
			break
		}
		did = true
		for i := 0; i < k; i++ {
			d.receive(now, d.rx[i][:d.rxSizes[i]])
		}
		if k < len(d.rx) {
			break
		}
		backlog = round == rxRounds-1
	}
	for len(d.timers) > 0 && d.timers[0].deadline <= now {
		q := d.timers[0]
		d.timers.remove(q)
		q.qp.OnTimer(now)
		d.touch(q)
		did = true
	}
	more := d.pump(now, backlog)
	if len(d.loopQ) > 0 {
		did = true
		more = d.loopback(now) || more
	}
	if hold && d.txN > 0 && d.txN < len(d.tx) {
		if d.txDue == 0 {
			d.txDue = now.Add(txHoldMax)
		}
		return did || more
	}
	d.flushTx()
	return did || more || d.txN > 0
}

// receive handles one frame.
func (d *Device) receive(now monotime.Time, frame []byte) {
	if d.tracing.Load() {
		d.traceFrame(TraceRx, frame, d.clock.Now(), false)
	}
	p := &d.pkt
	if err := p.Parse(frame); err != nil {
		if errors.Is(err, bth.ErrNotRoCE) {
			d.cnt[verbs.CntNotRoCE]++
		} else {
			d.cnt[verbs.CntMalformed]++
		}
		return
	}
	if !p.VerifyICRC() {
		if !d.icrcBlind {
			d.cnt[verbs.CntICRCError]++
			return
		}
		// The link cannot show the IP header as it was on the wire
		// (ICRCVerifier), so a mismatch proves nothing: count and accept.
		d.cnt[verbs.CntICRCUnchecked]++
	}
	if !d.isLocal(p.DstAddr()) {
		d.cnt[verbs.CntBadDGID]++
		return
	}
	q := d.lookupQP(p.BTH().DestQP())
	if q == nil {
		d.cnt[verbs.CntUnknownQPN]++
		return
	}
	q.qp.Receive(now, p)
	d.touch(q)
}

// lookupQP finds a live QP by number.
func (d *Device) lookupQP(n bth.QPN) *QP {
	if n == 1 {
		return d.gsi
	}
	i := int(n) - firstQPN
	if i < 0 || i >= len(d.qps) {
		return nil
	}
	return d.qps[i]
}

// touch reschedules q after it changed: its timer and whether it has
// something to send.
func (d *Device) touch(q *QP) {
	if q.dead {
		return
	}
	d.retime(q)
	if !q.queued && q.qp.HasWork() {
		q.queued = true
		d.runq = append(d.runq, q)
	}
}

// retime moves q in the timer heap to its current deadline.
func (d *Device) retime(q *QP) {
	dl, ok := q.qp.NextDeadline()
	switch {
	case ok && q.heapIdx >= 0 && dl != q.deadline:
		q.deadline = dl
		d.timers.fix(q)
	case ok && q.heapIdx < 0:
		q.deadline = dl
		d.timers.push(q)
	case !ok && q.heapIdx >= 0:
		d.timers.remove(q)
	}
}

// doorbells takes the QPs whose queues got new work requests.
func (d *Device) doorbells() bool {
	d.dbMu.Lock()
	list := d.db
	d.db, d.dbSpare = d.dbSpare[:0], list
	d.dbRung.Store(false)
	d.dbMu.Unlock()
	for _, q := range list {
		q.doorbell.Store(false)
		d.touch(q)
	}
	clear(list)
	return len(list) > 0
}

// ring notes that q has new work; called by posting goroutines. An
// inline device transmits it at once on the caller's goroutine.
func (d *Device) ring(q *QP) {
	d.ringRecv(q)
	if d.mode == EngineInline {
		d.progress(true)
	}
}

// ringRecv is ring for posted receives: an inline device leaves them to
// the next step (a receive only matters when a message arrives, which a
// poll or the loop handles), so posting a receive costs no step.
func (d *Device) ringRecv(q *QP) {
	if q.doorbell.CompareAndSwap(false, true) {
		d.dbMu.Lock()
		d.db = append(d.db, q)
		d.dbRung.Store(true)
		d.dbMu.Unlock()
		d.kick()
	}
}

// pump lets the queued QPs transmit, round robin. It reports whether some
// QP still has more to send.
//
// With backlog (frames still wait in the link after this step's reads),
// the QPs send responses only, for at most maxHeldSteps steps in a row:
// a request's retransmit timer starts when it is sent, and a loop that
// sends faster than it reads would start timers whose acknowledgements
// wait behind its own backlog. Ten thousand QPs starting at once otherwise
// sent every request within a few steps and timed out before the loop had
// read the replies.
func (d *Device) pump(now monotime.Time, backlog bool) bool {
	budget := pumpPerStep
	reqBudget := pumpPerStep
	if backlog && d.heldSteps < maxHeldSteps {
		d.heldSteps++
		reqBudget = 0
	} else {
		d.heldSteps = 0
	}
	for len(d.runq) > 0 && budget > 0 {
		k := 0
		for _, q := range d.runq {
			if q.dead {
				q.queued = false
				continue
			}
			if budget <= 0 {
				d.runq[k] = q
				k++
				continue
			}
			sent, more := q.qp.PumpLimit(now, min(pumpPerQP, budget), min(pumpPerQP, reqBudget))
			budget -= sent
			if more || (reqBudget == 0 && q.qp.HasWork()) {
				d.runq[k] = q
				k++
			} else {
				q.queued = false
			}
			d.retime(q)
		}
		clear(d.runq[k:])
		d.runq = d.runq[:k]
		if d.txN == len(d.tx) {
			d.flushTx()
			if d.txN == len(d.tx) {
				// The link takes nothing now; try again later.
				return true
			}
		}
		if reqBudget == 0 {
			break // the held QPs stay queued for the next step
		}
	}
	return len(d.runq) > 0
}

// --- qp.Env -----------------------------------------------------------------

// env is the device as the QPs of its loop see it: it implements qp.Env on
// an unexported type, so the loop's callbacks are not part of the verbs
// API.
type env Device

func (e *env) Frame(ah *verbs.AH, n int) []byte           { return (*Device)(e).frame(ah, n) }
func (e *env) Send(ah *verbs.AH, src bth.QPN, pkt []byte) { (*Device)(e).send(ah, src, pkt) }
func (e *env) ResolveAH(attr *verbs.AHAttr, ah *verbs.AH) error {
	return (*Device)(e).resolveAH(attr, ah)
}
func (e *env) Invalidate(pd *mr.PD, rkey uint32) error { return pd.Invalidate(rkey, true) }
func (e *env) Event(t verbs.EventType, q *qp.QP, srq *qp.SRQ) {
	(*Device)(e).event(t, q, srq)
}

// frame returns the next transmit buffer's room for a transport packet of
// n bytes toward ah, or nil when the batch is full and the link takes
// nothing. send completes the frame in that same buffer.
func (d *Device) frame(ah *verbs.AH, n int) []byte {
	if d.txN == len(d.tx) {
		d.flushTx()
		if d.txN == len(d.tx) {
			return nil
		}
	}
	hl := ah.Encap.Len()
	f := d.tx[d.txN]
	if hl+n > len(f) {
		d.cnt[verbs.CntSendErr]++
		return nil
	}
	d.txHL = hl
	return f[hl : hl+n]
}

// send adds the Ethernet, IP and UDP headers and the ICRC around pkt, the
// packet built in the buffer frame returned, and queues the frame.
func (d *Device) send(ah *verbs.AH, src bth.QPN, pkt []byte) {
	f := d.tx[d.txN]
	d.enc = ah.Encap
	e := &d.enc
	e.SrcMAC = d.mac
	e.SrcPort = UDPSourcePort(src)
	d.ipID++
	if d.ipID == 0 {
		d.ipID = 1
	}
	e.ID = d.ipID
	hl := d.txHL
	l3, err := e.Encode(f, len(pkt))
	if err != nil {
		d.cnt[verbs.CntSendErr]++
		return
	}
	bth.PutICRC(f[l3:hl+len(pkt)], e.IPv6())
	dropped := d.impair != nil && d.impair.drop()
	if d.tracing.Load() {
		d.traceFrame(TraceTx, f[:hl+len(pkt)], d.clock.Now(), dropped)
	}
	if dropped {
		// The impairment loses it on the way: the buffer is used again.
		d.impairDropped++
		return
	}
	if !d.linkLoopback && d.isLocal(e.Dst) {
		d.queueLoop(f[:hl+len(pkt)])
		return
	}
	d.txLen[d.txN] = hl + len(pkt)
	d.txN++
}

// isLocal reports whether a (unmapped, as bth.GID.Addr gives it) is the
// address of one of the device's GIDs: the device accepts packets to it,
// and keeps those it sends to it.
func (d *Device) isLocal(a netip.Addr) bool {
	for _, g := range d.gidAddrs {
		if g == a {
			return true
		}
	}
	return false
}

// maxLoop bounds the frames to the device itself waiting to be received;
// beyond it they are dropped as a full link would drop them, and RC
// recovers by retransmission.
const maxLoop = 4096

// queueLoop keeps a copy of a frame to one of the device's own GIDs.
func (d *Device) queueLoop(frame []byte) {
	if len(d.loopQ) >= maxLoop {
		d.cnt[verbs.CntSendErr]++
		return
	}
	var b []byte
	if n := len(d.loopFree); n > 0 {
		b, d.loopFree = d.loopFree[n-1][:0], d.loopFree[:n-1]
	}
	d.loopQ = append(d.loopQ, append(b, frame...))
}

// loopback receives the frames the device sent to itself, and what they
// make the QPs send, for a bounded number of rounds. Frames queued while
// it runs join the queue behind the ones being received; the queue and
// the frames' buffers are reused. It reports whether frames still wait.
func (d *Device) loopback(now monotime.Time) bool {
	done := 0
	for round := 0; round < 8 && done < len(d.loopQ); round++ {
		for end := len(d.loopQ); done < end; done++ {
			f := d.loopQ[done]
			d.receive(now, f)
			d.loopFree = append(d.loopFree, f)
		}
		d.doorbells()
		d.pump(now, false)
	}
	n := copy(d.loopQ, d.loopQ[done:])
	clear(d.loopQ[n:])
	d.loopQ = d.loopQ[:n]
	return n > 0
}

// UDPSourcePort returns the UDP source port of a QP's packets, as rdma_rxe
// chooses it: 0xC000 plus a 14-bit hash of the QP number.
func UDPSourcePort(qpn bth.QPN) uint16 {
	return 0xc000 + uint16((uint32(qpn)*0x61c88647)>>18)&0x3fff
}

// flushTx writes the transmit batch to the link.
func (d *Device) flushTx() {
	if d.txN == 0 {
		return
	}
	for i := 0; i < d.txN; i++ {
		d.txView[i] = d.tx[i][:d.txLen[i]]
	}
	d.txDue = 0
	var n int
	var err error
	if d.pw != nil {
		n, err = d.pw.WriteBatchNow(d.txView[:d.txN])
	} else {
		n, err = d.link.WriteBatch(d.txView[:d.txN])
	}
	d.txBlocked = err == nil && n < d.txN
	switch {
	case d.txBlocked && n > 0:
		d.txStuckAt = 0
	case d.txBlocked && d.txStuckAt == 0:
		d.txStuckAt = d.clock.Now()
	case d.txBlocked && d.clock.Now().Sub(d.txStuckAt) > txStuckMax:
		// The link has taken nothing for a long while: give the frames
		// up as a failed send would, and let RC retransmit them.
		err = errTxStuck
		d.txBlocked, d.txStuckAt = false, 0
	case !d.txBlocked:
		d.txStuckAt = 0
	}
	if err != nil {
		// The frames are lost; RC recovers by retransmission.
		d.cnt[verbs.CntSendErr] += uint64(d.txN - n)
		n = d.txN
	}
	if n < d.txN {
		// Keep what the link did not take, in order, at the front.
		for i := n; i < d.txN; i++ {
			d.tx[i-n], d.tx[i] = d.tx[i], d.tx[i-n]
			d.txLen[i-n] = d.txLen[i]
		}
	}
	d.txN -= n
}

// resolveAH fills in the headers that carry packets to attr's destination.
func (d *Device) resolveAH(attr *verbs.AHAttr, ah *verbs.AH) error {
	if attr.PortNum > 1 {
		return errors.New("port does not exist")
	}
	if int(attr.SGIDIndex) >= GIDTableLen || d.gids[attr.SGIDIndex].IsZero() {
		return ErrBadGIDIndex
	}
	if attr.DGID.IsZero() {
		return errors.New("destination GID is zero")
	}
	sgid := d.gids[attr.SGIDIndex]
	if sgid.IsIPv4() != attr.DGID.IsIPv4() {
		return errors.New("source and destination GIDs are of different IP versions")
	}
	if attr.FlowLabel > 0xfffff {
		return errors.New("flow label does not fit 20 bits")
	}
	ttl := attr.HopLimit
	if ttl == 0 {
		ttl = 64
	}
	*ah = verbs.AH{Attr: *attr, SGID: sgid}
	ah.Encap = bth.Encap{
		DstMAC: attr.DMAC, SrcMAC: d.mac,
		Src: sgid.Addr(), Dst: attr.DGID.Addr(),
		TOS: attr.TrafficClass, TTL: ttl, FlowLabel: attr.FlowLabel,
		DF: true, ID: 1, SrcPort: 0xc000,
	}
	return nil
}

// event posts an asynchronous event about a QP or SRQ of the loop.
func (d *Device) event(t verbs.EventType, q *qp.QP, srq *qp.SRQ) {
	ev := AsyncEvent{Type: t}
	if q != nil {
		ev.QP, _ = q.Context.(*QP)
	}
	if srq != nil {
		ev.SRQ, _ = srq.Context.(*SRQ)
	}
	d.events.post(ev)
}

// --- timers -------------------------------------------------------------------

// timerHeap is a min-heap of QPs by deadline; each QP knows its index.
type timerHeap []*QP

func (h timerHeap) less(i, j int) bool { return h[i].deadline < h[j].deadline }

func (h timerHeap) swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIdx = i
	h[j].heapIdx = j
}

func (h *timerHeap) push(q *QP) {
	q.heapIdx = len(*h)
	*h = append(*h, q)
	h.up(q.heapIdx)
}

func (h *timerHeap) remove(q *QP) {
	i := q.heapIdx
	if i < 0 {
		return
	}
	n := len(*h) - 1
	if i != n {
		h.swap(i, n)
	}
	(*h)[n] = nil
	*h = (*h)[:n]
	q.heapIdx = -1
	if i != n {
		if !h.down(i) {
			h.up(i)
		}
	}
}

func (h *timerHeap) fix(q *QP) {
	if !h.down(q.heapIdx) {
		h.up(q.heapIdx)
	}
}

func (h timerHeap) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if !h.less(j, i) {
			break
		}
		h.swap(i, j)
		j = i
	}
}

func (h timerHeap) down(i0 int) bool {
	i := i0
	n := len(h)
	for {
		j := 2*i + 1
		if j >= n {
			break
		}
		if r := j + 1; r < n && h.less(r, j) {
			j = r
		}
		if !h.less(j, i) {
			break
		}
		h.swap(i, j)
		i = j
	}
	return i > i0
}

func (d *Device) nextDeadline() (monotime.Time, bool) {
	if len(d.timers) == 0 {
		return 0, false
	}
	return d.timers[0].deadline, true
}
