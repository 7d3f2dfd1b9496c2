package rdmacm

// Multicast joins on RoCE, as Linux's rdma_cm makes them for rdma_rxe:
// there is no subnet administrator to ask, so a join completes at once on
// the ID's device. The group's GID is the IPv4-mapped address of the IPv4
// group (RoCEv2's MGID, ::ffff:a.b.c.d), the Q_Key the UDP port space's,
// and MULTICAST_JOIN carries the address vector to the group (its GID,
// the ID's source GID index, hop limit 64, the group's Ethernet address)
// with the destination QPN 0xFFFFFF. The ID's QP, if it has one, is
// attached to the group; the device's links join the IP group when a QP
// attaches (the kernel's IGMP join for RoCEv2).

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/cm"
	"github.com/sroce/sroce/roce"
)

// ErrNotJoined is returned by LeaveMulticast for a group the ID has not
// joined (the kernel's ucma answers ENOENT, which the daemon passes on;
// librdmacm finds no join first and says EADDRNOTAVAIL).
var ErrNotJoined = errors.New("rdmacm: the ID has not joined this multicast group")

// ErrIPv6Group is returned by JoinMulticast for an IPv6 group: Linux's
// rdma_cm refuses them on RoCEv2 ports (ENOTSUPP), and so does this CM.
var ErrIPv6Group = errors.New("rdmacm: IPv6 multicast groups are not joined on RoCEv2")

// McastInfo names the join a MULTICAST_JOIN or MULTICAST_ERROR event is
// about.
type McastInfo struct {
	Group   netip.Addr // the IP group JoinMulticast was given
	Context any        // JoinMulticast's context
}

// mcJoin is one join of an ID (under CM.mu).
type mcJoin struct {
	group    netip.Addr // an IPv4 group
	sendOnly bool
	attached bool // the ID's QP is attached for it
}

// mgid is the group's GID on RoCEv2: the IPv4-mapped address
// ::ffff:a.b.c.d (cma_iboe_set_mgid).
func (j *mcJoin) mgid() bth.GID { return bth.GIDFromAddr(j.group) }

// detachLocked detaches the ID's QP from j's group if j attached it
// (CM.mu held). A detach that fails (the group left with an earlier join
// of it) changes nothing.
func (id *ID) detachLocked(j *mcJoin) {
	if id.qp != nil && j.attached {
		id.qp.DetachMcast(j.mgid(), 0)
	}
	j.attached = false
}

// JoinMulticast joins the ID to the IPv4 multicast group
// (rdma_join_multicast; sendOnly is RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER).
// The ID must be in the UDP port space and bound to a device: bound to a
// local address or resolved (to the group, as mckey does), and not past
// that. MULTICAST_JOIN follows with Event.UD (QPN 0xFFFFFF, the Q_Key
// 0x01234567 and the address vector to the group) and Event.Mcast; the
// ID's QP, unless sendOnly, is attached to the group first, and if that
// fails MULTICAST_ERROR comes instead with the attach's -errno. Errors, as
// Linux's: ErrState (EINVAL) on an ID without a device or in another
// state, ErrInvalid (EINVAL) for another port space or the unspecified
// address, ErrIPv6Group for an IPv6 group. Joining a group twice is two
// joins, each with its event. A unicast address is not refused (Linux
// does not either); attaching a QP to it fails.
func (id *ID) JoinMulticast(group netip.Addr, sendOnly bool, ctx any) error {
	g := group.Unmap()
	c := id.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if id.agent == nil || (id.state != stateAddrBound && id.state != stateAddrResolved) {
		return id.wrong("join a multicast group")
	}
	switch {
	case id.ps != cm.PortSpaceUDP:
		return fmt.Errorf("rdmacm: a multicast join in port space %#x, only UDP IDs join groups: %w", uint16(id.ps), ErrInvalid)
	case !g.IsValid() || g.IsUnspecified():
		return fmt.Errorf("rdmacm: join the multicast group %v: %w", group, ErrInvalid)
	case !g.Is4():
		return fmt.Errorf("rdmacm: join %v: %w", g, ErrIPv6Group)
	}
	j := &mcJoin{group: g, sendOnly: sendOnly}
	mgid := j.mgid()
	mac, _ := mgid.MulticastMAC()
	e := &Event{Type: EventMulticastJoin, ID: id, Mcast: McastInfo{Group: g, Context: ctx},
		UD: UDParam{QPNum: bth.MulticastQPN, QKey: udpQKey,
			AH: AHInfo{DGID: mgid, SGIDIndex: uint8(id.sgidIx), HopLimit: 64, DMAC: mac}}}
	if id.qp != nil && !sendOnly {
		if err := id.qp.AttachMcast(mgid, 0); err != nil {
			e.Type, e.Status, e.UD = EventMulticastError, attachStatus(err), UDParam{}
		} else {
			j.attached = true
		}
	}
	id.mcast = append(id.mcast, j)
	id.post(e)
	return nil
}

// attachStatus is the event status of a failed attach: -errno as the
// verbs call returns it.
func attachStatus(err error) int {
	if errors.Is(err, roce.ErrNoResources) {
		return -12 // -ENOMEM
	}
	return StatusInvalid
}

// LeaveMulticast leaves a group the ID joined (rdma_leave_multicast): the
// earliest join of the group is forgotten and, if it attached the ID's QP,
// the QP is detached from the group, as Linux's rdma_cm does on a leave.
// ErrNotJoined for a group the ID has no join of.
func (id *ID) LeaveMulticast(group netip.Addr) error {
	g := group.Unmap()
	c := id.c
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, j := range id.mcast {
		if j.group != g {
			continue
		}
		id.mcast = append(id.mcast[:i], id.mcast[i+1:]...)
		id.detachLocked(j)
		return nil
	}
	return fmt.Errorf("rdmacm: leave %v: %w", group, ErrNotJoined)
}

// leaveAllLocked forgets the ID's joins, detaching its QP from their
// groups (CM.mu held).
func (id *ID) leaveAllLocked() {
	for _, j := range id.mcast {
		id.detachLocked(j)
	}
	id.mcast = nil
}
