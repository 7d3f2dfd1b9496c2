package main

// sroce demo --explain: both devices' traces (roce.Device.Subscribe) are
// gathered during each operation, merged on one timeline by package trace
// (the packets each side sent, so every packet shows once, and those the
// impairment dropped marked lost) and printed as a ladder after the
// operation, with plain-language lines under the steps that matter.

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/qp"
	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/trace"
	"github.com/sroce/sroce/verbs"
)

// explainIndent lines up an explanation under a ladder line's arrow.
const explainIndent = "                         ~ "

// explainer gathers and prints the demo's ladders.
type explainer struct {
	w     io.Writer
	subs  [2]*roce.Subscription
	sides [2]string
	qpn   map[bth.QPN]string // QPN -> side, to name QPs in words
	tl    trace.Timeline
	mtu   int
	// told remembers explanations given once per operation.
	told map[string]bool
	// Totals over the run, for the closing summary.
	lost, retrans int
}

// newExplainer subscribes to both devices.
func newExplainer(w io.Writer, devs [2]*roce.Device) (*explainer, error) {
	x := &explainer{w: w, sides: [2]string{"A", "B"}, qpn: map[bth.QPN]string{}}
	x.tl.TxOnly = true
	for i, d := range devs {
		s, err := d.Subscribe(&roce.TraceOptions{Events: 1 << 16, Bytes: 64 << 20})
		if err != nil {
			return nil, fmt.Errorf("cannot follow %s's engine: %w", x.sides[i], err)
		}
		x.subs[i] = s
	}
	return x, nil
}

// close detaches from the devices.
func (x *explainer) close() {
	if x == nil {
		return
	}
	for _, s := range x.subs {
		if s != nil {
			s.Close()
		}
	}
}

// stamped is an event with the side that reported it and its wall time.
type stamped struct {
	side string
	t    time.Time
	ev   roce.TraceEvent
}

// gather waits until both engines have been quiet for a little while (at
// most 2 s) and returns their events in time order.
func (x *explainer) gather() []stamped {
	var evs []stamped
	quietSince := time.Now()
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		got := false
		for i, s := range x.subs {
			for {
				ev, ok := s.Poll()
				if !ok {
					break
				}
				got = true
				evs = append(evs, stamped{x.sides[i], s.Wall(ev.Time), ev})
			}
		}
		if got {
			quietSince = time.Now()
		} else if time.Since(quietSince) > 40*time.Millisecond {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].t.Before(evs[j].t) })
	return evs
}

// show prints the ladder of what happened since the last show, with its
// explanations.
func (x *explainer) show() {
	x.told = map[string]bool{}
	for _, s := range x.gather() {
		e, ok := x.tl.Add(s.side, &s.ev, s.t)
		if !ok || x.skip(&e) {
			continue
		}
		if e.NewPair {
			fmt.Fprintf(x.w, "%s\n", trace.PairHeader(e.Packet.Conn))
		}
		fmt.Fprintf(x.w, "%s\n", x.tl.Line(&e))
		for _, l := range x.explain(&e) {
			fmt.Fprintf(x.w, "%s%s\n", explainIndent, l)
		}
	}
	fmt.Fprintln(x.w)
}

// skip leaves out events that only repeat what the ladder shows: a
// retransmit timer armed again while it runs (every ACK that acknowledges
// something restarts it).
func (x *explainer) skip(e *trace.Entry) bool {
	ev := &e.Engine
	if e.Packet == nil && ev.Kind == roce.TraceTimerArmed && ev.Timer == qp.TimerRetransmit {
		k := "armed " + e.Side
		if x.told[k] {
			return true
		}
		x.told[k] = true
	}
	if e.Packet == nil && (ev.Kind == roce.TraceTimerStopped || ev.Kind == roce.TraceTimerFired) {
		delete(x.told, "armed "+e.Side)
	}
	return false
}

// once returns s the first time key is asked for in an operation.
func (x *explainer) once(key, s string) []string {
	if x.told[key] {
		return nil
	}
	x.told[key] = true
	return []string{s}
}

// explain returns the plain-language lines for an entry.
func (x *explainer) explain(e *trace.Entry) []string {
	who := e.Side
	other := "B"
	if who == "B" {
		other = "A"
	}
	ev := &e.Engine
	if e.Packet == nil {
		switch ev.Kind {
		case roce.TraceQPState:
			switch ev.ToState {
			case verbs.QPStateInit:
				return []string{who + "'s QP exists and has its access rights (what the peer may do to " + who + "'s memory)"}
			case verbs.QPStateRTR:
				return []string{"Ready To Receive: " + who + " knows the peer's QP number and the first PSN (packet sequence number) to expect"}
			case verbs.QPStateRTS:
				return []string{"Ready To Send: " + who + " has its own first PSN, its retransmit timeout and retry count"}
			case verbs.QPStateErr:
				return []string{who + "'s QP failed: outstanding work completes with an error"}
			}
		case roce.TracePostSend:
			s := fmt.Sprintf("%s's application posts the work request (%v) and goes on with its business; the engine does the rest", who, ev.WROpcode)
			if int(ev.Length) > x.mtu && ev.WROpcode != verbs.WROpRDMARead {
				n := (int(ev.Length) + x.mtu - 1) / x.mtu
				s += fmt.Sprintf(" (%d bytes: %d packets of at most %d bytes, the path MTU)", ev.Length, n, x.mtu)
			}
			return []string{s}
		case roce.TracePostRecv:
			return []string{who + " posts a receive buffer: an arriving SEND (or WRITE with immediate) consumes one"}
		case roce.TraceTimerArmed:
			if ev.Timer == qp.TimerRNR {
				return []string{fmt.Sprintf("%s waits %s before trying again, as the RNR NAK asked", who, fmtSpan(ev.Deadline.Sub(ev.Time)))}
			}
			return x.once("armed", fmt.Sprintf("%s starts its retransmit timer: if nothing is acknowledged within %s, it sends again", who, fmtSpan(ev.Deadline.Sub(ev.Time))))
		case roce.TraceTimerStopped:
			return x.once("stopped", "everything "+who+" sent is acknowledged, so the timer stops")
		case roce.TraceTimerFired:
			if ev.Timer == qp.TimerRNR {
				return []string{"the RNR wait is over"}
			}
			return []string{"the timer expired: no acknowledgement came in time, so " + who + " must assume a packet or its ACK was lost"}
		case roce.TraceRetransmit:
			x.retrans++
			switch ev.Reason {
			case qp.RetryTimeout:
				return []string{fmt.Sprintf("RETRANSMISSION after a timeout: %s goes back to PSN %#06x, the oldest one not acknowledged, and sends from there again", who, uint32(ev.PSN))}
			case qp.RetrySeqNAK:
				return []string{fmt.Sprintf("RETRANSMISSION after the NAK: %s goes back to PSN %#06x and sends everything from there again (go-back-N)", who, uint32(ev.PSN))}
			case qp.RetryRNR:
				return []string{fmt.Sprintf("%s will send again from PSN %#06x once the RNR wait is over", who, uint32(ev.PSN))}
			case qp.RetryImpliedNAK:
				return []string{fmt.Sprintf("RETRANSMISSION: the response to an earlier READ or atomic never came (a later one did), so %s asks again from PSN %#06x", who, uint32(ev.PSN))}
			}
		case roce.TraceCompletion:
			if ev.Status != verbs.WCSuccess {
				return []string{fmt.Sprintf("%s's work request failed: %s", who, ev.Status)}
			}
			switch ev.WCOpcode {
			case verbs.WCRecv:
				return []string{fmt.Sprintf("%s's application learns that a %d-byte message arrived in its receive buffer", who, ev.Length)}
			case verbs.WCRecvRDMAWithImm:
				return []string{who + "'s application learns of the WRITE through the immediate value; the data is already in its memory"}
			case verbs.WCRDMAWrite:
				return []string{"done: " + who + "'s application gets its completion, " + other + "'s memory holds the data (" + other + "'s application was not involved)"}
			case verbs.WCRDMARead:
				return []string{"done: the data read from " + other + "'s memory is in " + who + "'s buffer"}
			case verbs.WCFetchAdd, verbs.WCCompSwap:
				return []string{"done: " + who + " has the value " + other + "'s word held before the atomic"}
			case verbs.WCSend:
				return []string{"done: " + other + " acknowledged the whole message"}
			}
		case roce.TraceLost:
			return []string{"(the trace fell behind and lost these events)"}
		}
		return nil
	}
	p := e.Packet
	var out []string
	if e.Lost {
		x.lost++
		return []string{"LOST on the way: the impairment dropped this packet, as a congested switch would; " + other + " never sees it"}
	}
	if p.Retransmission {
		out = append(out, "this PSN again: a retransmission")
	}
	for _, a := range p.Analysis {
		switch {
		case strings.HasPrefix(a, "out of sequence: expected PSN "):
			out = append(out, fmt.Sprintf("%s expected %s: a packet before this one is missing, so %s cannot take this one", other, strings.TrimPrefix(a, "out of sequence: expected "), other))
		case a == "duplicate":
			op := p.Opcode.Info().Op
			switch {
			case op == bth.OpReadRequest:
				out = append(out, fmt.Sprintf("%s has answered a READ at this PSN before: it reads its memory again and sends the responses from PSN %#06x", other, uint32(p.PSN)))
			case op.Atomic():
				out = append(out, other+" did this atomic already: it sends the result it saved again, and does not do the operation twice")
			case p.AckReq:
				out = append(out, other+" already has this PSN (it arrived the first time): it drops the copy and acknowledges again, so "+who+" can move on")
			default:
				out = append(out, other+" already has this PSN (it arrived the first time): it drops the copy")
			}
		}
	}
	info := p.Opcode.Info()
	switch {
	case p.HasAETH && p.Syndrome.IsNAK() && p.Syndrome.Value() == bth.NAKPSNSeqError:
		out = append(out, fmt.Sprintf("%s sends a sequence NAK: \"I am missing PSN %#06x, send again from there\"", who, uint32(p.PSN)))
	case p.HasAETH && p.Syndrome.IsNAK():
		out = append(out, fmt.Sprintf("%s refuses the request (%s): it fails with an error at %s", who, p.Syndrome, other))
	case p.HasAETH && p.Syndrome.IsRNR():
		out = append(out, who+" had no receive buffer posted: the RNR NAK tells "+other+" to wait and try again")
	case p.Opcode == bth.RCAcknowledge:
		for _, a := range p.Analysis {
			if strings.HasPrefix(a, "acks PSN ") {
				rng := strings.TrimPrefix(a, "acks PSN ")
				if lo, hi, ok := strings.Cut(rng, ".."); ok && lo != hi {
					out = append(out, fmt.Sprintf("one ACK covers every packet up to PSN %s (%s..%s): ACKs are cumulative", hi, lo, hi))
				} else {
					out = append(out, "the ACK says: everything up to PSN "+rng+" arrived")
				}
			}
		}
	case p.Opcode == bth.RCAtomicAcknowledge:
		out = append(out, x.once("atomic ack "+who, who+" did the atomic on its memory and returns the value the word held before")...)
	case info.Op == bth.OpReadResponse:
		out = append(out, x.once("read resp "+who, who+" answers the READ with the data itself; the responses are the acknowledgement")...)
	case info.Request && !p.Retransmission:
		if info.Op == bth.OpReadRequest {
			out = append(out, x.once("read req "+who, fmt.Sprintf("%s asks for %d bytes of %s's memory: one request, the data comes back in responses", who, p.DMALen, other))...)
		} else if info.Op.Atomic() {
			out = append(out, x.once("atomic req "+who, who+" asks "+other+"'s engine to do an atomic operation on an 8-byte word of "+other+"'s memory")...)
		} else {
			out = append(out, x.once("psn "+who, "every packet carries the next PSN, so that "+other+" can tell when one is missing")...)
		}
		if p.AckReq && info.Op != bth.OpReadRequest && !info.Op.Atomic() {
			out = append(out, x.once("ackreq "+who, "ackreq: the last packet of the message asks "+other+" to acknowledge")...)
		}
	}
	return out
}

// fmtSpan formats a timer's span in ms.
func fmtSpan(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/1e6) }

// explainIntro is what the demo says before each operation's ladder.
func explainIntro(op string, size, mtu int) string {
	switch op {
	case "SEND A->B":
		return fmt.Sprintf("A SENDs a %d-byte message to B. B must have posted a receive buffer first; the data lands there and B's application gets a completion.", size)
	case "RDMA WRITE A->B":
		return fmt.Sprintf("A WRITEs %d bytes straight into B's memory (address and rkey B gave A beforehand). B's engine places the data and acknowledges; B's application is not involved.", size)
	case "RDMA WRITE+imm A->B":
		return "The same WRITE, carrying a 32-bit immediate value: this one consumes a receive at B and gives B's application a completion."
	case "RDMA READ A<-B":
		return fmt.Sprintf("A READs %d bytes from B's memory: one request packet, B's engine answers with the data in packets of at most %d bytes.", size, mtu)
	case "FETCH_ADD on B":
		return "A adds a number to an 8-byte word in B's memory and gets the old value back, atomically."
	case "COMPARE_SWAP on B":
		return "A swaps B's word for a new value if it still holds the expected one, and gets the old value back; the second try compares with a wrong value and changes nothing."
	}
	return ""
}

// explainSize is --explain's message size: three packets at path MTU 1024.
const explainSize = 2500

// summary prints what the run's ladders showed of recovery.
func (x *explainer) summary() {
	switch {
	case x.lost == 0 && x.retrans == 0:
		fmt.Fprintf(x.w, "No packet was lost, so nothing was sent twice: every request was acknowledged the first time.\n")
		fmt.Fprintf(x.w, "Run with --loss 10 to see how RC recovers from losses.\n")
	default:
		fmt.Fprintf(x.w, "%d packet(s) were lost on the way and the requesters went back %d time(s) to send again;\n", x.lost, x.retrans)
		fmt.Fprintf(x.w, "every operation still completed with the right data: that is what the reliable connection (RC) guarantees.\n")
	}
}

// wrapText breaks s into lines of at most width characters.
func wrapText(s string, width int) string {
	var b strings.Builder
	n := 0
	for _, w := range strings.Fields(s) {
		if n > 0 && n+1+len(w) > width {
			b.WriteByte('\n')
			n = 0
		} else if n > 0 {
			b.WriteByte(' ')
			n++
		}
		b.WriteString(w)
		n += len(w)
	}
	return b.String()
}
