package netns

// rdma_rxe retransmits spuriously when its emulated guest is starved of
// the host's processor: a guest that stalls for longer than the retransmit
// timeout (67 ms at the timeout 14 that ibv_rc_pingpong hard-codes) fires
// its timer before it processes the ACK queued behind the stall, and
// resends a request that is already acknowledged. Seen once in CI (6.1
// guest kernel): rxe's requester then stopped for good. The capture showed
// everything rxe had sent acknowledged by sroce, rxe resending the first
// packet of its last message, sroce acknowledging the whole message again,
// and then silence from rxe while its ibv_rc_pingpong waited for the send
// completion. What stopped the requester mid-retransmission is not pinned
// down; what keeps it stopped is in rxe_comp.c: an ACK that arrives while
// the request is being resent only advances the acknowledged PSN
// (COMPST_UPDATE_COMP) without completing the request, and once that PSN
// has passed the requester's, the retry timer finds nothing to retry and
// is not armed again. Such a run says nothing about sroce, as long as
// sroce had acknowledged every PSN rxe sent and had nothing of its own
// unacknowledged; rxeRequesterStalled checks exactly that, and the pair
// is run again.

import (
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"testing"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/tests/netns/rxeguest"
)

// unackedRE finds the unacknowledged-packet count in sroce's stall sentence.
var unackedRE = regexp.MustCompile(`: (\d+) packets unacknowledged`)

// rxeRequesterStalled reports whether a failed pair shows rxe's requester
// stalling after a spurious retransmission (see the file comment), and
// describes what the capture shows. real and ours are the two sides'
// outcomes, frames the capture of the guest's tap, guest the rxe side's
// address.
func rxeRequesterStalled(real, ours toolOutcome, frames []rxeguest.Frame, guest netip.Addr) (string, bool) {
	if real.ok() || ours.ok() {
		return "", false
	}
	// sroce stalled with everything of its own acknowledged.
	counts := unackedRE.FindAllStringSubmatch(ours.stderr, -1)
	if len(counts) == 0 {
		return "", false
	}
	for _, m := range counts {
		if n, _ := strconv.Atoi(m[1]); n != 0 {
			return "", false
		}
	}

	type req struct {
		psn bth.PSN
		idx int
	}
	var (
		reqs      []req        // rxe's RC requests, in capture order
		reqQPN    = bth.QPN(0) // the sroce QP rxe's requests went to
		ackQPN    = bth.QPN(0) // the rxe QP sroce's ACKs went to
		highest   bth.PSN      // rxe's highest request PSN
		acked     bth.PSN      // the highest PSN sroce acknowledged
		haveAck   bool
		lastAck   int = -1 // index of sroce's last ACK
		lastAckTo bth.PSN
	)
	var p bth.Packet
	for i, f := range frames {
		if p.Parse(f.Data) != nil || p.Info().Service != bth.ServiceRC {
			continue
		}
		h := p.Headers()
		fromRxe := p.SrcAddr().Unmap() == guest.Unmap()
		switch {
		case fromRxe && p.Info().Request:
			if len(reqs) > 0 && h.BTH.DestQP != reqQPN {
				return "", false // more than one QP: no single story
			}
			reqQPN = h.BTH.DestQP
			if len(reqs) == 0 || highest.LessThan(h.BTH.PSN) {
				highest = h.BTH.PSN
			}
			reqs = append(reqs, req{h.BTH.PSN, i})
		case !fromRxe && (p.Opcode == bth.RCAcknowledge || p.Opcode == bth.RCAtomicAcknowledge) && h.AETH.Syndrome.IsACK():
			if haveAck && h.BTH.DestQP != ackQPN {
				return "", false
			}
			ackQPN = h.BTH.DestQP
			if !haveAck || acked.LessThan(h.BTH.PSN) {
				acked = h.BTH.PSN
			}
			haveAck = true
			lastAck, lastAckTo = i, h.BTH.PSN
		}
	}
	if len(reqs) < 2 || !haveAck {
		return "", false
	}
	// Every PSN rxe sent is acknowledged.
	if acked.LessThan(highest) {
		return "", false
	}
	// rxe's last request resends a PSN it had sent before...
	last := reqs[len(reqs)-1]
	resent := false
	for _, r := range reqs[:len(reqs)-1] {
		if r.psn == last.psn {
			resent = true
			break
		}
	}
	if !resent {
		return "", false
	}
	// ...and sroce acknowledged everything again after it.
	if lastAck < last.idx || lastAckTo.LessThan(highest) {
		return "", false
	}
	return fmt.Sprintf("rdma_rxe's requester stalled: sroce had acknowledged every PSN rxe sent (up to %#06x), "+
		"rxe resent PSN %#06x (frame %d, a spurious retransmission), sroce acknowledged up to %#06x again (frame %d), "+
		"and rxe sent no request after that while its tool waited",
		uint32(highest), uint32(last.psn), last.idx+1, uint32(lastAckTo), lastAck+1), true
}

// rcFrame builds one RC frame from src to dst for the detector's tests.
func rcFrame(t testing.TB, src, dst netip.Addr, op bth.Opcode, qpn bth.QPN, psn bth.PSN, payload int) rxeguest.Frame {
	t.Helper()
	e := bth.Encap{Src: src, Dst: dst, TTL: 64, DF: true, SrcPort: 49152}
	h := bth.Headers{BTH: bth.BTHFields{Opcode: op, PKey: 0xffff, DestQP: qpn, PSN: psn}}
	if op == bth.RCAcknowledge {
		h.AETH = bth.AETHFields{Syndrome: 0x1f, MSN: 1}
	}
	b := make([]byte, e.Len()+h.TransportLen(payload))
	n, err := bth.Build(b, &e, &h, make([]byte, payload))
	if err != nil {
		t.Fatal(err)
	}
	return rxeguest.Frame{Data: b[:n], OrigLen: n}
}

func TestRxeRequesterStalled(t *testing.T) {
	guest, host := interopGuestAddr.Addr(), interopHostAddr.Addr()
	const rxeQP, sroceQP = 0x43, 0x11
	fromRxe := func(op bth.Opcode, psn bth.PSN) rxeguest.Frame {
		return rcFrame(t, guest, host, op, sroceQP, psn, 256)
	}
	fromSroce := func(op bth.Opcode, psn bth.PSN) rxeguest.Frame {
		if op == bth.RCAcknowledge {
			return rcFrame(t, host, guest, op, rxeQP, psn, 0)
		}
		return rcFrame(t, host, guest, op, rxeQP, psn, 256)
	}
	ack := func(psn bth.PSN) rxeguest.Frame { return fromSroce(bth.RCAcknowledge, psn) }
	// The CI capture's ending: rxe's message 100-102 acknowledged, sroce's
	// message answered, rxe resending 100, sroce acknowledging 102 again.
	stalled := []rxeguest.Frame{
		fromRxe(bth.RCSendFirst, 100), fromRxe(bth.RCSendMiddle, 101), fromRxe(bth.RCSendLast, 102),
		ack(102),
		fromSroce(bth.RCSendOnly, 7000),
		rcFrame(t, guest, host, bth.RCAcknowledge, sroceQP, 7000, 0),
		fromRxe(bth.RCSendFirst, 100),
		ack(102),
	}
	failedReal := toolOutcome{exit: -1}
	stuckSroce := toolOutcome{exit: 1, stderr: "sroce rc-pingpong: no completion for 1m30s after 50 of 200 exchanges: the peer stopped answering (QP 0x000011 RTS: 0 packets unacknowledged, next PSN 0x001b59)"}
	busySroce := toolOutcome{exit: 1, stderr: "sroce rc-pingpong: no completion (QP 0x000011 RTS: 3 packets unacknowledged, next PSN 0x001b59)"}

	why, ok := rxeRequesterStalled(failedReal, stuckSroce, stalled, guest)
	if !ok {
		t.Fatal("the CI capture's pattern was not recognised")
	}
	t.Log(why)

	cases := []struct {
		name       string
		real, ours toolOutcome
		frames     []rxeguest.Frame
	}{
		{"real tool succeeded", toolOutcome{}, stuckSroce, stalled},
		{"sroce has unacknowledged packets", failedReal, busySroce, stalled},
		{"sroce failed otherwise", failedReal, toolOutcome{exit: 1, stderr: "sroce rc-pingpong: exchange timeout"}, stalled},
		{"sroce never acknowledged the last PSN", failedReal, stuckSroce, []rxeguest.Frame{
			fromRxe(bth.RCSendFirst, 100), fromRxe(bth.RCSendMiddle, 101), fromRxe(bth.RCSendLast, 102),
			ack(101), fromRxe(bth.RCSendFirst, 100), ack(101)}},
		{"no acknowledgement after the resend", failedReal, stuckSroce, stalled[:len(stalled)-1]},
		{"rxe's last request is new", failedReal, stuckSroce, []rxeguest.Frame{
			fromRxe(bth.RCSendFirst, 100), fromRxe(bth.RCSendMiddle, 101), fromRxe(bth.RCSendLast, 102), ack(102)}},
		{"two QPs", failedReal, stuckSroce, append([]rxeguest.Frame{
			rcFrame(t, guest, host, bth.RCSendOnly, sroceQP+1, 5, 8)}, stalled...)},
		{"empty capture", failedReal, stuckSroce, nil},
	}
	for _, c := range cases {
		if why, ok := rxeRequesterStalled(c.real, c.ours, c.frames, guest); ok {
			t.Errorf("%s: recognised as rxe's stall: %s", c.name, why)
		}
	}
}
