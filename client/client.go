// Package client is the Go client of the sroce daemon: the verbs of
// package roce (contexts, PDs, MRs, CQs, QPs, AHs) on a device the daemon
// serves, over its unix socket (package daemon/ctl) and the shared rings of
// package ring. Posting and polling touch only shared memory; the doorbell
// is written only when the daemon's bridge sleeps.
//
// Memory to register must be shared with the daemon: Context.Alloc returns
// a buffer in a memfd, and PD.RegMR registers (part of) one.
package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
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

// Timeout bounds every request to the daemon.
const Timeout = 30 * time.Second

// Error is a request the daemon refused, with its errno.
type Error struct {
	Op    ctl.Op
	Errno unix.Errno
}

func (e *Error) Error() string { return fmt.Sprintf("sroce daemon: %s: %v", e.Op, e.Errno) }

// Unwrap returns the errno.
func (e *Error) Unwrap() error { return e.Errno }

// conn is one connection to the daemon.
type conn struct {
	mu  sync.Mutex
	uc  *net.UnixConn
	seq uint32
	buf []byte
	oob []byte
}

func dial(path string) (*conn, error) {
	uc, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("sroce daemon at %s: %w (is `sroce daemon` running?)", path, err)
	}
	c := &conn{uc: uc, buf: make([]byte, ctl.MaxMsg), oob: make([]byte, unix.CmsgSpace(ctl.MaxFDs*4))}
	hello := ctl.Hello{ABI: ctl.Version}
	if _, _, err := c.call(ctl.OpHello, ctl.Bytes(&hello), nil); err != nil {
		uc.Close()
		return nil, err
	}
	return c, nil
}

// call sends a request and returns the reply's body and descriptors.
func (c *conn) call(op ctl.Op, body []byte, fds []int) ([]byte, []int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	msg := ctl.Append(nil, ctl.Hdr{Op: op, Seq: c.seq, NFDs: uint32(len(fds))}, body)
	var rights []byte
	if len(fds) > 0 {
		rights = unix.UnixRights(fds...)
	}
	c.uc.SetDeadline(time.Now().Add(Timeout))
	defer c.uc.SetDeadline(time.Time{})
	if _, _, err := c.uc.WriteMsgUnix(msg, rights, nil); err != nil {
		return nil, nil, fmt.Errorf("sroce daemon: sending %s: %w", op, err)
	}
	n, oobn, _, _, err := c.uc.ReadMsgUnix(c.buf, c.oob)
	if err != nil {
		return nil, nil, fmt.Errorf("sroce daemon: waiting for the reply to %s: %w", op, err)
	}
	var rfds []int
	if oobn > 0 {
		msgs, _ := unix.ParseSocketControlMessage(c.oob[:oobn])
		for _, m := range msgs {
			if f, err := unix.ParseUnixRights(&m); err == nil {
				rfds = append(rfds, f...)
			}
		}
	}
	h, rb, err := ctl.Parse(c.buf[:n])
	if err != nil || h.Op != op || h.Seq != c.seq {
		closeAll(rfds)
		return nil, nil, fmt.Errorf("sroce daemon: bad reply to %s: %w", op, err)
	}
	if h.Err != 0 {
		closeAll(rfds)
		return nil, nil, &Error{Op: op, Errno: unix.Errno(h.Err)}
	}
	return append([]byte(nil), rb...), rfds, nil
}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

func reply[T any](b []byte, op ctl.Op) (T, error) {
	v, err := ctl.Get[T](b)
	if err != nil {
		return v, fmt.Errorf("sroce daemon: short reply to %s", op)
	}
	return v, nil
}

// DeviceInfo describes a device the daemon serves.
type DeviceInfo struct {
	Name     string // sroce_<interface>
	Ifname   string
	Ifindex  int
	NodeGUID uint64
}

// Devices lists the daemon's devices (ibv_get_device_list).
func Devices(socket string) ([]DeviceInfo, error) {
	c, err := dial(socket)
	if err != nil {
		return nil, err
	}
	defer c.uc.Close()
	b, _, err := c.call(ctl.OpListDevices, nil, nil)
	if err != nil {
		return nil, err
	}
	hd, err := reply[ctl.Devices](b, ctl.OpListDevices)
	if err != nil {
		return nil, err
	}
	var out []DeviceInfo
	b = b[8:]
	for i := 0; i < int(hd.Count); i++ {
		d, err := reply[ctl.Device](b, ctl.OpListDevices)
		if err != nil {
			return nil, err
		}
		b = b[unsafe.Sizeof(d):]
		out = append(out, DeviceInfo{Name: ctl.Name(d.Name[:]), Ifname: ctl.Name(d.IfName[:]), Ifindex: int(d.IfIndex), NodeGUID: d.NodeGUID})
	}
	return out, nil
}

// Context is an open device (struct ibv_context): one connection to the
// daemon. Closing it frees everything created through it.
type Context struct {
	mu       sync.Mutex
	ahs      map[*verbs.AH]uint32
	c        *conn
	Info     DeviceInfo
	async    *os.File
	doorbell int
	page     []byte
	needWake *uint32
}

// Open opens device name on the daemon at socket.
func Open(socket, name string) (*Context, error) {
	c, err := dial(socket)
	if err != nil {
		return nil, err
	}
	var in ctl.Open
	ctl.SetName(in.Name[:], name)
	b, fds, err := c.call(ctl.OpOpen, ctl.Bytes(&in), nil)
	if err != nil {
		c.uc.Close()
		return nil, err
	}
	d, err := reply[ctl.Device](b, ctl.OpOpen)
	if err != nil || len(fds) != 3 {
		closeAll(fds)
		c.uc.Close()
		return nil, fmt.Errorf("sroce daemon: OPEN reply with %d descriptors", len(fds))
	}
	page, err := unix.Mmap(fds[2], 0, ctl.CtxPageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	unix.Close(fds[2])
	if err != nil {
		closeAll(fds[:2])
		c.uc.Close()
		return nil, err
	}
	unix.SetNonblock(fds[0], true) // so that reads honour deadlines
	ctx := &Context{c: c, ahs: make(map[*verbs.AH]uint32), async: os.NewFile(uintptr(fds[0]), "sroce-async"), doorbell: fds[1], page: page,
		Info: DeviceInfo{Name: ctl.Name(d.Name[:]), Ifname: ctl.Name(d.IfName[:]), Ifindex: int(d.IfIndex), NodeGUID: d.NodeGUID}}
	ctx.needWake = (*uint32)(unsafe.Pointer(&page[0]))
	return ctx, nil
}

// Close ends the connection; the daemon frees what it held.
func (x *Context) Close() error {
	err := x.c.uc.Close()
	x.async.Close()
	unix.Close(x.doorbell)
	unix.Munmap(x.page)
	return err
}

// ring rings doorbell number bell: it sets the bell's bit in the context
// page, then writes the eventfd if the daemon asked for it (0 rings none
// and only wakes the daemon).
func (x *Context) ring(bell uint32) {
	if bell != 0 {
		p := (*ctl.CtxPage)(unsafe.Pointer(&x.page[0]))
		atomic.OrUint64(&p.Bells[bell/64], 1<<(bell%64))
	}
	if atomic.LoadUint32(x.needWake) != 0 {
		v := uint64(1)
		unix.Write(x.doorbell, (*[8]byte)(unsafe.Pointer(&v))[:])
	}
}

// QueryDevice returns the device's attributes (ibv_query_device).
func (x *Context) QueryDevice() (ctl.DeviceAttr, error) {
	b, _, err := x.c.call(ctl.OpQueryDevice, nil, nil)
	if err != nil {
		return ctl.DeviceAttr{}, err
	}
	return reply[ctl.DeviceAttr](b, ctl.OpQueryDevice)
}

// QueryPort returns port 1's attributes (ibv_query_port).
func (x *Context) QueryPort() (ctl.PortAttr, error) {
	in := ctl.Port{PortNum: 1}
	b, _, err := x.c.call(ctl.OpQueryPort, ctl.Bytes(&in), nil)
	if err != nil {
		return ctl.PortAttr{}, err
	}
	return reply[ctl.PortAttr](b, ctl.OpQueryPort)
}

// QueryGID returns GID index of port 1 (ibv_query_gid).
func (x *Context) QueryGID(index int) (bth.GID, error) {
	in := ctl.Port{PortNum: 1, Index: uint32(index)}
	b, _, err := x.c.call(ctl.OpQueryGID, ctl.Bytes(&in), nil)
	if err != nil {
		return bth.GID{}, err
	}
	g, err := reply[ctl.GID](b, ctl.OpQueryGID)
	return bth.GID(g.GID), err
}

// AsyncEvent reads the next asynchronous event, waiting at most timeout.
func (x *Context) AsyncEvent(timeout time.Duration) (ctl.AsyncEvent, error) {
	var ev ctl.AsyncEvent
	x.async.SetReadDeadline(time.Now().Add(timeout))
	_, err := x.async.Read(ctl.Bytes(&ev))
	if err != nil {
		return ev, fmt.Errorf("waiting %v for an asynchronous event: %w", timeout, err)
	}
	return ev, nil
}

func (x *Context) handleCall(op ctl.Op, h uint32) error {
	in := ctl.Handle{Handle: h}
	_, _, err := x.c.call(op, ctl.Bytes(&in), nil)
	return err
}

// PD is a protection domain.
type PD struct {
	x *Context
	h uint32
}

// AllocPD allocates a protection domain (ibv_alloc_pd).
func (x *Context) AllocPD() (*PD, error) {
	b, _, err := x.c.call(ctl.OpAllocPD, nil, nil)
	if err != nil {
		return nil, err
	}
	h, err := reply[ctl.Handle](b, ctl.OpAllocPD)
	return &PD{x: x, h: h.Handle}, err
}

// Dealloc frees the PD (ibv_dealloc_pd).
func (p *PD) Dealloc() error { return p.x.handleCall(ctl.OpDeallocPD, p.h) }

// Buffer is memory shared with the daemon: a memfd mapped here.
type Buffer struct {
	fd  int
	Buf []byte
}

// Alloc returns n bytes of memory the daemon can reach, for RegMR.
func (x *Context) Alloc(n int) (*Buffer, error) {
	size := (n + os.Getpagesize() - 1) &^ (os.Getpagesize() - 1)
	fd, err := unix.MemfdCreate("sroce-client", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, err
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		return nil, err
	}
	unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW)
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	return &Buffer{fd: fd, Buf: mem[:n]}, nil
}

// Free unmaps the buffer; MRs on it must be deregistered first.
func (b *Buffer) Free() {
	unix.Munmap(b.Buf[:cap(b.Buf)])
	unix.Close(b.fd)
}

// Addr returns the address of byte off of the buffer (the address SGEs
// and remote peers use).
func (b *Buffer) Addr(off int) uint64 { return uint64(uintptr(unsafe.Pointer(&b.Buf[off]))) }

// MR is a registered memory region.
type MR struct {
	pd         *PD
	h          uint32
	lkey, rkey uint32
	addr       uint64
}

// LKey returns the MR's local key.
func (m *MR) LKey() uint32 { return m.lkey }

// RKey returns the MR's remote key.
func (m *MR) RKey() uint32 { return m.rkey }

// Addr returns the address of the MR's first byte (what SGEs and remote
// peers use).
func (m *MR) Addr() uint64 { return m.addr }

// SGE returns the SGE of n bytes at offset off of the MR.
func (m *MR) SGE(off, n int) mr.SGE {
	return mr.SGE{Addr: m.addr + uint64(off), Length: uint32(n), LKey: m.lkey}
}

// RegMR registers n bytes of buf from off (ibv_reg_mr).
func (p *PD) RegMR(buf *Buffer, off, n int, access mr.Access) (*MR, error) {
	in, err := regRange(p, buf, off, n, access)
	if err != nil {
		return nil, fmt.Errorf("client: RegMR %w", err)
	}
	b, _, err := p.x.c.call(ctl.OpRegMR, ctl.Bytes(&in), []int{buf.fd})
	if err != nil {
		return nil, err
	}
	r, err := reply[ctl.MR](b, ctl.OpRegMR)
	return &MR{pd: p, h: r.Handle, lkey: r.LKey, rkey: r.RKey, addr: in.Addr}, err
}

// Rereg re-registers the MR (ibv_rereg_mr): flags selects what changes,
// as roce's MR.Rereg says; with mr.ReregChangeTranslation the MR becomes n
// bytes of buf from off, with mr.ReregChangePD it moves to pd, with
// mr.ReregChangeAccess its access flags become access. The keys stay, as
// with rdma_rxe; the daemon no longer touches the old range when Rereg
// returns.
func (m *MR) Rereg(flags mr.ReregFlags, pd *PD, buf *Buffer, off, n int, access mr.Access) error {
	in := ctl.ReregMR{Handle: m.h, Flags: uint32(flags), Reg: ctl.RegMR{Access: uint32(access)}}
	var fds []int
	if flags&mr.ReregChangePD != 0 {
		if pd == nil {
			return errors.New("client: Rereg with ReregChangePD needs a PD")
		}
		in.Reg.PD = pd.h
	}
	if flags&mr.ReregChangeTranslation != 0 {
		if buf == nil {
			return errors.New("client: Rereg with ReregChangeTranslation needs a buffer")
		}
		reg, err := regRange(pd, buf, off, n, access)
		if err != nil {
			return fmt.Errorf("client: Rereg %w", err)
		}
		reg.PD = in.Reg.PD
		in.Reg = reg
		fds = []int{buf.fd}
	}
	b, _, err := m.pd.x.c.call(ctl.OpReregMR, ctl.Bytes(&in), fds)
	if err != nil {
		return err
	}
	r, err := reply[ctl.MR](b, ctl.OpReregMR)
	if err != nil {
		return err
	}
	m.lkey, m.rkey = r.LKey, r.RKey
	if flags&mr.ReregChangePD != 0 {
		m.pd = pd
	}
	if flags&mr.ReregChangeTranslation != 0 {
		m.addr = in.Reg.Addr
	}
	return nil
}

// regRange describes n bytes at off of buf, registered with access in pd
// (nil: no PD named), as REG_MR and REREG_MR carry them.
func regRange(pd *PD, buf *Buffer, off, n int, access mr.Access) (ctl.RegMR, error) {
	if off < 0 || n <= 0 || off+n > len(buf.Buf) {
		return ctl.RegMR{}, errors.New("range outside the buffer")
	}
	in := ctl.RegMR{Access: uint32(access), Addr: buf.Addr(off), Length: uint64(n), IOVA: buf.Addr(off), FDOffset: uint64(off)}
	if pd != nil {
		in.PD = pd.h
	}
	return in, nil
}

// Dereg deregisters the MR (ibv_dereg_mr).
func (m *MR) Dereg() error { return m.pd.x.handleCall(ctl.OpDeregMR, m.h) }

// CQ is a completion queue whose entries the client polls from shared
// memory.
type CQ struct {
	x    *Context
	h    uint32
	mem  []byte
	ring *ring.Ring[ring.CQE]
	ctl  *ctl.CQCtl
	ch   *os.File
}

// CreateCQ creates a CQ of cqe entries; with events, completions can be
// waited for with Wait (a completion channel of its own).
func (x *Context) CreateCQ(cqe int, events bool) (*CQ, error) {
	cq := &CQ{x: x}
	in := ctl.CreateCQ{CQE: uint32(cqe)}
	if events {
		b, fds, err := x.c.call(ctl.OpCreateCompChannel, nil, nil)
		if err != nil {
			return nil, err
		}
		h, _ := reply[ctl.Handle](b, ctl.OpCreateCompChannel)
		if len(fds) != 1 {
			closeAll(fds)
			return nil, errors.New("sroce daemon: completion channel without its socket")
		}
		unix.SetNonblock(fds[0], true) // so that reads honour deadlines
		cq.ch = os.NewFile(uintptr(fds[0]), "sroce-channel")
		in.Channel = h.Handle
	}
	if err := cq.mapReply(ctl.OpCreateCQ, ctl.Bytes(&in)); err != nil {
		return nil, err
	}
	return cq, nil
}

// mapReply sends a request whose reply is a CQ and its memory (CREATE_CQ,
// RESIZE_CQ) and maps that memory as the CQ's.
func (cq *CQ) mapReply(op ctl.Op, req []byte) error {
	b, fds, err := cq.x.c.call(op, req, nil)
	if err != nil {
		return err
	}
	r, err := reply[ctl.CQ](b, op)
	if err != nil || len(fds) != 1 {
		closeAll(fds)
		return fmt.Errorf("sroce daemon: bad %s reply (%w)", op, err)
	}
	mem, err := unix.Mmap(fds[0], 0, int(r.MemSize), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	unix.Close(fds[0])
	if err != nil {
		return err
	}
	rg, err := ring.Attach[ring.CQE](mem[r.RingOffset:], ring.KindCQ)
	if err != nil {
		unix.Munmap(mem)
		return err
	}
	if cq.mem != nil {
		unix.Munmap(cq.mem)
	}
	cq.h, cq.mem, cq.ring = r.Handle, mem, rg
	cq.ctl = (*ctl.CQCtl)(unsafe.Pointer(&mem[0]))
	return nil
}

// Resize changes the CQ's capacity to cqe completions (ibv_resize_cq),
// keeping the completions not yet polled. It must not run concurrently
// with Poll or Wait.
func (cq *CQ) Resize(cqe int) error {
	if cqe <= 0 {
		return &Error{Op: ctl.OpResizeCQ, Errno: unix.EINVAL}
	}
	in := ctl.ResizeCQ{Handle: cq.h, CQE: uint32(cqe)}
	return cq.mapReply(ctl.OpResizeCQ, ctl.Bytes(&in))
}

// Cqe returns the CQ's capacity.
func (cq *CQ) Cqe() int { return int(cq.ring.Limit()) }

// Len returns the number of completions waiting to be polled.
func (cq *CQ) Len() int { return int(cq.ring.Len()) }

// Ring returns the CQ's ring as mapped here, for tools that inspect it
// (and tests that check what the daemon does with a corrupt one).
func (cq *CQ) Ring() *ring.Ring[ring.CQE] { return cq.ring }

// Poll takes up to len(wcs) completions (ibv_poll_cq).
func (cq *CQ) Poll(wcs []verbs.WC) int {
	n := 0
	for n < len(wcs) {
		e := cq.ring.Front()
		if e == nil {
			break
		}
		e.WC(&wcs[n])
		cq.ring.Release(1)
		n++
	}
	return n
}

// Wait polls, arming the CQ and sleeping on its channel when it is empty,
// for at most timeout.
func (cq *CQ) Wait(wcs []verbs.WC, timeout time.Duration) (int, error) {
	deadline := time.Now().Add(timeout)
	for {
		if n := cq.Poll(wcs); n > 0 {
			return n, nil
		}
		if cq.ch == nil {
			if time.Now().After(deadline) {
				return 0, fmt.Errorf("no completion within %v: %w", timeout, context.DeadlineExceeded)
			}
			time.Sleep(20 * time.Microsecond)
			continue
		}
		cq.ReqNotify(false)
		if n := cq.Poll(wcs); n > 0 {
			return n, nil
		}
		if err := cq.event(deadline); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return cq.Poll(wcs), fmt.Errorf("no completion within %v: %w", timeout, context.DeadlineExceeded)
			}
			return 0, fmt.Errorf("waiting %v for a completion event: %w", timeout, err)
		}
	}
}

// ReqNotify arms the CQ (ibv_req_notify_cq): the next completion, or
// with solicitedOnly the next solicited or failed one, raises an event on
// the CQ's channel, which GetEvent takes. A CQ made without events has no
// channel: EINVAL.
func (cq *CQ) ReqNotify(solicitedOnly bool) error {
	if cq.ch == nil {
		return &Error{Op: ctl.OpCreateCompChannel, Errno: unix.EINVAL}
	}
	arm := uint32(1)
	if solicitedOnly {
		arm = 2
	}
	atomic.StoreUint32(&cq.ctl.Arm, arm)
	return nil
}

// GetEvent waits at most timeout for the CQ's next event
// (ibv_get_cq_event); the CQ is armed again only by ReqNotify.
func (cq *CQ) GetEvent(timeout time.Duration) error {
	if cq.ch == nil {
		return &Error{Op: ctl.OpCreateCompChannel, Errno: unix.EINVAL}
	}
	if err := cq.event(time.Now().Add(timeout)); err != nil {
		return fmt.Errorf("waiting %v for a completion event: %w", timeout, err)
	}
	return nil
}

// event reads one event from the CQ's channel, waiting until deadline.
func (cq *CQ) event(deadline time.Time) error {
	var ev ctl.CQEvent
	cq.ch.SetReadDeadline(deadline)
	_, err := cq.ch.Read(ctl.Bytes(&ev))
	return err
}

// Destroy destroys the CQ (ibv_destroy_cq).
func (cq *CQ) Destroy() error {
	err := cq.x.handleCall(ctl.OpDestroyCQ, cq.h)
	if err == nil {
		unix.Munmap(cq.mem)
		if cq.ch != nil {
			cq.ch.Close()
		}
	}
	return err
}

// QP is a queue pair whose work queues are shared rings.
type QP struct {
	x    *Context
	h    uint32
	qpn  bth.QPN
	Cap  ctl.QPCap
	mem  []byte
	sq   *ring.Ring[ring.SendWQE]
	rq   *ring.Ring[ring.RecvWQE]
	typ  verbs.QPType
	bell uint32 // the QP's doorbell number
}

// QPInitAttr describes a QP to create (struct ibv_qp_init_attr), as
// roce.QPInitAttr does with the client's CQs.
type QPInitAttr struct {
	Type           verbs.QPType
	SendCQ, RecvCQ *CQ
	Cap            verbs.QPCap
	SigAll         bool
}

// CreateQP creates a QP (ibv_create_qp).
func (p *PD) CreateQP(attr *QPInitAttr) (*QP, error) {
	typ, send, recv, cap, sigAll := attr.Type, attr.SendCQ, attr.RecvCQ, attr.Cap, attr.SigAll
	if send == nil || recv == nil {
		return nil, errors.New("client: CreateQP needs a send and a receive CQ")
	}
	in := ctl.CreateQP{PD: p.h, SendCQ: send.h, RecvCQ: recv.h, QPType: uint8(typ), Cap: ctl.CapOf(cap)}
	if sigAll {
		in.SQSigAll = 1
	}
	b, fds, err := p.x.c.call(ctl.OpCreateQP, ctl.Bytes(&in), nil)
	if err != nil {
		return nil, err
	}
	r, err := reply[ctl.QP](b, ctl.OpCreateQP)
	if err != nil || len(fds) != 1 {
		closeAll(fds)
		return nil, fmt.Errorf("sroce daemon: bad CREATE_QP reply (%w)", err)
	}
	q := &QP{x: p.x, h: r.Handle, qpn: bth.QPN(r.QPN), Cap: r.Cap, typ: typ, bell: r.Bell}
	q.mem, err = unix.Mmap(fds[0], 0, int(r.MemSize), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	unix.Close(fds[0])
	if err != nil {
		return nil, err
	}
	if q.sq, err = ring.Attach[ring.SendWQE](q.mem[r.SQOffset:], ring.KindSend); err != nil {
		return nil, err
	}
	if r.RQOffset != 0 {
		if q.rq, err = ring.Attach[ring.RecvWQE](q.mem[r.RQOffset:], ring.KindRecv); err != nil {
			return nil, err
		}
	}
	return q, nil
}

// Modify changes the QP's attributes (ibv_modify_qp), as roce's QP.Modify
// does; the daemon resolves the destination MAC of an address vector.
func (q *QP) Modify(a *verbs.QPAttr, mask verbs.QPAttrMask) error {
	in := ctl.ModifyQP{Handle: q.h, AttrMask: uint32(mask), Attr: ctl.QPAttrOf(a)}
	_, _, err := q.x.c.call(ctl.OpModifyQP, ctl.Bytes(&in), nil)
	return err
}

// Connect moves the QP through INIT, RTR and RTS as roce's QP.Connect
// does.
func (q *QP) Connect(c *roce.ConnectAttr) error { return roce.ConnectQP(q, c) }

// QPN returns the QP number.
func (q *QP) QPN() bth.QPN { return q.qpn }

// Type returns the QP's transport.
func (q *QP) Type() verbs.QPType { return q.typ }

// Query returns the QP's attributes (ibv_query_qp).
func (q *QP) Query() (verbs.QPAttr, error) {
	in := ctl.ModifyQP{Handle: q.h}
	b, _, err := q.x.c.call(ctl.OpQueryQP, ctl.Bytes(&in), nil)
	if err != nil {
		return verbs.QPAttr{}, err
	}
	r, err := reply[ctl.ModifyQP](b, ctl.OpQueryQP)
	return r.Attr.Verbs(), err
}

// State returns the QP state the daemon keeps in the shared control block.
func (q *QP) State() verbs.QPState {
	return verbs.QPState(atomic.LoadUint32((*uint32)(unsafe.Pointer(&q.mem[0]))))
}

// ErrFull reports a work queue with no free slot.
var ErrFull = errors.New("client: work queue full")

// PostSend posts a send work request (ibv_post_send). A UD send names
// its address handle with wr.AH, one PD.CreateAH returned.
//
// The request is checked as the engine checks it (qp.CheckSendWR, and the
// QP's state) before it goes on the ring, so that a post is refused exactly
// when an in-process QP would refuse it.
func (q *QP) PostSend(wr *verbs.SendWR) error {
	if err := q.put(wr); err != nil {
		return err
	}
	q.x.ring(q.bell)
	return nil
}

// PostSendList posts work requests in order, ringing the doorbell once,
// and returns how many were posted; on error, wrs[n] is the request that
// was refused (ibv_post_send with a list and its bad_wr).
func (q *QP) PostSendList(wrs []verbs.SendWR) (int, error) {
	n := 0
	var err error
	for i := range wrs {
		if err = q.put(&wrs[i]); err != nil {
			break
		}
		n++
	}
	if n > 0 {
		q.x.ring(q.bell)
	}
	return n, err
}

// put checks a send work request and publishes it on the send ring.
func (q *QP) put(wr *verbs.SendWR) error {
	switch q.State() {
	case verbs.QPStateRTS, verbs.QPStateSQD, verbs.QPStateSQE, verbs.QPStateErr:
	default:
		return qp.ErrPostState
	}
	vc := q.Cap.Verbs()
	if err := qp.CheckSendWR(q.typ, &vc, wr); err != nil {
		return err
	}
	var ahh uint32
	if wr.AH != nil {
		q.x.mu.Lock()
		ahh = q.x.ahs[wr.AH]
		q.x.mu.Unlock()
		if ahh == 0 {
			return errors.New("client: the send's address handle was not created by this context")
		}
	}
	s := q.sq.Next()
	if s == nil {
		return ErrFull
	}
	var attr *verbs.AHAttr
	if wr.AH != nil {
		attr = &wr.AH.Attr
	}
	s.SetWR(wr, attr)
	s.AH = ahh
	i := q.sq.Prod()
	if wr.Flags&verbs.Inline != 0 && wr.InlineData != nil {
		tail := q.sq.Tail(i)
		if len(wr.InlineData) > len(tail) {
			return errors.New("client: inline data larger than the QP's slots")
		}
		copy(tail, wr.InlineData)
		s.InlineLen = uint16(len(wr.InlineData))
		s.Length = uint32(len(wr.InlineData))
	} else {
		if len(wr.SGL) > q.sq.MaxSGEs() {
			return errors.New("client: more SGEs than the QP takes")
		}
		copy(q.sq.SGEs(i, len(wr.SGL)), wr.SGL)
		s.NumSGE = uint8(len(wr.SGL))
		for _, g := range wr.SGL {
			s.Length += g.Length
		}
	}
	q.sq.Publish()
	return nil
}

// PostRecv posts a receive work request (ibv_post_recv).
func (q *QP) PostRecv(wr *verbs.RecvWR) error {
	if q.rq == nil {
		return qp.ErrHasSRQ
	}
	if q.State() == verbs.QPStateReset {
		return qp.ErrPostState
	}
	s := q.rq.Next()
	if s == nil {
		return ErrFull
	}
	if len(wr.SGL) > q.rq.MaxSGEs() {
		return errors.New("client: more SGEs than the QP takes")
	}
	i := q.rq.Prod()
	*s = ring.RecvWQE{WRID: wr.WRID, NumSGE: uint32(len(wr.SGL))}
	copy(q.rq.SGEs(i, len(wr.SGL)), wr.SGL)
	for _, g := range wr.SGL {
		s.Length += g.Length
	}
	q.rq.Publish()
	q.x.ring(q.bell)
	return nil
}

// Destroy destroys the QP (ibv_destroy_qp).
func (q *QP) Destroy() error {
	err := q.x.handleCall(ctl.OpDestroyQP, q.h)
	if err == nil {
		unix.Munmap(q.mem)
	}
	return err
}

// AttachMcast attaches the UD QP to the multicast group gid
// (ibv_attach_mcast); lid is ignored on RoCE. The errors are the
// daemon's errnos: EINVAL for a QP that is not UD or a GID that is not
// multicast, ENOMEM beyond the device's multicast limits.
func (q *QP) AttachMcast(gid bth.GID, lid uint16) error {
	return q.mcast(ctl.OpAttachMcast, gid, lid)
}

// DetachMcast detaches the QP from the multicast group gid
// (ibv_detach_mcast): EINVAL when it is not attached.
func (q *QP) DetachMcast(gid bth.GID, lid uint16) error {
	return q.mcast(ctl.OpDetachMcast, gid, lid)
}

func (q *QP) mcast(op ctl.Op, gid bth.GID, lid uint16) error {
	in := ctl.Mcast{QP: q.h, LID: lid, GID: gid}
	_, _, err := q.x.c.call(op, ctl.Bytes(&in), nil)
	return err
}

// CreateAH creates an address handle (ibv_create_ah) for UD sends; the
// daemon resolves the destination MAC. It returns the resolved handle, as
// roce's PD.CreateAH does.
func (p *PD) CreateAH(a *verbs.AHAttr) (*verbs.AH, error) {
	in := ctl.AH{PDOrHandle: p.h, Attr: ctl.AHOf(a)}
	b, _, err := p.x.c.call(ctl.OpCreateAH, ctl.Bytes(&in), nil)
	if err != nil {
		return nil, err
	}
	r, err := reply[ctl.AH](b, ctl.OpCreateAH)
	if err != nil {
		return nil, err
	}
	ah := &verbs.AH{Attr: r.Attr.Verbs()}
	p.x.mu.Lock()
	p.x.ahs[ah] = r.PDOrHandle
	p.x.mu.Unlock()
	return ah, nil
}

// DestroyAH destroys an address handle (ibv_destroy_ah).
func (p *PD) DestroyAH(ah *verbs.AH) error {
	p.x.mu.Lock()
	h := p.x.ahs[ah]
	delete(p.x.ahs, ah)
	p.x.mu.Unlock()
	if h == 0 {
		return errors.New("client: the address handle was not created by this context")
	}
	return p.x.handleCall(ctl.OpDestroyAH, h)
}

// SendRing returns the QP's send ring as mapped here, for tools that
// inspect it (and tests that check what the daemon does with a corrupt one).
func (q *QP) SendRing() *ring.Ring[ring.SendWQE] { return q.sq }

// RecvRing returns the QP's receive ring as mapped here (nil with an
// SRQ), for tests that check what the daemon does with a corrupt one.
func (q *QP) RecvRing() *ring.Ring[ring.RecvWQE] { return q.rq }

// Ring rings the QP's doorbell: what posting does after publishing, for
// callers that write the rings themselves.
func (q *QP) Ring() { q.x.ring(q.bell) }

// Stats returns what the daemon at socket tells of its device name: the
// link, the port and the counters (what "sroce stat" prints). The daemon
// answers a context about its own device only, so Stats opens one for the
// question and closes it; the clients it counts are the others.
func Stats(socket, name string) (*ctl.Stats, error) {
	x, err := Open(socket, name)
	if err != nil {
		return nil, err
	}
	defer x.Close()
	st, err := x.Stats()
	if err != nil {
		return nil, err
	}
	if st.Clients > 0 {
		st.Clients-- // this context
	}
	return st, nil
}

// Stats returns what the daemon tells of this context's device, over the
// context's own connection (QUERY_STATS, which the daemon answers after
// OPEN only, for the context's device).
func (x *Context) Stats() (*ctl.Stats, error) { return queryStats(x.c, x.Info.Name) }

// queryStats asks the daemon on c for device name's stats.
func queryStats(c *conn, name string) (*ctl.Stats, error) {
	var in ctl.Open
	ctl.SetName(in.Name[:], name)
	b, _, err := c.call(ctl.OpQueryStats, ctl.Bytes(&in), nil)
	if err != nil {
		return nil, err
	}
	st := &ctl.Stats{}
	if err := json.Unmarshal(b, st); err != nil {
		return nil, fmt.Errorf("sroce daemon: unreadable QUERY_STATS reply: %w", err)
	}
	return st, nil
}

// Overflowed reports whether the CQ lost completions because it was full
// (roce's CQ.Overflowed); the context's asynchronous events carry an
// EventCQErr for it too.
func (cq *CQ) Overflowed() bool { return atomic.LoadUint32(&cq.ctl.Overflow) != 0 }
