package rdmacm

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/sroce/sroce/bth"
)

// EventType is an RDMA CM event, numbered as librdmacm's enum
// rdma_cm_event_type.
type EventType int

// Event types (RDMA_CM_EVENT_*).
const (
	EventAddrResolved    EventType = 0
	EventAddrError       EventType = 1
	EventRouteResolved   EventType = 2
	EventRouteError      EventType = 3
	EventConnectRequest  EventType = 4
	EventConnectResponse EventType = 5
	EventConnectError    EventType = 6
	EventUnreachable     EventType = 7
	EventRejected        EventType = 8
	EventEstablished     EventType = 9
	EventDisconnected    EventType = 10
	EventDeviceRemoval   EventType = 11
	EventMulticastJoin   EventType = 12
	EventMulticastError  EventType = 13
	EventAddrChange      EventType = 14
	EventTimewaitExit    EventType = 15
)

var eventNames = [...]string{
	"RDMA_CM_EVENT_ADDR_RESOLVED", "RDMA_CM_EVENT_ADDR_ERROR", "RDMA_CM_EVENT_ROUTE_RESOLVED",
	"RDMA_CM_EVENT_ROUTE_ERROR", "RDMA_CM_EVENT_CONNECT_REQUEST", "RDMA_CM_EVENT_CONNECT_RESPONSE",
	"RDMA_CM_EVENT_CONNECT_ERROR", "RDMA_CM_EVENT_UNREACHABLE", "RDMA_CM_EVENT_REJECTED",
	"RDMA_CM_EVENT_ESTABLISHED", "RDMA_CM_EVENT_DISCONNECTED", "RDMA_CM_EVENT_DEVICE_REMOVAL",
	"RDMA_CM_EVENT_MULTICAST_JOIN", "RDMA_CM_EVENT_MULTICAST_ERROR", "RDMA_CM_EVENT_ADDR_CHANGE",
	"RDMA_CM_EVENT_TIMEWAIT_EXIT",
}

// String names the event as rdma_event_str does ("RDMA_CM_EVENT_ESTABLISHED").
func (e EventType) String() string {
	if e >= 0 && int(e) < len(eventNames) {
		return eventNames[e]
	}
	return "UNKNOWN EVENT " + strconv.Itoa(int(e))
}

// Statuses of events, as librdmacm reports them: a negative errno for
// local failures, the IBTA reject reason (positive) for REJECTED.
const (
	StatusTimedOut     = -110 // -ETIMEDOUT: UNREACHABLE, ADDR_ERROR or ROUTE_ERROR after the timeout
	StatusNetUnreach   = -101 // -ENETUNREACH: no device or route reaches the address
	StatusHostUnreach  = -113 // -EHOSTUNREACH: the neighbour did not answer
	StatusConnRefused  = -111 // -ECONNREFUSED
	StatusInvalid      = -22  // -EINVAL
	StatusNoDevice     = -19  // -ENODEV: the device went away
	StatusConnReset    = -104 // -ECONNRESET
	StatusAddrNotAvail = -99  // -EADDRNOTAVAIL
)

// ConnParam is struct rdma_conn_param: what Connect and Accept offer and
// what CONNECT_REQUEST, CONNECT_RESPONSE, ESTABLISHED and REJECTED carry
// from the peer.
type ConnParam struct {
	// PrivateData goes in the REQ (at most MaxREQPrivate bytes after the
	// IP CM header), REP (MaxREPPrivate), REJ (MaxREJPrivate) or DREQ.
	PrivateData        []byte
	ResponderResources uint8 // READ/atomic requests this side serves at once
	InitiatorDepth     uint8 // READ/atomic requests this side keeps outstanding
	FlowControl        bool
	RetryCount         uint8 // transport retries, 0..7 (7 forever); ignored by Accept
	RNRRetryCount      uint8 // RNR retries the peer should make, 0..7
	SRQ                bool
	// QPNum names the QP when the ID has none (CreateQP not used): the
	// QP is then the application's to move through its states.
	QPNum bth.QPN
}

// Private data limits of RDMA CM on RoCE, as librdmacm documents them for
// the TCP port space.
const (
	MaxREQPrivate  = 56  // REQ: 92 bytes less the 36-byte IP CM header
	MaxREPPrivate  = 196 // REP
	MaxREJPrivate  = 148 // REJ
	MaxDREQPrivate = 220 // DREQ
	MaxRTUPrivate  = 224 // RTU
	MaxSIDRPrivate = 180 // SIDR_REQ: 216 less the IP CM header
)

// UDParam is what the event of a UD (port space UDP) exchange carries:
// the peer's QP, Q_Key and address vector.
type UDParam struct {
	QPNum bth.QPN
	QKey  uint32
	AH    AHInfo
}

// AHInfo is an address vector a UD sender needs for the peer, with the
// source GID index on this side.
type AHInfo struct {
	DGID      bth.GID
	SGIDIndex uint8
	HopLimit  uint8
	DMAC      [6]byte
}

// Event is struct rdma_cm_event: what happened to ID.
type Event struct {
	Type   EventType
	Status int
	// ID is the ID the event is for: for CONNECT_REQUEST a new ID for
	// the connection requested, created on the listener's channel.
	ID *ID
	// ListenID is the listening ID, for CONNECT_REQUEST.
	ListenID *ID
	// Param holds the peer's connection parameters and private data
	// (CONNECT_REQUEST, CONNECT_RESPONSE, ESTABLISHED, REJECTED,
	// DISCONNECTED by the peer).
	Param ConnParam
	// UD holds the peer's UD QP (UDP port space: ESTABLISHED on the
	// active side, CONNECT_REQUEST on the passive side), or the group's
	// (MULTICAST_JOIN: QPN 0xFFFFFF, the group's Q_Key and address).
	UD UDParam
	// Mcast names the join of MULTICAST_JOIN and MULTICAST_ERROR.
	Mcast McastInfo
}

// String describes the event in one line.
func (e *Event) String() string {
	return fmt.Sprintf("%v status %d", e.Type, e.Status)
}

// EventChannel is struct rdma_event_channel: the queue the events of the
// IDs created on it arrive on, in order.
type EventChannel struct {
	mu     sync.Mutex
	q      []*Event
	wake   chan struct{}
	closed bool
}

// ErrChannelClosed is returned by Get on a destroyed channel.
var ErrChannelClosed = errors.New("rdmacm: the event channel is destroyed")

// NewEventChannel returns an empty channel (rdma_create_event_channel).
func NewEventChannel() *EventChannel {
	return &EventChannel{wake: make(chan struct{}, 1)}
}

func (c *EventChannel) post(e *Event) {
	c.mu.Lock()
	if !c.closed {
		c.q = append(c.q, e)
	}
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// TryGet returns the next event without waiting, nil when none is queued.
func (c *EventChannel) TryGet() *Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.q) == 0 {
		return nil
	}
	e := c.q[0]
	c.q[0] = nil
	c.q = c.q[1:]
	return e
}

// Get waits for the next event (rdma_get_cm_event) until ctx is done.
func (c *EventChannel) Get(ctx context.Context) (*Event, error) {
	for {
		if e := c.TryGet(); e != nil {
			return e, nil
		}
		c.mu.Lock()
		closed := c.closed
		c.mu.Unlock()
		if closed {
			return nil, ErrChannelClosed
		}
		select {
		case <-c.wake:
		case <-ctx.Done():
			return nil, fmt.Errorf("rdmacm: no CM event came while waiting: %w", ctx.Err())
		}
	}
}

// GetTimeout waits at most d for the next event.
func (c *EventChannel) GetTimeout(d time.Duration) (*Event, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	e, err := c.Get(ctx)
	if err != nil && errors.Is(err, context.DeadlineExceeded) {
		return nil, fmt.Errorf("rdmacm: no CM event came within %v: %w", d, context.DeadlineExceeded)
	}
	return e, err
}

// Wait waits at most d for an event of type want on the channel and
// returns it; an event of another type is returned with an error naming
// both (so a test or tool says what it got instead).
func (c *EventChannel) Wait(want EventType, d time.Duration) (*Event, error) {
	e, err := c.GetTimeout(d)
	if err != nil {
		return nil, fmt.Errorf("waiting for %v: %w", want, err)
	}
	if e.Type != want {
		return e, fmt.Errorf("rdmacm: waiting for %v, got %v (status %d)", want, e.Type, e.Status)
	}
	return e, nil
}

// Destroy closes the channel (rdma_destroy_event_channel): queued events
// are dropped and Get returns ErrChannelClosed.
func (c *EventChannel) Destroy() {
	c.mu.Lock()
	c.closed = true
	c.q = nil
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}
