package rdmacm

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/cm"
	"github.com/sroce/sroce/roce"
)

// CM timing, as Linux's rdma_cm sets it for RoCE.
const (
	respTimeout    = 20 // CMA_CM_RESPONSE_TIMEOUT: 4.096 µs × 2^20, about 4.3 s
	maxCMRetries   = 15 // CMA_MAX_CM_RETRIES
	packetLifetime = 18 // CMA_IBOE_PACKET_LIFETIME (rxe's REQs carry the ACK timeout 19 it gives)
	// caAckDelay is the local CA ACK delay exponent rdma_rxe reports
	// (RXE_LOCAL_CA_ACK_DELAY).
	caAckDelay = 15
	// udpQKey is the Q_Key of the UDP port space (RDMA_UDP_QKEY).
	udpQKey = 0x01234567
	// ephemeral ports are taken from here up, as the kernel's range.
	ephemeralLow, ephemeralHigh = 32768, 60999
)

// Errors of the API's calls. Each is wrapped with a sentence naming the
// call and the ID's state.
var (
	ErrClosed     = errors.New("rdmacm: the CM is closed")
	ErrState      = errors.New("rdmacm: the ID is not in a state that allows this")
	ErrAddrInUse  = errors.New("rdmacm: the address and port are in use")
	ErrNoDevice   = errors.New("rdmacm: no device has this address")
	ErrInvalid    = errors.New("rdmacm: invalid argument")
	ErrNoQP       = errors.New("rdmacm: the ID has no QP")
	ErrQPExists   = errors.New("rdmacm: the ID has a QP already")
	ErrPrivateLen = errors.New("rdmacm: private data longer than the message carries")
)

// Config tunes a CM; the zero value is Linux's rdma_cm timing.
type Config struct {
	// Manager is passed to each device's cm.Manager (HoldRTU is always
	// set: the CM moves QPs to RTR and RTS before the RTU). Zero fields
	// take the Manager's defaults, except PacketLifetime (18, as
	// rdma_cm on RoCE), ResponseTimeout (20) and FirstID (random). Its ResponseTimeout is
	// also the remote CM response timeout put in REQs, so the pair sets
	// how long a side waits before resending: tests shorten both.
	Manager cm.Config
}

// CM is the connection manager of a set of devices: librdmacm's model, in
// process. One agent per device owns its QP1 and runs the CM protocol;
// IDs are created on event channels and bound to a device by the address
// they use. A program (or the sroce daemon, hosting many clients) makes
// one CM for all its devices with New, and Closes it at the end.
type CM struct {
	mu       sync.Mutex
	agents   []*agent
	ports    map[portKey]*ID // bound (port space, port, address) → ID
	listen   map[uint64][]*ID
	ids      map[*ID]struct{}
	rng      *rand.Rand
	nextPort int
	closed   bool
	respTO   uint8     // CM response timeout exponent of REQs
	mcfg     cm.Config // what each agent's Manager is made with
}

type portKey struct {
	ps   cm.PortSpace
	port uint16
	addr netip.Addr // unspecified for a wildcard bind
}

// New starts a CM on ports: a QP1 agent on each port's device (which must
// be running). Every device must be distinct.
func New(cfg Config, ports ...Port) (*CM, error) {
	if len(ports) == 0 {
		return nil, fmt.Errorf("rdmacm: no port to run on: %w", ErrInvalid)
	}
	mc := cfg.Manager
	if mc.PacketLifetime == 0 {
		mc.PacketLifetime = packetLifetime
	}
	if mc.ResponseTimeout == 0 {
		mc.ResponseTimeout = respTimeout
	}
	c := &CM{ports: map[portKey]*ID{}, listen: map[uint64][]*ID{}, ids: map[*ID]struct{}{},
		rng: rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())), respTO: mc.ResponseTimeout}
	c.nextPort = ephemeralLow + c.rng.IntN(ephemeralHigh-ephemeralLow)
	c.mcfg = mc
	for _, p := range ports {
		if cfg.Manager.FirstID == 0 {
			mc.FirstID = c.rng.Uint32() | 1
		}
		a, err := newAgent(c, p, mc)
		if err != nil {
			c.Close()
			return nil, err
		}
		c.agents = append(c.agents, a)
	}
	return c, nil
}

// AddPort starts an agent on one more port's device, for a program (the
// daemon) that opens devices after New. A device the CM runs on already
// is refused.
func (c *CM) AddPort(p Port) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrClosed
	}
	for _, a := range c.agents {
		if a.dev == p.Device() {
			c.mu.Unlock()
			return fmt.Errorf("rdmacm: the CM runs on %s already: %w", a.dev.Name(), ErrInvalid)
		}
	}
	mc := c.mcfg
	mc.FirstID = c.rng.Uint32() | 1
	c.mu.Unlock()
	a, err := newAgent(c, p, mc)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.agents = append(c.agents, a)
	for svc := range c.listen {
		a.mgr.Listen(svc)
	}
	return nil
}

// DestroyIDs destroys every ID created on ch, and the IDs of the
// connection requests its listeners received, as closing a process's
// rdma_cm file does: what the sroce daemon does when a client goes away.
// The IDs' QPs are the caller's to destroy.
func (c *CM) DestroyIDs(ch *EventChannel) {
	for _, id := range c.idsWhere(func(id *ID) bool { return id.ch == ch }) {
		id.Destroy()
	}
}

// Close stops every agent and frees QP1 on each device. IDs still open
// get no more events; their QPs are the application's to destroy.
func (c *CM) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	agents := c.agents
	c.mu.Unlock()
	for _, a := range agents {
		a.close()
	}
	return nil
}

// Stats returns the counters of each device's agent.
func (c *CM) Stats() []Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	var s []Stats
	for _, a := range c.agents {
		s = append(s, a.stats())
	}
	return s
}

// CreateID creates an ID on ch in port space ps (rdma_create_id: TCP for
// RC connections, UDP for UD services); ctx is
// the application's, returned by ID.Context.
func (c *CM) CreateID(ch *EventChannel, ps cm.PortSpace, ctx any) (*ID, error) {
	if ch == nil {
		return nil, fmt.Errorf("rdmacm: create ID without an event channel: %w", ErrInvalid)
	}
	switch ps {
	case cm.PortSpaceTCP, cm.PortSpaceUDP:
	default:
		// RDMA_PS_IB (AF_IB addressing) and RDMA_PS_IPOIB are not
		// served: IP addresses over RoCE are the TCP and UDP spaces.
		return nil, fmt.Errorf("rdmacm: port space %v is not supported (TCP and UDP are): %w", ps, ErrInvalid)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	id := &ID{c: c, ch: ch, ps: ps, ctx: ctx, state: stateIdle}
	c.ids[id] = struct{}{}
	return id, nil
}

// agentFor returns the agent whose device holds addr (CM.mu held).
func (c *CM) agentFor(addr netip.Addr) (*agent, int, bool) {
	for _, a := range c.agents {
		if ix, ok := gidIndexOf(a.dev, addr); ok {
			return a, ix, true
		}
	}
	return nil, 0, false
}

// anyAddr reports whether addr binds as a wildcard, as the kernel's
// cma_any_addr has it: the unspecified addresses, and loopback addresses
// unless a device of the CM holds one (onLoopbackNet). An ID bound there
// has no device, and a listener there hears every device and every
// destination: on rdma_rxe, `rping -s -a 127.0.0.1` listens on rxe0 as
// a wildcard listener does and accepts a client from another host
// (CM.mu held).
func (c *CM) anyAddr(addr netip.Addr) bool {
	return addr.IsUnspecified() || addr.IsLoopback() && !c.onLoopbackNet()
}

// onLoopbackNet reports whether a device of the CM has a loopback address
// among its GIDs (a UDP link on lo, as sroce's own tests run two hosts on
// 127.x addresses): loopback addresses are then other hosts' on that
// link, not the kernel's loopback of cma_bind_loopback and
// cma_resolve_loopback (CM.mu held).
func (c *CM) onLoopbackNet() bool {
	for _, a := range c.agents {
		for i := 0; i < roce.GIDTableLen; i++ {
			g, err := a.dev.QueryGID(i)
			if err != nil || g == (bth.GID{}) {
				continue
			}
			if addr := g.Addr(); addr.IsLoopback() {
				return true
			}
		}
	}
	return false
}

// bind reserves (ps, port, addr) for id; port 0 takes an ephemeral port
// (CM.mu held).
func (c *CM) bind(id *ID, addr netip.Addr, port uint16) (uint16, error) {
	// The wildcards a bind conflicts with: the unspecified addresses, and
	// the usual loopback ones where they bind as wildcards too.
	wild := []netip.Addr{netip.IPv4Unspecified(), netip.IPv6Unspecified()}
	if !c.onLoopbackNet() {
		wild = append(wild, netip.AddrFrom4([4]byte{127, 0, 0, 1}), netip.IPv6Loopback())
	}
	free := func(p uint16) bool {
		if c.ports[portKey{id.ps, p, addr}] != nil {
			return false
		}
		for _, w := range wild {
			if c.ports[portKey{id.ps, p, w}] != nil {
				return false
			}
		}
		if c.anyAddr(addr) {
			for k := range c.ports {
				if k.ps == id.ps && k.port == p {
					return false
				}
			}
		}
		return true
	}
	if port == 0 {
		for i := 0; i <= ephemeralHigh-ephemeralLow; i++ {
			p := uint16(c.nextPort)
			c.nextPort++
			if c.nextPort > ephemeralHigh {
				c.nextPort = ephemeralLow
			}
			if free(p) {
				port = p
				break
			}
		}
		if port == 0 {
			return 0, fmt.Errorf("rdmacm: no ephemeral port is free: %w", ErrAddrInUse)
		}
	} else if !free(port) {
		return 0, fmt.Errorf("rdmacm: %v port %d: %w", addr, port, ErrAddrInUse)
	}
	c.ports[portKey{id.ps, port, addr}] = id
	return port, nil
}

// deviceGone tells the IDs on a's device that it went away, and forgets
// the agent: a device opened later on the same addresses (an interface
// that came back, AddPort) gets the binds.
func (c *CM) deviceGone(a *agent) {
	c.mu.Lock()
	for i, x := range c.agents {
		if x == a {
			c.agents = append(c.agents[:i:i], c.agents[i+1:]...)
			break
		}
	}
	c.mu.Unlock()
	for _, id := range c.idsWhere(func(id *ID) bool { return id.agent == a }) {
		id.post(&Event{Type: EventDeviceRemoval, ID: id, Status: StatusNoDevice})
	}
}

// idsWhere returns the live IDs for which keep is true.
func (c *CM) idsWhere(keep func(*ID) bool) []*ID {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ids []*ID
	for id := range c.ids {
		if keep(id) {
			ids = append(ids, id)
		}
	}
	return ids
}
