package daemon

// Devices added while the daemon runs: an interface that was deleted and
// came back is served again (the command opens its port anew and calls
// Add), with its asynchronous events routed and the RDMA CM on it.

import (
	"errors"
	"fmt"

	"github.com/sroce/sroce/rdmacm"
)

// Add serves one more device from now on: new clients see it in
// LIST_DEVICES and may open it, its asynchronous events reach its
// contexts, and the RDMA CM runs on it when it can (an rdmacm.Port) and
// the CM runs at all. A device whose name (sroce_<interface>) is served
// already is refused.
func (s *Server) Add(d Device) error {
	sd := &served{name: "sroce_" + d.Ifname(), dev: d, owners: make(map[any]owner)}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errors.New("daemon: server closed")
	}
	for _, o := range s.devs {
		if o.name == sd.name {
			s.mu.Unlock()
			return fmt.Errorf("daemon: %s is served already", sd.name)
		}
	}
	// A new slice: devices() hands the old one out without the lock.
	s.devs = append(s.devs[:len(s.devs):len(s.devs)], sd)
	s.wg.Add(1)
	n := len(s.devs)
	s.nodes.add(sd.name, d.NodeGUID()) // under s.mu: not after Close
	s.mu.Unlock()
	go s.asyncEvents(sd)
	if p, ok := d.(rdmacm.Port); ok {
		if s.cm == nil {
			s.log.Warn("the RDMA CM does not run in this daemon; CM requests on the device will fail", "device", sd.name)
		} else if err := s.cm.AddPort(p); err != nil {
			s.log.Warn("the RDMA CM did not start on the device; CM requests on it will fail", "device", sd.name, "err", err)
		}
	}
	s.log.Info("device added", "device", sd.name, "devices", n)
	return nil
}
