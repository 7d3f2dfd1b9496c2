// Data path. One goroutine per engine (Run, or the caller of Step) owns
// the engine's part of everything in this file while holding the engine
// lock: it reads frames from the link,
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
// timers and transmission. It reports whether it did anything or there is
// more to do at once (busy), and whether there is more (more).
// With holdBatch, frames that fill less than a batch stay in it (see
// Device.progress) until txDue, a later step without a hold, or a full
// batch.
//
// With holdACKs (a poll's step) they stay the same way when everything
// the step leaves to send is positive ACKs it made itself: a program that
// polls a completion typically answers it with a post, and the post's
// kick then carries the ACK and the request together (one system call
// where there were two; a ping-pong's round trip over veth went from
// 12.0 to 9.6 us). A later poll or txDue sends them if no post comes.
func (e *engine) step(now monotime.Time, n int, hold txHold) (busy, more bool) {
	acksOnly := hold == holdACKs && e.txN == 0
	did := n > 0
	e.st.RxFrames += uint64(n)
	for i := 0; i < n; i++ {
		e.receive(now, e.rx[i][:e.rxSizes[i]])
	}
	if e.doorbells() {
		did = true
	}
	adopted, moreIn := false, false
	if e.inbox != nil {
		adopted, moreIn = e.adopt(now)
		did = did || adopted
	}
	if e.adoptHost(now) {
		did = true
	}
	backlog := false // every round read a full batch: frames are waiting
	for round := 0; round < rxRounds; round++ {
		var k int
		var err error
		if e.lender != nil {
			// The frames are handled where the link keeps them: receive
			// copies out whatever outlives it (payloads into memory,
			// handoffs, loopback, traces).
			k, err = e.lender.ReadLent(e.rx)
			for i := 0; i < k; i++ {
				e.receive(now, e.rx[i])
			}
			if k > 0 {
				e.lender.ReleaseLent()
			}
		} else if k, err = e.link.ReadBatch(e.rx, e.rxSizes, 0); err == nil {
			for i := 0; i < k; i++ {
				e.receive(now, e.rx[i][:e.rxSizes[i]])
			}
		}
		if err != nil || k == 0 {
			break
		}
		did = true
		e.st.RxFrames += uint64(k)
		if k < len(e.rx) {
			break
		}
		backlog = round == rxRounds-1
	}
	for len(e.timers) > 0 && e.timers[0].deadline <= now {
		q := e.timers[0]
		e.timers.remove(q)
		q.mu.Lock()
		if !q.gone.Load() {
			q.qp.OnTimer(now)
			e.touchLocked(q)
		}
		q.mu.Unlock()
		did = true
	}
	more = e.pump(now, backlog) || moreIn
	if len(e.loopQ) > 0 {
		did = true
		more = e.loopback(now) || more
	}
	if e.handed != 0 {
		e.wakeHanded()
	}
	// A hold that began with ACKs only ends when a request joins them:
	// the loop may have taken a post's doorbell meanwhile.
	keepACKs := (acksOnly || hold == holdBatch && e.txDueACKs) && e.txReqs == 0
	if (hold == holdBatch && !e.txDueACKs || keepACKs) && e.txN > 0 && e.txN < len(e.tx) {
		if e.txDue == 0 {
			e.txDue = now.Add(txHoldMax)
			e.txDueACKs = keepACKs
		}
		return did || more, more
	}
	e.flushTx()
	more = more || e.txN > 0
	return did || more, more
}

// receive handles one frame.
func (e *engine) receive(now monotime.Time, frame []byte) {
	if e.d.tracing.Load() {
		e.d.traceFrame(TraceRx, frame, e.d.clock.Now(), false)
	}
	p := &e.pkt
	if err := p.Parse(frame); err != nil {
		if errors.Is(err, bth.ErrNotRoCE) {
			e.cnt[verbs.CntNotRoCE]++
		} else {
			e.cnt[verbs.CntMalformed]++
		}
		return
	}
	if !p.VerifyICRC() {
		if !e.d.icrcBlind {
			e.cnt[verbs.CntICRCError]++
			return
		}
		// The link cannot show the IP header as it was on the wire
		// (linkcap.ICRCBlind), so a mismatch proves nothing: count and accept.
		e.cnt[verbs.CntICRCUnchecked]++
	}
	if dst := p.DstAddr(); !e.d.isLocal(dst) && !dst.IsMulticast() {
		e.cnt[verbs.CntBadDGID]++
		return
	}
	if p.BTH().DestQP() == bth.MulticastQPN {
		e.receiveMcast(now, frame, p, false)
		return
	}
	q := e.d.lookupQP(p.BTH().DestQP())
	if q == nil {
		e.cnt[verbs.CntUnknownQPN]++
		return
	}
	if q.eng != e {
		e.handOff(q.eng, frame)
		return
	}
	e.deliverTo(now, q, p)
}

// deliverTo gives a checked packet to q, one of the engine's QPs.
func (e *engine) deliverTo(now monotime.Time, q *QP, p *bth.Packet) {
	q.mu.Lock()
	if q.gone.Load() {
		// Destroyed since the lookup.
		q.mu.Unlock()
		e.cnt[verbs.CntUnknownQPN]++
		return
	}
	q.qp.Receive(now, p)
	e.touchLocked(q)
	q.mu.Unlock()
}

// lookupQP finds a live QP by number.
func (d *Device) lookupQP(n bth.QPN) *QP {
	if n == 1 {
		return d.gsi.Load()
	}
	i := int(n) - firstQPN
	if i < 0 || i >= len(d.qps) {
		return nil
	}
	return d.qps[i].Load()
}

// touch reschedules q after it changed: its timer and whether it has
// something to send. A destroyed QP leaves the timer heap.
func (e *engine) touch(q *QP) {
	q.mu.Lock()
	e.touchLocked(q)
	q.mu.Unlock()
}

// touchLocked is touch with the QP lock held.
func (e *engine) touchLocked(q *QP) {
	if q.gone.Load() {
		e.timers.remove(q)
		return
	}
	e.retime(q)
	if !q.queued && q.qp.HasWork() {
		q.queued = true
		e.runq = append(e.runq, q)
	}
}

// retime moves q in the timer heap to its current deadline.
func (e *engine) retime(q *QP) {
	dl, ok := q.qp.NextDeadline()
	switch {
	case ok && q.heapIdx >= 0 && dl != q.deadline:
		q.deadline = dl
		e.timers.fix(q)
	case ok && q.heapIdx < 0:
		q.deadline = dl
		e.timers.push(q)
	case !ok && q.heapIdx >= 0:
		e.timers.remove(q)
	}
}

// doorbells takes the QPs whose queues got new work requests.
func (e *engine) doorbells() bool {
	e.dbMu.Lock()
	list := e.db
	e.db, e.dbSpare = e.dbSpare[:0], list
	e.dbRung.Store(false)
	e.dbMu.Unlock()
	for _, q := range list {
		q.doorbell.Store(false)
		e.touch(q)
	}
	clear(list)
	return len(list) > 0
}

// ring notes that q has new work; called by posting goroutines. An
// inline device transmits it at once on the caller's goroutine.
//
// An inline device runs the step on the posting goroutine and wakes the
// loop only when that step could not run (another goroutine holds the
// engine): waking a parked loop for a doorbell the poster serves itself
// would cost a goroutine wake-up per post for nothing.
func (d *Device) ring(q *QP) {
	if d.mode != EngineInline {
		d.ringRecv(q)
		return
	}
	d.queueDoorbell(q)
	if ran, _ := q.eng.progress(stepPost); !ran {
		q.eng.kick()
	}
}

// ringRecv is ring for posted receives: an inline device leaves them to
// the next step (a receive only matters when a message arrives, which a
// poll or the loop handles), so posting a receive costs no step.
func (d *Device) ringRecv(q *QP) {
	if d.queueDoorbell(q) {
		q.eng.kick()
	}
}

// queueDoorbell puts q on its engine's doorbell list unless it is there
// already, and reports whether it put it there.
func (d *Device) queueDoorbell(q *QP) bool {
	if !q.doorbell.CompareAndSwap(false, true) {
		return false
	}
	e := q.eng
	e.dbMu.Lock()
	e.db = append(e.db, q)
	e.dbRung.Store(true)
	e.dbMu.Unlock()
	return true
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
func (e *engine) pump(now monotime.Time, backlog bool) bool {
	budget := pumpPerStep
	reqBudget := pumpPerStep
	if backlog && e.heldSteps < maxHeldSteps {
		e.heldSteps++
		reqBudget = 0
	} else {
		e.heldSteps = 0
	}
	for len(e.runq) > 0 && budget > 0 {
		k := 0
		for _, q := range e.runq {
			if budget <= 0 && !q.gone.Load() {
				e.runq[k] = q
				k++
				continue
			}
			q.mu.Lock()
			if q.gone.Load() {
				q.mu.Unlock()
				q.queued = false
				e.timers.remove(q)
				continue
			}
			sent, more := q.qp.PumpLimit(now, min(pumpPerQP, budget), min(pumpPerQP, reqBudget))
			budget -= sent
			if more || (reqBudget == 0 && q.qp.HasWork()) {
				e.runq[k] = q
				k++
			} else {
				q.queued = false
			}
			e.retime(q)
			q.mu.Unlock()
		}
		clear(e.runq[k:])
		e.runq = e.runq[:k]
		if e.txN == len(e.tx) || e.txDry {
			e.txDry = false
			if !e.room() {
				// The link takes nothing, or lends nothing, now; try
				// again later.
				return true
			}
		}
		if reqBudget == 0 {
			break // the held QPs stay queued for the next step
		}
	}
	return len(e.runq) > 0
}

// --- qp.Env -----------------------------------------------------------------

// env is an engine as the QPs of its loop see it: it implements qp.Env on
// an unexported type, so the loop's callbacks are not part of the verbs
// API.
type env engine

func (e *env) Frame(ah *verbs.AH, n int) []byte           { return (*engine)(e).frame(ah, n) }
func (e *env) Send(ah *verbs.AH, src bth.QPN, pkt []byte) { (*engine)(e).send(ah, src, pkt) }
func (e *env) ResolveAH(attr *verbs.AHAttr, ah *verbs.AH) error {
	return e.d.resolveAH(attr, ah)
}
func (e *env) Invalidate(pd *mr.PD, rkey uint32) error { return pd.Invalidate(rkey, true) }
func (e *env) Event(t verbs.EventType, q *qp.QP, srq *qp.SRQ) {
	e.d.event(t, q, srq)
}

// frame returns the next transmit buffer's room for a transport packet of
// n bytes toward ah, or nil when the batch is full and the link takes
// nothing. send completes the frame in that same buffer.
func (e *engine) frame(ah *verbs.AH, n int) []byte {
	if !e.room() {
		return nil
	}
	hl := ah.Encap.Len()
	f := e.tx[e.txN]
	if hl+n > len(f) {
		e.cnt[verbs.CntSendErr]++
		return nil
	}
	e.txHL = hl
	return f[hl : hl+n]
}

// room reports whether the batch's next slot has a buffer to build a
// frame in. A full batch, or one whose next slot the link lends nothing
// for, is written to the link first, which frees slots (and, once sent,
// the link's buffers).
func (e *engine) room() bool {
	if e.slotReady() {
		return true
	}
	e.flushTx()
	return e.slotReady()
}

// slotReady reports whether the next slot holds a buffer, borrowing one
// from a lending link if it is empty.
func (e *engine) slotReady() bool {
	return e.txN < len(e.tx) && (e.tx[e.txN] != nil || e.lendTx() != nil)
}

// lendTxBatch is how many transmit buffers the engine borrows at a time.
const lendTxBatch = 16

// lendTx puts a buffer of the link's in the batch's next slot, which the
// link has, and returns it; nil when the link lends none now (all its
// buffers are on their way out: the step waits for room as for a full
// batch) or no longer lends.
func (e *engine) lendTx() []byte {
	if e.txl == nil {
		return nil
	}
	if len(e.txSpare) == 0 {
		// A few at a time: buffers the engine keeps idle are buffers the
		// link cannot send from.
		n := e.txl.LendTx(e.txSpare[:lendTxBatch])
		if n == 0 {
			e.txBlocked, e.txDry = true, true
			return nil
		}
		e.txSpare = e.txSpare[:n]
		if e.txN == 0 {
			// Lending again with nothing waiting to be sent: the step
			// is no longer held up by the link.
			e.txBlocked = false
		}
	}
	k := len(e.txSpare) - 1
	// A frame gets the room of one of the engine's own buffers, whatever
	// the size of the link's.
	f := e.txSpare[k][:e.d.frameSize()]
	e.txSpare[k] = nil
	e.txSpare = e.txSpare[:k]
	e.tx[e.txN] = f
	return f
}

// returnTx gives the link's buffers back, the batch's frames unsent, and
// stops lending: a step that runs later builds no frame. The device
// calls it as it closes, before the link goes.
func (e *engine) returnTx() {
	if e.txl == nil {
		return
	}
	bufs := e.txSpare
	for i, f := range e.tx {
		if f != nil {
			bufs = append(bufs, f)
			e.tx[i] = nil
		}
	}
	e.txl.ReturnTx(bufs)
	clear(bufs)
	e.txSpare = e.txSpare[:0]
	e.txl = nil
	e.txN = 0
}

// send adds the Ethernet, IP and UDP headers and the ICRC around pkt, the
// packet built in the buffer frame returned, and queues the frame.
func (e *engine) send(ah *verbs.AH, src bth.QPN, pkt []byte) {
	f := e.tx[e.txN]
	e.enc = ah.Encap
	enc := &e.enc
	enc.SrcMAC = e.d.mac
	enc.SrcPort = UDPSourcePort(src)
	e.ipID++
	if e.ipID == 0 {
		e.ipID = 1
	}
	enc.ID = e.ipID
	hl := e.txHL
	l3, err := enc.Encode(f, len(pkt))
	if err != nil {
		e.cnt[verbs.CntSendErr]++
		return
	}
	bth.PutICRC(f[l3:hl+len(pkt)], enc.IPv6())
	dropped := e.impair != nil && e.impair.drop()
	if e.d.tracing.Load() {
		e.d.traceFrame(TraceTx, f[:hl+len(pkt)], e.d.clock.Now(), dropped)
	}
	if dropped {
		// The impairment loses it on the way: the buffer is used again.
		e.impairDropped++
		return
	}
	if !e.d.linkLoopback && e.d.isLocal(enc.Dst) {
		e.queueLoop(f[:hl+len(pkt)])
		return
	}
	if peer := e.d.hostPeer(enc.Dst); peer != nil {
		// To another device of the host: no wire, as the kernel's stack.
		if !peer.hostDeliver(f[:hl+len(pkt)]) {
			e.cnt[verbs.CntSendErr]++
		}
		return
	}
	if e.d.loopMcast(enc.Dst) {
		// To a group the device has joined: received here too.
		e.queueLoop(f[:hl+len(pkt)])
	}
	e.txLen[e.txN] = hl + len(pkt)
	if !isPositiveACK(pkt) {
		e.txReqs++
	}
	e.txN++
}

// isLocal reports whether a (unmapped, as bth.GID.Addr gives it) is the
// address of one of the device's GIDs: the device accepts packets to it,
// and keeps those it sends to it.
func (d *Device) isLocal(a netip.Addr) bool {
	for _, g := range d.gidSnap.Load().addrs {
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
func (e *engine) queueLoop(frame []byte) {
	if len(e.loopQ) >= maxLoop {
		e.cnt[verbs.CntSendErr]++
		return
	}
	var b []byte
	if n := len(e.loopFree); n > 0 {
		b, e.loopFree = e.loopFree[n-1][:0], e.loopFree[:n-1]
	}
	e.loopQ = append(e.loopQ, append(b, frame...))
}

// loopback receives the frames the device sent to itself, and what they
// make the QPs send, for a bounded number of rounds. Frames queued while
// it runs join the queue behind the ones being received; the queue and
// the frames' buffers are reused. It reports whether frames still wait.
func (e *engine) loopback(now monotime.Time) bool {
	done := 0
	for round := 0; round < 8 && done < len(e.loopQ); round++ {
		for end := len(e.loopQ); done < end; done++ {
			f := e.loopQ[done]
			e.receive(now, f)
			e.loopFree = append(e.loopFree, f)
		}
		e.doorbells()
		e.pump(now, false)
	}
	n := copy(e.loopQ, e.loopQ[done:])
	clear(e.loopQ[n:])
	e.loopQ = e.loopQ[:n]
	return n > 0
}

// UDPSourcePort returns the UDP source port of a QP's packets, as rdma_rxe
// chooses it: 0xC000 plus a 14-bit hash of the QP number.
func UDPSourcePort(qpn bth.QPN) uint16 {
	return 0xc000 + uint16((uint32(qpn)*0x61c88647)>>18)&0x3fff
}

// flushTx writes the transmit batch to the link.
func (e *engine) flushTx() {
	if e.txN == 0 {
		return
	}
	for i := 0; i < e.txN; i++ {
		e.txView[i] = e.tx[i][:e.txLen[i]]
	}
	e.txDue, e.txDueACKs = 0, false
	var n int
	var err error
	switch {
	case e.txl != nil:
		n, err = e.txl.SubmitLent(e.txView[:e.txN])
		// The link has the buffers it took.
		clear(e.tx[:n])
	case e.pw != nil:
		n, err = e.pw.WriteBatchNow(e.txView[:e.txN])
	default:
		n, err = e.link.WriteBatch(e.txView[:e.txN])
	}
	e.st.TxFrames += uint64(n)
	e.txBlocked = err == nil && n < e.txN
	switch {
	case e.txBlocked && n > 0:
		e.txStuckAt = 0
	case e.txBlocked && e.txStuckAt == 0:
		e.txStuckAt = e.d.clock.Now()
	case e.txBlocked && e.d.clock.Now().Sub(e.txStuckAt) > txStuckMax:
		// The link has taken nothing for a long while: give the frames
		// up as a failed send would, and let RC retransmit them.
		err = errTxStuck
		e.txBlocked, e.txStuckAt = false, 0
	case !e.txBlocked:
		e.txStuckAt = 0
	}
	if err != nil {
		// The frames are lost; RC recovers by retransmission.
		e.cnt[verbs.CntSendErr] += uint64(e.txN - n)
		n = e.txN
	}
	if n < e.txN {
		// Keep what the link did not take, in order, at the front.
		for i := n; i < e.txN; i++ {
			e.tx[i-n], e.tx[i] = e.tx[i], e.tx[i-n]
			e.txLen[i-n] = e.txLen[i]
		}
	}
	e.txN -= n
	// What is left is counted as requests: held no longer than it was.
	e.txReqs = e.txN
}

// isPositiveACK reports whether pkt (from the BTH on) is an RC
// ACKNOWLEDGE whose AETH syndrome is an ACK, not a NAK.
func isPositiveACK(pkt []byte) bool {
	return len(pkt) >= bth.BTHLen+bth.AETHLen && bth.Opcode(pkt[0]) == bth.RCAcknowledge &&
		bth.AETH(pkt[bth.BTHLen:]).Syndrome().IsACK()
}

// resolveAH fills in the headers that carry packets to attr's destination.
func (d *Device) resolveAH(attr *verbs.AHAttr, ah *verbs.AH) error {
	if attr.PortNum > 1 {
		return errors.New("port does not exist")
	}
	gids := &d.gidSnap.Load().gids
	if int(attr.SGIDIndex) >= GIDTableLen || gids[attr.SGIDIndex].IsZero() {
		return ErrBadGIDIndex
	}
	if attr.DGID.IsZero() {
		return errors.New("destination GID is zero")
	}
	sgid := gids[attr.SGIDIndex]
	if sgid.IsIPv4() != attr.DGID.IsIPv4() {
		return errors.New("source and destination GIDs are of different IP versions")
	}
	// The flow label is the low 20 bits of what the caller gave, as a
	// NIC's address vector takes it (UCX sets 0xffffffff); the traffic
	// class goes out as given, and a hop limit of 0 as 64, the kernel's
	// default that rxe's IPv6 headers take for it.
	fl := attr.FlowLabel & 0xfffff
	ttl := attr.HopLimit
	if ttl == 0 {
		ttl = 64
	}
	*ah = verbs.AH{Attr: *attr, SGID: sgid}
	ah.Attr.FlowLabel = fl
	if m, ok := attr.DGID.MulticastMAC(); ok {
		// A group's frames go to its Ethernet address, whatever the
		// attributes say (libibverbs derives it the same way).
		ah.Attr.DMAC = m
	}
	ah.Encap = bth.Encap{
		DstMAC: ah.Attr.DMAC, SrcMAC: d.mac,
		Src: sgid.Addr(), Dst: attr.DGID.Addr(),
		TOS: attr.TrafficClass, TTL: ttl, FlowLabel: fl,
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

func (e *engine) nextDeadline() (monotime.Time, bool) {
	if len(e.timers) == 0 {
		return 0, false
	}
	return e.timers[0].deadline, true
}
