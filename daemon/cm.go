package daemon

// The connection manager's operations (CM_* of sroce_ctl.h): the daemon
// runs one rdmacm.CM over all its devices (a QP1 agent per device, shared
// by every client) and serves the kernel's ucma commands as librdmacm
// sends them. Each connection has one rdmacm.EventChannel for all its IDs;
// a goroutine per connection forwards its events to the socket of the
// client channel the event's ID is on (an ID moves with CM_MIGRATE_ID).
// When the connection ends its IDs are destroyed: established connections
// are disconnected (a DREQ to the peer), undecided requests rejected,
// listeners released.

import (
	"errors"
	"net/netip"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/cm"
	"github.com/sroce/sroce/daemon/ctl"
	"github.com/sroce/sroce/rdmacm"
	"github.com/sroce/sroce/verbs"
)

// cmState is a connection's part of the CM: its channels and IDs (under
// conn.cmMu).
type cmState struct {
	ch     *rdmacm.EventChannel // every ID of the connection posts here
	chans  map[uint32]*cmChan
	ids    map[uint32]*cmID
	byID   map[*rdmacm.ID]*cmID
	fwDone chan struct{} // closed when the forwarder has stopped
}

type cmChan struct {
	w    int // the daemon's end of the event socket
	refs int // IDs on it
}

type cmID struct {
	id     *rdmacm.ID
	handle uint32
	ch     uint32 // the client channel its events go to
	// last is the type of the last event delivered. After CONNECT_RESPONSE
	// the client's ACCEPT sends the RTU and the CM posts ESTABLISHED,
	// which the kernel's ucma does not report (librdmacm turned
	// CONNECT_RESPONSE into ESTABLISHED itself): swallow drops it.
	last    rdmacm.EventType
	swallow bool
}

// cmErrno maps the CM's errors to the errno values the kernel's rdma_cm
// gives for the same mistakes.
func cmErrno(err error) error {
	var en unix.Errno
	switch {
	case err == nil:
		return nil
	case errors.As(err, &en):
		return en
	case errors.Is(err, rdmacm.ErrAddrInUse):
		return unix.EADDRINUSE
	case errors.Is(err, rdmacm.ErrNoDevice):
		return unix.EADDRNOTAVAIL
	case errors.Is(err, rdmacm.ErrClosed):
		return unix.ENODEV
	case errors.Is(err, rdmacm.ErrNoQP):
		return unix.EINVAL
	case errors.Is(err, rdmacm.ErrQPExists):
		return unix.EEXIST
	case errors.Is(err, rdmacm.ErrNotJoined):
		return unix.ENOENT
	case errors.Is(err, rdmacm.ErrIPv6Group):
		return errENOTSUPP
	}
	return unix.EINVAL // ErrState, ErrInvalid, ErrPrivateLen and what the CM did not name
}

// errENOTSUPP is the kernel's own ENOTSUPP (524), which its rdma_cm
// returns to a program joining an IPv6 group on a RoCEv2 port.
const errENOTSUPP = unix.Errno(524)

// cmTable is the connection's CM IDs for the generic path: a CM request
// names its ID first (every CM struct but CREATE_ID's starts with its
// uint32 ID); an unknown one is ENOENT, as with ucma.
var cmTable = table[*cmID]{kind: kindCM, m: func(c *conn) map[uint32]*cmID { return c.cm.ids }, notFound: unix.ENOENT}

// cmKey is the ID a CM request names.
func cmKey[T any](in *T) uint32 { return *(*uint32)(unsafe.Pointer(in)) }

// onID is a CM request on an ID: its body decoded, its ID looked up.
func onID[T any](h func(c *conn, in *T, o *cmID, r *request) ([]byte, []int, error)) func(*conn, *request) ([]byte, []int, error) {
	return on(cmTable, cmKey[T], h)
}

// idOnly is a CM request whose answer is an errno only.
func idOnly[T any](h func(c *conn, in *T, o *cmID) error) func(*conn, *request) ([]byte, []int, error) {
	return onID(func(c *conn, in *T, o *cmID, _ *request) ([]byte, []int, error) { return nil, nil, h(c, in, o) })
}

func init() {
	cmMethod := func(op ctl.Op, locks kinds, run func(*conn, *request) ([]byte, []int, error)) method {
		return method{op: op, cm: true, locks: locks, run: run}
	}
	// Most hold no lock while the CM works (it may wait, and its
	// forwarder takes c.cmMu to deliver events); they take c.cmMu where
	// they change the tables.
	register(
		cmMethod(ctl.OpCMCreateChannel, locks(kindCM), plain((*conn).cmCreateChannel)),
		cmMethod(ctl.OpCMDestroyChannel, 0, decoded((*conn).cmDestroyChannel)),
		cmMethod(ctl.OpCMCreateID, locks(kindCM), decoded((*conn).cmCreateID)),
		cmMethod(ctl.OpCMDestroyID, 0, idOnly(func(c *conn, _ *ctl.CMIDArg, o *cmID) error { return c.cmDestroyID(o) })),
		cmMethod(ctl.OpCMBind, 0, onID((*conn).cmAddr)),
		cmMethod(ctl.OpCMResolveAddr, 0, onID((*conn).cmAddr)),
		cmMethod(ctl.OpCMResolveRoute, 0, idOnly(func(_ *conn, in *ctl.CMIDArg, o *cmID) error {
			return cmErrno(o.id.ResolveRoute(time.Duration(in.Arg) * time.Millisecond))
		})),
		cmMethod(ctl.OpCMQuery, 0, onID(func(c *conn, _ *ctl.CMIDArg, o *cmID, _ *request) ([]byte, []int, error) {
			info := c.cmInfo(o)
			return ctl.Bytes(&info), nil, nil
		})),
		cmMethod(ctl.OpCMListen, 0, idOnly(func(_ *conn, in *ctl.CMIDArg, o *cmID) error {
			return cmErrno(o.id.Listen(int(min(in.Arg, 1<<16))))
		})),
		cmMethod(ctl.OpCMConnect, 0, idOnly((*conn).cmConn)),
		cmMethod(ctl.OpCMAccept, 0, idOnly((*conn).cmAccept)),
		cmMethod(ctl.OpCMReject, 0, idOnly(func(_ *conn, in *ctl.CMConn, o *cmID) error {
			p, err := param(in)
			if err != nil {
				return err
			}
			return cmErrno(o.id.Reject(p.PrivateData))
		})),
		cmMethod(ctl.OpCMDisconnect, 0, idOnly(func(_ *conn, _ *ctl.CMIDArg, o *cmID) error { return cmErrno(o.id.Disconnect()) })),
		cmMethod(ctl.OpCMInitQPAttr, 0, onID(func(_ *conn, in *ctl.CMIDArg, o *cmID, _ *request) ([]byte, []int, error) {
			a, mask, err := o.id.InitQPAttr(verbs.QPState(in.Arg))
			if err != nil {
				return nil, nil, cmErrno(err)
			}
			out := ctl.ModifyQP{Handle: o.handle, AttrMask: uint32(mask), Attr: ctl.QPAttrOf(&a)}
			return ctl.Bytes(&out), nil, nil
		})),
		// The CM moves no QP of a client and has nothing to notify.
		cmMethod(ctl.OpCMNotify, 0, idOnly(func(*conn, *ctl.CMIDArg, *cmID) error { return unix.ENOSYS })),
		cmMethod(ctl.OpCMSetOption, 0, onID((*conn).cmSetOption)),
		cmMethod(ctl.OpCMMigrateID, locks(kindCM), idOnly(func(c *conn, in *ctl.CMIDArg, o *cmID) error { return c.cmMigrate(o, in.Arg) })),
		cmMethod(ctl.OpCMJoinMcast, 0, onID((*conn).cmMcast)),
		cmMethod(ctl.OpCMLeaveMcast, 0, onID((*conn).cmMcast)),
	)
}

// cmStart creates the connection's event channel and its forwarder on
// first use (c.cmMu held).
func (c *conn) cmStart() {
	if c.cm.ch != nil {
		return
	}
	c.cm.ch = rdmacm.NewEventChannel()
	c.cm.chans = map[uint32]*cmChan{}
	c.cm.ids = map[uint32]*cmID{}
	c.cm.byID = map[*rdmacm.ID]*cmID{}
	c.cm.fwDone = make(chan struct{})
	go c.cmForward(c.cm.ch, c.cm.fwDone)
}

func (c *conn) cmCreateChannel() ([]byte, []int, error) {
	c.cmStart()
	return c.newChannel(len(c.cm.chans), "CM event channels", func(h uint32, w int) { c.cm.chans[h] = &cmChan{w: w} })
}

func (c *conn) cmDestroyChannel(in *ctl.Handle, _ *request) ([]byte, []int, error) {
	// As the kernel's rdma_cm when a program closes the channel's file:
	// the IDs still on it are destroyed (listeners stop, connections are
	// disconnected), and the close succeeds.
	c.cmMu.Lock()
	ch := c.cm.chans[in.Handle]
	if ch == nil {
		c.cmMu.Unlock()
		return nil, nil, unix.EINVAL
	}
	var on []*cmID
	for _, o := range c.cm.ids {
		if o.ch == in.Handle {
			on = append(on, o)
		}
	}
	c.cmMu.Unlock()
	for _, o := range on {
		if err := c.cmDestroyID(o); err != nil {
			c.s.log.Debug("an ID of a destroyed CM event channel", "client", c.id, "err", err)
		}
	}
	c.cmMu.Lock()
	defer c.cmMu.Unlock()
	if c.cm.chans[in.Handle] != ch {
		return nil, nil, unix.EINVAL
	}
	if ch.refs > 0 {
		// An ID migrated onto it meanwhile.
		return nil, nil, unix.EBUSY
	}
	unix.Close(ch.w)
	delete(c.cm.chans, in.Handle)
	c.release(one(ResFDs, 1))
	return nil, nil, nil
}

func (c *conn) cmCreateID(in *ctl.CMCreateID, _ *request) ([]byte, []int, error) {
	ps := cm.PortSpace(in.PS)
	switch ps {
	case cm.PortSpaceTCP, cm.PortSpaceUDP, cm.PortSpaceIB:
	default:
		return nil, nil, unix.EPROTONOSUPPORT
	}
	ch := c.cm.chans[in.Channel]
	if ch == nil {
		return nil, nil, unix.EINVAL
	}
	h, err := c.alloc(len(c.cm.ids), c.s.Limits().CMIDs, "CM IDs")
	if err != nil {
		return nil, nil, err
	}
	if err := c.charge(cmIDCost); err != nil {
		return nil, nil, err
	}
	id, err := c.s.cm.CreateID(c.cm.ch, ps, nil)
	if err != nil {
		c.release(cmIDCost)
		return nil, nil, cmErrno(err)
	}
	c.cmAdd(id, h, in.Channel)
	out := ctl.Handle{Handle: h}
	return ctl.Bytes(&out), nil, nil
}

// cmIDCost is what a CM ID is charged: a nominal size of its state in
// the daemon, against the queue memory budget.
var cmIDCost = one(ResQueueBytes, 2048)

// cmAdd records an ID of the connection, charged (c.cmMu held).
func (c *conn) cmAdd(id *rdmacm.ID, h, ch uint32) *cmID {
	o := &cmID{id: id, handle: h, ch: ch}
	c.cm.ids[h] = o
	c.cm.byID[id] = o
	c.cm.chans[ch].refs++
	return o
}

// cmDestroyID destroys an ID and forgets it; its queued events are dropped
// by the forwarder, which no longer finds it.
func (c *conn) cmDestroyID(o *cmID) error {
	err := o.id.Destroy()
	c.cmMu.Lock()
	defer c.cmMu.Unlock()
	c.cmForget(o)
	return cmErrno(err)
}

// cmForget removes an ID from the tables (c.cmMu held).
func (c *conn) cmForget(o *cmID) {
	if c.cm.ids[o.handle] != o {
		return
	}
	delete(c.cm.ids, o.handle)
	delete(c.cm.byID, o.id)
	c.release(cmIDCost)
	if ch := c.cm.chans[o.ch]; ch != nil {
		ch.refs--
	}
}

// cmMigrate moves an ID to channel to (c.cmMu held).
func (c *conn) cmMigrate(o *cmID, to uint32) error {
	nch := c.cm.chans[to]
	if nch == nil || c.cm.ids[o.handle] != o {
		return unix.EINVAL
	}
	if old := c.cm.chans[o.ch]; old != nil {
		old.refs--
	}
	nch.refs++
	o.ch = to
	return nil
}

// addrPort returns a protocol address as a netip.AddrPort (invalid for
// family 0).
func addrPort(a ctl.CMAddr) (netip.AddrPort, error) {
	switch a.Family {
	case 0:
		return netip.AddrPort{}, nil
	case unix.AF_INET:
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(a.Addr[:4])), a.Port), nil
	case unix.AF_INET6:
		return netip.AddrPortFrom(netip.AddrFrom16(a.Addr).Unmap(), a.Port), nil
	}
	return netip.AddrPort{}, unix.EAFNOSUPPORT
}

// cmAddrOf returns a as the protocol's address (family 0 when invalid).
func cmAddrOf(a netip.AddrPort) ctl.CMAddr {
	var out ctl.CMAddr
	ip := a.Addr()
	switch {
	case !ip.IsValid():
	case ip.Is4():
		out.Family = unix.AF_INET
		b := ip.As4()
		copy(out.Addr[:], b[:])
	default:
		out.Family = unix.AF_INET6
		out.Addr = ip.As16()
	}
	out.Port = a.Port()
	return out
}

func (c *conn) cmAddr(in *ctl.CMAddrReq, o *cmID, r *request) ([]byte, []int, error) {
	src, err := addrPort(in.Src)
	if err != nil {
		return nil, nil, err
	}
	// A bind, and a resolve that binds an unbound ID to the source it
	// names, take a port below 1024 only with CAP_NET_BIND_SERVICE
	// (rdma_bind_addr's cma_get_port; a listen on an unbound ID takes an
	// ephemeral port).
	if src.Addr().IsValid() && !o.id.LocalAddr().IsValid() {
		if err := c.mayBindPort(src.Port()); err != nil {
			return nil, nil, err
		}
	}
	if r.op == ctl.OpCMBind {
		if !src.Addr().IsValid() {
			return nil, nil, unix.EINVAL
		}
		if err := o.id.BindAddr(src); err != nil {
			return nil, nil, cmErrno(err)
		}
		info := c.cmInfo(o)
		return ctl.Bytes(&info), nil, nil
	}
	dst, err := addrPort(in.Dst)
	if err != nil {
		return nil, nil, err
	}
	if !dst.Addr().IsValid() {
		return nil, nil, unix.EINVAL
	}
	return nil, nil, cmErrno(o.id.ResolveAddr(src, dst, time.Duration(in.TimeoutMS)*time.Millisecond))
}

// param returns the protocol's connection parameters as the CM's.
func param(in *ctl.CMConn) (*rdmacm.ConnParam, error) {
	if int(in.PrivateDataLen) > len(in.PrivateData) {
		return nil, unix.EINVAL
	}
	return &rdmacm.ConnParam{
		PrivateData:        append([]byte(nil), in.PrivateData[:in.PrivateDataLen]...),
		ResponderResources: in.ResponderResources, InitiatorDepth: in.InitiatorDepth,
		FlowControl: in.FlowControl != 0, RetryCount: in.RetryCount, RNRRetryCount: in.RNRRetryCount,
		SRQ: in.SRQ != 0, QPNum: bth.QPN(in.QPNum & 0xffffff),
	}, nil
}

func (c *conn) cmConn(in *ctl.CMConn, o *cmID) error {
	p, err := param(in)
	if err != nil {
		return err
	}
	return cmErrno(o.id.Connect(p))
}

func (c *conn) cmAccept(in *ctl.CMConn, o *cmID) error {
	p, err := param(in)
	if err != nil {
		return err
	}
	c.cmMu.Lock()
	o.swallow = o.last == rdmacm.EventConnectResponse
	c.cmMu.Unlock()
	if err = o.id.Accept(p); err != nil {
		c.cmMu.Lock()
		o.swallow = false
		c.cmMu.Unlock()
	}
	return cmErrno(err)
}

// cmMcast joins or leaves a multicast group. The join's event carries
// the client's UID for it; the client attaches its QP to the group itself,
// as librdmacm does.
func (c *conn) cmMcast(in *ctl.CMMcast, o *cmID, r *request) ([]byte, []int, error) {
	return nil, nil, c.cmJoinLeave(r.op, in, o)
}

func (c *conn) cmJoinLeave(op ctl.Op, in *ctl.CMMcast, o *cmID) error {
	g, err := addrPort(in.Addr)
	if err != nil {
		return err
	}
	if op == ctl.OpCMLeaveMcast {
		return cmErrno(o.id.LeaveMulticast(g.Addr()))
	}
	if in.JoinFlags != ctl.JoinFullMember && in.JoinFlags != ctl.JoinSendOnlyFullMember {
		return unix.EINVAL
	}
	return cmErrno(o.id.JoinMulticast(g.Addr(), in.JoinFlags == ctl.JoinSendOnlyFullMember, in.UID))
}

func (c *conn) cmSetOption(in *ctl.CMOption, o *cmID, _ *request) ([]byte, []int, error) {
	const optionID, tos, reuseAddr, afOnly, ackTimeout = 0, 0, 1, 2, 3
	if in.Level != optionID {
		return nil, nil, unix.ENOSYS // RDMA_OPTION_IB_PATH: paths come from the CM
	}
	switch in.OptName {
	case tos:
		if in.Value > 0xff {
			return nil, nil, unix.EINVAL
		}
		o.id.SetTOS(uint8(in.Value))
		return nil, nil, nil
	case ackTimeout:
		if in.Value > 0xff {
			return nil, nil, unix.EINVAL
		}
		return nil, nil, cmErrno(o.id.SetACKTimeout(uint8(in.Value)))
	case reuseAddr, afOnly:
		// Ports are the CM's to share out; IPv6 IDs hear only IPv6.
		return nil, nil, nil
	}
	return nil, nil, unix.ENOPROTOOPT
}

// cmInfo describes an ID as the client sees it.
func (c *conn) cmInfo(o *cmID) ctl.CMIDInfo {
	id := o.id
	info := ctl.CMIDInfo{Handle: o.handle, Src: cmAddrOf(id.LocalAddr()), Dst: cmAddrOf(id.PeerAddr()),
		PKey: 0xffff, HopLimit: 64}
	if dst := id.PeerAddr().Addr(); dst.IsValid() {
		info.DGID = bth.GIDFromAddr(dst)
	}
	dev := id.Device()
	if dev == nil {
		return info
	}
	for _, sd := range c.s.devices() {
		if sd.dev.Device() == dev {
			ctl.SetName(info.Device[:], sd.name)
			break
		}
	}
	info.PortNum = 1
	ix := id.SGIDIndex()
	info.SGIDIndex = uint8(ix)
	if g, err := dev.QueryGID(ix); err == nil {
		info.SGID = g
	}
	if mtu := id.PathMTU(); mtu != 0 {
		info.PathMTU = uint32(mtu)
		info.NumPaths = 1
	}
	return info
}

// cmForward sends the events of the connection's IDs to their channels'
// sockets until the channel is destroyed.
func (c *conn) cmForward(ch *rdmacm.EventChannel, done chan struct{}) {
	defer close(done)
	defer c.contain("CM events")
	for {
		e, err := ch.Get(c.s.ctx)
		if err != nil {
			return
		}
		c.cmDeliver(e)
	}
}

// cmDeliver turns one event into a datagram on its ID's channel socket.
// A CONNECT_REQUEST's new ID is given a handle on the listener's channel
// (or rejected when the client is at its limit). An event the client's
// socket has no room for is dropped and logged: the client is not reading.
func (c *conn) cmDeliver(e *rdmacm.Event) {
	c.cmMu.Lock()
	defer c.cmMu.Unlock()
	if c.gone.Load() || c.cm.ch == nil {
		if e.Type == rdmacm.EventConnectRequest {
			go c.contained("CM", func() { e.ID.Destroy() })
		}
		return
	}
	var out ctl.CMEvent
	o := c.cm.byID[e.ID]
	if e.Type == rdmacm.EventConnectRequest {
		l := c.cm.byID[e.ListenID]
		h, err := c.alloc(len(c.cm.ids), c.s.Limits().CMIDs, "CM IDs")
		if err == nil && l != nil {
			err = c.charge(cmIDCost)
		}
		if l == nil || err != nil {
			go c.contained("CM", func() {
				e.ID.Reject(nil)
				e.ID.Destroy()
			})
			return
		}
		o = c.cmAdd(e.ID, h, l.ch)
		out.ListenID = l.handle
	}
	if o == nil {
		return // an ID destroyed meanwhile
	}
	if e.Type == rdmacm.EventEstablished && o.swallow {
		o.swallow = false
		return
	}
	o.last = e.Type
	ch := c.cm.chans[o.ch]
	if ch == nil {
		return
	}
	out.Event = uint32(e.Type)
	out.Status = int32(e.Status)
	if uid, ok := e.Mcast.Context.(uint32); ok {
		out.McastUID = uid
	}
	out.Info = c.cmInfo(o) // c.cmMu before the CM's lock, never the other way
	p := &e.Param
	n := copy(out.Conn.PrivateData[:], p.PrivateData)
	out.Conn.ID = o.handle
	out.Conn.PrivateDataLen = uint8(n)
	out.Conn.ResponderResources, out.Conn.InitiatorDepth = p.ResponderResources, p.InitiatorDepth
	out.Conn.RetryCount, out.Conn.RNRRetryCount = p.RetryCount, p.RNRRetryCount
	if p.FlowControl {
		out.Conn.FlowControl = 1
	}
	if p.SRQ {
		out.Conn.SRQ = 1
	}
	out.Conn.QPNum = uint32(p.QPNum)
	if o.id.PortSpace() == cm.PortSpaceUDP {
		out.Conn.QPNum, out.Conn.QKey = uint32(e.UD.QPNum), e.UD.QKey
		ah := verbs.AHAttr{DGID: e.UD.AH.DGID, SGIDIndex: e.UD.AH.SGIDIndex, HopLimit: e.UD.AH.HopLimit, DMAC: e.UD.AH.DMAC}
		out.AHAttr = ctl.AHOf(&ah)
	}
	if _, err := unix.Write(ch.w, ctl.Bytes(&out)); err != nil {
		c.s.log.Warn("a CM event was dropped: the client's event socket is full or closed",
			"client", c.id, "event", e.Type.String(), "err", err)
	}
}

// cmCleanup destroys the connection's IDs (disconnecting, rejecting,
// unlistening as each needs) and closes its channels. c.cmMu is not held:
// destroying an ID may wait for the CM.
func (c *conn) cmCleanup() {
	c.cmMu.Lock()
	if c.cm.ch == nil {
		c.cmMu.Unlock()
		return
	}
	ids := make([]*cmID, 0, len(c.cm.ids))
	for _, o := range c.cm.ids {
		ids = append(ids, o)
	}
	c.cmMu.Unlock()
	for _, o := range ids {
		if err := o.id.Destroy(); err != nil {
			c.s.log.Warn("destroying a departed client's CM ID failed", "client", c.id, "err", err)
		}
	}
	c.cmMu.Lock()
	ch := c.cm.ch
	for _, o := range ids {
		c.cmForget(o)
	}
	for h, cc := range c.cm.chans {
		unix.Close(cc.w)
		delete(c.cm.chans, h)
		c.release(one(ResFDs, 1))
	}
	done := c.cm.fwDone
	c.cmMu.Unlock()
	ch.Destroy()
	<-done
}
