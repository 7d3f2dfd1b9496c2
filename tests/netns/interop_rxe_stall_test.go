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
	"strings"
	"testing"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/tests/netns/rxeguest"
)

// unackedRE finds the unacknowledged-packet count in sroce's stall sentence.
var unackedRE = regexp.MustCompile(`: (\d+) packets unacknowledged`)

// rxeRequesterStalled reports whether a failed pair shows rxe's requester
// stalling after a spurious retransmission (see the file comment), and
// describes what the capture shows. cmd is the sroce tool, real and ours
// the two sides' outcomes, frames the capture of the guest's tap, guest
// the rxe side's address.
func rxeRequesterStalled(cmd string, real, ours toolOutcome, frames []rxeguest.Frame, guest netip.Addr) (string, bool) {
	if real.ok() || ours.ok() || !sroceWaitedOnPeer(cmd, ours) {
		return "", false
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
		ourHigh   bth.PSN // sroce's highest request PSN
		ourReqs   bool
		answered  bth.PSN // the highest PSN rxe answered with other than a NAK
		haveAns   bool
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
		case !fromRxe && p.Info().Request:
			if !ourReqs || ourHigh.LessThan(h.BTH.PSN) {
				ourHigh = h.BTH.PSN
			}
			ourReqs = true
		case fromRxe:
			if p.Info().Headers&bth.HdrAETH != 0 && !h.AETH.Syndrome.IsACK() {
				continue
			}
			if !haveAns || answered.LessThan(h.BTH.PSN) {
				answered = h.BTH.PSN
			}
			haveAns = true
		case (p.Opcode == bth.RCAcknowledge || p.Opcode == bth.RCAtomicAcknowledge) && h.AETH.Syndrome.IsACK():
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
	// rxe answered every request sroce sent.
	if ourReqs && (!haveAns || answered.LessThan(ourHigh)) {
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

// sroceWaitedOnPeer reports whether sroce's side failed only by waiting
// for its peer: it reported a stall with nothing of its own
// unacknowledged, or, in a bandwidth test, where the peer's completions
// never wait on sroce's application, the test stopped it (exit -1) after
// the real tool hung.
func sroceWaitedOnPeer(cmd string, ours toolOutcome) bool {
	counts := unackedRE.FindAllStringSubmatch(ours.stderr, -1)
	if len(counts) == 0 {
		return ours.exit == -1 && kindOf(cmd) == kindBW && strings.TrimSpace(ours.stderr) == ""
	}
	for _, m := range counts {
		if n, _ := strconv.Atoi(m[1]); n != 0 {
			return false
		}
	}
	return true
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

	why, ok := rxeRequesterStalled("rc-pingpong", failedReal, stuckSroce, stalled, guest)
	if !ok {
		t.Fatal("the CI capture's pattern was not recognised")
	}
	t.Log(why)
	// A passive bandwidth server that the test stopped after the real
	// client hung.
	killed := toolOutcome{exit: -1}
	if _, ok := rxeRequesterStalled("write-bw", failedReal, killed, stalled, guest); !ok {
		t.Error("a stopped write-bw server was not recognised")
	}
	unanswered := append(append([]rxeguest.Frame(nil), stalled...), fromSroce(bth.RCSendOnly, 7001))

	cases := []struct {
		name       string
		cmd        string
		real, ours toolOutcome
		frames     []rxeguest.Frame
	}{
		{"real tool succeeded", "rc-pingpong", toolOutcome{}, stuckSroce, stalled},
		{"sroce's last request unanswered", "rc-pingpong", failedReal, stuckSroce, unanswered},
		{"sroce stopped in a ping-pong", "rc-pingpong", failedReal, killed, stalled},
		{"sroce stopped with something to say", "write-bw", failedReal, toolOutcome{exit: -1, stderr: "data check failed"}, stalled},
		{"sroce has unacknowledged packets", "rc-pingpong", failedReal, busySroce, stalled},
		{"sroce failed otherwise", "rc-pingpong", failedReal, toolOutcome{exit: 1, stderr: "sroce rc-pingpong: exchange timeout"}, stalled},
		{"sroce never acknowledged the last PSN", "rc-pingpong", failedReal, stuckSroce, []rxeguest.Frame{
			fromRxe(bth.RCSendFirst, 100), fromRxe(bth.RCSendMiddle, 101), fromRxe(bth.RCSendLast, 102),
			ack(101), fromRxe(bth.RCSendFirst, 100), ack(101)}},
		{"no acknowledgement after the resend", "rc-pingpong", failedReal, stuckSroce, stalled[:len(stalled)-1]},
		{"rxe's last request is new", "rc-pingpong", failedReal, stuckSroce, []rxeguest.Frame{
			fromRxe(bth.RCSendFirst, 100), fromRxe(bth.RCSendMiddle, 101), fromRxe(bth.RCSendLast, 102), ack(102)}},
		{"two QPs", "rc-pingpong", failedReal, stuckSroce, append([]rxeguest.Frame{
			rcFrame(t, guest, host, bth.RCSendOnly, sroceQP+1, 5, 8)}, stalled...)},
		{"empty capture", "rc-pingpong", failedReal, stuckSroce, nil},
	}
	for _, c := range cases {
		if why, ok := rxeRequesterStalled(c.cmd, c.real, c.ours, c.frames, guest); ok {
			t.Errorf("%s: recognised as rxe's stall: %s", c.name, why)
		}
	}
}
