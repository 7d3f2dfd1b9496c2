// Multicast: UD QPs attached to multicast groups (ibv_attach_mcast), as
// rdma_rxe keeps them. The device's table is the one place the
// memberships live: a link with linkcap.Groups is only told to join a group
// when its first QP attaches and to leave it with the last (rxe adds the
// group's Ethernet address to the interface's filter the same way). The device lock serializes changes; the table is
// also under its own read-write lock (Device.mcMu), which the engines take
// for reading only for frames to or from a group, and a group's list of
// QPs is replaced, never changed, so that a reader may keep it. A frame to a group (destination QPN 0xFFFFFF) goes to
// every attached QP, each checking P_Key, Q_Key and state as for unicast;
// one attached to another engine gets the frame through that engine's
// inbox. A frame the device sends to a group it has joined is also
// received by the device itself, as the kernel loops a multicast datagram
// back to a host that is a member of the group.

package roce

import (
	"io"
	"net/netip"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/monotime"
	"github.com/sroce/sroce/verbs"
)

// Multicast limits, as rdma_rxe reports them (rxe_param.h).
const (
	MaxMcastGrp           = 8192
	MaxMcastQPAttach      = 56
	MaxTotalMcastQPAttach = MaxMcastGrp * MaxMcastQPAttach // 0x70000
)

// mcGroup is a multicast group the device has joined: its QPs (a list
// replaced, never changed, so that an engine may keep it) and its
// membership on the link (nil on a link without linkcap.Groups, which receives
// every group's frames). It is the one record of the membership: links
// keep none.
type mcGroup struct {
	qps    []*QP
	member io.Closer
}

// AttachMcast attaches the QP to the multicast group gid
// (ibv_attach_mcast): UD packets to the group's address with destination
// QPN 0xFFFFFF reach it. lid is ignored, as on any RoCE port. Errors, as
// rxe and the verbs core return them: ErrInvalid (EINVAL) for a QP that is
// not UD or a GID that is not multicast, ErrNoResources (ENOMEM) beyond
// MaxMcastGrp groups, MaxMcastQPAttach QPs in a group or
// MaxTotalMcastQPAttach attachments, ErrDestroyed after Destroy, and the
// link's error if it cannot join the group. Attaching a QP twice to a
// group does nothing.
func (q *QP) AttachMcast(gid bth.GID, lid uint16) error {
	if q.Type() != verbs.QPTypeUD || !gid.IsMulticast() {
		return ErrInvalid
	}
	d := q.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	if q.gone.Load() {
		return ErrDestroyed
	}
	if d.closed.Load() {
		return ErrClosed
	}
	g, ok := d.mcast[gid]
	for _, m := range g.qps {
		if m == q {
			return nil
		}
	}
	switch {
	case !ok && len(d.mcast) >= MaxMcastGrp,
		d.mcTotal >= MaxTotalMcastQPAttach,
		len(g.qps) >= MaxMcastQPAttach:
		return ErrNoResources
	}
	if !ok && d.groups != nil {
		m, err := d.groups.JoinGroup(gid.Addr())
		if err != nil {
			return err
		}
		g.member = m
	}
	g.qps = append(g.qps[:len(g.qps):len(g.qps)], q)
	d.mcMu.Lock()
	d.mcast[gid] = g
	d.mcMu.Unlock()
	d.mcTotal++
	q.mcGroups = append(q.mcGroups, gid)
	return nil
}

// DetachMcast detaches the QP from the multicast group gid
// (ibv_detach_mcast). It returns ErrInvalid (EINVAL, as rxe) for a QP that
// is not UD, a GID that is not multicast, or a group the QP is not
// attached to.
func (q *QP) DetachMcast(gid bth.GID, lid uint16) error {
	if q.Type() != verbs.QPTypeUD || !gid.IsMulticast() {
		return ErrInvalid
	}
	d := q.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.detachLocked(q, gid) {
		return ErrInvalid
	}
	return nil
}

// DetachAllMcast detaches the QP from every multicast group, as the kernel
// does for the QPs of a process that ends, and returns how many it left.
func (q *QP) DetachAllMcast() int {
	d := q.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for len(q.mcGroups) > 0 {
		if d.detachLocked(q, q.mcGroups[len(q.mcGroups)-1]) {
			n++
		}
	}
	return n
}

// McastGroups returns the multicast groups the QP is attached to.
func (q *QP) McastGroups() []bth.GID {
	d := q.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]bth.GID(nil), q.mcGroups...)
}

// detachLocked removes q from group gid, leaving the group on the links
// when q was its last QP; it reports whether q was attached. The caller
// holds the device lock.
func (d *Device) detachLocked(q *QP, gid bth.GID) bool {
	i := indexOf(q.mcGroups, gid)
	if i < 0 {
		return false
	}
	q.mcGroups = append(q.mcGroups[:i], q.mcGroups[i+1:]...)
	g := d.mcast[gid]
	kept := make([]*QP, 0, len(g.qps))
	for _, m := range g.qps {
		if m != q {
			kept = append(kept, m)
		}
	}
	d.mcTotal--
	d.mcMu.Lock()
	if len(kept) == 0 {
		delete(d.mcast, gid)
	} else {
		d.mcast[gid] = mcGroup{qps: kept, member: g.member}
	}
	d.mcMu.Unlock()
	if len(kept) == 0 && g.member != nil {
		_ = g.member.Close()
	}
	return true
}

// leaveAllGroups closes the device's memberships on the link, as the
// device closes; the groups keep their QPs. The caller holds the device
// lock.
func (d *Device) leaveAllGroups() {
	d.mcMu.Lock()
	defer d.mcMu.Unlock()
	for gid, g := range d.mcast {
		if g.member != nil {
			_ = g.member.Close()
			g.member = nil
			d.mcast[gid] = g
		}
	}
}

// indexOf returns where g is in gs (each group once), searching from the
// end: DetachAllMcast takes the groups from the end, each found at once.
func indexOf(gs []bth.GID, g bth.GID) int {
	for i := len(gs) - 1; i >= 0; i-- {
		if gs[i] == g {
			return i
		}
	}
	return -1
}

// mcastMembers returns the QPs attached to the group at a, an address
// as bth.Packet.DstAddr gives it.
func (d *Device) mcastMembers(a netip.Addr) []*QP {
	d.mcMu.RLock()
	g := d.mcast[bth.GIDFromAddr(a)]
	d.mcMu.RUnlock()
	return g.qps
}

// receiveMcast gives a checked frame to a multicast group (destination
// QPN 0xFFFFFF) to the group's QPs on this engine and, unless the frame
// was handed over by another engine (handed), hands it once to each other
// engine that runs some of them. A group nobody attached to drops it
// under unknown_qpn, as rxe drops it.
func (e *engine) receiveMcast(now monotime.Time, frame []byte, p *bth.Packet, handed bool) {
	members := e.d.mcastMembers(p.DstAddr())
	if len(members) == 0 {
		if !handed {
			e.cnt[verbs.CntUnknownQPN]++
		}
		return
	}
	var others uint64
	for _, q := range members {
		if q.eng != e {
			others |= 1 << uint(q.eng.idx)
			continue
		}
		e.deliverTo(now, q, p)
	}
	if handed {
		return
	}
	for m := others; m != 0; m &= m - 1 {
		e.handOff(e.d.eng[bitIndex(m)], frame)
	}
}

// loopMcast reports whether a frame the device sends to dst must also be
// received by the device itself: dst is a group it has joined, and the
// link does not loop it back itself.
func (d *Device) loopMcast(dst netip.Addr) bool {
	return !d.linkLoopback && dst.IsMulticast() && len(d.mcastMembers(dst)) > 0
}
