package daemon

import (
	"context"
	"errors"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/daemon/ctl"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/qp"
	"github.com/sroce/sroce/ring"
	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/verbs"
	"golang.org/x/sys/unix"
)

// bridge moves one connection's work between its shared rings and the
// engine: WQEs the client published go to the roce QPs and SRQs,
// completions of the roce CQs go to the client's CQ rings, and an armed
// CQ's event goes to its completion channel.
//
// Everything in the rings is the client's to scribble on, so the bridge
// keeps its own consumer indices and checks every count and length
// against what the daemon sized the ring for; a client that publishes more
// entries than its ring holds or an entry that does not fit its slot is
// disconnected.
type bridge struct {
	c       *conn
	ch      *roce.CompChannel // the engine's events for this client's CQs
	page    *ctl.CtxPage
	wakeC   chan struct{}
	done    chan struct{}
	exited  chan struct{}
	ctx     context.Context
	cancel  context.CancelFunc
	wr      verbs.SendWR
	rwr     verbs.RecvWR
	spinFor time.Duration
}

// idleWake bounds how long the bridge sleeps without a doorbell or a
// completion, as a safety net.
const idleWake = 100 * time.Millisecond

func newBridge(c *conn) *bridge {
	b := &bridge{c: c, ch: c.dev.dev.Device().CreateCompChannel(),
		page:  (*ctl.CtxPage)(unsafe.Pointer(&c.ctxPage.mem[0])),
		wakeC: make(chan struct{}, 1), done: make(chan struct{}), exited: make(chan struct{}),
		spinFor: c.s.spin}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	go b.run()
	go b.doorbells()
	go b.events()
	return b
}

// wake makes a sleeping bridge look at its rings.
func (b *bridge) wake() {
	select {
	case b.wakeC <- struct{}{}:
	default:
	}
}

// stop ends the bridge and waits for it (bounded: a pass is short).
func (b *bridge) stop() {
	b.cancel()
	close(b.done)
	select {
	case <-b.exited:
	case <-time.After(5 * time.Second):
		b.c.s.log.Error("a client's bridge did not stop within 5 s", "client", b.c.id)
	}
}

func (b *bridge) doorbells() {
	var v [8]byte
	for {
		if _, err := b.c.doorbell.Read(v[:]); err != nil {
			if errors.Is(err, unix.EAGAIN) {
				continue
			}
			return
		}
		b.wake()
	}
}

func (b *bridge) events() {
	for {
		cq, err := b.ch.GetEvent(b.ctx)
		if err != nil {
			return
		}
		b.ch.AckEvents(cq, 1)
		b.wake()
	}
}

func (b *bridge) run() {
	defer close(b.exited)
	timer := time.NewTimer(idleWake)
	defer timer.Stop()
	last := time.Now()
	for {
		select {
		case <-b.done:
			return
		default:
		}
		work, err := b.pass(false)
		if err != nil {
			b.fail(err)
			return
		}
		if work {
			last = time.Now()
			continue
		}
		if b.spinFor > 0 && time.Since(last) < b.spinFor {
			continue
		}
		atomic.StoreUint32(&b.page.NeedWakeup, 1)
		work, err = b.pass(true)
		if err != nil {
			b.fail(err)
			return
		}
		if !work {
			timer.Reset(idleWake)
			select {
			case <-b.wakeC:
			case <-timer.C:
			case <-b.done:
				return
			}
		}
		atomic.StoreUint32(&b.page.NeedWakeup, 0)
		last = time.Now()
	}
}

// fail disconnects a client whose rings broke the rules.
func (b *bridge) fail(err error) {
	b.c.s.log.Warn("client disconnected: its rings are corrupt", "client", b.c.id, "pid", b.c.pid, "reason", err.Error())
	b.c.uc.Close()
}

// pass moves what is ready once; arm asks the engine for an event on every
// CQ first (before the bridge sleeps). It reports whether it moved
// anything.
func (b *bridge) pass(arm bool) (bool, error) {
	c := b.c
	c.mu.Lock()
	defer c.mu.Unlock()
	work := false
	if arm {
		for _, o := range c.cqs {
			o.cq.ReqNotify(false)
		}
	}
	for _, o := range c.qps {
		w, err := b.sends(o)
		if err != nil {
			return work, err
		}
		work = work || w
		if o.rq != nil {
			w, err = b.recvs(o.rq, &o.rqCons, o.maxRecv, o.qp.PostRecv)
			if err != nil {
				return work, err
			}
			work = work || w
		}
		atomic.StoreUint32(&o.ctl.State, uint32(o.qp.State()))
	}
	for _, s := range c.srqs {
		w, err := b.recvs(s.rq, &s.cons, s.maxSGE, s.srq.PostRecv)
		if err != nil {
			return work, err
		}
		work = work || w
	}
	for _, o := range c.cqs {
		if b.completions(o) {
			work = true
		}
	}
	return work, nil
}

// sends posts the send WQEs the client published on q.
func (b *bridge) sends(o *qpObj) (bool, error) {
	r := o.sq
	n := r.Prod() - o.sqCons
	if n == 0 {
		return false, nil
	}
	if n > r.Limit() {
		return false, misbehaved("QP %d's send ring says %d entries wait; it holds %d", o.handle, n, r.Limit())
	}
	moved := false
	for ; n > 0; n-- {
		i := o.sqCons
		e := r.At(i)
		wr := &b.wr
		*wr = verbs.SendWR{WRID: e.WRID, Opcode: verbs.WROpcode(e.Opcode), Flags: verbs.SendFlags(e.Flags),
			Imm: e.Imm, InvalidateRKey: e.InvalidateRKey, RemoteAddr: e.RemoteAddr, RKey: e.RKey,
			CompareAdd: e.CompareAdd, Swap: e.Swap, RegAccess: mr.Access(e.RegAccess),
			Bind: mr.MWBind{LKey: e.BindLKey, Addr: e.BindAddr, Length: e.BindLength, Access: mr.Access(e.BindAccess)}}
		if wr.Flags&verbs.Inline != 0 {
			tail := r.Tail(i)
			if int(e.InlineLen) > len(tail) {
				return moved, misbehaved("QP %d: inline data of %d bytes in a %d-byte slot tail", o.handle, e.InlineLen, len(tail))
			}
			wr.InlineData = tail[:e.InlineLen]
		} else {
			ns := int(e.NumSGE)
			if ns > int(o.maxSend) || ns > r.MaxSGEs() {
				return moved, misbehaved("QP %d: send WQE with %d SGEs, the QP takes %d", o.handle, ns, o.maxSend)
			}
			copy(o.sge, r.SGEs(i, ns))
			wr.SGL = o.sge[:ns]
		}
		var bad verbs.WCStatus
		if o.typ == verbs.QPTypeUD {
			ah := b.c.ahs[e.AH]
			if ah == nil || ah.pd != o.pd {
				bad = verbs.WCLocQPOpErr
			} else {
				wr.AH, wr.RemoteQPN, wr.RemoteQKey = ah.ah, bth.QPN(e.UD.RemoteQPN), e.UD.RemoteQKey
			}
		}
		if bad == 0 {
			err := o.qp.PostSend(wr)
			if errors.Is(err, qp.ErrQueueFull) {
				break // the engine's queue is full: the rest waits for completions
			}
			if err != nil {
				bad = verbs.WCLocQPOpErr
			}
		}
		if bad != 0 && !b.errorCQE(o.cqs[0], e.WRID, bad, o) {
			break // the CQ ring is full: try again later
		}
		o.sqCons++
		r.SetCons(o.sqCons)
		moved = true
	}
	return moved, nil
}

// errorCQE completes a WQE the engine refused with status st.
func (b *bridge) errorCQE(cq uint32, wrid uint64, st verbs.WCStatus, o *qpObj) bool {
	c := b.c.cqs[cq]
	if c == nil {
		return true
	}
	s := c.ring.Next()
	if s == nil {
		return false
	}
	wc := verbs.WC{WRID: wrid, Status: st, QPNum: o.qp.QPN()}
	s.SetWC(&wc)
	c.ring.Publish()
	b.notify(c)
	return true
}

// recvs posts the receive WQEs published on ring r.
func (b *bridge) recvs(r *ring.Ring[ring.RecvWQE], cons *uint32, maxSGE uint32, post func(*verbs.RecvWR) error) (bool, error) {
	n := r.Prod() - *cons
	if n == 0 {
		return false, nil
	}
	if n > r.Limit() {
		return false, misbehaved("a receive ring says %d entries wait; it holds %d", n, r.Limit())
	}
	moved := false
	for ; n > 0; n-- {
		i := *cons
		e := r.At(i)
		ns := int(e.NumSGE)
		if ns > int(maxSGE) || ns > r.MaxSGEs() {
			return moved, misbehaved("receive WQE with %d SGEs, the queue takes %d", ns, maxSGE)
		}
		b.rwr = verbs.RecvWR{WRID: e.WRID, SGL: r.SGEs(i, ns)}
		if err := post(&b.rwr); err != nil {
			if errors.Is(err, qp.ErrQueueFull) {
				break
			}
			// A QP in the error state flushes; anything else is the
			// client's mistake, which the engine reports as it posts.
		}
		*cons++
		r.SetCons(*cons)
		moved = true
	}
	return moved, nil
}

// completions copies the engine's completions of one CQ to its ring.
func (b *bridge) completions(o *cqObj) bool {
	moved := false
	for {
		room := int(o.ring.Limit()) - int(o.ring.Prod()-o.ring.Cons())
		if room <= 0 || room > int(o.ring.Limit()) {
			break
		}
		if room > len(o.wcs) {
			room = len(o.wcs)
		}
		n := o.cq.Poll(o.wcs[:room])
		for i := 0; i < n; i++ {
			s := o.ring.Next()
			if s == nil {
				break
			}
			s.SetWC(&o.wcs[i])
			o.ring.Publish()
		}
		if n == 0 {
			break
		}
		moved = true
	}
	if moved {
		b.notify(o)
	}
	if o.cq.Overflowed() {
		atomic.StoreUint32(&o.ctl.Overflow, 1)
	}
	return moved
}

// notify sends the CQ's event to its channel if the client armed it.
func (b *bridge) notify(o *cqObj) {
	if o.ch == 0 || atomic.LoadUint32(&o.ctl.Arm) == 0 {
		return
	}
	if !atomic.CompareAndSwapUint32(&o.ctl.Arm, 1, 0) && !atomic.CompareAndSwapUint32(&o.ctl.Arm, 2, 0) {
		return
	}
	ch := b.c.chans[o.ch]
	if ch == nil {
		return
	}
	ev := ctl.CQEvent{CQ: o.handle}
	unix.Write(ch.w, ctl.Bytes(&ev))
}
