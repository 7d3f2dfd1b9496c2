package daemon

// Completion queues: CREATE_CQ, RESIZE_CQ, DESTROY_CQ. A CQ's memory is a
// memfd the daemon makes (its control block, then its ring), which the
// engine writes completions into and the client polls.

import (
	"errors"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/sroce/sroce/daemon/ctl"
	"github.com/sroce/sroce/ring"
	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/verbs"
	"golang.org/x/sys/unix"
)

type cqObj struct {
	cq     *roce.CQ // its ring is in mem, which the client polls
	mem    *shm
	ctl    *ctl.CQCtl
	ch     uint32
	handle uint32
	cost   cost
}

var cqTable = table[*cqObj]{kind: kindCQ, m: func(c *conn) map[uint32]*cqObj { return c.cqs }, notFound: einval}

func init() {
	register(
		method{op: ctl.OpCreateCQ, open: true, locks: locks(kindChan, kindCQ), run: decoded((*conn).createCQ)},
		// Its handler settles the sends first, through the bridge, and
		// takes the CQs' lock then.
		method{op: ctl.OpResizeCQ, open: true, run: on(cqTable, func(in *ctl.ResizeCQ) uint32 { return in.Handle }, (*conn).resizeCQ)},
		method{op: ctl.OpDestroyCQ, open: true, locks: locks(kindChan, kindCQ), run: destroys(cqTable, (*conn).destroyCQ)},
	)
}

func (c *conn) createCQ(in *ctl.CreateCQ, _ *request) ([]byte, []int, error) {
	if in.CQE == 0 || in.CQE > roce.MaxCQE {
		return nil, nil, unix.EINVAL
	}
	if in.Channel != 0 && c.chans[in.Channel] == nil {
		return nil, nil, unix.EINVAL
	}
	h, err := c.alloc(len(c.cqs), c.s.Limits().CQs, "CQs")
	if err != nil {
		return nil, nil, err
	}
	mem, cm, fd, k, err := c.newChargedCQShm(in.CQE)
	if err != nil {
		return nil, nil, err
	}
	o := &cqObj{mem: mem, ctl: cm.ctl, ch: in.Channel, handle: h, cost: k}
	var notify func()
	if ch := c.chans[in.Channel]; ch != nil {
		// On the device loop, with the device lock held: a nonblocking
		// write of one event (a full socket means the client is not
		// reading its events; the event is dropped as a full queue
		// would drop it).
		w := ch.w
		notify = func() {
			ev := ctl.CQEvent{CQ: h}
			unix.Write(w, ctl.Bytes(&ev))
		}
	}
	cm.Notify = c.guarded("CQ event", notify)
	cq, err := c.dev.dev.Device().CreateSharedCQ(int(in.CQE), cm.SharedCQ)
	if err != nil {
		unix.Close(fd)
		mem.close()
		c.release(k)
		return nil, nil, err
	}
	o.cq = cq
	c.cqs[h] = o
	if in.Channel != 0 {
		c.chans[in.Channel].refs++
	}
	c.dev.own(cq, c, h)
	return cqReply(h, in.CQE, mem, fd)
}

// cqSize is the size of the memory of a CQ of cqe entries.
func cqSize(cqe uint32) int { return cqRingOffset + ring.Bytes(cqe, ring.Stride[ring.CQE](0)) }

// cqShm is a CQ's memory as the daemon lays it out: the control block,
// then the CQE ring at cqRingOffset.
type cqShm struct {
	roce.SharedCQ
	ctl *ctl.CQCtl
}

// cqRingOffset is where a CQ's ring starts in its memfd.
var cqRingOffset = cacheLine(int(unsafe.Sizeof(ctl.CQCtl{})))

// newCQShm creates the memory of a CQ of cqe entries.
func newCQShm(cqe uint32) (*shm, cqShm, error) {
	mem, err := newShm("cq", cqSize(cqe))
	if err != nil {
		return nil, cqShm{}, err
	}
	cc := (*ctl.CQCtl)(unsafe.Pointer(&mem.mem[0]))
	return mem, cqShm{ctl: cc, SharedCQ: roce.SharedCQ{Ring: mem.mem[cqRingOffset:],
		Arm: (*atomic.Uint32)(unsafe.Pointer(&cc.Arm))}}, nil
}

// newChargedCQShm charges the memory of a CQ of cqe entries to the
// client's budgets and creates it, with a descriptor of it for the reply;
// on an error nothing is left charged or open.
func (c *conn) newChargedCQShm(cqe uint32) (*shm, cqShm, int, cost, error) {
	k := shmCost(cqSize(cqe))
	if err := c.charge(k); err != nil {
		return nil, cqShm{}, -1, k, err
	}
	mem, cm, err := newCQShm(cqe)
	if err != nil {
		c.release(k)
		return nil, cqShm{}, -1, k, err
	}
	fd, err := dupFD(mem.fd)
	if err != nil {
		mem.close()
		c.release(k)
		return nil, cqShm{}, -1, k, err
	}
	return mem, cm, fd, k, nil
}

// cqReply is the reply of CREATE_CQ and RESIZE_CQ: the CQ and fd, a
// descriptor of its memory for the client.
func cqReply(h, cqe uint32, mem *shm, fd int) ([]byte, []int, error) {
	out := ctl.CQ{Handle: h, CQE: cqe, RingOffset: uint64(cqRingOffset), MemSize: uint64(len(mem.mem))}
	return ctl.Bytes(&out), []int{fd}, nil
}

// resizeCQ gives a CQ new memory of cqe entries (ibv_resize_cq): the
// completions the client has not polled (the old ring's entries from the
// consumer index the client keeps) move to it under the CQ's push lock,
// with the arm word, so that the engine loses none.
func (c *conn) resizeCQ(in *ctl.ResizeCQ, o *cqObj, _ *request) ([]byte, []int, error) {
	c.settleSends(in.Handle)
	c.cqMu.Lock()
	defer c.cqMu.Unlock()
	if in.CQE == 0 || in.CQE > roce.MaxCQE {
		return nil, nil, unix.EINVAL
	}
	mem, cm, fd, k, err := c.newChargedCQShm(in.CQE)
	if err != nil {
		return nil, nil, err
	}
	if err := o.cq.ResizeShared(int(in.CQE), cm.SharedCQ); err != nil {
		unix.Close(fd)
		mem.close()
		c.release(k)
		if errors.Is(err, roce.ErrRingCorrupt) {
			return nil, nil, misbehaved("CQ %d: %w", in.Handle, err)
		}
		return nil, nil, err
	}
	// Under c.cqMu, which asyncEvent holds to set the overflow flag.
	atomic.StoreUint32(&cm.ctl.Overflow, atomic.LoadUint32(&o.ctl.Overflow))
	o.mem.close()
	c.release(o.cost)
	o.mem, o.ctl, o.cost = mem, cm.ctl, k
	return cqReply(in.Handle, in.CQE, mem, fd)
}

// settleSends makes the completions of work the client posted before a
// resize of CQ h be in the CQ when its size is checked, as the kernel's
// providers complete a datagram send before ibv_post_send returns: the
// rings are passed to the engine, and the UD and UC sends completed on h
// are waited for (they complete once sent, with no answer to wait for)
// up to 100 ms. RC completions wait for their acknowledgements and are
// counted as they are.
func (c *conn) settleSends(h uint32) {
	if c.br == nil {
		return
	}
	for _, o := range c.qps { // the request goroutine's own table
		if o.cqs[0] != h {
			continue
		}
		c.br.serve(o.t)
	}
	c.dev.dev.Device().Flush()
	deadline := time.Now().Add(100 * time.Millisecond)
	for {
		busy := false
		for _, o := range c.qps { // the request goroutine's own table
			if o.cqs[0] == h && (o.typ == verbs.QPTypeUD || o.typ == verbs.QPTypeUC) && o.qp.SendQueueLen() != 0 {
				busy = true
				break
			}
		}
		if !busy || time.Now().After(deadline) {
			return
		}
		c.dev.dev.Device().Flush()
		time.Sleep(50 * time.Microsecond)
	}
}

func (c *conn) destroyCQ(h uint32, o *cqObj) error {
	for _, q := range c.qps {
		if q.cqs[0] == h || q.cqs[1] == h {
			return unix.EBUSY
		}
	}
	if err := o.cq.Destroy(); err != nil {
		return err
	}
	c.dropCQ(h, o)
	return nil
}

// dropCQ forgets a destroyed CQ; c.cqMu and c.chanMu are held.
func (c *conn) dropCQ(h uint32, o *cqObj) {
	c.dev.disown(o.cq)
	if ch := c.chans[o.ch]; ch != nil {
		ch.refs--
	}
	delete(c.cqs, h)
	o.mem.close()
	c.release(o.cost)
}
