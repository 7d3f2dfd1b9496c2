package rdmacm

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/cm"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/verbs"
)

type idState uint8

const (
	stateIdle idState = iota
	stateAddrBound
	stateAddrQuery
	stateAddrResolved
	stateRouteResolved
	stateListen
	stateConnect         // active: REQ (or SIDR_REQ) sent
	stateConnectResponse // active: REP held, the application answers
	stateConnectRequest  // passive: REQ received, the application decides
	stateAccepted        // passive: REP sent, waiting for the RTU
	stateEstablished
	stateDisconnected
	stateDestroyed
)

var stateNames = [...]string{"IDLE", "ADDR_BOUND", "ADDR_QUERY", "ADDR_RESOLVED", "ROUTE_RESOLVED",
	"LISTEN", "CONNECT", "CONNECT_RESPONSE", "CONNECT_REQUEST", "ACCEPTED", "ESTABLISHED",
	"DISCONNECTED", "DESTROYED"}

func (s idState) String() string { return stateNames[s] }

// ID is struct rdma_cm_id: one communication endpoint, created on an
// event channel, which gets an address (BindAddr or ResolveAddr), then
// either listens for connection requests or resolves a route and
// connects. Its methods may be called from any goroutine.
type ID struct {
	c   *CM
	ch  *EventChannel
	ps  cm.PortSpace
	ctx any

	// Under CM.mu.
	state    idState
	agent    *agent
	src      netip.AddrPort
	dst      netip.AddrPort
	bound    *portKey
	sgidIx   int
	ah       verbs.AHAttr
	mtu      verbs.MTU
	backlog  int
	pending  int // listener: CONNECT_REQUESTs not yet accepted or rejected
	listener *ID // passive: the ID that listened
	commID   uint32
	peer     cm.Addr
	qp       *roce.QP
	ownCQs   []*roce.CQ
	qpNum    bth.QPN // the QP the CM names (ours, or ConnParam.QPNum)
	psn      bth.PSN // our starting PSN
	// What the connection agreed: the peer's QP and PSN, the READ/atomic
	// depths each way, the retries and the ACK timeout.
	remoteQPN  bth.QPN
	remotePSN  bth.PSN
	respRes    uint8
	initDepth  uint8
	retry      uint8
	rnr        uint8
	ackTimeout uint8
	remoteQKey uint32
	req        *cm.REQ
	tos        uint8     // SetTOS
	mcast      []*mcJoin // JoinMulticast's joins, oldest first
	ackSet     bool      // SetACKTimeout was called
	ackOpt     uint8
}

// SetTOS sets the type of service (rdma_set_option RDMA_OPTION_ID_TOS):
// the traffic class of the route ResolveRoute builds and of the REQ's
// path. Call it before ResolveRoute.
func (id *ID) SetTOS(tos uint8) {
	id.c.mu.Lock()
	defer id.c.mu.Unlock()
	id.tos = tos
}

// SetACKTimeout sets the QP's local ACK timeout exponent (rdma_set_option
// RDMA_OPTION_ID_ACK_TIMEOUT, 4.096 µs × 2^t) in place of the one derived
// from the path's packet lifetime: the REQ carries it and the QP's RTS
// attributes use it. Values above 31 are refused.
func (id *ID) SetACKTimeout(t uint8) error {
	if t > 31 {
		return fmt.Errorf("rdmacm: ACK timeout %d is above 31: %w", t, ErrInvalid)
	}
	id.c.mu.Lock()
	defer id.c.mu.Unlock()
	id.ackSet, id.ackOpt = true, t
	if id.state >= stateRouteResolved {
		id.ackTimeout = t
	}
	return nil
}

// Context returns the application's value given to CreateID.
func (id *ID) Context() any { return id.ctx }

// Channel returns the event channel the ID's events go to.
func (id *ID) Channel() *EventChannel { return id.ch }

// PortSpace returns the ID's port space.
func (id *ID) PortSpace() cm.PortSpace { return id.ps }

// Device returns the device the ID is bound to, nil before it has one.
func (id *ID) Device() *roce.Device {
	if a := id.boundAgent(); a != nil {
		return a.dev
	}
	return nil
}

// PD returns the protection domain the CM uses on the ID's device (the
// one CreateQP takes when given none), nil before the ID has a device.
func (id *ID) PD() *roce.PD {
	if a := id.boundAgent(); a != nil {
		return a.pd
	}
	return nil
}

// boundAgent returns the agent of the ID's device, nil before it has one.
func (id *ID) boundAgent() *agent { return locked(id, func() *agent { return id.agent }) }

// locked returns get's result, read under the CM's lock.
func locked[T any](id *ID, get func() T) T {
	id.c.mu.Lock()
	defer id.c.mu.Unlock()
	return get()
}

// QP returns the ID's QP, nil when it has none.
func (id *ID) QP() *roce.QP { return locked(id, func() *roce.QP { return id.qp }) }

// State returns the ID's state, named as librdmacm's and the kernel's
// rdma_cm name theirs ("ADDR_BOUND", "LISTEN", "ESTABLISHED", ...).
func (id *ID) State() string { return locked(id, func() string { return id.state.String() }) }

// QPNum returns the QP the ID names in its connection: its own, or the
// one the application gave to Connect or Accept; 0 before either.
func (id *ID) QPNum() bth.QPN { return locked(id, func() bth.QPN { return id.qpNum }) }

// LocalAddr returns the ID's source address and port (rdma_get_local_addr).
func (id *ID) LocalAddr() netip.AddrPort { return locked(id, func() netip.AddrPort { return id.src }) }

// PeerAddr returns the destination address and port (rdma_get_peer_addr).
func (id *ID) PeerAddr() netip.AddrPort { return locked(id, func() netip.AddrPort { return id.dst }) }

// SGIDIndex returns the index of the source GID on the ID's device.
func (id *ID) SGIDIndex() int { return locked(id, func() int { return id.sgidIx }) }

// PathMTU returns the path MTU of the resolved route or the connection.
func (id *ID) PathMTU() verbs.MTU { return locked(id, func() verbs.MTU { return id.mtu }) }

func (id *ID) post(e *Event) { id.ch.post(e) }

func (id *ID) wrong(call string) error {
	return fmt.Errorf("rdmacm: %s on an ID in state %v: %w", call, id.state, ErrState)
}

// BindAddr binds the ID to a local address and port (rdma_bind_addr). An
// unspecified address (0.0.0.0, ::), or a loopback one no device holds,
// binds no device: a listener then hears every device; port 0 takes a
// free port.
func (id *ID) BindAddr(a netip.AddrPort) error {
	c := id.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if id.state != stateIdle {
		return id.wrong("bind")
	}
	return id.bindLocked(a)
}

func (id *ID) bindLocked(a netip.AddrPort) error {
	addr := a.Addr().Unmap()
	if !addr.IsValid() {
		return fmt.Errorf("rdmacm: bind to an invalid address: %w", ErrInvalid)
	}
	var ag *agent
	ix := 0
	if !addr.IsUnspecified() {
		var ok bool
		// A loopback address no device holds binds as a wildcard
		// (anyAddr), with no device. libfabric's verbs provider, which
		// binds "localhost" first when given no address, relies on it:
		// it takes the devices' own addresses only for an ID without
		// a device (vrb_fill_addr); with one it advertised 127.0.0.1
		// to its peers. Resolving from such an ID picks the device as
		// cma_resolve_loopback does.
		if ag, ix, ok = id.c.agentFor(addr); !ok && id.c.anyAddr(addr) {
			ok = len(id.c.agents) > 0
		}
		if !ok {
			return fmt.Errorf("rdmacm: bind to %v: %w", addr, ErrNoDevice)
		}
	}
	port, err := id.c.bind(id, addr, a.Port())
	if err != nil {
		return err
	}
	id.bound = &portKey{id.ps, port, addr}
	id.src = netip.AddrPortFrom(addr, port)
	id.agent, id.sgidIx = ag, ix
	id.state = stateAddrBound
	return nil
}

// ResolveAddr finds the device and source address that reach dst
// (rdma_resolve_addr): src, when valid, binds the ID first (its port may
// be 0); otherwise the ID is bound to the source the device's route
// picks. The neighbour is resolved in the background, at most timeout;
// ADDR_RESOLVED or ADDR_ERROR follows.
func (id *ID) ResolveAddr(src, dst netip.AddrPort, timeout time.Duration) error {
	c := id.c
	daddr := dst.Addr().Unmap()
	if !daddr.IsValid() {
		return fmt.Errorf("rdmacm: resolve the invalid address %v: %w", dst, ErrInvalid)
	}
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	c.mu.Lock()
	if id.state == stateIdle && src.Addr().IsValid() {
		if err := id.bindLocked(src); err != nil {
			c.mu.Unlock()
			return err
		}
	}
	if id.state != stateIdle && id.state != stateAddrBound {
		c.mu.Unlock()
		return id.wrong("resolve address")
	}
	id.state = stateAddrQuery
	id.dst = netip.AddrPortFrom(daddr, dst.Port())
	fixed := id.agent
	agents := c.agents
	sgid := id.sgidIx
	if _, _, local := c.agentFor(daddr); !local && c.anyAddr(daddr) {
		// As the kernel's cma_resolve_loopback: a loopback or wildcard
		// destination is the ID's own device (the first one when the ID
		// has none), its source the loopback address of the family.
		if fixed == nil {
			fixed, sgid, _ = c.loopbackAgent()
		}
		if fixed == nil {
			id.state = stateIdle
			if id.bound != nil {
				id.state = stateAddrBound
			}
			c.mu.Unlock()
			return fmt.Errorf("rdmacm: resolve %v: %w", daddr, ErrNoDevice)
		}
		c.mu.Unlock()
		go id.resolveLoopback(fixed, sgid, daddr)
		return nil
	}
	c.mu.Unlock()
	go id.resolve(fixed, sgid, agents, daddr, timeout)
	return nil
}

// loopbackAgent is the device an ID resolved to a loopback address
// uses, as the kernel's cma_bind_loopback picks it: the first
// device, GID index 0 (CM.mu held). ok false when the CM has no device.
func (c *CM) loopbackAgent() (*agent, int, bool) {
	if len(c.agents) == 0 {
		return nil, 0, false
	}
	return c.agents[0], 0, true
}

// resolveLoopback completes ResolveAddr to a loopback or wildcard
// destination: the path leads to the device's own source GID.
func (id *ID) resolveLoopback(ag *agent, six int, daddr netip.Addr) {
	c := id.c
	sg, err := ag.dev.QueryGID(six)
	c.mu.Lock()
	if id.state != stateAddrQuery {
		c.mu.Unlock()
		return
	}
	fail := func() {
		id.state = stateIdle
		if id.bound != nil {
			id.state = stateAddrBound
		}
		c.mu.Unlock()
		id.post(&Event{Type: EventAddrError, ID: id, Status: StatusAddrNotAvail})
	}
	if err != nil {
		fail()
		return
	}
	lo := netip.IPv6Loopback()
	if daddr.Is4() {
		lo = netip.AddrFrom4([4]byte{127, 0, 0, 1})
	}
	if daddr.IsUnspecified() {
		id.dst = netip.AddrPortFrom(lo, id.dst.Port())
	}
	if id.bound == nil || id.src.Addr().IsUnspecified() {
		port := uint16(0)
		if id.bound != nil {
			port = id.bound.port
			delete(c.ports, *id.bound)
		}
		p, e := c.bind(id, lo, port)
		if e != nil {
			fail()
			return
		}
		id.bound = &portKey{id.ps, p, lo}
		id.src = netip.AddrPortFrom(lo, p)
	}
	id.agent, id.sgidIx = ag, six
	id.ah = verbs.AHAttr{DGID: sg, SGIDIndex: uint8(six), HopLimit: 64, PortNum: 1}
	id.state = stateAddrResolved
	c.mu.Unlock()
	id.post(&Event{Type: EventAddrResolved, ID: id})
}

// resolve finds the route and neighbour to daddr and posts the outcome.
func (id *ID) resolve(fixed *agent, sgid int, agents []*agent, daddr netip.Addr, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	dgid := bth.GIDFromAddr(daddr)
	var (
		ag   *agent
		attr verbs.AHAttr
		err  error
	)
	try := func(a *agent, ix int) bool {
		attr, err = a.port.AHAttr(ctx, dgid, ix)
		if err == nil {
			ag = a
		}
		return err == nil
	}
	if fixed != nil {
		try(fixed, sgid)
	} else {
		for _, a := range agents {
			ix, e := a.port.SourceGIDIndex(dgid)
			if e != nil {
				err = e
				continue
			}
			if try(a, ix) {
				break
			}
		}
		if ag == nil && err == nil {
			err = fmt.Errorf("rdmacm: no device reaches %v", daddr)
		}
	}
	c := id.c
	c.mu.Lock()
	if id.state != stateAddrQuery {
		c.mu.Unlock()
		return
	}
	if ag == nil {
		id.state = stateAddrBound
		if id.bound == nil {
			id.state = stateIdle
		}
		c.mu.Unlock()
		st := StatusHostUnreach
		if ctx.Err() != nil {
			st = StatusTimedOut
		}
		id.post(&Event{Type: EventAddrError, ID: id, Status: st})
		return
	}
	id.agent, id.sgidIx, id.ah = ag, int(attr.SGIDIndex), attr
	sg, _ := ag.dev.QueryGID(id.sgidIx)
	if id.bound == nil || c.anyAddr(id.src.Addr()) {
		port := uint16(0)
		if id.bound != nil {
			port = id.bound.port
			delete(c.ports, *id.bound)
		}
		p, e := c.bind(id, sg.Addr(), port)
		if e != nil {
			id.state = stateIdle
			c.mu.Unlock()
			id.post(&Event{Type: EventAddrError, ID: id, Status: StatusAddrNotAvail})
			return
		}
		id.bound = &portKey{id.ps, p, sg.Addr()}
		id.src = netip.AddrPortFrom(sg.Addr(), p)
	}
	id.state = stateAddrResolved
	c.mu.Unlock()
	id.post(&Event{Type: EventAddrResolved, ID: id})
}

// ResolveRoute builds the path to the resolved address
// (rdma_resolve_route): the path MTU is the device's active MTU; on
// RoCE there is nothing to ask. ROUTE_RESOLVED follows.
func (id *ID) ResolveRoute(timeout time.Duration) error {
	c := id.c
	c.mu.Lock()
	if id.state != stateAddrResolved {
		c.mu.Unlock()
		return id.wrong("resolve route")
	}
	id.mtu = id.agent.dev.QueryPort().ActiveMTU
	id.ackTimeout = ackTimeout(packetLifetime)
	if id.ackSet {
		id.ackTimeout = id.ackOpt
	}
	id.ah.FlowLabel = flowLabel(id.src.Port(), id.dst.Port())
	id.ah.TrafficClass = id.tos
	id.state = stateRouteResolved
	c.mu.Unlock()
	id.post(&Event{Type: EventRouteResolved, ID: id})
	return nil
}

// flowLabel is the flow label rdma_cm gives a RoCEv2 path between two
// ports (when the IPv6 source has none of its own): 31 × the source port
// plus the destination port, in 20 bits.
func flowLabel(sport, dport uint16) uint32 {
	return (uint32(sport)*31 + uint32(dport)) & 0xfffff
}

// ackTimeout is Linux ib_cm's local ACK timeout for a path: twice the
// packet lifetime, raised to the CA's ACK delay.
func ackTimeout(pktLife uint8) uint8 {
	t := pktLife + 1
	if t >= caAckDelay {
		if caAckDelay >= t-1 {
			t++
		}
	} else {
		t = caAckDelay
		if pktLife+1 >= caAckDelay-1 {
			t++
		}
	}
	return min(t, 31)
}

// Listen makes the bound ID hear connection requests for its port
// (rdma_listen). As with Linux's rdma_cm on RoCE, backlog (recorded, 0:
// 1024) does not refuse requests; the device's bound on half-open
// connections (cm.Config.MaxHalfOpen) does.
func (id *ID) Listen(backlog int) error {
	c := id.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if id.state == stateIdle {
		if err := id.bindLocked(netip.AddrPortFrom(netip.IPv4Unspecified(), 0)); err != nil {
			return err
		}
	}
	if id.state != stateAddrBound {
		return id.wrong("listen")
	}
	if backlog <= 0 {
		backlog = 1024
	}
	svc := cm.ServiceID(id.ps, id.src.Port())
	if len(c.listen[svc]) == 0 {
		for _, a := range c.agents {
			a.mgr.Listen(svc)
		}
	}
	c.listen[svc] = append(c.listen[svc], id)
	id.backlog = backlog
	id.state = stateListen
	return nil
}

// CreateQP creates the ID's QP on its device (rdma_create_qp) and moves
// it to INIT (RC, UC) or through INIT, RTR and RTS (UD, with the port
// space's Q_Key), as librdmacm does. pd nil takes the CM's PD of the
// device; CQs left nil in attr are created for the QP (and destroyed with
// it by DestroyQP).
func (id *ID) CreateQP(pd *roce.PD, attr *roce.QPInitAttr) (*roce.QP, error) {
	c := id.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if id.agent == nil {
		return nil, id.wrong("create QP")
	}
	if id.qp != nil {
		return nil, ErrQPExists
	}
	if attr == nil {
		return nil, fmt.Errorf("rdmacm: create QP without attributes: %w", ErrInvalid)
	}
	if pd == nil {
		pd = id.agent.pd
	}
	if pd.Device() != id.agent.dev {
		return nil, fmt.Errorf("rdmacm: the PD is of %s, the ID of %s: %w", pd.Device().Name(), id.agent.dev.Name(), ErrInvalid)
	}
	a := *attr
	var own []*roce.CQ
	if a.SendCQ == nil {
		cq, err := id.agent.dev.CreateCQ(int(max(a.Cap.MaxSendWR, 1)), nil)
		if err != nil {
			return nil, err
		}
		a.SendCQ = cq
		own = append(own, cq)
	}
	if a.RecvCQ == nil {
		cq, err := id.agent.dev.CreateCQ(int(max(a.Cap.MaxRecvWR, 1)), nil)
		if err != nil {
			destroyCQs(own)
			return nil, err
		}
		a.RecvCQ = cq
		own = append(own, cq)
	}
	q, err := pd.CreateQP(&a)
	if err != nil {
		destroyCQs(own)
		return nil, err
	}
	states := []verbs.QPState{verbs.QPStateInit}
	if a.Type == verbs.QPTypeUD {
		states = append(states, verbs.QPStateRTR, verbs.QPStateRTS)
	}
	for _, s := range states {
		qa, mask, err := id.initQPAttrLocked(s, a.Type)
		if err == nil {
			err = q.Modify(&qa, mask)
		}
		if err != nil {
			q.Destroy()
			destroyCQs(own)
			return nil, fmt.Errorf("rdmacm: moving the new QP to %v: %w", s, err)
		}
	}
	id.qp, id.ownCQs, id.qpNum = q, own, q.QPN()
	return q, nil
}

func destroyCQs(cqs []*roce.CQ) {
	for _, cq := range cqs {
		cq.Destroy()
	}
}

// DestroyQP destroys the ID's QP and the CQs CreateQP made for it
// (rdma_destroy_qp), detaching it first from the groups JoinMulticast
// attached it to.
func (id *ID) DestroyQP() error {
	c := id.c
	c.mu.Lock()
	q, own := id.qp, id.ownCQs
	for _, j := range id.mcast {
		id.detachLocked(j)
	}
	id.qp, id.ownCQs = nil, nil
	c.mu.Unlock()
	if q == nil {
		return ErrNoQP
	}
	err := q.Destroy()
	destroyCQs(own)
	return err
}

// InitQPAttr returns the attributes and mask that move a QP to state as
// the connection requires (rdma_init_qp_attr): INIT (P_Key index, port,
// access flags, or the Q_Key for UD), RTR (the peer's address, QPN and
// PSN, path MTU, responder resources) or RTS (our PSN, ACK timeout,
// retries, initiator depth). For a QP the application made itself.
func (id *ID) InitQPAttr(state verbs.QPState) (verbs.QPAttr, verbs.QPAttrMask, error) {
	c := id.c
	if state == verbs.QPStateRTR {
		// A passive side may move its QP before Accept (perftest does):
		// its address handle needs the peer's MAC already.
		c.mu.Lock()
		a, need := id.agent, id.state == stateConnectRequest && id.ah.DMAC == [6]byte{}
		peer, six := id.peer.GID, id.sgidIx
		c.mu.Unlock()
		if need && a != nil {
			mac, err := a.peerMAC(peer, six)
			if err != nil {
				return verbs.QPAttr{}, 0, fmt.Errorf("rdmacm: RTR attributes: the peer %v cannot be reached: %w", peer.Addr(), err)
			}
			c.mu.Lock()
			if id.ah.DMAC == [6]byte{} {
				id.ah.DMAC = mac
			}
			c.mu.Unlock()
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	t := verbs.QPTypeRC
	if id.ps == cm.PortSpaceUDP {
		t = verbs.QPTypeUD
	}
	return id.initQPAttrLocked(state, t)
}

func (id *ID) initQPAttrLocked(state verbs.QPState, t verbs.QPType) (verbs.QPAttr, verbs.QPAttrMask, error) {
	var a verbs.QPAttr
	a.State = state
	switch state {
	case verbs.QPStateInit:
		if id.agent == nil {
			return a, 0, id.wrong("init QP attributes")
		}
		a.PKeyIndex, a.PortNum = 0, 1
		mask := verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort
		if t == verbs.QPTypeUD {
			a.QKey = udpQKey
			return a, mask | verbs.AttrQKey, nil
		}
		if id.commID != 0 {
			// ib_cm's INIT attributes once the connection is known.
			a.AccessFlags = mr.AccessRemoteWrite
			if id.respRes > 0 {
				a.AccessFlags |= mr.AccessRemoteRead | mr.AccessRemoteAtomic
			}
		}
		return a, mask | verbs.AttrAccessFlags, nil
	case verbs.QPStateRTR:
		if t == verbs.QPTypeUD {
			return a, verbs.AttrState, nil
		}
		if id.commID == 0 || (id.state != stateConnectRequest && id.state != stateConnectResponse && id.state != stateAccepted && id.state != stateEstablished) {
			return a, 0, id.wrong("RTR attributes")
		}
		// Linux's rdma_cm on RoCE (and so rdma_rxe) expects to receive
		// the starting PSN it announced itself (its RTR takes its own
		// REQ's or REP's PSN) and sends from the one its peer announced:
		// the same here, or neither side accepts the other's first packet.
		a.AH, a.PathMTU, a.DestQPN, a.RQPSN = id.ah, id.mtu, id.remoteQPN, id.psn
		a.MaxDestRdAtomic, a.MinRNRTimer = id.respRes, 0
		return a, verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN |
			verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer, nil
	case verbs.QPStateRTS:
		if t == verbs.QPTypeUD {
			a.SQPSN = id.psn
			return a, verbs.AttrState | verbs.AttrSQPSN, nil
		}
		if id.commID == 0 || (id.state != stateConnectRequest && id.state != stateConnectResponse && id.state != stateAccepted && id.state != stateEstablished) {
			return a, 0, id.wrong("RTS attributes")
		}
		a.SQPSN, a.Timeout, a.RetryCnt, a.RNRRetry, a.MaxRdAtomic = id.remotePSN, id.ackTimeout, id.retry, id.rnr, id.initDepth
		return a, verbs.AttrState | verbs.AttrSQPSN | verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry |
			verbs.AttrMaxQPRdAtomic, nil
	case verbs.QPStateErr:
		return a, verbs.AttrState, nil
	}
	return a, 0, fmt.Errorf("rdmacm: no CM attributes for QP state %v: %w", state, ErrInvalid)
}

// modifyQP moves the ID's QP to each state in turn (CM.mu held).
func (id *ID) modifyQP(states ...verbs.QPState) error {
	if id.qp == nil {
		return nil
	}
	for _, s := range states {
		a, mask, err := id.initQPAttrLocked(s, id.qp.Type())
		if err == nil {
			err = id.qp.Modify(&a, mask)
		}
		if err != nil {
			return fmt.Errorf("rdmacm: moving QP %v to %v: %w", id.qp.QPN(), s, err)
		}
	}
	return nil
}

// toErr moves the ID's QP to the error state, as librdmacm does on a
// disconnect (CM.mu held).
func (id *ID) toErr() {
	if id.qp != nil {
		id.qp.Modify(&verbs.QPAttr{State: verbs.QPStateErr}, verbs.AttrState)
	}
}

func clamp3(v uint8) uint8 { return min(v, 7) }

// Connect sends the connection request (rdma_connect): a REQ with the
// route's path, the QP (the ID's, or p.QPNum), a random starting PSN and
// p's depths, retries and private data after the IP CM header; in the
// UDP port space a SIDR_REQ. ESTABLISHED (after the QP is moved to RTR
// and RTS and the RTU sent), CONNECT_RESPONSE (no QP), REJECTED or
// UNREACHABLE follows.
func (id *ID) Connect(p *ConnParam) error {
	if p == nil {
		p = &ConnParam{}
	}
	c := id.c
	c.mu.Lock()
	if id.state != stateRouteResolved {
		c.mu.Unlock()
		return id.wrong("connect")
	}
	a := id.agent
	lim := MaxREQPrivate
	if id.ps == cm.PortSpaceUDP {
		lim = MaxSIDRPrivate
	}
	if len(p.PrivateData) > lim {
		c.mu.Unlock()
		return fmt.Errorf("rdmacm: %d bytes of private data, a request carries %d: %w", len(p.PrivateData), lim, ErrPrivateLen)
	}
	hdr := cm.IPHeader{SrcPort: id.src.Port(), Src: id.src.Addr(), Dst: id.dst.Addr()}
	sgid, _ := a.dev.QueryGID(id.sgidIx)
	to := cm.Addr{GID: id.ah.DGID, QPN: cm.GSIQPN}
	now := a.now()
	if id.ps == cm.PortSpaceUDP {
		pd, err := cm.IPPrivateData(hdr, p.PrivateData, cm.SIDRREQPrivateLen)
		if err != nil {
			c.mu.Unlock()
			return err
		}
		cid, err := a.mgr.SIDRRequest(now, to, cm.SIDRREQ{PKey: 0xffff, ServiceID: cm.ServiceID(id.ps, id.dst.Port()), PrivateData: pd}, c.respTO, maxCMRetries)
		if err != nil {
			c.mu.Unlock()
			return err
		}
		id.commID, id.peer, id.state = cid, to, stateConnect
		a.conns[cid] = id
		a.srcIx[to.GID] = id.sgidIx
		a.flushLocked()
		return nil
	}
	qpn := p.QPNum
	if id.qp != nil {
		qpn = id.qp.QPN()
	}
	pd, err := cm.IPPrivateData(hdr, p.PrivateData, cm.REQPrivateLen)
	if err != nil {
		c.mu.Unlock()
		return err
	}
	id.psn = bth.PSN(c.rng.Uint32() & 0xffffff)
	id.retry, id.rnr = clamp3(p.RetryCount), clamp3(p.RNRRetryCount)
	id.respRes, id.initDepth = p.ResponderResources, p.InitiatorDepth
	hop := id.ah.HopLimit
	if hop == 0 {
		hop = 64
	}
	lid := uint16(0)
	if hop > 1 {
		lid = 0xffff // ib_cm's permissive LIDs for a routed (RoCEv2) path
	}
	req := cm.REQ{
		ServiceID: cm.ServiceID(id.ps, id.dst.Port()), LocalCAGUID: a.guid, LocalQPN: qpn,
		ResponderResources: p.ResponderResources, InitiatorDepth: p.InitiatorDepth,
		RemoteCMResponseTimeout: c.respTO, Transport: cm.TransportRC, EndToEndFlowControl: p.FlowControl,
		StartingPSN: id.psn, RetryCount: id.retry, PKey: 0xffff, PathMTU: id.mtu,
		RNRRetryCount: id.rnr, MaxCMRetries: maxCMRetries, SRQ: p.SRQ,
		Primary: cm.Path{LocalLID: lid, RemoteLID: lid, LocalGID: sgid, RemoteGID: id.ah.DGID,
			FlowLabel: id.ah.FlowLabel, TrafficClass: id.ah.TrafficClass, HopLimit: hop,
			SubnetLocal: hop <= 1, LocalACKTimeout: id.ackTimeout},
		PrivateData: pd,
	}
	cid, err := a.mgr.Connect(now, to, req)
	if err != nil {
		c.mu.Unlock()
		return err
	}
	id.commID, id.peer, id.qpNum, id.state = cid, to, qpn, stateConnect
	a.conns[cid] = id
	a.srcIx[to.GID] = id.sgidIx
	a.flushLocked()
	return nil
}

// Accept accepts the connection request of a passive ID (rdma_accept):
// the QP, if the ID has one, is moved to RTR and RTS, then the REP goes
// out with p's private data; ESTABLISHED follows the RTU. In the UDP
// port space it sends the SIDR_REP with the QP and Q_Key. On an active ID
// at CONNECT_RESPONSE it sends the RTU. A nil p takes librdmacm's
// defaults: the depths the request offered, 7 retries.
func (id *ID) Accept(p *ConnParam) error {
	c := id.c
	c.mu.Lock()
	if p == nil {
		p = &ConnParam{RetryCount: 7, RNRRetryCount: 7}
		if id.req != nil {
			p.ResponderResources, p.InitiatorDepth = id.req.InitiatorDepth, id.req.ResponderResources
		}
	}
	a := id.agent
	switch id.state {
	case stateConnectResponse:
		if err := a.establish(id, ConnParam{}); err != nil {
			c.mu.Unlock()
			return err
		}
		a.flushLocked()
		return nil
	case stateConnectRequest:
	default:
		c.mu.Unlock()
		return id.wrong("accept")
	}
	if len(p.PrivateData) > MaxREPPrivate {
		c.mu.Unlock()
		return fmt.Errorf("rdmacm: %d bytes of private data, a REP carries %d: %w", len(p.PrivateData), MaxREPPrivate, ErrPrivateLen)
	}
	peer, six := id.peer.GID, id.sgidIx
	c.mu.Unlock()
	// The data QP needs the peer's MAC: QP1's address handle has it.
	mac, err := a.peerMAC(peer, six)
	c.mu.Lock()
	if id.state != stateConnectRequest {
		c.mu.Unlock()
		return id.wrong("accept")
	}
	if err != nil {
		c.mu.Unlock()
		return fmt.Errorf("rdmacm: accept: the peer %v cannot be reached: %w", peer.Addr(), err)
	}
	id.ah.DMAC = mac
	if id.ps == cm.PortSpaceUDP {
		qpn := p.QPNum
		if id.qp != nil {
			qpn = id.qp.QPN()
		}
		err := a.mgr.SIDRReply(a.now(), id.commID, cm.SIDRREP{Status: cm.SIDRValid, QPN: qpn, QKey: udpQKey, PrivateData: p.PrivateData})
		if err != nil {
			c.mu.Unlock()
			return err
		}
		id.finishRequest()
		id.state = stateEstablished
		delete(a.conns, id.commID)
		a.flushLocked()
		return nil
	}
	r := id.req
	id.respRes = min(p.ResponderResources, r.InitiatorDepth)
	id.initDepth = min(p.InitiatorDepth, r.ResponderResources)
	if id.qp != nil {
		if err := id.modifyQP(verbs.QPStateInit, verbs.QPStateRTR, verbs.QPStateRTS); err != nil {
			c.mu.Unlock()
			return err
		}
	}
	qpn := p.QPNum
	if id.qp != nil {
		qpn = id.qp.QPN()
	}
	rep := cm.REP{LocalQPN: qpn, StartingPSN: id.psn, ResponderResources: id.respRes, InitiatorDepth: id.initDepth,
		TargetACKDelay: caAckDelay, EndToEndFlowControl: p.FlowControl, RNRRetryCount: clamp3(p.RNRRetryCount),
		SRQ: p.SRQ, LocalCAGUID: a.guid, PrivateData: p.PrivateData}
	if err := a.mgr.Accept(a.now(), id.commID, rep); err != nil {
		c.mu.Unlock()
		return err
	}
	id.qpNum = qpn
	id.finishRequest()
	id.state = stateAccepted
	a.flushLocked()
	return nil
}

// finishRequest takes a decided request off its listener's backlog
// (CM.mu held).
func (id *ID) finishRequest() {
	if id.listener != nil {
		id.listener.pending--
		id.listener = nil
	}
}

// Reject rejects the connection request of a passive ID (rdma_reject)
// with a consumer-defined REJ carrying private data (a SIDR_REP with
// status "rejected" in the UDP port space), or, on an active ID at
// CONNECT_RESPONSE, the REP.
func (id *ID) Reject(private []byte) error {
	c := id.c
	c.mu.Lock()
	a := id.agent
	if id.state != stateConnectRequest && id.state != stateConnectResponse {
		c.mu.Unlock()
		return id.wrong("reject")
	}
	if len(private) > MaxREJPrivate {
		c.mu.Unlock()
		return fmt.Errorf("rdmacm: %d bytes of private data, a REJ carries %d: %w", len(private), MaxREJPrivate, ErrPrivateLen)
	}
	var err error
	if id.ps == cm.PortSpaceUDP {
		err = a.mgr.SIDRReply(a.now(), id.commID, cm.SIDRREP{Status: cm.SIDRRejected, PrivateData: private})
	} else {
		err = a.mgr.Reject(a.now(), id.commID, cm.RejConsumerDefined, private)
	}
	if err != nil {
		c.mu.Unlock()
		return err
	}
	id.finishRequest()
	delete(a.conns, id.commID)
	id.commID = 0
	id.state = stateDisconnected
	a.flushLocked()
	return nil
}

// Disconnect tears the connection down (rdma_disconnect): the QP moves to
// the error state and a DREQ goes to the peer; DISCONNECTED follows its
// DREP (or the DREQ's retries). As the kernel's rdma_disconnect, which
// fails only on an ID that never had a connection (its IB CM ID): on one
// whose connection is being set up, was refused or is already down (the
// peer's DREQ came first, or a second call) the QP moves to the error
// state and nothing is sent, and it returns nil.
func (id *ID) Disconnect() error {
	c := id.c
	c.mu.Lock()
	a := id.agent
	switch id.state {
	case stateEstablished, stateAccepted:
	case stateConnect, stateConnectResponse, stateConnectRequest, stateDisconnected:
		id.toErr()
		c.mu.Unlock()
		return nil
	default:
		c.mu.Unlock()
		return id.wrong("disconnect")
	}
	id.toErr()
	if id.ps == cm.PortSpaceUDP {
		id.state = stateDisconnected
		c.mu.Unlock()
		return nil
	}
	if err := a.mgr.Disconnect(a.now(), id.commID); err != nil {
		c.mu.Unlock()
		return fmt.Errorf("rdmacm: disconnect: %w", err)
	}
	a.flushLocked()
	return nil
}

// Destroy releases the ID (rdma_destroy_id): a listener stops listening,
// a connection request not decided is rejected, an established connection
// is disconnected, multicast groups are left; no more events come for it. Its QP must have been
// destroyed (DestroyQP) or is left to the application.
func (id *ID) Destroy() error {
	c := id.c
	c.mu.Lock()
	if id.state == stateDestroyed {
		c.mu.Unlock()
		return nil
	}
	a := id.agent
	if id.bound != nil && c.ports[*id.bound] == id {
		delete(c.ports, *id.bound)
	}
	if id.state == stateListen {
		svc := cm.ServiceID(id.ps, id.src.Port())
		ls := c.listen[svc]
		for i, l := range ls {
			if l == id {
				ls = append(ls[:i], ls[i+1:]...)
				break
			}
		}
		if len(ls) == 0 {
			delete(c.listen, svc)
			for _, ag := range c.agents {
				ag.mgr.Unlisten(svc)
			}
		} else {
			c.listen[svc] = ls
		}
	}
	delete(c.ids, id)
	id.leaveAllLocked()
	prev := id.state
	id.state = stateDestroyed
	if a == nil || id.commID == 0 || a.conns[id.commID] != id {
		c.mu.Unlock()
		return nil
	}
	delete(a.conns, id.commID)
	now := a.now()
	switch prev {
	case stateEstablished, stateAccepted:
		id.toErr()
		if a.mgr.Disconnect(now, id.commID) != nil {
			a.mgr.Abort(id.commID)
		}
	case stateConnectRequest:
		id.finishRequest()
		if id.ps == cm.PortSpaceUDP {
			a.mgr.SIDRReply(now, id.commID, cm.SIDRREP{Status: cm.SIDRRejected})
		} else {
			a.mgr.Reject(now, id.commID, cm.RejConsumerDefined, nil)
		}
	case stateConnectResponse:
		a.mgr.Reject(now, id.commID, cm.RejConsumerDefined, nil)
	case stateConnect:
		a.mgr.Abort(id.commID)
	}
	a.flushLocked()
	return nil
}
