package testbed

import (
	"net/netip"
	"sync"
	"testing"

	"github.com/sroce/sroce/bth"
)

// Rules watches every frame a test bed's devices send and checks it
// against what an rdma_rxe peer trusts. Tests that put sroce against sroce
// cannot see a packet that sroce's own completer ignores but rxe's acts
// on; this makes every in-memory test see it. The rule checked:
//
//   - A plain ACK never names a PSN inside a READ request's span. rxe's
//     completer takes an ACK whose PSN is a pending READ's last PSN as the
//     READ's completion, with no data placed (rxe_comp.c: check_ack,
//     COMPST_WRITE_SEND, then COMP_ACK), and one inside the span as
//     progress past part of the READ.
//
// A test reports each connection with Connected and shows the checker
// every frame with Frame (Bed does both; a router's tap is the place).
type Rules struct {
	t     testing.TB
	mu    sync.Mutex
	peers map[QPAddr]qpLink // responder end -> requester end
	flows map[QPAddr]*flow  // by requester end
}

// QPAddr names a QP on the wire.
type QPAddr struct {
	IP  netip.Addr
	QPN bth.QPN
}

type qpLink struct {
	requester QPAddr
	mtu       uint32
}

// flow is what one requester has asked of its responder.
type flow struct {
	responder netip.Addr
	reads     []readSpan
}

type readSpan struct{ first, last bth.PSN }

// NewRules returns a checker that reports a broken rule as an error of t.
func NewRules(t testing.TB) *Rules {
	return &Rules{t: t, peers: map[QPAddr]qpLink{}, flows: map[QPAddr]*flow{}}
}

// Connected records that the QP local sends to remote with path MTU mtu.
func (r *Rules) Connected(local, remote QPAddr, mtu int) {
	r.mu.Lock()
	r.peers[remote] = qpLink{requester: local, mtu: uint32(mtu)}
	r.flows[local] = &flow{responder: remote.IP}
	r.mu.Unlock()
}

// Frame checks one frame sent by a device.
func (r *Rules) Frame(f []byte) {
	p, err := bth.Parse(f)
	if err != nil || p.Info().Service != bth.ServiceRC {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case p.Opcode == bth.RCReadRequest:
		l, ok := r.peers[QPAddr{p.DstAddr(), p.BTH().DestQP()}]
		if !ok {
			return
		}
		n := max((p.RETH().DMALen()+l.mtu-1)/l.mtu, 1)
		first := p.BTH().PSN()
		s := readSpan{first, first.Add(n - 1)}
		fl := r.flows[l.requester]
		list := fl.reads
		for i := range list {
			if list[i].last == s.last {
				// a retry of the same READ from a later packet
				if s.first.Diff(list[i].first) < 0 {
					list[i].first = s.first
				}
				return
			}
		}
		if len(list) >= 256 {
			list = list[1:]
		}
		fl.reads = append(list, s)
	case p.Opcode == bth.RCAcknowledge && p.AETH().Syndrome().IsACK():
		req := QPAddr{p.DstAddr(), p.BTH().DestQP()}
		fl, ok := r.flows[req]
		if !ok || p.SrcAddr() != fl.responder {
			return // not from a device of the bed (a hostile test's forgery)
		}
		psn := p.BTH().PSN()
		list := fl.reads
		k := 0
		for _, s := range list {
			if psn.Diff(s.first) >= 0 && psn.Diff(s.last) <= 0 {
				r.t.Errorf("%v sent an ACK with PSN %v, inside the READ request spanning %v-%v from %v QP %v: an rdma_rxe requester would complete that READ with no data",
					p.SrcAddr(), psn, s.first, s.last, req.IP, req.QPN)
			}
			if psn.Diff(s.last) <= 0 {
				list[k] = s // still ahead of the acknowledgements
				k++
			}
		}
		fl.reads = list[:k]
	}
}
