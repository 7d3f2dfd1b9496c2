package daemon

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/sroce/sroce/daemon/ctl"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/verbs"
	"golang.org/x/sys/unix"
)

// Version is the daemon's version string, sent in HELLO.
const Version = "sroce 0.1"

// conn is one client connection: one device context and its objects.
// Its requests are served one at a time by its own goroutine (requests);
// the tables of its objects have a lock per kind (table.go), which the
// other goroutines that read them take: the bridge, the engine's event
// routing, the CM's forwarder, QUERY_RES of other clients, the metrics.
type conn struct {
	s    *Server
	uc   *net.UnixConn
	id   uint64
	pid  int32
	uid  uint32
	comm string
	dev  *served // set by OPEN, under s.mu and ctxMu

	next atomic.Uint32 // the last handle given, of any kind

	// One lock per kind of object (kind, in table.go, gives the order in
	// which they are taken), each over its table.
	pdMu     sync.RWMutex
	pds      map[uint32]*roce.PD
	xrcdMu   sync.RWMutex
	xrcds    map[uint32]*xrcdObj
	chanMu   sync.RWMutex
	chans    map[uint32]*chanObj
	cqMu     sync.RWMutex
	cqs      map[uint32]*cqObj
	srqMu    sync.RWMutex
	srqs     map[uint32]*srqObj
	qpMu     sync.RWMutex
	qps      map[uint32]*qpObj
	ahMu     sync.RWMutex
	ahs      map[uint32]*ahObj
	mrMu     sync.RWMutex
	mrs      map[uint32]*mrObj
	mws      map[uint32]*mr.MW
	regBytes uint64
	cmMu     sync.RWMutex
	cm       cmState // the connection manager's channels and IDs

	// ctxMu guards the context's async event socket (and dev, with s.mu).
	ctxMu sync.Mutex

	heldMu     sync.Mutex
	held       cost // what the connection holds of its uid's budget
	openCost   cost // what OPEN charged: the context page, doorbell, async socket
	ctxPage    *shm
	doorbell   *os.File // the eventfd clients write to (closed with the connection)
	doorbellFD int      // its descriptor, nonblocking
	doorbellRC syscall.RawConn
	asyncW     int // the daemon's end of the async event socket
	br         *bridge
	gone       atomic.Bool
	ringErr    atomic.Pointer[error] // a corrupt ring the engine found (ringFault)
	panics     atomic.Int32          // panics contained (conn.contain)
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
	st := ClientStat{ID: c.id, PID: c.pid, UID: c.uid, Comm: c.comm}
	c.ctxMu.Lock()
	if c.dev != nil {
		st.Device = c.dev.name
	}
	c.ctxMu.Unlock()
	c.qpMu.RLock()
	st.QPs = len(c.qps)
	c.qpMu.RUnlock()
	c.mrMu.RLock()
	st.MRs, st.Bytes = len(c.mrs), c.regBytes
	c.mrMu.RUnlock()
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
		rh := ctl.Hdr{Op: h.Op, Seq: h.Seq, NFDs: uint32(len(rfds))}
		var msg []byte
		if herr != nil {
			closeFDs(rfds)
			rfds = nil
			class, en := classify(herr)
			switch class {
			case classMisbehaviour:
				reason = fmt.Sprintf("%s request: %s", h.Op, herr)
			case classInternal:
				log.Error("a request failed in the daemon", "op", h.Op.String(), "errno", en.Error(), "err", herr)
			case classShortage:
				log.Debug("a request found the daemon or a budget short", "op", h.Op.String(), "errno", en.Error(), "err", herr)
			default:
				log.Debug("request failed", "op", h.Op.String(), "err", herr)
			}
			if class == classMisbehaviour {
				break
			}
			rh.Err, rh.NFDs = int32(en), 0
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
	h := c.next.Add(1)
	if h == 0 {
		h = c.next.Add(1)
	}
	return h, nil
}

// asyncEvent sends an asynchronous event to the client (dropped if its
// socket is full: the client is not reading its events).
func (c *conn) asyncEvent(typ, handle uint32) {
	if verbs.EventType(typ) == verbs.EventCQErr {
		// The CQ lost completions: say so in its control block too
		// (under the CQs' lock, which a resize holds to move the flag
		// and cleanup to free the CQ).
		c.cqMu.RLock()
		if o := c.cqs[handle]; o != nil && !c.gone.Load() {
			atomic.StoreUint32(&o.ctl.Overflow, 1)
		}
		c.cqMu.RUnlock()
	}
	// Under ctxMu: cleanup closes the socket under it.
	c.ctxMu.Lock()
	defer c.ctxMu.Unlock()
	if c.gone.Load() || c.asyncW < 0 {
		return
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
	all := kinds(1<<nKinds - 1)
	c.lock(all)
	defer c.unlock(all)
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
		c.br.setAH(h, nil)
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
	c.ctxMu.Lock()
	if c.asyncW >= 0 {
		unix.Close(c.asyncW)
		c.asyncW = -1
	}
	c.ctxMu.Unlock()
	c.release(c.openCost)
	c.openCost = cost{}
	// The connection's socket was closed before the cleanup.
	c.release(connCost)
	c.releaseRest()
}
