package roce

// Port events that come from outside the device loop: the network interface
// under the port lost or regained its link, or changed its addresses.
// Package roce/iface calls these from its watch on the interface (netif
// link events), the way rdma_rxe reacts to NETDEV_DOWN / NETDEV_UP /
// NETDEV_CHANGE of its netdev and the core's GID cache to address changes.

import "github.com/sroce/sroce/verbs"

// PortDown tells the device that the interface under its port went down
// (administratively down or no carrier). As rdma_rxe's rxe_port_down does,
// it moves the port to DOWN, counts link_downed and posts an EventPortErr
// asynchronous event, and does nothing to the QPs: rxe leaves them in their
// state, and the frames they send while the link is down are lost on the
// way out (here the link refuses them and they count as send_err). An RC
// QP then retransmits on its timer as it would after any loss, so a link
// that comes back within the QP's retry budget (retry_cnt 7 is unlimited,
// as on rxe) carries its traffic on; one that stays down longer ends the
// QP's work with RETRY_EXC_ERR, as the same QP on rxe would. Moving every
// connected QP to the error state here, as sroce once did, turned a cable
// pulled for a second into the loss of every connection on the host.
func (d *Device) PortDown() {
	d.mu.Lock()
	if d.closed.Load() || d.portDown {
		d.mu.Unlock()
		return
	}
	d.cnt[verbs.CntLinkDowned]++
	d.portDown = true
	d.mu.Unlock()
	d.events.post(AsyncEvent{Type: verbs.EventPortErr})
}

// PortUp tells the device that the interface under its port is up with
// carrier again: the port moves to ACTIVE and an EventPortActive
// asynchronous event is posted (rxe_port_up). QPs carry on where they were.
func (d *Device) PortUp() {
	d.mu.Lock()
	if d.closed.Load() || !d.portDown {
		d.mu.Unlock()
		return
	}
	d.portDown = false
	d.mu.Unlock()
	d.events.post(AsyncEvent{Type: verbs.EventPortActive})
}

// GIDChanged tells the device's contexts that its GID table changed (an
// address of the interface came or went, and SetGID installed it): it
// posts an EventGIDChange asynchronous event, as the kernel's GID cache
// does for every change of a port's table.
func (d *Device) GIDChanged() {
	if !d.closed.Load() {
		d.events.post(AsyncEvent{Type: verbs.EventGIDChange})
	}
}

// linkFailed is the port's end when its link failed for good (the engine
// could not read from it): the port goes DOWN as in PortDown, and since no
// frame will ever move again, the connected QPs move to the error state so
// that their work completes at once with WR_FLUSH_ERR. It reports how many
// QPs it moved.
func (d *Device) linkFailed() int {
	d.PortDown()
	moved := 0
	for _, q := range d.liveQPs() {
		if t := q.qp.Type(); t != verbs.QPTypeRC && t != verbs.QPTypeUC {
			continue
		}
		switch q.qp.State() {
		case verbs.QPStateReset, verbs.QPStateErr:
			continue
		}
		if q.Modify(&verbs.QPAttr{State: verbs.QPStateErr}, verbs.AttrState) == nil {
			moved++
		}
	}
	return moved
}
