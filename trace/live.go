package trace

// Live traces: a device's engine events (roce.Device.Subscribe, or its
// trace socket) on one timeline with its packets. Frames go through
// dissect's decoder and the Analyzer, as in a capture; the engine's own
// events (posts, timers, retransmissions, completions, QP states) become
// lines of their own between the packets.

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gopacket/gopacket/layers"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/dissect"
	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/verbs"
)

// Peek returns the Event of a packet the way Add would label it (its
// fields and, when its QP pair is known, which side sent it) without
// changing the analysis: for packets the receiver never saw.
func (a *Analyzer) Peek(frame int, t time.Time, p *bth.Packet, icrcOK bool) Event {
	ev := newEvent(frame, t, p, icrcOK)
	ev.FromA = true
	if h, ok := a.dirs[dirKey{ev.Src, ev.Dst, ev.DestQP}]; ok {
		ev.Conn, ev.FromA = h.c, h.d == 0
		return ev
	}
	for _, c := range a.conns {
		switch {
		case c.A.Addr == ev.Src && c.B.Addr == ev.Dst && c.B.QPN == ev.DestQP:
			ev.Conn = c
			return ev
		case c.B.Addr == ev.Src && c.A.Addr == ev.Dst && c.A.QPN == ev.DestQP:
			ev.Conn, ev.FromA = c, false
			return ev
		}
	}
	return ev
}

// Entry is one line of a live trace: a packet with its analysis or an
// engine event.
type Entry struct {
	// Time is when the device saw it (wall clock).
	Time time.Time
	// Side names the device that reported it when the timeline merges
	// several ("A", "B"), or is empty.
	Side string
	// Engine is the engine event; for packets it is the TraceTx or
	// TraceRx event that carried the frame.
	Engine roce.TraceEvent
	// Packet is the decoded packet with its analysis (nil for engine
	// events).
	Packet *Event
	// Lost marks a packet the device's impairment dropped: the analysis
	// did not see it, as its receiver did not.
	Lost bool
	// NewPair is set on the first packet of a QP pair.
	NewPair bool
}

// Timeline turns trace events into entries: packets are decoded and
// analysed in the order they come, engine events pass through.
type Timeline struct {
	// TxOnly analyses only the frames each device sent, for a timeline
	// that merges both ends of the links (each packet would otherwise
	// come twice); a single device's trace analyses what it sent and
	// what it received.
	TxOnly bool

	an      Analyzer
	dec     dissect.Decoder
	frames  int
	start   time.Time
	started bool
	pairs   int
	// lostSent remembers the requests the impairment dropped (sender,
	// receiver, QP, PSN), so that sending one again shows as a
	// retransmission although the analysis never saw the first.
	lostSent map[dirKeyPSN]bool
	// Skipped counts frames that were not RoCEv2, or could not be
	// decoded, or were cut short.
	Skipped int
}

// Analyzer returns the timeline's analysis, for its QP pairs.
func (tl *Timeline) Analyzer() *Analyzer { return &tl.an }

// Add turns one trace event, reported by side at wall time t, into an
// entry; false means it makes none (a frame the timeline does not
// analyse).
func (tl *Timeline) Add(side string, ev *roce.TraceEvent, t time.Time) (Entry, bool) {
	e := Entry{Time: t, Side: side, Engine: *ev}
	if !tl.started {
		tl.start, tl.started = t, true
	}
	if ev.Kind != roce.TraceTx && ev.Kind != roce.TraceRx {
		return e, true
	}
	if ev.Kind == roce.TraceRx && tl.TxOnly {
		return e, false
	}
	fm := tl.dec.Decode(ev.Frame, layers.LinkTypeEthernet, ev.FrameLen)
	if fm.Kind != dissect.RoCE {
		tl.Skipped++
		return e, false
	}
	tl.frames++
	var pe Event
	p := &tl.dec.Packet
	k := dirKeyPSN{dirKey{p.SrcAddr(), p.DstAddr(), p.BTH().DestQP()}, p.BTH().PSN(), p.Opcode}
	if ev.Dropped {
		pe = tl.an.Peek(tl.frames, t, p, fm.ICRCOK)
		pe.Analysis = append(pe.Analysis, "lost on the way (dropped by the impairment)")
		e.Lost = true
		if tl.lostSent == nil || len(tl.lostSent) >= SentWindow {
			tl.lostSent = make(map[dirKeyPSN]bool)
		}
		tl.lostSent[k] = true
	} else {
		pe = tl.an.Add(tl.frames, t, p, fm.ICRCOK)
		if tl.lostSent[k] {
			delete(tl.lostSent, k)
			if !pe.Retransmission {
				pe.Retransmission = true
				pe.Analysis = append([]string{"retransmission of a lost packet"}, pe.Analysis...)
			}
		}
		if n := len(tl.an.conns); n > tl.pairs {
			tl.pairs, e.NewPair = n, true
		}
	}
	e.Packet = &pe
	return e, true
}

// dirKeyPSN names one packet of one direction.
type dirKeyPSN struct {
	dirKey
	psn bth.PSN
	op  bth.Opcode
}

// Start returns the time of the first entry, which Line counts from.
func (tl *Timeline) Start() time.Time { return tl.start }

// PairHeader returns the header of a QP pair: "QP pair 1: A 10.0.0.1 QP
// 0x000011 <-> B 10.0.0.2 QP 0x000012".
func PairHeader(c *Conn) string { return fmt.Sprintf("QP pair %d: A %s <-> B %s", c.ID, c.A, c.B) }

// Line formats an entry as the live ladder prints it: the frame number
// (packets only), the time since the first entry, the side, and the
// packet's arrow with its analysis or "* " and the engine event.
func (tl *Timeline) Line(e *Entry) string {
	var b strings.Builder
	if e.Packet != nil {
		fmt.Fprintf(&b, "%6d", e.Packet.Frame)
	} else {
		b.WriteString("      ")
	}
	fmt.Fprintf(&b, " %11s  ", relTime(e.Time.Sub(tl.start)))
	if e.Side != "" {
		fmt.Fprintf(&b, "%-2s ", e.Side)
	}
	if e.Packet == nil {
		b.WriteString("* ")
		b.WriteString(Describe(&e.Engine))
		return b.String()
	}
	if tl.pairs > 1 && e.Packet.Conn != nil {
		fmt.Fprintf(&b, "[%d] ", e.Packet.Conn.ID)
	}
	arrow := e.Packet.Arrow()
	if e.Lost {
		// The arrow ends in X: the packet never arrived.
		if e.Packet.FromA {
			arrow = arrow[:len(arrow)-1] + "X"
		} else {
			arrow = "X" + arrow[1:]
		}
	}
	b.WriteString(arrow)
	if len(e.Packet.Analysis) > 0 {
		b.WriteString("  ")
		b.WriteString(strings.Join(e.Packet.Analysis, "; "))
	}
	return b.String()
}

// Describe says what an engine event is in a line: "QP 0x000011 posts
// RDMA_WRITE wr_id=0 length=2500", "QP 0x000011 retransmit timer armed:
// fires in 16.777 ms".
func Describe(ev *roce.TraceEvent) string {
	qpn := fmt.Sprintf("QP %#06x", uint32(ev.QPN))
	switch ev.Kind {
	case roce.TracePostSend:
		return fmt.Sprintf("%s posts %v wr_id=%d length=%d", qpn, ev.WROpcode, ev.WRID, ev.Length)
	case roce.TracePostRecv:
		return fmt.Sprintf("%s posts a receive wr_id=%d room=%d", qpn, ev.WRID, ev.Length)
	case roce.TraceTimerArmed:
		return fmt.Sprintf("%s %v timer armed: fires in %s", qpn, ev.Timer, msText(ev.Deadline.Sub(ev.Time)))
	case roce.TraceTimerFired:
		return fmt.Sprintf("%s %v timer fired", qpn, ev.Timer)
	case roce.TraceTimerStopped:
		return fmt.Sprintf("%s %v timer stopped: everything sent is acknowledged", qpn, ev.Timer)
	case roce.TraceRetransmit:
		return fmt.Sprintf("%s goes back to PSN %s and sends again (%v)", qpn, psnText(ev.PSN), ev.Reason)
	case roce.TraceCompletion:
		s := fmt.Sprintf("%s completion wr_id=%d %v %s", qpn, ev.WRID, ev.WCOpcode, ev.Status)
		if ev.WCOpcode == verbs.WCRecv || ev.WCOpcode == verbs.WCRecvRDMAWithImm {
			s += fmt.Sprintf(" length=%d", ev.Length)
		}
		return s
	case roce.TraceQPState:
		return fmt.Sprintf("%s %v -> %v", qpn, ev.FromState, ev.ToState)
	case roce.TraceLost:
		return fmt.Sprintf("%d trace events lost: the reader fell behind", ev.Lost)
	case roce.TraceTx, roce.TraceRx:
		what := "sent"
		if ev.Kind == roce.TraceRx {
			what = "received"
		}
		return fmt.Sprintf("%s a %d-byte frame that is not RoCEv2", what, ev.FrameLen)
	}
	return ev.Kind.String()
}

// msText formats a span in milliseconds.
func msText(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/1e6, 'f', 3, 64) + " ms"
}

// jsonLive is the JSON form of an entry.
type jsonLive struct {
	Kind    string          `json:"kind"`
	Time    string          `json:"time"`
	Side    string          `json:"side,omitempty"`
	QPN     *uint32         `json:"qpn,omitempty"`
	WRID    *uint64         `json:"wr_id,omitempty"`
	Opcode  string          `json:"opcode,omitempty"`
	Status  string          `json:"status,omitempty"`
	Length  *uint32         `json:"length,omitempty"`
	Timer   string          `json:"timer,omitempty"`
	FiresIn string          `json:"fires_in,omitempty"`
	Reason  string          `json:"reason,omitempty"`
	PSN     *uint32         `json:"psn,omitempty"`
	From    string          `json:"from,omitempty"`
	To      string          `json:"to,omitempty"`
	Lost    *uint64         `json:"lost,omitempty"`
	Dropped bool            `json:"dropped,omitempty"`
	Text    string          `json:"text,omitempty"`
	Packet  json.RawMessage `json:"packet,omitempty"`
}

// AppendJSON appends e as one JSON object and a newline: kind (the
// engine event's kind: post_send, tx, rx, timer_armed, ...), time (since
// the first entry), side, the event's fields, text (the line Describe
// writes) and, for packets, packet (the object Event.AppendJSON writes).
func (tl *Timeline) AppendJSON(b []byte, e *Entry) []byte {
	ev := &e.Engine
	j := jsonLive{Kind: ev.Kind.String(), Time: relTime(e.Time.Sub(tl.start)), Side: e.Side}
	u32 := func(v uint32) *uint32 { return &v }
	switch ev.Kind {
	case roce.TraceTx, roce.TraceRx:
		j.Dropped = ev.Dropped
		if e.Packet != nil {
			j.Packet = e.Packet.AppendJSON(nil, e.Time.Sub(tl.start))
			j.Packet = j.Packet[:len(j.Packet)-1] // the newline
		}
	case roce.TraceLost:
		j.Lost = &ev.Lost
	default:
		j.QPN = u32(uint32(ev.QPN))
	}
	switch ev.Kind {
	case roce.TracePostSend:
		j.WRID, j.Opcode, j.Length = &ev.WRID, ev.WROpcode.String(), &ev.Length
	case roce.TracePostRecv:
		j.WRID, j.Length = &ev.WRID, &ev.Length
	case roce.TraceCompletion:
		j.WRID, j.Opcode, j.Status, j.Length = &ev.WRID, ev.WCOpcode.String(), ev.Status.String(), &ev.Length
	case roce.TraceTimerArmed:
		j.Timer, j.FiresIn = ev.Timer.String(), relTime(ev.Deadline.Sub(ev.Time))
	case roce.TraceTimerFired, roce.TraceTimerStopped:
		j.Timer = ev.Timer.String()
	case roce.TraceRetransmit:
		j.Reason, j.PSN = ev.Reason.String(), u32(uint32(ev.PSN))
	case roce.TraceQPState:
		j.From, j.To = ev.FromState.String(), ev.ToState.String()
	}
	if e.Packet == nil {
		j.Text = Describe(ev)
	}
	out, err := json.Marshal(&j)
	if err != nil { // cannot happen: every field marshals
		panic(err)
	}
	return append(append(b, out...), '\n')
}

// Comment returns the text a capture file carries for a packet's entry:
// its arrow label and analysis, for a pcapng per-packet comment.
func Comment(e *Entry) string {
	if e.Packet == nil {
		return Describe(&e.Engine)
	}
	s := e.Packet.Label()
	if len(e.Packet.Analysis) > 0 {
		s += ": " + strings.Join(e.Packet.Analysis, "; ")
	}
	return s
}
