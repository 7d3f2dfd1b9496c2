package daemon

// Queue pairs: CREATE_QP, MODIFY_QP, QUERY_QP, DESTROY_QP, ATTACH_MCAST,
// DETACH_MCAST (OPEN_QP is XRC's, in xrc.go). A QP's memory is a memfd the
// daemon makes: its control block, its send ring and (without an SRQ) its
// receive ring, which the bridge (bridge.go) takes the WQEs from.

import (
	"sync/atomic"
	"unsafe"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/daemon/ctl"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/ring"
	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/verbs"
	"golang.org/x/sys/unix"
)

type qpObj struct {
	qp     *roce.QP
	t      *target // what the bridge serves
	mem    *shm
	sq     *ring.Ring[ring.SendWQE] // the engine's send queue in place
	sqSeen uint32                   // the producer index the bridge last rang the engine for
	rq     *ring.Ring[ring.RecvWQE] // its own receive ring, the engine's receive queue in place (none with an SRQ, XRC)
	ctl    *ctl.QPCtl
	typ    verbs.QPType
	pd     uint32
	cqs    [2]uint32
	srq    uint32
	xrcd   uint32 // XRC_RECV: its domain's handle
	tgt    *tgtQP // XRC_RECV: the QP and its handles
	opened bool   // a handle of ibv_open_qp: the QP's watch and events are its creator's
	handle uint32
	cap    verbs.QPCap // as the client sees it
	cost   cost
}

var qpTable = table[*qpObj]{kind: kindQP, m: func(c *conn) map[uint32]*qpObj { return c.qps }, notFound: einval}

func init() {
	modifyKey := func(in *ctl.ModifyQP) uint32 { return in.Handle }
	mcastKey := func(in *ctl.Mcast) uint32 { return in.QP }
	register(
		method{op: ctl.OpCreateQP, open: true, locks: locks(kindXRCD, kindSRQ, kindQP), run: decoded((*conn).createQP)},
		// Modify and query look the QP up and hold no lock: a move to RTR
		// may wait for a neighbour.
		method{op: ctl.OpModifyQP, open: true, run: on(qpTable, modifyKey, (*conn).modifyQP)},
		method{op: ctl.OpQueryQP, open: true, run: on(qpTable, modifyKey, (*conn).queryQP)},
		method{op: ctl.OpDestroyQP, open: true, locks: locks(kindXRCD, kindSRQ, kindQP), run: destroys(qpTable, (*conn).destroyQP)},
		method{op: ctl.OpAttachMcast, open: true, run: on(qpTable, mcastKey, (*conn).mcast)},
		method{op: ctl.OpDetachMcast, open: true, run: on(qpTable, mcastKey, (*conn).mcast)},
	)
}

func (c *conn) createQP(in *ctl.CreateQP, _ *request) ([]byte, []int, error) {
	typ := verbs.QPType(in.QPType)
	var (
		pd       *roce.PD
		scq, rcq *cqObj
		xo       *xrcdObj
	)
	switch typ {
	case verbs.QPTypeRC, verbs.QPTypeUC, verbs.QPTypeUD:
		if pd, scq, rcq = c.pds[in.PD], c.cqs[in.SendCQ], c.cqs[in.RecvCQ]; pd == nil || scq == nil || rcq == nil {
			return nil, nil, unix.EINVAL
		}
	case verbs.QPTypeXRCSend:
		// An initiator receives nothing: its receive CQ is optional.
		pd, scq, rcq = c.pds[in.PD], c.cqs[in.SendCQ], c.cqs[in.RecvCQ]
		if pd == nil || scq == nil || in.SRQ != 0 || (in.RecvCQ != 0 && rcq == nil) {
			return nil, nil, unix.EINVAL
		}
	case verbs.QPTypeXRCRecv:
		// A target belongs to a domain and has no PD, CQs or SRQ.
		if xo = c.xrcds[in.PD]; xo == nil || in.SRQ != 0 {
			return nil, nil, unix.EINVAL
		}
	default:
		return nil, nil, unix.EOPNOTSUPP
	}
	xrc := typ == verbs.QPTypeXRCSend || typ == verbs.QPTypeXRCRecv
	var srq *srqObj
	if in.SRQ != 0 {
		if srq = c.srqs[in.SRQ]; srq == nil {
			return nil, nil, unix.EINVAL
		}
	}
	h, err := c.alloc(len(c.qps), c.s.Limits().QPs, "QPs")
	if err != nil {
		return nil, nil, err
	}
	if in.Cap.MaxSendWR == 0 {
		in.Cap.MaxSendWR = 1
	}
	if in.Cap.MaxSendWR > roce.MaxQPWR {
		return nil, nil, unix.EINVAL
	}
	attr := &roce.QPInitAttr{Type: typ, Cap: in.Cap.Verbs(), SigAll: in.SQSigAll != 0}
	if scq != nil {
		attr.SendCQ = scq.cq
	}
	if rcq != nil {
		attr.RecvCQ = rcq.cq
	}
	if srq != nil {
		attr.SRQ = srq.srq
		attr.Cap.MaxRecvWR, attr.Cap.MaxRecvSGE = 0, 0
	}
	// Charged before the engine allocates: the QP and its shared memory
	// as the caps asked for it lay out; once the engine says what it
	// gave, the charge becomes the real footprint, the engine's queues
	// included.
	// XRC QPs have no receive ring: a target's receives are its domain's
	// SRQs', an initiator receives nothing.
	noRQ := srq != nil || xrc
	if noRQ {
		attr.Cap.MaxRecvWR, attr.Cap.MaxRecvSGE = 0, 0
	}
	want := in.Cap.Verbs()
	if !noRQ && want.MaxRecvWR == 0 {
		want.MaxRecvWR = 1
	}
	if want.MaxSendSGE > roce.MaxSGE || want.MaxInlineData > roce.MaxInlineData ||
		!noRQ && (want.MaxRecvWR > roce.MaxQPWR || want.MaxRecvSGE > roce.MaxSGE) {
		return nil, nil, unix.EINVAL
	}
	k := add(one(ResQPs, 1), shmCost(layoutQP(want, noRQ).size))
	if err := c.charge(k); err != nil {
		return nil, nil, err
	}
	var q *roce.QP
	if xo != nil {
		q, err = xo.sh.x.CreateQP(attr)
	} else {
		q, err = pd.CreateQP(attr)
	}
	if err != nil {
		c.release(k)
		return nil, nil, err
	}
	_, ia := q.Query()
	got := ia.Cap
	got.MaxSendWR = in.Cap.MaxSendWR
	if noRQ {
		got.MaxRecvWR, got.MaxRecvSGE = 0, 0
	} else if got.MaxRecvWR == 0 {
		got.MaxRecvWR = 1
	}
	lay := layoutQP(got, noRQ)
	fail := func(err error) ([]byte, []int, error) {
		q.Destroy()
		c.release(k)
		return nil, nil, err
	}
	o := &qpObj{qp: q, typ: typ, pd: in.PD, cqs: [2]uint32{in.SendCQ, in.RecvCQ}, srq: in.SRQ, cost: k,
		handle: h, cap: got}
	fd, err := o.makeMemory(lay, got, noRQ)
	if err != nil {
		return fail(err)
	}
	if o.rq != nil {
		// The engine takes the client's receives from the ring where
		// the client writes them.
		if err := q.AttachRecvRing(o.rq); err != nil {
			unix.Close(fd)
			o.mem.close()
			return fail(err)
		}
	}
	// The engine executes the client's sends from the ring where the
	// client writes them.
	if err := q.AttachSendRing(o.sq, c.br.resolveAH(o)); err != nil {
		unix.Close(fd)
		o.mem.close()
		return fail(err)
	}
	// What the QP holds, now that its queues are the client's rings
	// (the shared memory) and the engine's state beside them.
	real := add(one(ResQPs, 1), shmCost(lay.size))
	real[ResQueueBytes] += uint64(q.QueueBytes())
	if k, err = c.recharge(k, real); err != nil {
		unix.Close(fd)
		o.mem.close()
		return fail(err)
	}
	o.cost = k
	if o.t, err = c.br.add(o, nil); err != nil {
		unix.Close(fd)
		o.mem.close()
		return fail(err)
	}
	atomic.StoreUint32(&o.ctl.State, uint32(q.State()))
	// The client reads the QP's state in its control block: every change
	// is stored there as it is made, the loop's own (the error state after
	// a NAK or a retry count used up) included, so that a bridge asleep on
	// its doorbell needs no timer to mirror it.
	qctl := o.ctl
	q.SetStateWatch(func(st verbs.QPState) { atomic.StoreUint32(&qctl.State, uint32(st)) })
	c.qps[h] = o
	switch {
	case srq != nil:
		srq.refs++
	case xo != nil:
		xo.uses++
		o.xrcd = in.PD
		o.tgt = c.dev.addTarget(xo.sh, q)
	}
	c.dev.own(q, c, h)
	out := ctl.QP{Handle: h, QPN: uint32(q.QPN()), Cap: ctl.CapOf(got), Bell: o.t.bell, SQOffset: uint64(lay.sqOff), RQOffset: uint64(lay.rqOff),
		MemSize: uint64(len(o.mem.mem))}
	if noRQ {
		out.Cap.MaxRecvWR, out.Cap.MaxRecvSGE = 0, 0
	}
	return ctl.Bytes(&out), []int{fd}, nil
}

// makeMemory makes o's memory as lay lays it out for caps got: the
// control block, the send ring and (unless noRQ) the receive ring. It
// returns the descriptor for the reply.
func (o *qpObj) makeMemory(lay qpLayout, got verbs.QPCap, noRQ bool) (int, error) {
	mem, err := newShm("qp", lay.size)
	if err != nil {
		return -1, err
	}
	fd, err := dupFD(mem.fd)
	if err != nil {
		mem.close()
		return -1, err
	}
	if o.sq, err = ring.Init[ring.SendWQE](mem.mem[lay.sqOff:], ring.KindSend, got.MaxSendWR, lay.sqStride); err == nil && !noRQ {
		o.rq, err = ring.Init[ring.RecvWQE](mem.mem[lay.rqOff:], ring.KindRecv, got.MaxRecvWR, lay.rqStride)
	}
	if err != nil {
		unix.Close(fd)
		mem.close()
		return -1, internalf("laying out a QP's rings: %w", err)
	}
	o.mem, o.ctl = mem, (*ctl.QPCtl)(unsafe.Pointer(&mem.mem[0]))
	return fd, nil
}

// qpLayout is where a QP's rings lie in its memory.
type qpLayout struct {
	sqOff, rqOff       int // rqOff is 0 with an SRQ
	size               int
	sqStride, rqStride uint32
}

// layoutQP lays out the memory of a QP of caps cp (MaxRecvWR at least 1
// without an SRQ): the control block, the send ring, the receive ring.
func layoutQP(cp verbs.QPCap, withSRQ bool) qpLayout {
	sqTail := max(int(cp.MaxSendSGE)*int(unsafe.Sizeof(mr.SGE{})), int(cp.MaxInlineData))
	l := qpLayout{sqStride: ring.Stride[ring.SendWQE](sqTail), sqOff: cacheLine(int(unsafe.Sizeof(ctl.QPCtl{})))}
	l.size = l.sqOff + ring.Bytes(cp.MaxSendWR, l.sqStride)
	if !withSRQ {
		l.rqStride = ring.Stride[ring.RecvWQE](int(cp.MaxRecvSGE) * int(unsafe.Sizeof(mr.SGE{})))
		l.rqOff = cacheLine(l.size)
		l.size = l.rqOff + ring.Bytes(cp.MaxRecvWR, l.rqStride)
	}
	return l
}
func (c *conn) modifyQP(in *ctl.ModifyQP, o *qpObj, _ *request) ([]byte, []int, error) {
	a := &in.Attr
	mask := verbs.QPAttrMask(in.AttrMask)
	attr := a.Verbs()
	attr.AH = verbs.AHAttr{}
	if mask&verbs.AttrAV != 0 {
		ah, err := c.resolve(&a.AHAttr)
		if err != nil {
			return nil, nil, unix.EHOSTUNREACH
		}
		attr.AH = ah
	}
	if err := o.qp.Modify(&attr, mask); err != nil {
		return nil, nil, err
	}
	atomic.StoreUint32(&o.ctl.State, uint32(o.qp.State()))
	c.br.kick(o.t)
	return nil, nil, nil
}

func (c *conn) queryQP(in *ctl.ModifyQP, o *qpObj, _ *request) ([]byte, []int, error) {
	a, ia := o.qp.Query()
	a.CurState = a.State
	out := ctl.ModifyQP{Handle: in.Handle, AttrMask: in.AttrMask, Attr: ctl.QPAttrOf(&a)}
	out.Attr.Cap, out.Attr.PortNum, out.Attr.QPType = ctl.CapOf(o.cap), 1, uint32(o.typ)
	if ia.SigAll {
		out.Attr.SQSigAll = 1
	}
	return ctl.Bytes(&out), nil, nil
}

func (c *conn) destroyQP(h uint32, o *qpObj) error {
	// What the client posted before it asked goes out first, as from a
	// NIC's queue (a program that posts unsignaled sends and then
	// destroys the QP expects them sent): the engine is rung for what
	// waits in the ring (drainSends) and pumped once (SendPosted).
	if c.br != nil {
		c.br.drainSends(o.t)
	}
	if !c.lastHandle(o) {
		c.dropQP(h, o) // an XRC target another handle keeps
		return nil
	}
	o.qp.SendPosted()
	if err := o.qp.Destroy(); err != nil {
		return err
	}
	c.dropQP(h, o)
	return nil
}

// mcast attaches a QP to a multicast group or detaches it
// (ibv_attach_mcast, ibv_detach_mcast), with the engine's errnos: EINVAL
// for a QP that is not UD, a GID that is not multicast or a group the QP
// is not attached to, ENOMEM beyond the device's limits, EBUSY never.
func (c *conn) mcast(in *ctl.Mcast, o *qpObj, r *request) ([]byte, []int, error) {
	var err error
	if r.op == ctl.OpAttachMcast {
		err = o.qp.AttachMcast(bth.GID(in.GID), in.LID)
	} else {
		err = o.qp.DetachMcast(bth.GID(in.GID), in.LID)
	}
	return nil, nil, err
}

// dropQP forgets a destroyed QP; c.qpMu, c.srqMu and c.xrcdMu are held.
func (c *conn) dropQP(h uint32, o *qpObj) {
	if o.opened {
		if x := c.xrcds[o.xrcd]; x != nil {
			x.uses--
		}
		delete(c.qps, h)
		c.br.drop(o.t)
		o.mem.close()
		c.release(o.cost)
		return
	}
	c.dev.disown(o.qp)
	if s := c.srqs[o.srq]; s != nil {
		s.refs--
	}
	if x := c.xrcds[o.xrcd]; x != nil {
		x.uses--
	}
	delete(c.qps, h)
	c.br.drop(o.t)
	o.qp.SetStateWatch(nil)
	o.mem.close()
	c.release(o.cost)
}
