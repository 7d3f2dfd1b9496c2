package roce

// Port events that come from outside the device loop: the network interface
// under the port lost or regained its link. Package roce/iface calls these
// from its watch on the interface (netif link events), the way rdma_rxe
// reacts to NETDEV_DOWN / NETDEV_CHANGE of its netdev.

import "github.com/sroce/sroce/verbs"

// PortDown tells the device that the interface under its port went down
// (administratively down or no carrier). It counts link_downed, posts an
// EventPortErr asynchronous event and moves every RC and UC QP that is past
// RESET and not yet in ERR to the error state, so their outstanding work
// requests complete at once with WR_FLUSH_ERR instead of retrying into a
// dead link. UD and GSI QPs are left alone: they have no connection to
// lose. It reports how many QPs it moved.
func (d *Device) PortDown() int {
	d.mu.Lock()
	if d.closed.Load() {
		d.mu.Unlock()
		return 0
	}
	d.cnt[verbs.CntLinkDowned]++
	d.portDown = true
	d.mu.Unlock()
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
	d.events.post(AsyncEvent{Type: verbs.EventPortErr})
	return moved
}

// PortUp tells the device that the interface under its port is up with
// carrier again. It posts an EventPortActive asynchronous event; QPs moved
// to ERR by PortDown stay there, as with rdma_rxe, and must be reset and
// connected again.
func (d *Device) PortUp() {
	d.mu.Lock()
	closed := d.closed.Load()
	d.portDown = false
	d.mu.Unlock()
	if !closed {
		d.events.post(AsyncEvent{Type: verbs.EventPortActive})
	}
}
