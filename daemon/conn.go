package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
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

// Version is the daemon's version string, sent in HELLO.
const Version = "sroce 0.1"

// errClient is an error that ends the connection: the client broke the
// protocol. Its text goes to the log.
type errClient struct{ reason string }

func (e *errClient) Error() string { return e.reason }

func misbehaved(format string, args ...any) error {
	return &errClient{fmt.Sprintf(format, args...)}
}

// conn is one client connection: one device context and its objects.
type conn struct {
	s    *Server
	uc   *net.UnixConn
	id   uint64
	pid  int32
	uid  uint32
	comm string
	dev  *served

	// mu guards the object tables; the bridge reads them under it.
	mu       sync.Mutex
	next     uint32
	pds      map[uint32]*roce.PD
	mrs      map[uint32]*mrObj
	mws      map[uint32]*mr.MW
	chans    map[uint32]*chanObj
	cqs      map[uint32]*cqObj
	qps      map[uint32]*qpObj
	srqs     map[uint32]*srqObj
	ahs      map[uint32]*ahObj
	xrcds    map[uint32]*xrcdObj
	regBytes uint64

	heldMu     sync.Mutex
	held       cost // what the connection holds of its uid's budget
	openCost   cost // what OPEN charged: the context page, doorbell, async socket
	ctxPage    *shm
	doorbell   *os.File // the eventfd clients write to (closed with the connection)
	doorbellFD int      // its descriptor, nonblocking
	asyncW     int      // the daemon's end of the async event socket
	cm         cmState  // the connection manager's channels and IDs
	br         *bridge
	gone       atomic.Bool
	ringErr    atomic.Pointer[error] // a corrupt ring the engine found (ringFault)
	panics     atomic.Int32          // panics contained (conn.contain)
}

type mrObj struct {
	mr     *roce.MR
	mem    *clientMem
	cost   cost
	access uint32 // as registered, or as REREG_MR last changed it
}

type chanObj struct {
	w    int // the daemon's end of the channel socket
	refs int // CQs using it
}

type cqObj struct {
	cq     *roce.CQ // its ring is in mem, which the client polls
	mem    *shm
	ctl    *ctl.CQCtl
	ch     uint32
	handle uint32
	cost   cost
}

type qpObj struct {
	qp      *roce.QP
	t       *target  // what the bridge serves
	scq     *roce.CQ // the send CQ, for the completions of refused WQEs
	mem     *shm
	sq      *ring.Ring[ring.SendWQE]
	sqCons  uint32
	rq      *ring.Ring[ring.RecvWQE] // its own receive ring, the engine's receive queue in place (none with an SRQ, XRC)
	ctl     *ctl.QPCtl
	typ     verbs.QPType
	pd      uint32
	cqs     [2]uint32
	srq     uint32
	xrcd    uint32 // XRC_RECV: its domain's handle
	tgt     *tgtQP // XRC_RECV: the QP and its handles
	opened  bool   // a handle of ibv_open_qp: the QP's watch and events are its creator's
	handle  uint32
	sge     []mr.SGE
	inline  []byte       // pwr's inline data
	pwr     verbs.SendWR // the request being posted
	pending bool         // pwr waits for room in the engine's queue
	bad     verbs.WCStatus
	cap     verbs.QPCap // as the client sees it
	maxSend uint32
	maxRecv uint32
	cost    cost
}

type srqObj struct {
	srq    *roce.SRQ
	t      *target                  // what the bridge serves
	mem    *shm                     // replaced by a resize under c.mu
	rq     *ring.Ring[ring.RecvWQE] // its ring, the engine's queue in place
	pd     uint32
	handle uint32
	maxSGE uint32
	refs   int
	xrcd   uint32 // an XRC SRQ's domain handle
	cost   cost
}

type ahObj struct {
	ah *verbs.AH
	pd uint32
}

// newConn identifies the peer (SO_PEERCRED).
func (s *Server) newConn(uc *net.UnixConn) (*conn, error) {
	raw, err := uc.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var cerr error
	raw.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) })
	if cerr != nil {
		return nil, fmt.Errorf("SO_PEERCRED: %w", cerr)
	}
	s.mu.Lock()
	s.nextID++
	id := s.nextID
	s.mu.Unlock()
	c := &conn{s: s, uc: uc, id: id, pid: cred.Pid, uid: cred.Uid, asyncW: -1,
		pds: map[uint32]*roce.PD{}, mrs: map[uint32]*mrObj{}, mws: map[uint32]*mr.MW{},
		chans: map[uint32]*chanObj{}, cqs: map[uint32]*cqObj{}, qps: map[uint32]*qpObj{},
		srqs: map[uint32]*srqObj{}, ahs: map[uint32]*ahObj{}, xrcds: map[uint32]*xrcdObj{}}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", cred.Pid)); err == nil {
		c.comm = strings.TrimSpace(string(b))
	}
	return c, nil
}

func (c *conn) stat() ClientStat {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := ClientStat{ID: c.id, PID: c.pid, UID: c.uid, Comm: c.comm, QPs: len(c.qps), MRs: len(c.mrs), Bytes: c.regBytes}
	if c.dev != nil {
		st.Device = c.dev.name
	}
	return st
}

// serve reads requests until the client goes away or breaks the protocol,
// then frees everything the connection holds.
func (c *conn) serve() {
	log := c.s.log.With("client", c.id, "pid", c.pid, "uid", c.uid, "comm", c.comm)
	log.Debug("client connected")
	reason := c.requests(log)
	c.uc.Close()
	c.contained("cleanup", c.cleanup)
	if c.dev == nil && strings.HasPrefix(reason, "client closed") {
		log.Debug("client gone without opening a device")
	} else if strings.HasPrefix(reason, "client closed") {
		log.Info("client gone, its objects freed")
	} else {
		log.Warn("client disconnected, its objects freed", "reason", reason)
	}
}

// requests answers the client's requests until it goes away or breaks the
// protocol, and says why it stopped. A panic on the way ends the
// connection only (conn.contain).
func (c *conn) requests(log *slog.Logger) (reason string) {
	var fds []int // a request's descriptors, until they are closed
	defer func() {
		if v := recover(); v != nil {
			closeFDs(fds)
			c.panicked("request", v)
			reason = fmt.Sprintf("panic: %v", v)
		}
	}()
	buf := make([]byte, ctl.MaxMsg+1)
	oob := make([]byte, unix.CmsgSpace(ctl.MaxFDs*4))
	reason = "client closed the connection"
	for {
		n, oobn, flags, _, err := c.uc.ReadMsgUnix(buf, oob)
		if err != nil || n == 0 {
			if err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, io.EOF) && !errors.Is(err, unix.ECONNRESET) {
				reason = "reading: " + err.Error()
			}
			break
		}
		var ferr error
		fds, ferr = parseFDs(oob[:oobn])
		if flags&unix.MSG_TRUNC != 0 || n > ctl.MaxMsg {
			closeFDs(fds)
			reason = "sent a datagram larger than the protocol allows"
			break
		}
		if flags&unix.MSG_CTRUNC != 0 {
			// Descriptors were lost on the way in: more than the
			// protocol allows (the client's fault), or as many as it
			// allows and the daemon's descriptor table is full (the
			// daemon's shortage: EMFILE, and the client stays).
			closeFDs(fds)
			fds = nil
			h, _, err := ctl.Parse(buf[:n])
			if err != nil || h.NFDs > ctl.MaxFDs {
				reason = "sent more descriptors than the protocol allows"
				break
			}
			log.Debug("a request's descriptors were lost: the daemon's descriptor table is full", "op", h.Op.String())
			rh := ctl.Hdr{Op: h.Op, Seq: h.Seq, Err: int32(unix.EMFILE)}
			if _, _, werr := c.uc.WriteMsgUnix(ctl.Append(nil, rh), nil, nil); werr != nil {
				reason = "writing a reply: " + werr.Error()
				break
			}
			continue
		}
		if ferr != nil {
			closeFDs(fds)
			reason = ferr.Error()
			break
		}
		h, body, err := ctl.Parse(buf[:n])
		if err == nil && int(h.NFDs) != len(fds) {
			err = fmt.Errorf("header announces %d descriptors, %d came", h.NFDs, len(fds))
		}
		if err != nil {
			closeFDs(fds)
			reason = "protocol error: " + err.Error()
			break
		}
		if hk := panicHook.Load(); hk != nil {
			(*hk)(c, "request")
		}
		reply, rfds, herr := c.handle(h, body, fds)
		closeFDs(fds) // handlers dup what they keep
		fds = nil
		var ce *errClient
		if errors.As(herr, &ce) {
			closeFDs(rfds)
			reason = fmt.Sprintf("%s request: %s", h.Op, ce.reason)
			break
		}
		rh := ctl.Hdr{Op: h.Op, Seq: h.Seq, NFDs: uint32(len(rfds))}
		var msg []byte
		if herr != nil {
			rh.Err, rh.NFDs = errnoOf(herr), 0
			closeFDs(rfds)
			rfds = nil
			log.Debug("request failed", "op", h.Op.String(), "err", herr)
			msg = ctl.Append(nil, rh)
		} else {
			msg = ctl.Append(nil, rh, reply)
		}
		var rights []byte
		if len(rfds) > 0 {
			rights = unix.UnixRights(rfds...)
		}
		_, _, werr := c.uc.WriteMsgUnix(msg, rights, nil)
		closeFDs(rfds) // the client has its own copies now
		if werr != nil {
			reason = "writing a reply: " + werr.Error()
			break
		}
	}
	return reason
}

func parseFDs(oob []byte) ([]int, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("unreadable control message: %w", err)
	}
	var fds []int
	for _, m := range msgs {
		if m.Header.Level != unix.SOL_SOCKET || m.Header.Type != unix.SCM_RIGHTS {
			continue
		}
		f, err := unix.ParseUnixRights(&m)
		if err != nil {
			return fds, fmt.Errorf("unreadable SCM_RIGHTS: %w", err)
		}
		fds = append(fds, f...)
	}
	return fds, nil
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// errnoOf maps an engine error to the errno the verbs call returns.
func errnoOf(err error) int32 {
	var en unix.Errno
	switch {
	case errors.As(err, &en):
		return int32(en)
	case errors.Is(err, roce.ErrNoResources), errors.Is(err, mr.ErrNoResources), errors.Is(err, qp.ErrQueueFull):
		return int32(unix.ENOMEM)
	case errors.Is(err, roce.ErrBusy), errors.Is(err, mr.ErrBusy), errors.Is(err, mr.ErrWindowsBound):
		return int32(unix.EBUSY)
	case errors.Is(err, roce.ErrNotSupported):
		return int32(unix.EOPNOTSUPP)
	case errors.Is(err, roce.ErrClosed):
		return int32(unix.ENODEV)
	case errors.Is(err, roce.ErrBadGIDIndex):
		return int32(unix.ENODATA)
	}
	return int32(unix.EINVAL)
}

// dupFD duplicates fd for a reply (which closes its descriptors once
// sent); failing, it returns the errno (EMFILE, ENFILE), the daemon's
// shortage.
func dupFD(fd int) (int, error) {
	d, err := unix.Dup(fd)
	if err != nil {
		return -1, fmt.Errorf("dup for the reply: %w", err)
	}
	return d, nil
}

// alloc returns the next handle, checking a table's limit.
func (c *conn) alloc(have, limit int, what string) (uint32, error) {
	if have >= limit {
		c.s.budget.warn(c.uid, "client limit reached", "client", c.id, "what", what, "limit", limit)
		return 0, unix.ENOMEM
	}
	c.next++
	if c.next == 0 {
		c.next++
	}
	return c.next, nil
}

func body[T any](b []byte) (T, error) {
	v, err := ctl.Get[T](b)
	if err != nil {
		var z T
		return v, misbehaved("body of %d bytes, the operation needs %d", len(b), unsafe.Sizeof(z))
	}
	return v, nil
}

// destroy is the request that frees one object: the body names it by
// handle in table m; free releases it (c.mu held) and, when it succeeds,
// the handle is forgotten.
func destroy[T any](c *conn, b []byte, m map[uint32]T, free func(h uint32, o T) error) ([]byte, []int, error) {
	in, err := body[ctl.Handle](b)
	if err != nil {
		return nil, nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	o, ok := m[in.Handle]
	if !ok {
		return nil, nil, unix.EINVAL
	}
	if err := free(in.Handle, o); err != nil {
		return nil, nil, err
	}
	delete(m, in.Handle)
	return nil, nil, nil
}

// handle runs one request and returns the reply body and the descriptors
// to pass. fds are closed by the caller after handle returns.
func (c *conn) handle(h ctl.Hdr, b []byte, fds []int) ([]byte, []int, error) {
	if h.Op != ctl.OpRegMR && h.Op != ctl.OpReregMR && h.Op != ctl.OpOpenXRCD && len(fds) != 0 {
		return nil, nil, misbehaved("passed descriptors with a request that takes none")
	}
	switch h.Op {
	case ctl.OpHello:
		in, err := body[ctl.Hello](b)
		if err != nil {
			return nil, nil, err
		}
		if in.ABI != ctl.Version {
			return nil, nil, unix.EPROTO
		}
		out := ctl.Hello{ABI: ctl.Version, NDevices: uint32(len(c.s.devices()))}
		copy(out.Version[:len(out.Version)-1], Version)
		return ctl.Bytes(&out), nil, nil
	case ctl.OpListDevices:
		devs := c.s.devices()
		n := len(devs)
		if max := (ctl.MaxMsg - ctl.HdrSize - 8) / int(unsafe.Sizeof(ctl.Device{})); n > max {
			n = max
		}
		hd := ctl.Devices{Count: uint32(n)}
		out := append([]byte(nil), ctl.Bytes(&hd)...)
		for _, d := range devs[:n] {
			var e ctl.Device
			ctl.SetName(e.Name[:], d.name)
			ctl.SetName(e.IfName[:], d.dev.Ifname())
			g := d.dev.NodeGUID()
			e.NodeGUID = *(*uint64)(unsafe.Pointer(&g))
			e.IfIndex = uint32(d.dev.Ifindex())
			out = append(out, ctl.Bytes(&e)...)
		}
		return out, nil, nil
	case ctl.OpOpen:
		return c.open(b)
	case ctl.OpQueryStats:
		in, err := body[ctl.Open](b)
		if err != nil {
			return nil, nil, err
		}
		if c.dev == nil {
			// A context's device only, as a uverbs method before
			// GET_CONTEXT fails (ib_uverbs_get_ucontext_file: EINVAL);
			// the client stays connected and may OPEN.
			return nil, nil, unix.EINVAL
		}
		return c.s.stats(c.dev, ctl.Name(in.Name[:]))
	case ctl.OpQueryRes:
		return c.s.queryRes(c, b)
	}
	if h.Op.IsCM() {
		return c.handleCM(h, b)
	}
	if c.dev == nil {
		return nil, nil, misbehaved("%s before OPEN", h.Op)
	}
	switch h.Op {
	case ctl.OpQueryDevice:
		return c.queryDevice()
	case ctl.OpQueryPort:
		return c.queryPort(b)
	case ctl.OpQueryGID:
		return c.queryGID(b)
	case ctl.OpQueryPKey:
		in, err := body[ctl.Port](b)
		if err != nil {
			return nil, nil, err
		}
		if in.PortNum != 1 || in.Index != 0 {
			return nil, nil, unix.EINVAL
		}
		out := ctl.PKey{PKey: 0xffff}
		return ctl.Bytes(&out), nil, nil
	case ctl.OpAllocPD:
		return c.allocPD()
	case ctl.OpDeallocPD:
		return c.deallocPD(b)
	case ctl.OpRegMR:
		return c.regMR(b, fds)
	case ctl.OpDeregMR:
		return c.deregMR(b)
	case ctl.OpReregMR:
		return c.reregMR(b, fds)
	case ctl.OpAllocMW:
		return c.allocMW(b)
	case ctl.OpDeallocMW:
		return c.deallocMW(b)
	case ctl.OpCreateCompChannel:
		return c.createChannel()
	case ctl.OpDestroyCompChannel:
		return c.destroyChannel(b)
	case ctl.OpCreateCQ:
		return c.createCQ(b)
	case ctl.OpDestroyCQ:
		return c.destroyCQ(b)
	case ctl.OpResizeCQ:
		return c.resizeCQ(b)
	case ctl.OpCreateQP:
		return c.createQP(b)
	case ctl.OpModifyQP:
		return c.modifyQP(b)
	case ctl.OpQueryQP:
		return c.queryQP(b)
	case ctl.OpDestroyQP:
		return c.destroyQP(b)
	case ctl.OpAttachMcast, ctl.OpDetachMcast:
		return c.mcast(h.Op, b)
	case ctl.OpCreateSRQ:
		return c.createSRQ(b)
	case ctl.OpModifySRQ:
		return c.modifySRQ(b)
	case ctl.OpQuerySRQ:
		return c.querySRQ(b)
	case ctl.OpDestroySRQ:
		return c.destroySRQ(b)
	case ctl.OpOpenXRCD:
		return c.openXRCD(b, fds)
	case ctl.OpOpenQP:
		return c.openQP(b)
	case ctl.OpCloseXRCD:
		return c.closeXRCD(b)
	case ctl.OpCreateAH:
		return c.createAH(b)
	case ctl.OpDestroyAH:
		return c.destroyAH(b)
	}
	return nil, nil, misbehaved("unknown operation %d", uint16(h.Op))
}

func (c *conn) open(b []byte) ([]byte, []int, error) {
	in, err := body[ctl.Open](b)
	if err != nil {
		return nil, nil, err
	}
	if c.dev != nil {
		return nil, nil, misbehaved("OPEN twice on one connection")
	}
	name := ctl.Name(in.Name[:])
	var sd *served
	for _, d := range c.s.devices() {
		if d.name == name {
			sd = d
		}
	}
	if sd == nil {
		return nil, nil, unix.ENODEV
	}
	// The context page, the doorbell and the daemon's end of the async
	// socket; the reply's copies for the client are closed when sent.
	k := add(shmCost(ctl.CtxPageSize), one(ResFDs, 2))
	if err := c.charge(k); err != nil {
		return nil, nil, err
	}
	fail := func(err error, fds ...int) ([]byte, []int, error) {
		closeFDs(fds)
		c.release(k)
		return nil, nil, err
	}
	page, err := newShm("ctx", ctl.CtxPageSize)
	if err != nil {
		return fail(err)
	}
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		page.close()
		return fail(fmt.Errorf("eventfd for the doorbell: %w", err))
	}
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		page.close()
		return fail(fmt.Errorf("socketpair for async events: %w", err), efd)
	}
	// The reply passes the client's copies: its async socket end, the
	// eventfd and the context page (dup'd, as the caller closes what it
	// passes).
	dbl, err := dupFD(efd)
	if err != nil {
		page.close()
		return fail(err, efd, pair[0], pair[1])
	}
	pg, err := dupFD(page.fd)
	if err != nil {
		page.close()
		return fail(err, efd, pair[0], pair[1], dbl)
	}
	unix.SetNonblock(pair[0], true)
	// c.dev is read by other goroutines under s.mu (stats, Remove,
	// asyncEvents) or c.mu (stat): it is written under both. asyncW
	// with it: an event (Remove's) may come as soon as c.dev is set,
	// and asyncEvent reads asyncW under c.mu.
	c.s.mu.Lock()
	c.mu.Lock()
	c.dev = sd
	c.ctxPage, c.asyncW = page, pair[0]
	c.mu.Unlock()
	c.s.mu.Unlock()
	c.doorbell, c.doorbellFD = os.NewFile(uintptr(efd), "sroce-doorbell"), efd
	c.openCost = k
	c.br = newBridge(c)
	dev := ctl.Device{}
	ctl.SetName(dev.Name[:], c.dev.name)
	ctl.SetName(dev.IfName[:], c.dev.dev.Ifname())
	g := c.dev.dev.NodeGUID()
	dev.NodeGUID = *(*uint64)(unsafe.Pointer(&g))
	dev.IfIndex = uint32(c.dev.dev.Ifindex())
	c.s.log.Info("client opened device", "client", c.id, "pid", c.pid, "comm", c.comm, "device", c.dev.name)
	return ctl.Bytes(&dev), []int{pair[1], dbl, pg}, nil
}

func (c *conn) queryDevice() ([]byte, []int, error) {
	a := c.dev.dev.Device().Query()
	g := c.dev.dev.NodeGUID()
	guid := *(*uint64)(unsafe.Pointer(&g))
	out := ctl.DeviceAttr{NodeGUID: guid, SysImageGUID: guid, MaxMRSize: ^uint64(0), PageSizeCap: 0xfffff000,
		VendorID: 0xffffff, MaxQP: uint32(a.MaxQP), MaxQPWR: uint32(a.MaxQPWR),
		// rxe's: BAD_PKEY_CNTR, CHANGE_PHY_PORT, AUTO_PATH_MIG, UD_AV_PORT_ENFORCE,
		// PORT_ACTIVE_EVENT, SYS_IMAGE_GUID, RC_RNR_NAK_GEN, SRQ_RESIZE,
		// MEM_WINDOW, MEM_MGT_EXTENSIONS, MEM_WINDOW_TYPE_2B (as ibv_devinfo -v shows it).
		// Not XRC (1<<20), although the XRC verbs work: libfabric's verbs
		// provider takes the bit as a promise of XRC connections over RDMA
		// CM, which sroce's CM does not make, and Open MPI over it then
		// waits for them for ever.
		DeviceCapFlags: 1<<1 | 1<<5 | 1<<6 | 1<<9 | 1<<10 | 1<<11 | 1<<12 | 1<<13 | 1<<17 | 1<<21 | 1<<24,
		MaxSGE:         uint32(a.MaxSGE), MaxSGERd: uint32(a.MaxSGE), MaxCQ: uint32(a.MaxCQ), MaxCQE: uint32(a.MaxCQE),
		MaxMR: uint32(a.MaxMR), MaxPD: uint32(a.MaxPD), MaxQPRdAtom: uint32(a.MaxQPRdAtom),
		MaxResRdAtom: uint32(a.MaxQPRdAtom) * uint32(a.MaxQP), MaxQPInitRdAtom: uint32(a.MaxQPInitRdAtom),
		AtomicCap: 1, MaxMW: uint32(a.MaxMR), MaxAH: uint32(a.MaxQP), MaxSRQ: uint32(a.MaxSRQ),
		MaxSRQWR: uint32(a.MaxSRQWR), MaxSRQSGE: uint32(a.MaxSGE), MaxPKeys: 64, LocalCAAckDelay: 15,
		PhysPortCnt: 1, MaxInlineData: uint32(a.MaxInlineData), MaxMcastGrp: uint32(a.MaxMcastGrp),
		MaxMcastQPAttach: uint32(a.MaxMcastQPAttach), MaxTotalMcastQPAttach: uint32(a.MaxTotalMcastQPAttach)}
	ctl.SetName(out.FWVer[:], "0.0.0")
	return ctl.Bytes(&out), nil, nil
}

func (c *conn) queryPort(b []byte) ([]byte, []int, error) {
	in, err := body[ctl.Port](b)
	if err != nil {
		return nil, nil, err
	}
	if in.PortNum != 1 {
		return nil, nil, unix.EINVAL
	}
	d := c.dev.dev
	pa := d.Device().QueryPort()
	state := uint32(d.State())
	phys := uint8(3) // disabled
	if d.State() == verbs.PortActive {
		phys = 5 // link up
	}
	out := ctl.PortAttr{State: state, MaxMTU: uint32(pa.MaxMTU), ActiveMTU: uint32(d.ActiveMTU()),
		GIDTblLen: int32(pa.GIDTblLen), PortCapFlags: 1<<16 | 1<<26 | 1<<27, // CM_SUP, IP_BASED_GIDS, ...
		MaxMsgSz: 0x80000000, PKeyTblLen: uint16(pa.PKeyTblLen), MaxVLNum: 1, ActiveWidth: 2, // 4X
		ActiveSpeed: 32, PhysState: phys, LinkLayer: 2 /* Ethernet */, LinkMTU: uint32(d.MTU())}
	return ctl.Bytes(&out), nil, nil
}

func (c *conn) queryGID(b []byte) ([]byte, []int, error) {
	in, err := body[ctl.Port](b)
	if err != nil {
		return nil, nil, err
	}
	if in.PortNum != 1 {
		return nil, nil, unix.EINVAL
	}
	g, err := c.dev.dev.Device().QueryGID(int(in.Index))
	if err != nil {
		return nil, nil, err
	}
	if g == (bth.GID{}) {
		return nil, nil, unix.ENODATA
	}
	out := ctl.GID{GID: g, GIDType: 1, NdevIfIndex: uint32(c.dev.dev.Ifindex())}
	return ctl.Bytes(&out), nil, nil
}

func handleReply(h uint32) ([]byte, []int, error) {
	out := ctl.Handle{Handle: h}
	return ctl.Bytes(&out), nil, nil
}

func (c *conn) allocPD() ([]byte, []int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	h, err := c.alloc(len(c.pds), c.s.Limits().Objects, "PDs")
	if err != nil {
		return nil, nil, err
	}
	if err := c.charge(objectCost); err != nil {
		return nil, nil, err
	}
	pd, err := c.dev.dev.Device().AllocPD()
	if err != nil {
		c.release(objectCost)
		return nil, nil, err
	}
	c.pds[h] = pd
	return handleReply(h)
}

// objectCost is what a PD or an AH is charged: a nominal size of its
// state in the daemon, against the queue memory budget (the per-connection
// limit on objects alone lets a uid's many connections hold gigabytes).
var objectCost = one(ResQueueBytes, 512)

func (c *conn) deallocPD(b []byte) ([]byte, []int, error) {
	return destroy(c, b, c.pds, func(_ uint32, pd *roce.PD) error {
		if err := pd.Dealloc(); err != nil {
			return err
		}
		c.release(objectCost)
		return nil
	})
}

func (c *conn) regMR(b []byte, fds []int) ([]byte, []int, error) {
	in, err := body[ctl.RegMR](b)
	if err != nil {
		return nil, nil, err
	}
	if len(fds) > 1 {
		return nil, nil, misbehaved("REG_MR with %d descriptors, it takes one memfd or none", len(fds))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	pd, ok := c.pds[in.PD]
	if !ok {
		return nil, nil, unix.EINVAL
	}
	if err := c.checkRegBytes(in.Length, 0); err != nil {
		return nil, nil, err
	}
	h, err := c.alloc(len(c.mrs)+len(c.mws), c.s.Limits().MRs, "MRs")
	if err != nil {
		return nil, nil, err
	}
	mem, k, err := c.clientRange("REG_MR", fds, in, 1)
	if err != nil {
		return nil, nil, err
	}
	m, err := pd.RegMRRegion(mem, in.IOVA, mr.Access(in.Access))
	if err != nil {
		mem.unmap()
		c.release(k)
		return nil, nil, err
	}
	c.mrs[h] = &mrObj{mr: m, mem: mem, cost: k, access: in.Access}
	c.regBytes += in.Length
	out := ctl.MR{Handle: h, LKey: m.LKey(), RKey: m.RKey()}
	return ctl.Bytes(&out), nil, nil
}

// clientRange maps the memory of a registration and charges it: with a
// descriptor, a range of the client's memfd (mapClientMem); without, the
// range at in.Addr of the client's address space (mapProcMem), one
// mapping per VMA it spans. It charges mrs MRs, the mappings and the
// bytes. c.mu is held.
func (c *conn) clientRange(op string, fds []int, in ctl.RegMR, mrs uint64) (*clientMem, cost, error) {
	k := mrCost(in.Length)
	k[ResMRs] = mrs
	if len(fds) == 1 {
		if err := c.charge(k); err != nil {
			return nil, k, err
		}
		mem, err := mapClientMem(fds[0], in.FDOffset, in.Length)
		if err != nil {
			c.release(k)
			return nil, k, clientMemErr(op, err)
		}
		return mem, k, nil
	}
	// The VMAs are not known before the maps are read: charge the most a
	// registration may hold, and the descriptors it opens on the way,
	// then give back what it does not keep.
	k[ResMaps], k[ResFDs] = maxMRPieces, maxMRPieces
	if err := c.charge(k); err != nil {
		return nil, k, err
	}
	write := mr.Access(in.Access)&(mr.AccessLocalWrite|mr.AccessRemoteWrite|mr.AccessRemoteAtomic) != 0
	mem, n, err := c.mapProcMem(in.Addr, in.Length, write)
	if err != nil {
		c.release(k)
		c.s.log.Debug("registration by address refused", "client", c.id, "op", op, "err", err)
		return nil, k, procMemErrno(err)
	}
	var back cost
	back[ResMaps], back[ResFDs] = maxMRPieces-n, maxMRPieces
	c.release(back)
	k[ResMaps], k[ResFDs] = n, 0
	return mem, k, nil
}

// procMemErrno is the errno a registration by address fails with: the
// errno of the failure, EFAULT when there is none.
func procMemErrno(err error) error {
	var e unix.Errno
	if errors.As(err, &e) {
		return e
	}
	return unix.EFAULT
}

// mrCost is what an MR of length bytes holds: one MR, one mapping, its
// bytes.
func mrCost(length uint64) cost {
	var k cost
	k[ResMRs], k[ResMaps], k[ResRegBytes] = 1, 1, length
	return k
}

// clientMemErr is the error of a request whose client memory could not
// be mapped: the client's fault (not a memfd, not sealed, a range outside
// it) ends the connection; the daemon's shortage (mmap's ENOMEM at
// vm.max_map_count) is the errno the client gets, connected.
func clientMemErr(op string, err error) error {
	var f *memFault
	if errors.As(err, &f) {
		return misbehaved("%s: %v", op, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}

// checkRegBytes checks a registration of length bytes that replaces one
// of old bytes against the range a registration may have and the
// client's limit on registered bytes; c.mu is held.
func (c *conn) checkRegBytes(length, old uint64) error {
	if length == 0 || length > 1<<40 {
		return unix.EINVAL
	}
	if c.regBytes-old+length > c.s.Limits().RegBytes {
		c.s.budget.warn(c.uid, "client limit reached", "client", c.id, "what", "registered bytes", "limit", c.s.Limits().RegBytes)
		return unix.ENOMEM
	}
	return nil
}

// reregMR re-registers an MR (ibv_rereg_mr) with the checks of REG_MR:
// a new translation is a memfd range mapped as REG_MR maps it, within the
// client's limit on registered bytes (less what the old range held).
func (c *conn) reregMR(b []byte, fds []int) ([]byte, []int, error) {
	in, err := body[ctl.ReregMR](b)
	if err != nil {
		return nil, nil, err
	}
	flags := mr.ReregFlags(in.Flags)
	translate := flags&mr.ReregChangeTranslation != 0
	if len(fds) > 1 || (len(fds) == 1 && !translate) {
		return nil, nil, misbehaved("REREG_MR with %d descriptors, its flags %#x take at most %d", len(fds), in.Flags, min(in.Flags&uint32(mr.ReregChangeTranslation), 1))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	o, ok := c.mrs[in.Handle]
	// As the kernel's rereg: no flag, or an unknown one, is EINVAL.
	if !ok || flags == 0 || flags&^(mr.ReregChangeTranslation|mr.ReregChangePD|mr.ReregChangeAccess) != 0 {
		return nil, nil, unix.EINVAL
	}
	var pd *roce.PD
	if flags&mr.ReregChangePD != 0 {
		if pd, ok = c.pds[in.Reg.PD]; !ok {
			return nil, nil, unix.EINVAL
		}
	}
	var mem *clientMem
	var region mr.Region
	var k cost // the new range's mapping and bytes
	old := uint64(len(o.mem.bytes))
	if translate {
		if err := c.checkRegBytes(in.Reg.Length, old); err != nil {
			return nil, nil, err
		}
		// The new range is mapped beside the old until Rereg is done.
		reg := in.Reg
		if flags&mr.ReregChangeAccess == 0 {
			reg.Access = o.access
		}
		if mem, k, err = c.clientRange("REREG_MR", fds, reg, 0); err != nil {
			return nil, nil, err
		}
		region = mem
	}
	if err := o.mr.Rereg(flags, pd, region, in.Reg.IOVA, mr.Access(in.Reg.Access)); err != nil {
		mem.unmap()
		c.release(k)
		return nil, nil, err
	}
	if flags&mr.ReregChangeAccess != 0 {
		o.access = in.Reg.Access
	}
	if translate {
		// The engine no longer touches the old range: Rereg waited.
		o.mem.unmap()
		o.mem = mem
		c.regBytes = c.regBytes - old + in.Reg.Length
		// The MR stays; the old range's mappings and bytes go.
		gone := o.cost
		gone[ResMRs] = 0
		c.release(gone)
		k[ResMRs] = o.cost[ResMRs]
		o.cost = k
	}
	out := ctl.MR{Handle: in.Handle, LKey: o.mr.LKey(), RKey: o.mr.RKey()}
	return ctl.Bytes(&out), nil, nil
}

func (c *conn) deregMR(b []byte) ([]byte, []int, error) {
	return destroy(c, b, c.mrs, func(_ uint32, o *mrObj) error {
		if err := o.mr.Dereg(); err != nil {
			return err
		}
		c.regBytes -= uint64(len(o.mem.bytes))
		o.mem.unmap()
		c.release(o.cost)
		return nil
	})
}

func (c *conn) allocMW(b []byte) ([]byte, []int, error) {
	in, err := body[ctl.MW](b)
	if err != nil {
		return nil, nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	pd, ok := c.pds[in.PDOrHandle]
	if !ok || (in.TypeOrRKey != 1 && in.TypeOrRKey != 2) {
		return nil, nil, unix.EINVAL
	}
	h, err := c.alloc(len(c.mrs)+len(c.mws), c.s.Limits().MRs, "MWs")
	if err != nil {
		return nil, nil, err
	}
	if err := c.charge(one(ResMRs, 1)); err != nil {
		return nil, nil, err
	}
	w, err := pd.AllocMW(mr.MWType(in.TypeOrRKey))
	if err != nil {
		c.release(one(ResMRs, 1))
		return nil, nil, err
	}
	c.mws[h] = w
	out := ctl.MW{PDOrHandle: h, TypeOrRKey: w.RKey()}
	return ctl.Bytes(&out), nil, nil
}

func (c *conn) deallocMW(b []byte) ([]byte, []int, error) {
	return destroy(c, b, c.mws, func(_ uint32, w *mr.MW) error {
		if err := w.Dealloc(); err != nil {
			return err
		}
		c.release(one(ResMRs, 1))
		return nil
	})
}

// eventSocket returns the two ends of a socket the daemon sends events
// on: its own end w (nonblocking: a client that does not read loses
// events, it never stalls the daemon) and the client's r.
func eventSocket() (w, r int, err error) {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, -1, fmt.Errorf("socketpair for events: %w", err)
	}
	unix.SetNonblock(pair[0], true)
	return pair[0], pair[1], nil
}

// newChannel allocates a handle from a table of have entries and makes
// its event socket; add records the daemon's end under the handle. The
// reply is the handle with the client's end.
func (c *conn) newChannel(have int, what string, add func(h uint32, w int)) ([]byte, []int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	h, err := c.alloc(have, c.s.Limits().Objects, what)
	if err != nil {
		return nil, nil, err
	}
	if err := c.charge(one(ResFDs, 1)); err != nil {
		return nil, nil, err
	}
	w, r, err := eventSocket()
	if err != nil {
		c.release(one(ResFDs, 1))
		return nil, nil, err
	}
	add(h, w)
	out := ctl.Handle{Handle: h}
	return ctl.Bytes(&out), []int{r}, nil
}

func (c *conn) createChannel() ([]byte, []int, error) {
	return c.newChannel(len(c.chans), "completion channels", func(h uint32, w int) { c.chans[h] = &chanObj{w: w} })
}

func (c *conn) destroyChannel(b []byte) ([]byte, []int, error) {
	return destroy(c, b, c.chans, func(_ uint32, ch *chanObj) error {
		if ch.refs > 0 {
			return unix.EBUSY
		}
		// Closed whatever close says (Linux frees the descriptor even
		// when it reports an error), so released once.
		unix.Close(ch.w)
		c.release(one(ResFDs, 1))
		return nil
	})
}

// cacheLine rounds n up to a 64-byte boundary.
func cacheLine(n int) int { return (n + 63) &^ 63 }

func (c *conn) createCQ(b []byte) ([]byte, []int, error) {
	in, err := body[ctl.CreateCQ](b)
	if err != nil {
		return nil, nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
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
func (c *conn) resizeCQ(b []byte) ([]byte, []int, error) {
	in, err := body[ctl.ResizeCQ](b)
	if err != nil {
		return nil, nil, err
	}
	c.settleSends(in.Handle)
	c.mu.Lock()
	defer c.mu.Unlock()
	o, ok := c.cqs[in.Handle]
	if !ok || in.CQE == 0 || in.CQE > roce.MaxCQE {
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
			return nil, nil, misbehaved("CQ %d: %v", in.Handle, err)
		}
		return nil, nil, err
	}
	// Under c.mu, which asyncEvent holds to set the overflow flag.
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
	c.mu.Lock()
	for _, o := range c.qps {
		if o.cqs[0] == h {
			_, stuck, err := c.br.serve(o.t)
			if err != nil {
				c.mu.Unlock()
				return // the client's ring is corrupt: the bridge disconnects it
			}
			if stuck {
				c.br.kick(o.t)
			}
		}
	}
	c.mu.Unlock()
	c.dev.dev.Device().Flush()
	deadline := time.Now().Add(100 * time.Millisecond)
	for {
		busy := false
		c.mu.Lock()
		for _, o := range c.qps {
			if o.cqs[0] == h && (o.typ == verbs.QPTypeUD || o.typ == verbs.QPTypeUC) && o.qp.SendQueueLen() != 0 {
				busy = true
				break
			}
		}
		c.mu.Unlock()
		if !busy || time.Now().After(deadline) {
			return
		}
		c.dev.dev.Device().Flush()
		time.Sleep(50 * time.Microsecond)
	}
}

func (c *conn) destroyCQ(b []byte) ([]byte, []int, error) {
	return destroy(c, b, c.cqs, func(h uint32, o *cqObj) error {
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
	})
}

// dropCQ forgets a destroyed CQ; c.mu is held.
func (c *conn) dropCQ(h uint32, o *cqObj) {
	c.dev.disown(o.cq)
	if ch := c.chans[o.ch]; ch != nil {
		ch.refs--
	}
	delete(c.cqs, h)
	o.mem.close()
	c.release(o.cost)
}

func (c *conn) createQP(b []byte) ([]byte, []int, error) {
	in, err := body[ctl.CreateQP](b)
	if err != nil {
		return nil, nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
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
	// The client's send ring frees a slot when the bridge takes its WQE,
	// before the engine completes it: the engine's send queue has room
	// for twice the ring, so that the ring drains while the engine still
	// holds the requests of the previous round.
	attr.Cap.MaxSendWR = min(2*in.Cap.MaxSendWR, roce.MaxQPWR)
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
	real := add(one(ResQPs, 1), shmCost(lay.size))
	real[ResQueueBytes] += uint64(q.QueueBytes())
	if k, err = c.recharge(k, real); err != nil {
		q.Destroy()
		c.release(k)
		return nil, nil, err
	}
	fail := func(err error) ([]byte, []int, error) {
		q.Destroy()
		c.release(k)
		return nil, nil, err
	}
	o := &qpObj{qp: q, typ: typ, pd: in.PD, cqs: [2]uint32{in.SendCQ, in.RecvCQ}, srq: in.SRQ, cost: k,
		handle: h, maxSend: got.MaxSendSGE, maxRecv: got.MaxRecvSGE, cap: got}
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
	sge := got.MaxSendSGE
	if got.MaxRecvSGE > sge {
		sge = got.MaxRecvSGE
	}
	o.sge = make([]mr.SGE, sge+1)
	if scq != nil {
		o.scq = scq.cq
	}
	if o.t, err = c.br.add(o, nil); err != nil {
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
	case !xrc:
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
		return -1, err
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

// recharge turns the charge held turns into want: it takes what want has
// more (which may be refused: held stays) and gives back what it has
// less. It returns the charge now held.
func (c *conn) recharge(held, want cost) (cost, error) {
	var more, less cost
	for r := range held {
		if want[r] > held[r] {
			more[r] = want[r] - held[r]
		} else {
			less[r] = held[r] - want[r]
		}
	}
	if err := c.charge(more); err != nil {
		return held, err
	}
	c.release(less)
	return want, nil
}

// rechargeForce is recharge for a change already made: what want has
// more is taken whatever the budgets say.
func (c *conn) rechargeForce(held, want cost) cost {
	var more, less cost
	for r := range held {
		if want[r] > held[r] {
			more[r] = want[r] - held[r]
		} else {
			less[r] = held[r] - want[r]
		}
	}
	c.force(more)
	c.release(less)
	return want
}

// resolve fills in the destination MAC of a path, as rdma-core does for
// RoCE when a QP moves to RTR or an AH is created (bounded).
func (c *conn) resolve(a *ctl.AHAttr) (verbs.AHAttr, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got, err := c.dev.dev.AHAttr(ctx, bth.GID(a.DGID), int(a.SGIDIndex))
	if err != nil {
		return verbs.AHAttr{}, err
	}
	got.FlowLabel, got.HopLimit, got.TrafficClass = a.FlowLabel, a.HopLimit, a.TrafficClass
	return got, nil
}

func (c *conn) modifyQP(b []byte) ([]byte, []int, error) {
	in, err := body[ctl.ModifyQP](b)
	if err != nil {
		return nil, nil, err
	}
	c.mu.Lock()
	o, ok := c.qps[in.Handle]
	c.mu.Unlock()
	if !ok {
		return nil, nil, unix.EINVAL
	}
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

func (c *conn) queryQP(b []byte) ([]byte, []int, error) {
	in, err := body[ctl.ModifyQP](b)
	if err != nil {
		return nil, nil, err
	}
	c.mu.Lock()
	o, ok := c.qps[in.Handle]
	c.mu.Unlock()
	if !ok {
		return nil, nil, unix.EINVAL
	}
	a, ia := o.qp.Query()
	a.CurState = a.State
	out := ctl.ModifyQP{Handle: in.Handle, AttrMask: in.AttrMask, Attr: ctl.QPAttrOf(&a)}
	out.Attr.Cap, out.Attr.PortNum, out.Attr.QPType = ctl.CapOf(o.cap), 1, uint32(o.typ)
	if ia.SigAll {
		out.Attr.SQSigAll = 1
	}
	return ctl.Bytes(&out), nil, nil
}

func (c *conn) destroyQP(b []byte) ([]byte, []int, error) {
	return destroy(c, b, c.qps, func(h uint32, o *qpObj) error {
		// What the client posted before it asked goes out first, as from
		// a NIC's queue (a program that posts unsignaled sends and then
		// destroys the QP expects them sent): what the bridge has not
		// yet taken from the ring, and what it gave the engine that the
		// engine has not yet sent. A ring that broke the rules
		// disconnects the client, as the bridge would.
		if c.br != nil {
			if err := c.br.drainSends(o.t); err != nil {
				return err
			}
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
	})
}

// mcast attaches a QP to a multicast group or detaches it
// (ibv_attach_mcast, ibv_detach_mcast), with the engine's errnos: EINVAL
// for a QP that is not UD, a GID that is not multicast or a group the QP
// is not attached to, ENOMEM beyond the device's limits, EBUSY never.
func (c *conn) mcast(op ctl.Op, b []byte) ([]byte, []int, error) {
	in, err := body[ctl.Mcast](b)
	if err != nil {
		return nil, nil, err
	}
	c.mu.Lock()
	o, ok := c.qps[in.QP]
	c.mu.Unlock()
	if !ok {
		return nil, nil, unix.EINVAL
	}
	if op == ctl.OpAttachMcast {
		err = o.qp.AttachMcast(bth.GID(in.GID), in.LID)
	} else {
		err = o.qp.DetachMcast(bth.GID(in.GID), in.LID)
	}
	return nil, nil, err
}

// dropQP forgets a destroyed QP; c.mu is held.
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

func (c *conn) createSRQ(b []byte) ([]byte, []int, error) {
	in, err := body[ctl.SRQ](b)
	if err != nil {
		return nil, nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
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
	// Charged before the engine allocates (its memory as asked for),
	// then the real footprint with the engine's queue.
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
	real := shmCost(srqSize(maxWR, stride))
	real[ResQueueBytes] += uint64(s.QueueBytes())
	fail := func(err error) ([]byte, []int, error) {
		s.Destroy()
		c.release(k)
		return nil, nil, err
	}
	if k, err = c.recharge(k, real); err != nil {
		return fail(err)
	}
	mem, r, err := newSRQShm(maxWR, stride)
	if err != nil {
		return fail(err)
	}
	fd, err := dupFD(mem.fd)
	if err != nil {
		mem.close()
		return fail(err)
	}
	so := &srqObj{srq: s, mem: mem, pd: in.PDOrHandle, handle: h, maxSGE: in.MaxSGE, rq: r, cost: k,
		xrcd: in.XRCD}
	if err = s.AttachRing(r); err == nil {
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
// stride bytes.
func newSRQShm(maxWR, stride uint32) (*shm, *ring.Ring[ring.RecvWQE], error) {
	mem, err := newShm("srq", srqSize(maxWR, stride))
	if err != nil {
		return nil, nil, err
	}
	r, err := ring.Init[ring.RecvWQE](mem.mem[srqRingOffset:], ring.KindRecv, maxWR, stride)
	if err != nil {
		mem.close()
		return nil, nil, err
	}
	return mem, r, nil
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

func (c *conn) modifySRQ(b []byte) ([]byte, []int, error) {
	in, err := body[ctl.SRQ](b)
	if err != nil {
		return nil, nil, err
	}
	if in.AttrMask&srqMaxWR != 0 {
		return c.resizeSRQ(&in)
	}
	c.mu.Lock()
	o, ok := c.srqs[in.PDOrHandle]
	c.mu.Unlock()
	if !ok {
		return nil, nil, unix.EINVAL
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
// receives posted is EINVAL. c.mu and the SRQ's bridge lock are held
// throughout; the engine is kept away while the ring is replaced.
func (c *conn) resizeSRQ(in *ctl.SRQ) ([]byte, []int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
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
	mem, r, err := newSRQShm(in.MaxWR, stride)
	if err != nil {
		return fail(err)
	}
	fd, err := dupFD(mem.fd)
	if err != nil {
		mem.close()
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

func (c *conn) querySRQ(b []byte) ([]byte, []int, error) {
	in, err := body[ctl.Handle](b)
	if err != nil {
		return nil, nil, err
	}
	c.mu.Lock()
	o, ok := c.srqs[in.Handle]
	c.mu.Unlock()
	if !ok {
		return nil, nil, unix.EINVAL
	}
	maxWR, limit, _ := o.srq.Query()
	out := ctl.SRQ{PDOrHandle: in.Handle, MaxWR: maxWR, MaxSGE: o.maxSGE, SRQLimit: limit}
	return ctl.Bytes(&out), nil, nil
}

func (c *conn) destroySRQ(b []byte) ([]byte, []int, error) {
	return destroy(c, b, c.srqs, func(_ uint32, o *srqObj) error {
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
	})
}

func (c *conn) createAH(b []byte) ([]byte, []int, error) {
	in, err := body[ctl.AH](b)
	if err != nil {
		return nil, nil, err
	}
	c.mu.Lock()
	pd := c.pds[in.PDOrHandle]
	n := len(c.ahs)
	c.mu.Unlock()
	if pd == nil {
		return nil, nil, unix.EINVAL
	}
	attr, err := c.resolve(&in.Attr)
	if err != nil {
		return nil, nil, unix.EHOSTUNREACH
	}
	ah, err := pd.CreateAH(&attr)
	if err != nil {
		return nil, nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	h, err := c.alloc(n, c.s.Limits().Objects, "AHs")
	if err == nil {
		err = c.charge(objectCost)
	}
	if err != nil {
		pd.DestroyAH(ah)
		return nil, nil, err
	}
	c.ahs[h] = &ahObj{ah: ah, pd: in.PDOrHandle}
	c.br.ahs.Store(h, c.ahs[h])
	out := ctl.AH{PDOrHandle: h, Attr: ctl.AHOf(&attr)}
	out.Attr.SL, out.Attr.StaticRate = in.Attr.SL, in.Attr.StaticRate
	return ctl.Bytes(&out), nil, nil
}

func (c *conn) destroyAH(b []byte) ([]byte, []int, error) {
	return destroy(c, b, c.ahs, func(h uint32, o *ahObj) error {
		c.br.ahs.Delete(h)
		if pd := c.pds[o.pd]; pd != nil {
			pd.DestroyAH(o.ah)
		}
		c.release(objectCost)
		return nil
	})
}

// asyncEvent sends an asynchronous event to the client (dropped if its
// socket is full: the client is not reading its events).
func (c *conn) asyncEvent(typ, handle uint32) {
	// Under c.mu: cleanup closes the socket (and the CQs) under it.
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gone.Load() || c.asyncW < 0 {
		return
	}
	if verbs.EventType(typ) == verbs.EventCQErr {
		// The CQ lost completions: say so in its control block too.
		if o := c.cqs[handle]; o != nil {
			atomic.StoreUint32(&o.ctl.Overflow, 1)
		}
	}
	ev := ctl.AsyncEvent{EventType: typ, Handle: handle}
	unix.Write(c.asyncW, ctl.Bytes(&ev))
}

// cleanup frees everything the connection holds, in the order that keeps
// the engine away from memory before it is unmapped: the bridge stops,
// QPs go to the error state and are destroyed (their work flushed), then
// windows, MRs (and their mappings), SRQs, CQs, AHs, PDs, channels.
func (c *conn) cleanup() {
	c.gone.Store(true)
	c.cmCleanup()
	if c.br != nil {
		c.br.stop()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for h, o := range c.qps {
		if !c.lastHandle(o) {
			c.dropQP(h, o) // an XRC target another process keeps
			continue
		}
		o.qp.Modify(&verbs.QPAttr{State: verbs.QPStateErr}, verbs.AttrState)
		// As the kernel does for a departing process: its groups first.
		o.qp.DetachAllMcast()
		o.qp.Destroy()
		c.dropQP(h, o)
	}
	for h, w := range c.mws {
		w.Dealloc()
		delete(c.mws, h)
		c.release(one(ResMRs, 1))
	}
	for h, o := range c.mrs {
		// A mapping kept is released from the budget all the same: the
		// error says it is lost, and the budget must not shrink for it.
		c.release(o.cost)
		if err := o.mr.Dereg(); err != nil {
			c.s.log.Error("deregistering a departed client's MR failed; its mapping is kept", "client", c.id, "err", err)
			delete(c.mrs, h)
			continue
		}
		o.mem.unmap()
		delete(c.mrs, h)
	}
	c.regBytes = 0
	for h, o := range c.srqs {
		o.srq.Destroy()
		c.dev.disown(o.srq)
		c.br.drop(o.t)
		delete(c.srqs, h)
		o.mem.close()
		c.release(o.cost)
	}
	for h, o := range c.cqs {
		o.cq.Destroy()
		c.dropCQ(h, o)
	}
	for h, o := range c.ahs {
		if pd := c.pds[o.pd]; pd != nil {
			pd.DestroyAH(o.ah)
		}
		delete(c.ahs, h)
		c.br.ahs.Delete(h)
		c.release(objectCost)
	}
	for h, o := range c.xrcds {
		if err := c.dev.closeXRCD(o.sh); err != nil {
			c.s.log.Error("freeing a departed client's XRC domain failed", "client", c.id, "err", err)
		}
		delete(c.xrcds, h)
		c.release(openCost(o.sh.keyed))
	}
	for h, pd := range c.pds {
		pd.Dealloc()
		delete(c.pds, h)
		c.release(objectCost)
	}
	for h, ch := range c.chans {
		unix.Close(ch.w)
		delete(c.chans, h)
		c.release(one(ResFDs, 1))
	}
	c.ctxPage.close()
	if c.doorbell != nil {
		c.doorbell.Close()
	}
	if c.asyncW >= 0 {
		unix.Close(c.asyncW)
		c.asyncW = -1
	}
	c.release(c.openCost)
	c.openCost = cost{}
	// The connection's socket was closed before the cleanup.
	c.release(connCost)
	c.releaseRest()
}
