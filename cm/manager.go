package cm

import (
	"errors"
	"time"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/monotime"
)

// Addr is where a MAD comes from or goes to: a port's GID and the QP on
// it (QP1 for the CM).
type Addr struct {
	GID bth.GID
	QPN bth.QPN
}

// Out is a MAD the Manager asks its caller to send.
type Out struct {
	To  Addr
	MAD []byte
}

// EventType is a connection event for the application, named as
// librdmacm's events that belong to the CM layer.
type EventType uint8

// Event types.
const (
	EventConnectRequest  EventType = iota + 1 // passive: a REQ arrived for a listened service ID
	EventEstablished                          // the connection is up (RTU sent or received)
	EventRejected                             // the peer sent a REJ
	EventDisconnected                         // DREQ received, or DREP (or its timeout) after our DREQ
	EventUnreachable                          // REQ or REP retries used up, or the consumer never decided
	EventTimeWaitExit                         // TIMEWAIT over: the connection is forgotten
	EventConnectResponse                      // active, with Config.HoldRTU: the REP arrived, SendRTU (or RejectREP) answers it
	EventSIDRRequest                          // passive: a SIDR_REQ arrived for a listened service ID
	EventSIDRReply                            // active: the SIDR_REP arrived (Status says whether the service was found)
)

var eventText = [...]string{
	0: "event 0", EventConnectRequest: "CONNECT_REQUEST", EventEstablished: "ESTABLISHED",
	EventRejected: "REJECTED", EventDisconnected: "DISCONNECTED", EventUnreachable: "UNREACHABLE",
	EventTimeWaitExit: "TIMEWAIT_EXIT", EventConnectResponse: "CONNECT_RESPONSE",
	EventSIDRRequest: "SIDR_REQUEST", EventSIDRReply: "SIDR_REPLY",
}

// String names the event as librdmacm does, without its RDMA_CM_EVENT_
// prefix.
func (e EventType) String() string {
	if int(e) < len(eventText) {
		return eventText[e]
	}
	return "unknown event"
}

// Event is what the Manager tells the application about a connection,
// identified by its local communication ID.
type Event struct {
	Type   EventType
	ID     uint32
	Peer   Addr
	REQ    *REQ      // CONNECT_REQUEST: the request
	REP    *REP      // ESTABLISHED (or CONNECT_RESPONSE) on the active side: the reply
	REJ    *REJ      // REJECTED: the whole message (private data, ARI)
	Reason RejReason // REJECTED: the peer's reason
	DREQ   *DREQ     // DISCONNECTED by the peer: its request (private data)
	// SIDR_REQUEST: the request; SIDR_REPLY: the reply. For
	// SIDR_REQUEST, ID is the exchange to answer with SIDRReply.
	SIDRREQ *SIDRREQ
	SIDRREP *SIDRREP
}

// Config sets a Manager's limits and timing. Zero fields take defaults.
type Config struct {
	// PacketLifetime is the path's packet lifetime exponent (4.096 µs ×
	// 2^value); default 16 (about 268 ms).
	PacketLifetime uint8
	// ResponseTimeout is this side's CM response timeout exponent, put in
	// REQs; default 18 (about 1.07 s).
	ResponseTimeout uint8
	// MaxRetries is the resend count of REP and DREQ; default 15. A REQ
	// uses its own MaxCMRetries.
	MaxRetries uint8
	// MaxHalfOpen bounds the passive connections not yet established
	// (REQ received, REP sent); REQs beyond it are rejected with "no
	// resources available". Default 1024.
	MaxHalfOpen int
	// DedupCapacity is how many received MADs are remembered for
	// duplicate detection; default 4096.
	DedupCapacity int
	// HoldRTU makes the active side stop at REP_RCVD when the REP comes:
	// it raises CONNECT_RESPONSE and sends the RTU only when SendRTU is
	// called, as the kernel's rdma_cm does for a QP in user space (the
	// QP is moved to RTR and RTS between the two).
	HoldRTU bool
	// FirstID is the first local communication ID handed out (zero: 1),
	// and the first transaction ID. A random one, as Linux's ib_cm uses,
	// keeps a restarted program's IDs from meeting the ones a peer still
	// holds in TIMEWAIT, and its REQs from being taken for resends of the
	// last run's that the peer's duplicate detection remembers.
	FirstID uint32
}

// Counters are what a Manager counted since it was made.
type Counters struct {
	Resends      uint64 // REQ, REP, DREQ and SIDR_REQ sent again after their wait ran out
	DupsAnswered uint64 // duplicate MADs answered from the Dedup (or the connection's last message)
	REJSent      uint64
	REJReceived  uint64
	Established  uint64 // connections that reached ESTABLISHED
	Timeouts     uint64 // exchanges whose retries were used up, or consumers that never decided
	HalfOpenFull uint64 // REQs rejected because MaxHalfOpen passive connections were pending
	NoListener   uint64 // REQs and SIDR_REQs for a service nobody listens on
	UnknownConn  uint64 // MADs for a connection this Manager does not hold
	Disconnects  uint64 // connections that went DISCONNECTED
}

func (c *Config) fill() {
	if c.PacketLifetime == 0 {
		c.PacketLifetime = 16
	}
	if c.ResponseTimeout == 0 {
		c.ResponseTimeout = 18
	}
	if c.MaxRetries == 0 {
		c.MaxRetries = 15
	}
	if c.MaxHalfOpen <= 0 {
		c.MaxHalfOpen = 1024
	}
	if c.DedupCapacity <= 0 {
		c.DedupCapacity = 4096
	}
}

// Errors of the Manager's calls.
var (
	ErrUnknownID    = errors.New("cm: no connection has this ID")
	ErrWrongState   = errors.New("cm: the connection is not in a state that allows this")
	ErrListening    = errors.New("cm: the service ID is already listened on")
	ErrNoListener   = errors.New("cm: the service ID is not listened on")
	ErrNotCMMessage = errors.New("cm: the MAD holds no CM connection message")
)

type peerKey struct {
	gid    bth.GID
	commID uint32
}

type conn struct {
	id, remoteID uint32
	peer         Addr
	state        State
	passive      bool
	tid          uint64 // of the REQ/REP/RTU exchange
	dreqTID      uint64
	respWait     time.Duration // wait for the peer's answer
	retry        Retry
	last         []byte        // the message retry resends
	deadline     monotime.Time // TIMEWAIT end, or the consumer's decision limit in REQ_RCVD
	req          REQ
	halfOpen     bool
	remoteQPN    bth.QPN // the peer's QP, named in a DREQ
	repKey       DupKey  // active: the REP's, answered by the RTU
	sidr         bool    // a SIDR exchange, not a connection
}

// Manager is the connection manager's state machine for both sides, pure:
// the caller feeds it received MADs (Receive), the application's calls
// (Connect, Listen, Accept, Reject, Disconnect) and the time (Tick), each
// with the current virtual time, and takes from it the MADs to send and
// the events (Take) and the next time it must be ticked (Deadline). It
// does no I/O, starts no goroutines and reads no clock.
type Manager struct {
	cfg      Config
	conns    map[uint32]*conn
	byPeer   map[peerKey]uint32
	listen   map[uint64]bool
	dedup    *Dedup
	nextID   uint32
	nextTID  uint64
	halfOpen int
	out      []Out
	events   []Event
	cnt      Counters
}

// Counters returns what the Manager counted.
func (m *Manager) Counters() Counters { return m.cnt }

// NewManager returns a Manager with cfg's limits (defaults for zero
// fields).
func NewManager(cfg Config) *Manager {
	cfg.fill()
	ttl := 4 * ResponseWait(cfg.PacketLifetime, cfg.ResponseTimeout)
	return &Manager{
		cfg: cfg, conns: map[uint32]*conn{}, byPeer: map[peerKey]uint32{},
		listen: map[uint64]bool{}, dedup: NewDedup(cfg.DedupCapacity, ttl),
		nextID: max(cfg.FirstID, 1), nextTID: uint64(max(cfg.FirstID, 1)),
	}
}

// Len returns how many connections the Manager holds (in any state).
func (m *Manager) Len() int { return len(m.conns) }

// HalfOpen returns how many passive connections are not yet established.
func (m *Manager) HalfOpen() int { return m.halfOpen }

// State returns the state of connection id.
func (m *Manager) State(id uint32) (State, bool) {
	c, ok := m.conns[id]
	if !ok {
		return StateIdle, false
	}
	return c.state, true
}

// Take returns the MADs to send and the events raised since the last Take.
func (m *Manager) Take() ([]Out, []Event) {
	o, e := m.out, m.events
	m.out, m.events = nil, nil
	return o, e
}

// Deadline returns the earliest time Tick must be called, false when no
// timer runs.
func (m *Manager) Deadline() (monotime.Time, bool) {
	var d monotime.Time
	ok := false
	take := func(t monotime.Time) {
		if !ok || t.Before(d) {
			d, ok = t, true
		}
	}
	for _, c := range m.conns {
		if c.retry.Active() {
			take(c.retry.Deadline())
		}
		if hasDeadline(c.state) {
			take(c.deadline)
		}
	}
	return d, ok
}

// Listen makes REQs for serviceID raise CONNECT_REQUEST events.
func (m *Manager) Listen(serviceID uint64) error {
	if m.listen[serviceID] {
		return ErrListening
	}
	m.listen[serviceID] = true
	return nil
}

// Unlisten stops listening on serviceID; connections already requested
// are not affected.
func (m *Manager) Unlisten(serviceID uint64) error {
	if !m.listen[serviceID] {
		return ErrNoListener
	}
	delete(m.listen, serviceID)
	return nil
}

func (m *Manager) newID() uint32 {
	for {
		id := m.nextID
		m.nextID++
		if id != 0 && m.conns[id] == nil {
			return id
		}
	}
}

func (m *Manager) send(to Addr, tid uint64, msg Message) []byte {
	// Every message sent is built here from checked values; a failure
	// means a field from the application is out of range, and the
	// message is not sent (the peer times out).
	b, _ := m.trySend(to, tid, msg)
	return b
}

// trySend encodes msg once and queues it for to, or returns why it cannot
// be encoded (nothing queued): the calls that carry the application's
// private data report that to it.
func (m *Manager) trySend(to Addr, tid uint64, msg Message) ([]byte, error) {
	b, err := Send(tid, msg)
	if err != nil {
		return nil, err
	}
	m.out = append(m.out, Out{To: to, MAD: b})
	if msg.Attr() == AttrREJ {
		m.cnt.REJSent++
	}
	return b, nil
}

func (m *Manager) event(e Event) {
	switch e.Type {
	case EventEstablished:
		m.cnt.Established++
	case EventDisconnected:
		m.cnt.Disconnects++
	case EventUnreachable:
		m.cnt.Timeouts++
	}
	m.events = append(m.events, e)
}

// Connect starts the active side: req (its LocalCommID and
// LocalCMResponseTimeout are filled in here) is sent to the peer at to,
// and resent every ResponseWait of the path and the peer's
// RemoteCMResponseTimeout, req.MaxCMRetries times. It returns the new
// connection's ID.
func (m *Manager) Connect(now monotime.Time, to Addr, req REQ) (uint32, error) {
	c := &conn{id: m.newID(), peer: to, state: StateREQSent, tid: m.nextTID}
	m.nextTID++
	req.LocalCommID = c.id
	req.LocalCMResponseTimeout = m.cfg.ResponseTimeout
	b, err := m.trySend(to, c.tid, &req)
	if err != nil {
		return 0, err
	}
	c.req = req
	c.respWait = ResponseWait(m.cfg.PacketLifetime, req.RemoteCMResponseTimeout)
	c.last = b
	c.retry.Start(now, c.respWait, req.MaxCMRetries)
	m.conns[c.id] = c
	return c.id, nil
}

// Accept answers the REQ of passive connection id with rep (its comm IDs
// are filled in here); the REP is resent until the RTU comes.
func (m *Manager) Accept(now monotime.Time, id uint32, rep REP) error {
	c, ok := m.conns[id]
	if !ok {
		return ErrUnknownID
	}
	if c.state != StateREQRcvd {
		return ErrWrongState
	}
	rep.LocalCommID, rep.RemoteCommID = c.id, c.remoteID
	b, err := m.trySend(c.peer, c.tid, &rep)
	if err != nil {
		return err
	}
	m.dedup.Answer(m.reqKey(c), b)
	c.last = b
	c.state = StateREPSent
	c.respWait = ResponseWait(m.cfg.PacketLifetime, c.req.LocalCMResponseTimeout)
	c.retry.Start(now, c.respWait, m.cfg.MaxRetries)
	return nil
}

// Reject answers the REQ of passive connection id with a REJ (or, on the
// active side held at REP_RCVD, the REP), and forgets the connection.
func (m *Manager) Reject(now monotime.Time, id uint32, reason RejReason, private []byte) error {
	c, ok := m.conns[id]
	if !ok {
		return ErrUnknownID
	}
	kind, ok := heldMessage(c.state)
	if !ok {
		return ErrWrongState
	}
	rej := &REJ{LocalCommID: c.id, RemoteCommID: c.remoteID, MessageRejected: kind, Reason: reason, PrivateData: private}
	b, err := m.trySend(c.peer, c.tid, rej)
	if err != nil {
		return err
	}
	if kind == MsgREQ {
		m.dedup.Answer(m.reqKey(c), b)
	}
	m.free(c)
	return nil
}

// SendRTU answers the REP of active connection id, held at REP_RCVD by
// Config.HoldRTU, with the RTU: the connection is ESTABLISHED (no event is
// raised: the caller knows).
func (m *Manager) SendRTU(now monotime.Time, id uint32, private []byte) error {
	c, ok := m.conns[id]
	if !ok {
		return ErrUnknownID
	}
	if c.state != StateREPRcvd {
		return ErrWrongState
	}
	rtu := &RTU{LocalCommID: c.id, RemoteCommID: c.remoteID, PrivateData: private}
	b, err := m.trySend(c.peer, c.tid, rtu)
	if err != nil {
		return err
	}
	c.last = b
	m.dedup.Answer(c.repKey, c.last)
	m.established(c)
	m.cnt.Established++
	return nil
}

// Abort forgets connection id at once, sending nothing: what destroying a
// CM ID does to a connection that is not established (the peer's resends
// then get a REJ or time out). An established connection should be
// disconnected first.
func (m *Manager) Abort(id uint32) error {
	c, ok := m.conns[id]
	if !ok {
		return ErrUnknownID
	}
	m.free(c)
	return nil
}

// Disconnect sends a DREQ for established connection id, resent until the
// DREP comes; then (or when the retries are used up) the connection is
// DISCONNECTED and enters TIMEWAIT.
func (m *Manager) Disconnect(now monotime.Time, id uint32) error {
	c, ok := m.conns[id]
	if !ok {
		return ErrUnknownID
	}
	if c.state != StateEstablished {
		return ErrWrongState
	}
	c.dreqTID = m.nextTID
	m.nextTID++
	c.last = m.send(c.peer, c.dreqTID, &DREQ{LocalCommID: c.id, RemoteCommID: c.remoteID, RemoteQPN: c.remoteQPN})
	c.state = StateDREQSent
	c.retry.Start(now, c.respWait, m.cfg.MaxRetries)
	return nil
}

func (m *Manager) reqKey(c *conn) DupKey {
	return DupKey{Src: c.peer.GID, SrcQP: c.peer.QPN, TID: c.tid, Attr: AttrREQ}
}

func (m *Manager) free(c *conn) {
	if c.halfOpen {
		m.halfOpen--
		c.halfOpen = false
	}
	if c.passive {
		delete(m.byPeer, peerKey{c.peer.GID, c.remoteID})
	}
	delete(m.conns, c.id)
}

func (m *Manager) established(c *conn) {
	c.state = StateEstablished
	if c.halfOpen {
		m.halfOpen--
		c.halfOpen = false
	}
}

// timeWait enters TIMEWAIT for the local ACK timeout of the path (the
// packet lifetime exponent plus one, twice the packet lifetime), the span
// Linux's ib_cm waits before it lets the QP be reused.
func (m *Manager) timeWait(now monotime.Time, c *conn) {
	c.retry.Stop()
	c.state = StateTimeWait
	c.deadline = now.Add(2 * TimeoutDuration(m.cfg.PacketLifetime))
}

// Tick runs the timers due at now: resends, retries used up, TIMEWAIT
// ends and consumer decisions not taken in time.
func (m *Manager) Tick(now monotime.Time) {
	for _, c := range m.conns {
		switch c.retry.Poll(now) {
		case RetryResend:
			if c.last != nil {
				m.out = append(m.out, Out{To: c.peer, MAD: c.last})
				m.cnt.Resends++
			}
		case RetryTimeout:
			m.expire(now, c)
			continue
		}
		if !hasDeadline(c.state) || now.Before(c.deadline) {
			continue
		}
		switch c.state {
		case StateTimeWait:
			m.event(Event{Type: EventTimeWaitExit, ID: c.id, Peer: c.peer})
			m.free(c)
		case StateREQRcvd, StateREPRcvd:
			kind, _ := heldMessage(c.state)
			m.giveUp(c, kind)
			m.free(c)
		case StateSIDRREQRcvd:
			// The consumer never answered: the requester times out.
			m.cnt.Timeouts++
			m.free(c)
		}
	}
}

// hasDeadline says whether a connection in state s ends at its deadline
// (Tick): TIMEWAIT, or a REQ, REP or SIDR_REQ its consumer has not
// answered.
func hasDeadline(s State) bool {
	switch s {
	case StateTimeWait, StateREQRcvd, StateREPRcvd, StateSIDRREQRcvd:
		return true
	}
	return false
}

// heldMessage is the message a consumer holds unanswered in state s: the
// REQ of a passive side, or the REP of an active side with HoldRTU.
func heldMessage(s State) (MsgKind, bool) {
	switch s {
	case StateREQRcvd:
		return MsgREQ, true
	case StateREPRcvd:
		return MsgREP, true
	}
	return 0, false
}

// giveUp tells c's peer that the exchange timed out (a REJ, reason
// timeout, for the message of kind) and raises UNREACHABLE.
func (m *Manager) giveUp(c *conn, kind MsgKind) {
	m.send(c.peer, c.tid, &REJ{LocalCommID: c.id, RemoteCommID: c.remoteID, MessageRejected: kind, Reason: RejTimeout})
	m.event(Event{Type: EventUnreachable, ID: c.id, Peer: c.peer})
}

// expire handles a message whose retries are used up.
func (m *Manager) expire(now monotime.Time, c *conn) {
	switch c.state {
	case StateREQSent, StateMRAREQRcvd:
		m.giveUp(c, MsgREQ)
		m.free(c)
	case StateREPSent, StateMRAREPRcvd:
		// The peer vanished between REP and RTU.
		m.giveUp(c, MsgREP)
		if c.halfOpen {
			m.halfOpen--
			c.halfOpen = false
		}
		m.timeWait(now, c)
	case StateDREQSent:
		m.event(Event{Type: EventDisconnected, ID: c.id, Peer: c.peer})
		m.timeWait(now, c)
	case StateSIDRREQSent:
		m.event(Event{Type: EventUnreachable, ID: c.id, Peer: c.peer})
		m.free(c)
	}
}

// Receive handles a MAD received at now from from. A MAD that is not a
// well-formed CM connection message (or one for no connection it knows,
// other than a REQ or DREQ) is dropped and reported as an error; nothing
// is sent for it.
func (m *Manager) Receive(now monotime.Time, from Addr, b []byte) error {
	h, msg, err := Unmarshal(b)
	if err != nil {
		return err
	}
	if h.Method != MethodSend {
		return ErrNotCMMessage
	}
	key := DupKey{Src: from.GID, SrcQP: from.QPN, TID: h.TID, Attr: h.AttrID}
	switch h.AttrID {
	case AttrREQ, AttrREP, AttrDREQ, AttrSIDRREQ:
		if ans, dup := m.dedup.Check(now, key); dup {
			if ans != nil {
				m.out = append(m.out, Out{To: from, MAD: ans})
				m.cnt.DupsAnswered++
			}
			return nil
		}
	}
	switch r := msg.(type) {
	case *REQ:
		m.onREQ(now, from, h.TID, key, r)
	case *REP:
		return m.onREP(now, from, key, r)
	case *RTU:
		return m.onRTU(from, r)
	case *MRA:
		return m.onMRA(now, from, r)
	case *REJ:
		return m.onREJ(now, from, r)
	case *DREQ:
		m.onDREQ(now, from, h.TID, key, r)
	case *DREP:
		return m.onDREP(now, from, r)
	case *SIDRREQ:
		m.onSIDRREQ(now, from, h.TID, key, r)
	case *SIDRREP:
		return m.onSIDRREP(from, h.TID, r)
	default:
		return ErrNotCMMessage
	}
	return nil
}

func (m *Manager) lookup(from Addr, localID, remoteID uint32) (*conn, error) {
	c, ok := m.conns[localID]
	if !ok || c.sidr || c.peer.GID != from.GID || (c.remoteID != 0 && c.remoteID != remoteID) {
		m.cnt.UnknownConn++
		return nil, ErrUnknownID
	}
	return c, nil
}

func (m *Manager) onREQ(now monotime.Time, from Addr, tid uint64, key DupKey, r *REQ) {
	if id, ok := m.byPeer[peerKey{from.GID, r.LocalCommID}]; ok {
		c := m.conns[id]
		switch {
		case c == nil:
		case c.state == StateREPSent && c.last != nil:
			// A resend the Dedup no longer remembers.
			m.out = append(m.out, Out{To: from, MAD: c.last})
			m.cnt.DupsAnswered++
		case c.state == StateTimeWait:
			// The peer reuses the ID of a connection not yet out of
			// TIMEWAIT.
			m.send(from, tid, &REJ{LocalCommID: c.id, RemoteCommID: r.LocalCommID, MessageRejected: MsgREQ, Reason: RejStaleConn})
		}
		return
	}
	rej := func(reason RejReason) {
		b := m.send(from, tid, &REJ{RemoteCommID: r.LocalCommID, MessageRejected: MsgREQ, Reason: reason})
		m.dedup.Answer(key, b)
	}
	if !m.listen[r.ServiceID] {
		m.cnt.NoListener++
		rej(RejInvalidServiceID)
		return
	}
	if m.halfOpen >= m.cfg.MaxHalfOpen {
		m.cnt.HalfOpenFull++
		rej(RejNoResources)
		return
	}
	c := &conn{
		id: m.newID(), remoteID: r.LocalCommID, peer: from, state: StateREQRcvd,
		passive: true, tid: tid, req: *r, halfOpen: true, remoteQPN: r.LocalQPN,
	}
	// The active side gives up after its retries: so does the wait for the
	// consumer's decision.
	c.deadline = now.Add(time.Duration(int64(r.MaxCMRetries)+1) * ResponseWait(m.cfg.PacketLifetime, r.RemoteCMResponseTimeout))
	m.conns[c.id] = c
	m.byPeer[peerKey{from.GID, r.LocalCommID}] = c.id
	m.halfOpen++
	req := *r
	m.event(Event{Type: EventConnectRequest, ID: c.id, Peer: from, REQ: &req})
}

func (m *Manager) onREP(now monotime.Time, from Addr, key DupKey, r *REP) error {
	c, err := m.lookup(from, r.RemoteCommID, r.LocalCommID)
	if err != nil {
		return err
	}
	switch c.state {
	case StateREQSent, StateMRAREQRcvd:
	case StateEstablished:
		// Our RTU was lost: send it again.
		b := c.last
		if b == nil {
			b = m.send(from, c.tid, &RTU{LocalCommID: c.id, RemoteCommID: c.remoteID})
		} else {
			m.out = append(m.out, Out{To: from, MAD: b})
		}
		m.cnt.DupsAnswered++
		m.dedup.Answer(key, b)
		return nil
	default:
		return nil
	}
	c.remoteID, c.remoteQPN = r.LocalCommID, r.LocalQPN
	c.retry.Stop()
	if m.cfg.HoldRTU {
		c.state, c.repKey, c.last = StateREPRcvd, key, nil
		// The peer resends its REP for as long: so long the consumer
		// may take.
		c.deadline = now.Add(time.Duration(int64(m.cfg.MaxRetries)+1) * ResponseWait(m.cfg.PacketLifetime, c.req.LocalCMResponseTimeout))
		rep := *r
		m.event(Event{Type: EventConnectResponse, ID: c.id, Peer: from, REP: &rep})
		return nil
	}
	b := m.send(from, c.tid, &RTU{LocalCommID: c.id, RemoteCommID: c.remoteID})
	m.dedup.Answer(key, b)
	c.last = nil
	m.established(c)
	rep := *r
	m.event(Event{Type: EventEstablished, ID: c.id, Peer: from, REP: &rep})
	return nil
}

func (m *Manager) onRTU(from Addr, r *RTU) error {
	c, err := m.lookup(from, r.RemoteCommID, r.LocalCommID)
	if err != nil {
		return err
	}
	if c.state != StateREPSent && c.state != StateMRAREPRcvd {
		return nil // a duplicate
	}
	c.retry.Stop()
	c.last = nil
	m.established(c)
	m.event(Event{Type: EventEstablished, ID: c.id, Peer: from})
	return nil
}

func (m *Manager) onMRA(now monotime.Time, from Addr, r *MRA) error {
	c, err := m.lookup(from, r.RemoteCommID, r.LocalCommID)
	if err != nil {
		return err
	}
	wait := MRAWait(m.cfg.PacketLifetime, r.ServiceTimeout)
	switch {
	case r.MessageMRAed == MsgREQ && c.state == StateREQSent:
		c.state = StateMRAREQRcvd
		c.retry.Extend(now, wait)
	case r.MessageMRAed == MsgREP && c.state == StateREPSent:
		c.state = StateMRAREPRcvd
		c.retry.Extend(now, wait)
	}
	return nil
}

func (m *Manager) onREJ(now monotime.Time, from Addr, r *REJ) error {
	c, err := m.lookup(from, r.RemoteCommID, r.LocalCommID)
	if err != nil {
		return err
	}
	m.cnt.REJReceived++
	rej := *r
	switch c.state {
	case StateREQSent, StateMRAREQRcvd, StateREPSent, StateMRAREPRcvd, StateREPRcvd:
		m.event(Event{Type: EventRejected, ID: c.id, Peer: from, Reason: r.Reason, REJ: &rej})
		m.free(c)
	case StateEstablished:
		m.event(Event{Type: EventRejected, ID: c.id, Peer: from, Reason: r.Reason, REJ: &rej})
		m.timeWait(now, c)
	}
	return nil
}

func (m *Manager) onDREQ(now monotime.Time, from Addr, tid uint64, key DupKey, r *DREQ) {
	drep := &DREP{LocalCommID: r.RemoteCommID, RemoteCommID: r.LocalCommID}
	c, err := m.lookup(from, r.RemoteCommID, r.LocalCommID)
	if err == nil {
		dreq := *r
		switch c.state {
		case StateEstablished, StateDREQSent:
			m.event(Event{Type: EventDisconnected, ID: c.id, Peer: from, DREQ: &dreq})
			m.timeWait(now, c)
		case StateREPSent, StateMRAREPRcvd:
			// The DREQ stands in for the lost RTU, then disconnects.
			m.established(c)
			m.event(Event{Type: EventDisconnected, ID: c.id, Peer: from, DREQ: &dreq})
			m.timeWait(now, c)
		}
	}
	// Unknown connection or any other state: answer anyway, so that the
	// peer stops resending.
	b := m.send(from, tid, drep)
	m.dedup.Answer(key, b)
}

func (m *Manager) onDREP(now monotime.Time, from Addr, r *DREP) error {
	c, err := m.lookup(from, r.RemoteCommID, r.LocalCommID)
	if err != nil {
		return err
	}
	if c.state == StateDREQSent {
		m.event(Event{Type: EventDisconnected, ID: c.id, Peer: from})
		m.timeWait(now, c)
	}
	return nil
}

// SIDRRequest starts a service ID resolution (UD port spaces): req (its
// RequestID is filled in here) is sent to the peer at to and resent every
// ResponseWait of the path and respTimeout, maxRetries times, until the
// SIDR_REP comes (SIDR_REPLY) or the retries are used up (UNREACHABLE).
// It returns the exchange's ID.
func (m *Manager) SIDRRequest(now monotime.Time, to Addr, req SIDRREQ, respTimeout, maxRetries uint8) (uint32, error) {
	c := &conn{id: m.newID(), peer: to, state: StateSIDRREQSent, tid: m.nextTID, sidr: true}
	m.nextTID++
	req.RequestID = c.id
	b, err := m.trySend(to, c.tid, &req)
	if err != nil {
		return 0, err
	}
	c.last = b
	c.respWait = ResponseWait(m.cfg.PacketLifetime, respTimeout)
	c.retry.Start(now, c.respWait, maxRetries)
	m.conns[c.id] = c
	return c.id, nil
}

// SIDRReply answers SIDR_REQUEST id with rep (its RequestID and
// ServiceID are filled in here) and forgets the exchange; resent requests
// get the same reply.
func (m *Manager) SIDRReply(now monotime.Time, id uint32, rep SIDRREP) error {
	c, ok := m.conns[id]
	if !ok || !c.sidr {
		return ErrUnknownID
	}
	if c.state != StateSIDRREQRcvd {
		return ErrWrongState
	}
	rep.RequestID, rep.ServiceID = c.remoteID, c.req.ServiceID
	b, err := m.trySend(c.peer, c.tid, &rep)
	if err != nil {
		return err
	}
	m.dedup.Answer(c.repKey, b)
	m.free(c)
	return nil
}

func (m *Manager) onSIDRREQ(now monotime.Time, from Addr, tid uint64, key DupKey, r *SIDRREQ) {
	if !m.listen[r.ServiceID] {
		m.cnt.NoListener++
		b := m.send(from, tid, &SIDRREP{RequestID: r.RequestID, Status: SIDRServiceUnsupported, ServiceID: r.ServiceID})
		m.dedup.Answer(key, b)
		return
	}
	c := &conn{id: m.newID(), remoteID: r.RequestID, peer: from, state: StateSIDRREQRcvd, tid: tid, sidr: true, repKey: key}
	c.req.ServiceID = r.ServiceID
	c.deadline = now.Add(4 * ResponseWait(m.cfg.PacketLifetime, m.cfg.ResponseTimeout))
	m.conns[c.id] = c
	req := *r
	m.event(Event{Type: EventSIDRRequest, ID: c.id, Peer: from, SIDRREQ: &req})
}

func (m *Manager) onSIDRREP(from Addr, tid uint64, r *SIDRREP) error {
	c, ok := m.conns[r.RequestID]
	if !ok || !c.sidr || c.state != StateSIDRREQSent || c.tid != tid || c.peer.GID != from.GID {
		m.cnt.UnknownConn++
		return ErrUnknownID
	}
	rep := *r
	m.event(Event{Type: EventSIDRReply, ID: c.id, Peer: from, SIDRREP: &rep})
	m.free(c)
	return nil
}
