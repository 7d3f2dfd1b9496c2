package daemon

// Shared receive queues: CREATE_SRQ, MODIFY_SRQ (a resize with max_wr),
// QUERY_SRQ, DESTROY_SRQ. An SRQ's memory is a memfd the daemon makes: its
// control block and its receive ring.

import (
	"unsafe"

	"github.com/sroce/sroce/daemon/ctl"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/ring"
	"github.com/sroce/sroce/roce"
	"golang.org/x/sys/unix"
)

type srqObj struct {
	srq    *roce.SRQ
	t      *target                  // what the bridge serves
	mem    *shm                     // replaced by a resize under c.srqMu and t.mu
	rq     *ring.Ring[ring.RecvWQE] // its ring, the engine's queue in place
	pd     uint32
	handle uint32
	maxSGE uint32
	refs   int
	xrcd   uint32 // an XRC SRQ's domain handle
	cost   cost
}

var srqTable = table[*srqObj]{kind: kindSRQ, m: func(c *conn) map[uint32]*srqObj { return c.srqs }, notFound: einval}

func init() {
	register(
		method{op: ctl.OpCreateSRQ, open: true, locks: locks(kindXRCD, kindSRQ), run: decoded((*conn).createSRQ)},
		// A resize holds the SRQs' lock throughout, so that the bridge
		// takes nothing from the ring meanwhile; arming the limit needs
		// no lock.
		method{op: ctl.OpModifySRQ, open: true, run: decoded((*conn).modifySRQ)},
		method{op: ctl.OpQuerySRQ, open: true, run: on(srqTable, handleOf, (*conn).querySRQ)},
		method{op: ctl.OpDestroySRQ, open: true, locks: locks(kindXRCD, kindSRQ), run: destroys(srqTable, (*conn).destroySRQ)},
	)
}

func (c *conn) createSRQ(in *ctl.SRQ, _ *request) ([]byte, []int, error) {
	pd := c.pds[in.PDOrHandle]
	if pd == nil || in.MaxWR == 0 {
		return nil, nil, unix.EINVAL
	}
	var xo *xrcdObj
	var xcq *cqObj
	if in.XRCD != 0 {
		if xo, xcq = c.xrcds[in.XRCD], c.cqs[in.CQ]; xo == nil || xcq == nil {
			return nil, nil, unix.EINVAL
		}
	}
	h, err := c.alloc(len(c.srqs), c.s.Limits().Objects, "SRQs")
	if err != nil {
		return nil, nil, err
	}
	if in.MaxSGE == 0 {
		in.MaxSGE = 1
	}
	if in.MaxWR > roce.MaxSRQWR || in.MaxSGE > roce.MaxSGE {
		return nil, nil, unix.EINVAL
	}
	// Charged before the engine allocates (the shared ring as asked
	// for), then, once the client's ring is the SRQ's queue, the real
	// footprint.
	stride := ring.Stride[ring.RecvWQE](int(in.MaxSGE) * int(unsafe.Sizeof(mr.SGE{})))
	k := shmCost(srqSize(in.MaxWR, stride))
	if err := c.charge(k); err != nil {
		return nil, nil, err
	}
	var s *roce.SRQ
	if xo != nil {
		s, err = pd.CreateXRCSRQ(xo.sh.x, xcq.cq, in.MaxWR, in.MaxSGE, in.SRQLimit)
	} else {
		s, err = pd.CreateSRQ(in.MaxWR, in.MaxSGE, in.SRQLimit)
	}
	if err != nil {
		c.release(k)
		return nil, nil, err
	}
	maxWR, _, _ := s.Query()
	fail := func(err error) ([]byte, []int, error) {
		s.Destroy()
		c.release(k)
		return nil, nil, err
	}
	mem, r, fd, err := newSRQShm(maxWR, stride)
	if err != nil {
		return fail(err)
	}
	so := &srqObj{srq: s, mem: mem, pd: in.PDOrHandle, handle: h, maxSGE: in.MaxSGE, rq: r,
		xrcd: in.XRCD}
	if err = s.AttachRing(r); err == nil {
		// What the SRQ holds, now that its queue is the client's ring
		// (the shared memory).
		real := shmCost(srqSize(maxWR, stride))
		real[ResQueueBytes] += uint64(s.QueueBytes())
		k, err = c.recharge(k, real)
		so.cost = k
	}
	if err == nil {
		so.t, err = c.br.add(nil, so)
	}
	if err != nil {
		unix.Close(fd)
		mem.close()
		return fail(err)
	}
	c.srqs[h] = so
	if xo != nil {
		xo.uses++
	}
	c.dev.own(s, c, h)
	return srqReply(so, maxWR, fd)
}

// srqSize is the size of the memory of an SRQ's ring of maxWR entries of
// stride bytes.
func srqSize(maxWR, stride uint32) int { return srqRingOffset + ring.Bytes(maxWR, stride) }

// srqRingOffset is where an SRQ's ring starts in its memfd.
var srqRingOffset = cacheLine(int(unsafe.Sizeof(ctl.SRQCtl{})))

// newSRQShm creates the memory of an SRQ's ring of maxWR entries of
// stride bytes, with a descriptor of it for the reply.
func newSRQShm(maxWR, stride uint32) (*shm, *ring.Ring[ring.RecvWQE], int, error) {
	mem, err := newShm("srq", srqSize(maxWR, stride))
	if err != nil {
		return nil, nil, -1, err
	}
	r, err := ring.Init[ring.RecvWQE](mem.mem[srqRingOffset:], ring.KindRecv, maxWR, stride)
	if err != nil {
		mem.close()
		return nil, nil, -1, internalf("laying out an SRQ's ring: %w", err)
	}
	fd, err := dupFD(mem.fd)
	if err != nil {
		mem.close()
		return nil, nil, -1, err
	}
	return mem, r, fd, nil
}

// srqReply is the reply of CREATE_SRQ and of MODIFY_SRQ with max_wr: the
// SRQ and fd, a descriptor of its memory for the client.
func srqReply(o *srqObj, maxWR uint32, fd int) ([]byte, []int, error) {
	out := ctl.SRQCreated{Handle: o.handle, MaxWR: maxWR, MaxSGE: o.maxSGE, SRQNum: o.srq.Num(), Bell: o.t.bell,
		RingOffset: uint64(srqRingOffset), MemSize: uint64(len(o.mem.mem))}
	return ctl.Bytes(&out), []int{fd}, nil
}

// enum ibv_srq_attr_mask
const (
	srqMaxWR = 1 << 0
	srqLimit = 1 << 1
)

func (c *conn) modifySRQ(in *ctl.SRQ, r *request) ([]byte, []int, error) {
	if in.AttrMask&srqMaxWR != 0 {
		c.srqMu.Lock()
		defer c.srqMu.Unlock()
		return c.resizeSRQ(in)
	}
	o, err := srqTable.get(c, r, in.PDOrHandle)
	if err != nil {
		return nil, nil, err
	}
	if in.AttrMask&srqLimit != 0 {
		if err := o.srq.Arm(in.SRQLimit); err != nil {
			return nil, nil, err
		}
	}
	return nil, nil, nil
}

// resizeSRQ gives an SRQ room for in.MaxWR receives (ibv_modify_srq with
// IBV_SRQ_MAX_WR): the client's ring, which is the engine's queue, moves
// to new memory with the receives not yet taken. As with rdma_rxe, max_wr
// of 0, above the device's max_srq_wr, below the armed limit or below the
// receives posted is EINVAL. c.srqMu and the SRQ's bridge lock are held
// throughout; the engine is kept away while the ring is replaced.
func (c *conn) resizeSRQ(in *ctl.SRQ) ([]byte, []int, error) {
	o, ok := c.srqs[in.PDOrHandle]
	if !ok || in.MaxWR == 0 || in.MaxWR > roce.MaxSRQWR || in.AttrMask&srqLimit != 0 && in.SRQLimit > in.MaxWR {
		return nil, nil, unix.EINVAL
	}
	o.t.mu.Lock()
	defer o.t.mu.Unlock()
	if o.srq.RingFault() {
		return nil, nil, misbehaved("SRQ %d's ring is corrupt", in.PDOrHandle)
	}
	if _, _, posted := o.srq.Query(); posted > in.MaxWR {
		return nil, nil, unix.EINVAL
	}
	stride := o.rq.Stride()
	k := shmCost(srqSize(in.MaxWR, stride))
	if err := c.charge(k); err != nil {
		return nil, nil, err
	}
	fail := func(err error) ([]byte, []int, error) {
		c.release(k)
		return nil, nil, err
	}
	mem, r, fd, err := newSRQShm(in.MaxWR, stride)
	if err != nil {
		return fail(err)
	}
	if err := o.srq.ResizeRing(r); err != nil {
		unix.Close(fd)
		mem.close()
		if o.srq.RingFault() {
			return fail(misbehaved("SRQ %d's ring is corrupt", in.PDOrHandle))
		}
		return fail(unix.EINVAL)
	}
	// The new memory is the real charge: the old one's is released.
	c.release(o.cost)
	o.cost = k
	o.mem.close()
	o.mem, o.rq = mem, r
	if in.AttrMask&srqLimit != 0 {
		if err := o.srq.Arm(in.SRQLimit); err != nil {
			unix.Close(fd)
			return nil, nil, err
		}
	}
	return srqReply(o, in.MaxWR, fd)
}

func (c *conn) querySRQ(in *ctl.Handle, o *srqObj, _ *request) ([]byte, []int, error) {
	maxWR, limit, _ := o.srq.Query()
	out := ctl.SRQ{PDOrHandle: in.Handle, MaxWR: maxWR, MaxSGE: o.maxSGE, SRQLimit: limit}
	return ctl.Bytes(&out), nil, nil
}

func (c *conn) destroySRQ(_ uint32, o *srqObj) error {
	if o.refs > 0 {
		return unix.EBUSY
	}
	if err := o.srq.Destroy(); err != nil {
		return err
	}
	if x := c.xrcds[o.xrcd]; x != nil {
		x.uses--
	}
	c.dev.disown(o.srq)
	c.br.drop(o.t)
	o.mem.close()
	c.release(o.cost)
	return nil
}
