package trace

import (
	"bytes"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sroce/sroce/bth"
)

// The two sides of the synthetic connection: A (10.0.0.1, QP 0x11) sends
// requests to B (10.0.0.2, QP 0x22).
var (
	addrA = netip.MustParseAddr("10.0.0.1")
	addrB = netip.MustParseAddr("10.0.0.2")
)

const (
	qpA bth.QPN = 0x11
	qpB bth.QPN = 0x22
)

// pkt describes one synthetic packet.
type pkt struct {
	fromB    bool
	op       bth.Opcode
	psn      bth.PSN
	ackReq   bool
	syndrome bth.Syndrome
	msn      bth.MSN
	dmaLen   uint32
	payload  int
	badICRC  bool
}

// build encodes p as a whole frame with bth.Build.
func build(t testing.TB, p pkt) []byte {
	t.Helper()
	e := bth.Encap{Src: addrA, Dst: addrB, TTL: 64, SrcPort: 49152}
	dest := qpB
	if p.fromB {
		e.Src, e.Dst, dest = addrB, addrA, qpA
	}
	h := bth.Headers{
		BTH:  bth.BTHFields{Opcode: p.op, PKey: 0xffff, DestQP: dest, AckReq: p.ackReq, PSN: p.psn},
		AETH: bth.AETHFields{Syndrome: p.syndrome, MSN: p.msn},
		RETH: bth.RETHFields{VA: 0x1000, RKey: 0x42, DMALen: p.dmaLen},
	}
	payload := make([]byte, p.payload)
	frame := make([]byte, e.Len()+h.TransportLen(len(payload)))
	n, err := bth.Build(frame, &e, &h, payload)
	if err != nil {
		t.Fatalf("building %+v: %v", p, err)
	}
	frame = frame[:n]
	if p.badICRC {
		frame[n-1] ^= 0xff
	}
	return frame
}

// run feeds ps to a new Analyzer, one frame per packet, 1 ms apart, and
// returns the events.
func run(t testing.TB, ps []pkt) []Event {
	t.Helper()
	var a Analyzer
	var evs []Event
	t0 := time.Unix(1700000000, 0)
	for i, p := range ps {
		var bp bth.Packet
		if err := bp.Parse(build(t, p)); err != nil {
			t.Fatalf("packet %d: %v", i+1, err)
		}
		evs = append(evs, a.Add(i+1, t0.Add(time.Duration(i)*time.Millisecond), &bp, bp.VerifyICRC()))
	}
	return evs
}

// check runs ps and compares each packet's analysis with want (a line per
// packet, the strings joined by "; ").
func check(t *testing.T, ps []pkt, want []string) {
	t.Helper()
	evs := run(t, ps)
	if len(want) != len(evs) {
		t.Fatalf("%d expectations for %d packets", len(want), len(evs))
	}
	for i, ev := range evs {
		if got := strings.Join(ev.Analysis, "; "); got != want[i] {
			t.Errorf("frame %d (%s psn=%#x): analysis\n  %q\nwant\n  %q", i+1, ev.Opcode, uint32(ev.PSN), got, want[i])
		}
		if ev.Retransmission != slices.Contains(ev.Analysis, "retransmission") {
			t.Errorf("frame %d: Retransmission=%v with analysis %q", i+1, ev.Retransmission, ev.Analysis)
		}
	}
}

func ack(psn bth.PSN, msn bth.MSN) pkt {
	return pkt{fromB: true, op: bth.RCAcknowledge, psn: psn, syndrome: bth.SyndromeACKUnlimited, msn: msn}
}

func send(psn bth.PSN, ackReq bool) pkt {
	return pkt{op: bth.RCSendOnly, psn: psn, ackReq: ackReq, payload: 8}
}

func TestInOrder(t *testing.T) {
	check(t, []pkt{
		send(100, false),
		send(101, false),
		send(102, true),
		ack(102, 3),
		send(103, true),
		ack(103, 4),
	}, []string{
		"", "", "",
		"acks PSN 0x000064..0x000066",
		"",
		"acks PSN 0x000067",
	})
}

func TestConnection(t *testing.T) {
	evs := run(t, []pkt{send(100, true), ack(100, 1)})
	c := evs[0].Conn
	if evs[1].Conn != c || !evs[0].FromA || evs[1].FromA {
		t.Fatalf("the ACK is not paired with its request: %+v", evs)
	}
	if got, want := c.A.String()+" <-> "+c.B.String(), "10.0.0.1 QP 0x000011 <-> 10.0.0.2 QP 0x000022"; got != want {
		t.Errorf("endpoints %q, want %q", got, want)
	}
}

func TestLossNAKGoBackN(t *testing.T) {
	// 102 is lost before the capture point; B NAKs 103, A goes back to 102.
	check(t, []pkt{
		send(100, false),
		send(101, false),
		send(103, false),
		send(104, true),
		{fromB: true, op: bth.RCAcknowledge, psn: 102, syndrome: bth.NAKSyndrome(bth.NAKPSNSeqError), msn: 2},
		send(102, false),
		send(103, false),
		send(104, true),
		ack(104, 5),
	}, []string{
		"", "",
		"out of sequence: expected PSN 0x000066",
		"out of sequence: expected PSN 0x000066",
		"NAK: PSN sequence error; expects PSN 0x000066; acks PSN 0x000064..0x000065",
		"",
		"retransmission",
		"retransmission",
		"acks PSN 0x000066..0x000068",
	})
}

func TestDuplicate(t *testing.T) {
	// The ACK is lost on its way to A, which sends 100 again.
	check(t, []pkt{
		send(100, true),
		ack(100, 1),
		send(100, true),
		ack(100, 1),
	}, []string{
		"",
		"acks PSN 0x000064",
		"retransmission; duplicate",
		"repeats the acknowledgement of PSN 0x000064",
	})
}

func TestRNRNAK(t *testing.T) {
	rnr := func(timer uint8) pkt {
		return pkt{fromB: true, op: bth.RCAcknowledge, psn: 100, syndrome: bth.RNRSyndrome(timer)}
	}
	check(t, []pkt{
		send(100, true),
		rnr(1),
		send(100, true),
		rnr(12),
		send(100, true),
		rnr(0),
		send(100, true),
		ack(100, 1),
	}, []string{
		"",
		"RNR NAK: retry after 0.01 ms",
		"retransmission",
		"RNR NAK: retry after 0.64 ms",
		"retransmission",
		"RNR NAK: retry after 655.36 ms",
		"retransmission",
		"acks PSN 0x000064",
	})
}

func TestNAKCodes(t *testing.T) {
	for code, want := range map[uint8]string{
		bth.NAKInvalidRequest:    "NAK: invalid request",
		bth.NAKRemoteAccessError: "NAK: remote access error",
		bth.NAKRemoteOpError:     "NAK: remote operational error",
		bth.NAKInvalidRDRequest:  "NAK: invalid RD request",
	} {
		check(t, []pkt{
			send(100, true),
			{fromB: true, op: bth.RCAcknowledge, psn: 100, syndrome: bth.NAKSyndrome(code)},
		}, []string{"", want})
	}
}

func TestReadRetransmitted(t *testing.T) {
	read := pkt{op: bth.RCReadRequest, psn: 200, ackReq: true, dmaLen: 4096}
	first := pkt{fromB: true, op: bth.RCReadResponseFirst, psn: 200, syndrome: bth.SyndromeACKUnlimited, msn: 1, payload: 1024}
	middle := func(psn bth.PSN) pkt {
		return pkt{fromB: true, op: bth.RCReadResponseMiddle, psn: psn, payload: 1024}
	}
	last := pkt{fromB: true, op: bth.RCReadResponseLast, psn: 203, syndrome: bth.SyndromeACKUnlimited, msn: 1, payload: 1024}
	// The response at PSN 202 is lost; A's timer runs out and it asks again.
	check(t, []pkt{
		send(199, false),
		read,
		first,
		middle(201),
		read,
		first,
		middle(201),
		middle(202),
		last,
		send(204, true),
		ack(204, 2),
	}, []string{
		"",
		"READ/atomic outstanding: 1",
		"READ response 1/4 for the READ request at frame 2; acks PSN 0x0000c7",
		"READ response 2/4 for the READ request at frame 2",
		"retransmission; duplicate; READ/atomic outstanding: 1",
		"retransmission; READ response 1/4 for the READ request at frame 5",
		"retransmission; READ response 2/4 for the READ request at frame 5",
		"READ response 3/4 for the READ request at frame 5",
		"READ response 4/4 for the READ request at frame 5; acks PSN 0x0000c8..0x0000cb",
		"",
		"acks PSN 0x0000cc",
	})
}

func TestReadOnlyAndAtomic(t *testing.T) {
	check(t, []pkt{
		{op: bth.RCReadRequest, psn: 10, ackReq: true, dmaLen: 8},
		{op: bth.RCFetchAdd, psn: 11, ackReq: true},
		{fromB: true, op: bth.RCReadResponseOnly, psn: 10, syndrome: bth.SyndromeACKUnlimited, msn: 1, payload: 8},
		{fromB: true, op: bth.RCAtomicAcknowledge, psn: 11, syndrome: bth.SyndromeACKUnlimited, msn: 2},
	}, []string{
		"READ/atomic outstanding: 1",
		"READ/atomic outstanding: 2",
		"READ response 1/1 for the READ request at frame 1; acks PSN 0x00000a",
		"FETCH_ADD response for the request at frame 2; acks PSN 0x00000b",
	})
}

func TestImpliedNAK(t *testing.T) {
	// The READ's response is lost; the ACK of the SEND after it tells A.
	check(t, []pkt{
		{op: bth.RCReadRequest, psn: 10, ackReq: true, dmaLen: 8},
		send(11, true),
		ack(11, 2),
	}, []string{
		"READ/atomic outstanding: 1",
		"",
		"acks PSN 0x00000a..0x00000b; implied NAK: no response to the READ request at frame 1",
	})
}

func TestWraparound(t *testing.T) {
	check(t, []pkt{
		send(0xfffffe, false),
		send(0xffffff, false),
		send(0x000000, false),
		send(0x000001, true),
		ack(0x000001, 4),
		send(0xffffff, false),
		send(0x000003, false),
	}, []string{
		"", "", "", "",
		"acks PSN 0xfffffe..0x000001",
		"retransmission; duplicate",
		"out of sequence: expected PSN 0x000002",
	})
}

func TestICRCBad(t *testing.T) {
	bad := send(100, true)
	bad.badICRC = true
	check(t, []pkt{
		bad,
		send(100, true),
		ack(100, 1),
	}, []string{
		"ICRC bad",
		"retransmission",
		"acks PSN 0x000064",
	})
}

func TestBoundedWindow(t *testing.T) {
	var w psnWindow
	for i := range 3 * SentWindow {
		w.add(bth.PSN(i))
	}
	if len(w.set) != SentWindow || len(w.ring) != SentWindow {
		t.Fatalf("window holds %d PSNs in a ring of %d, want %d", len(w.set), len(w.ring), SentWindow)
	}
	if w.has(0) || !w.has(bth.PSN(3*SentWindow-1)) || !w.has(bth.PSN(2*SentWindow)) {
		t.Error("the window does not hold the newest PSNs")
	}
}

func TestLabelAndArrow(t *testing.T) {
	evs := run(t, []pkt{send(0x7b, true), ack(0x7b, 1)})
	if got, want := evs[0].Arrow(), "---- SEND_ONLY psn=0x00007b ackreq len=8 "; !strings.HasPrefix(got, want) || !strings.HasSuffix(got, "->") {
		t.Errorf("arrow from A %q", got)
	}
	if got := evs[1].Arrow(); !strings.HasPrefix(got, "<--") || !strings.HasSuffix(got, " ACKNOWLEDGE psn=0x00007b msn=1 ----") {
		t.Errorf("arrow from B %q", got)
	}
}

// FuzzAnalyzer feeds arbitrary sequences of packets (any opcode, PSNs close
// together so that they repeat and wrap, any syndrome, bad ICRCs) to the
// analysis and to an HTML page: neither may panic, an event's
// Retransmission flag must agree with its analysis, and the page must draw
// every packet.
func FuzzAnalyzer(f *testing.F) {
	f.Add([]byte{0x04, 0xff, 0xff, 0x00, 0x11, 0x80, 0x1f, 0x00, 0x0c, 0x00, 0x00, 0x10, 0x0d, 0x80, 0x00})
	f.Add([]byte{0x0c, 0x00, 0x01, 0x00, 0x0e, 0x80, 0x02, 0x00, 0x0f, 0x80, 0x03, 0x60, 0x11, 0x80, 0x01, 0x20})
	f.Fuzz(func(t *testing.T, data []byte) {
		var a Analyzer
		var page HTML
		frame := 0
		for len(data) >= 4 {
			op, lo, flags, syn := bth.Opcode(data[0]), data[1], data[2], data[3]
			data = data[4:]
			if !op.Valid() {
				continue
			}
			info := op.Info()
			p := pkt{
				fromB:    flags&0x80 != 0,
				op:       op,
				psn:      bth.PSN(0xfffff0).Add(uint32(lo)),
				ackReq:   flags&0x40 != 0,
				syndrome: bth.Syndrome(syn),
				dmaLen:   uint32(flags&0x0f) << 9,
				badICRC:  flags&0x20 != 0,
			}
			if info.Payload {
				p.payload = int(flags&0x3) * 256
			}
			if info.FixedPayload >= 0 {
				p.payload = info.FixedPayload
			}
			e := bth.Encap{Src: addrA, Dst: addrB, TTL: 64, SrcPort: 49152}
			dest := qpB
			if p.fromB {
				e.Src, e.Dst, dest = addrB, addrA, qpA
			}
			h := bth.Headers{
				BTH:  bth.BTHFields{Opcode: p.op, DestQP: dest, AckReq: p.ackReq, PSN: p.psn},
				AETH: bth.AETHFields{Syndrome: p.syndrome},
				RETH: bth.RETHFields{DMALen: p.dmaLen},
				DETH: bth.DETHFields{SrcQP: qpB},
			}
			buf := make([]byte, e.Len()+h.TransportLen(p.payload))
			n, err := bth.Build(buf, &e, &h, make([]byte, p.payload))
			if err != nil {
				continue
			}
			if p.badICRC {
				buf[n-1] ^= 1
			}
			var bp bth.Packet
			if bp.Parse(buf[:n]) != nil {
				continue
			}
			frame++
			ev := a.Add(frame, time.Time{}, &bp, bp.VerifyICRC())
			if ev.Retransmission != slices.Contains(ev.Analysis, "retransmission") {
				t.Fatalf("frame %d: Retransmission=%v with analysis %q", frame, ev.Retransmission, ev.Analysis)
			}
			ev.Arrow()
			ev.AppendJSON(nil, 0)
			page.Add(&ev, &bp)
		}
		var out bytes.Buffer
		if err := page.Write(&out, "fuzz", ""); err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(out.String(), `id="frame-`); n != frame {
			t.Fatalf("the page draws %d arrows for %d packets", n, frame)
		}
		for _, c := range a.Conns() {
			for _, d := range c.dir {
				if len(d.outstanding) > MaxOutstanding || len(d.reqSeen.ring) > SentWindow {
					t.Fatal("a connection's state outgrew its bounds")
				}
			}
		}
	})
}

func TestReadResponseGapAndDuplicate(t *testing.T) {
	first := pkt{fromB: true, op: bth.RCReadResponseFirst, psn: 300, syndrome: bth.SyndromeACKUnlimited, msn: 1, payload: 1024}
	check(t, []pkt{
		{op: bth.RCReadRequest, psn: 300, ackReq: true, dmaLen: 4096},
		first,
		first,
		{fromB: true, op: bth.RCReadResponseLast, psn: 303, syndrome: bth.SyndromeACKUnlimited, msn: 1, payload: 1024},
	}, []string{
		"READ/atomic outstanding: 1",
		"READ response 1/4 for the READ request at frame 1",
		"retransmission; duplicate; READ response 1/4 for the READ request at frame 1",
		"out of sequence: expected PSN 0x00012d; READ response 4/4 for the READ request at frame 1; acks PSN 0x00012c..0x00012f",
	})
}

// TestReadsBeforeMTUKnown: READ requests sent before any response showed
// the path MTU leave the expected PSN loose; the end of the first READ's
// response must not pull it back behind the second READ (seen in a
// capture of sroce's read-bw against rdma_rxe, where every request after
// the first responses was called out of sequence).
func TestReadsBeforeMTUKnown(t *testing.T) {
	read := func(psn bth.PSN) pkt { return pkt{op: bth.RCReadRequest, psn: psn, ackReq: true, dmaLen: 4096} }
	resp := func(op bth.Opcode, psn bth.PSN, msn bth.MSN) pkt {
		p := pkt{fromB: true, op: op, psn: psn, payload: 1024}
		if op != bth.RCReadResponseMiddle {
			p.syndrome, p.msn = bth.SyndromeACKUnlimited, msn
		}
		return p
	}
	check(t, []pkt{
		read(200),
		read(204),
		resp(bth.RCReadResponseFirst, 200, 1),
		resp(bth.RCReadResponseMiddle, 201, 0),
		resp(bth.RCReadResponseMiddle, 202, 0),
		resp(bth.RCReadResponseLast, 203, 1),
		read(208),
		resp(bth.RCReadResponseFirst, 204, 2),
		resp(bth.RCReadResponseMiddle, 205, 0),
		resp(bth.RCReadResponseMiddle, 206, 0),
		resp(bth.RCReadResponseLast, 207, 2),
		send(212, true),
		read(213),
	}, []string{
		"READ/atomic outstanding: 1",
		"READ/atomic outstanding: 2",
		"READ response 1/4 for the READ request at frame 1",
		"READ response 2/4 for the READ request at frame 1",
		"READ response 3/4 for the READ request at frame 1",
		"READ response 4/4 for the READ request at frame 1; acks PSN 0x0000c8..0x0000cb",
		"READ/atomic outstanding: 2",
		"READ response 1/4 for the READ request at frame 2",
		"READ response 2/4 for the READ request at frame 2",
		"READ response 3/4 for the READ request at frame 2",
		"READ response 4/4 for the READ request at frame 2; acks PSN 0x0000cc..0x0000cf",
		"",
		"READ/atomic outstanding: 2",
	})
}

// TestReadAskedAgainInPart: a requester that lost a READ response asks
// again for the rest of that READ only (a READ at the lost PSN for the
// remaining bytes) while a later READ is still outstanding; the later
// READ's responses belong to it, not to the newer request at a lower PSN
// (seen in a lossy capture of sroce read-bw against rdma_rxe, where they
// were "READ response without a READ request seen").
func TestReadAskedAgainInPart(t *testing.T) {
	resp := func(op bth.Opcode, psn bth.PSN, msn bth.MSN) pkt {
		p := pkt{fromB: true, op: op, psn: psn, payload: 1024}
		if op != bth.RCReadResponseMiddle {
			p.syndrome, p.msn = bth.SyndromeACKUnlimited, msn
		}
		return p
	}
	check(t, []pkt{
		send(99, true),
		ack(99, 1),
		{op: bth.RCReadRequest, psn: 100, ackReq: true, dmaLen: 4096},
		{op: bth.RCReadRequest, psn: 104, ackReq: true, dmaLen: 4096},
		resp(bth.RCReadResponseFirst, 100, 2),
		resp(bth.RCReadResponseMiddle, 102, 0), // 101 is lost
		resp(bth.RCReadResponseMiddle, 102, 0),
		resp(bth.RCReadResponseLast, 103, 2),
		resp(bth.RCReadResponseFirst, 104, 3),
		resp(bth.RCReadResponseMiddle, 105, 0),
		{op: bth.RCReadRequest, psn: 101, ackReq: true, dmaLen: 3072}, // the rest of the first READ
		resp(bth.RCReadResponseMiddle, 106, 0),
		resp(bth.RCReadResponseLast, 107, 3),
		resp(bth.RCReadResponseFirst, 101, 2),
		resp(bth.RCReadResponseMiddle, 102, 0),
		resp(bth.RCReadResponseLast, 103, 2),
	}, []string{
		"",
		"acks PSN 0x000063",
		"READ/atomic outstanding: 1",
		"READ/atomic outstanding: 2",
		"READ response 1/4 for the READ request at frame 3",
		"out of sequence: expected PSN 0x000065; READ response 3/4 for the READ request at frame 3",
		"retransmission; duplicate; READ response 3/4 for the READ request at frame 3",
		"READ response 4/4 for the READ request at frame 3; acks PSN 0x000064..0x000067",
		"READ response 1/4 for the READ request at frame 4",
		"READ response 2/4 for the READ request at frame 4",
		"duplicate; READ/atomic outstanding: 2",
		"READ response 3/4 for the READ request at frame 4",
		"READ response 4/4 for the READ request at frame 4; acks PSN 0x000068..0x00006b",
		"READ response 1/3 for the READ request at frame 11",
		"retransmission; READ response 2/3 for the READ request at frame 11",
		"retransmission; READ response 3/3 for the READ request at frame 11",
	})
}

// TestReadAnsweredTwice: the requester sends a READ again while the
// first answer is on its way, and the responder answers both; the second
// answer belongs to the READ already answered (seen in a lossy capture
// between two rdma_rxe guests, where it was "READ response without a READ
// request seen"). A response that fits no READ at all still says so.
func TestReadAnsweredTwice(t *testing.T) {
	read := pkt{op: bth.RCReadRequest, psn: 100, ackReq: true, dmaLen: 2048}
	first := pkt{fromB: true, op: bth.RCReadResponseFirst, psn: 100, syndrome: bth.SyndromeACKUnlimited, msn: 1, payload: 1024}
	last := pkt{fromB: true, op: bth.RCReadResponseLast, psn: 101, syndrome: bth.SyndromeACKUnlimited, msn: 1, payload: 1024}
	stray := pkt{fromB: true, op: bth.RCReadResponseMiddle, psn: 150, payload: 1024}
	check(t, []pkt{
		read,
		read,
		first,
		last,
		first,
		last,
		stray,
	}, []string{
		"READ/atomic outstanding: 1",
		"retransmission; duplicate; READ/atomic outstanding: 1",
		"READ response 1/2 for the READ request at frame 2",
		"READ response 2/2 for the READ request at frame 2; acks PSN 0x000064..0x000065",
		"retransmission; duplicate; READ response 1/2 for the READ request at frame 2, answered already",
		"retransmission; duplicate; READ response 2/2 for the READ request at frame 2, answered already",
		"READ response without a READ request seen",
	})
}

// TestManyPairsForgotten feeds more QP pairs than an analyzer follows: it
// keeps MaxConns, counts the rest, and a pair seen again after it was
// forgotten starts afresh.
func TestManyPairsForgotten(t *testing.T) {
	var a Analyzer
	t0 := time.Unix(1700000000, 0)
	frame := build(t, send(0x10, true))
	add := func(qpn bth.QPN, n int) Event {
		var bp bth.Packet
		f := append([]byte(nil), frame...)
		if err := bp.Parse(f); err != nil {
			t.Fatal(err)
		}
		bf := bp.BTH().Fields()
		bf.DestQP = qpn
		bf.Encode(bp.BTH())
		return a.Add(n, t0, &bp, true)
	}
	const pairs = 3 * MaxConns
	for i := 0; i < pairs; i++ {
		add(bth.QPN(0x100+i), i+1)
	}
	if len(a.Conns()) != MaxConns || a.Seen() != pairs || a.Forgotten() != pairs-MaxConns || len(a.dirs) != MaxConns {
		t.Fatalf("following %d pairs (%d directions), seen %d, forgotten %d", len(a.Conns()), len(a.dirs), a.Seen(), a.Forgotten())
	}
	if ev := add(0x100, pairs+1); ev.Conn.ID != pairs+1 {
		t.Errorf("a forgotten pair seen again is pair %d, want a new pair %d", ev.Conn.ID, pairs+1)
	}
}

// TestLadderLineBound feeds more packets than the text ladder keeps: the
// rest are counted and said so when it is written.
func TestLadderLineBound(t *testing.T) {
	var a Analyzer
	l := NewLadder()
	var bp bth.Packet
	t0 := time.Unix(1700000000, 0)
	for i := 0; i < MaxLadderLines+5; i++ {
		if err := bp.Parse(build(t, send(bth.PSN(i), false))); err != nil {
			t.Fatal(err)
		}
		ev := a.Add(i+1, t0, &bp, true)
		l.Add(&ev)
	}
	var b strings.Builder
	if err := l.Flush(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if n := strings.Count(out, "\n"); n != MaxLadderLines+3 {
		t.Errorf("%d lines written, want the header, %d packets and the note", n, MaxLadderLines)
	}
	if !strings.Contains(out, "... 5 more packets of this QP pair not shown") {
		t.Errorf("no note of the packets left out; the output ends with %q", out[len(out)-200:])
	}
}

// TestReordered feeds a connection's packets in reverse order: the
// receiver took the first as the start, so each later one is below the PSN
// it expects, a duplicate as an RC responder sees it, and none is a
// retransmission (its sender sent each PSN once).
func TestReordered(t *testing.T) {
	var ps []pkt
	for i := 9; i >= 0; i-- {
		ps = append(ps, send(bth.PSN(0x100+i), false))
	}
	evs := run(t, ps)
	for i, ev := range evs[1:] {
		if !slices.Contains(ev.Analysis, "duplicate") || ev.Retransmission {
			t.Errorf("frame %d (PSN %#x, sent before the one ahead of it): analysis %q, retransmission %v",
				i+2, uint32(ev.PSN), ev.Analysis, ev.Retransmission)
		}
	}
}
