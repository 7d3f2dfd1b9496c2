package roce

// Loopback between devices of one host: the kernel's stack delivers a
// packet sent to an address of another interface of the same network
// namespace without a wire. Devices whose links do not pass through that
// stack (AF_XDP) join a host group (JoinHost); a frame one of them sends
// to an address of another member goes straight to that member's first
// engine.

import (
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/sroce/sroce/monotime"
)

// hostGroup is the devices of one process in one network namespace.
type hostGroup struct {
	key     string
	members atomic.Pointer[[]*Device] // replaced on change
}

// hosts maps a group's key to the group; under hostsMu.
var (
	hostsMu sync.Mutex
	hosts   = map[string]*hostGroup{}
)

// maxHostQ bounds the frames from other devices waiting for an engine;
// beyond it they are dropped as a full link would drop them.
const maxHostQ = 4096

// hostQ is an engine's queue of frames from other devices of its host.
type hostQ struct {
	n  atomic.Int32
	mu sync.Mutex
	q  [][]byte
}

// JoinHost makes the device a member of the group of devices of this
// process that share a network namespace, named by key (an identity of
// the namespace): frames it sends to an address of another member are
// received by that member at once, as the kernel loops a packet to an
// address of another interface of its host, and HostMAC finds the other
// members' addresses. The device leaves the group when it closes. Only
// devices whose links bypass the kernel's stack (AF_XDP) need it.
func (d *Device) JoinHost(key string) {
	if key == "" {
		return
	}
	hostsMu.Lock()
	g := hosts[key]
	if g == nil {
		g = &hostGroup{key: key}
		g.members.Store(&[]*Device{})
		hosts[key] = g
	}
	m := append(slices.Clone(*g.members.Load()), d)
	g.members.Store(&m)
	d.host.Store(g)
	hostsMu.Unlock()
	d.OnClose(func() { d.leaveHost(g) })
}

// leaveHost takes the device out of its group.
func (d *Device) leaveHost(g *hostGroup) {
	hostsMu.Lock()
	defer hostsMu.Unlock()
	m := slices.DeleteFunc(slices.Clone(*g.members.Load()), func(x *Device) bool { return x == d })
	g.members.Store(&m)
	d.host.Store(nil)
	if len(m) == 0 {
		delete(hosts, g.key)
	}
}

// hostPeer returns the other member of the device's host group that owns
// address a, or nil.
func (d *Device) hostPeer(a netip.Addr) *Device {
	g := d.host.Load()
	if g == nil {
		return nil
	}
	m := *g.members.Load()
	if len(m) < 2 {
		return nil
	}
	for _, x := range m {
		if x != d && !x.closed.Load() && x.isLocal(a) {
			return x
		}
	}
	return nil
}

// HostMAC returns the Ethernet address of the device of this host group
// (JoinHost) that owns address a, other than d itself.
func (d *Device) HostMAC(a netip.Addr) (net.HardwareAddr, bool) {
	x := d.hostPeer(a.Unmap())
	if x == nil {
		return nil, false
	}
	mac := make(net.HardwareAddr, len(x.mac))
	copy(mac, x.mac[:])
	return mac, true
}

// hostDeliver queues a copy of frame for the device's first engine and
// wakes it; it reports false when the queue is full.
func (d *Device) hostDeliver(frame []byte) bool {
	e := d.eng[0]
	e.hostIn.mu.Lock()
	if len(e.hostIn.q) >= maxHostQ {
		e.hostIn.mu.Unlock()
		return false
	}
	e.hostIn.q = append(e.hostIn.q, slices.Clone(frame))
	e.hostIn.n.Store(int32(len(e.hostIn.q)))
	e.hostIn.mu.Unlock()
	e.dbRung.Store(true)
	e.kick()
	return true
}

// adoptHost receives the frames other devices of the host sent to this
// one; it reports whether there were any.
func (e *engine) adoptHost(now monotime.Time) bool {
	if e.hostIn.n.Load() == 0 {
		return false
	}
	e.hostIn.mu.Lock()
	q := e.hostIn.q
	e.hostIn.q = nil
	e.hostIn.n.Store(0)
	e.hostIn.mu.Unlock()
	for _, f := range q {
		e.receive(now, f)
	}
	return len(q) > 0
}
