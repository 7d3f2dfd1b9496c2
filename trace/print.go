package trace

// Printing events: a ladder per QP pair (text, gathered per connection and
// written at the end), or one JSON object per packet as it comes.

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// arrowWidth is the width of the ladder's arrow column.
const arrowWidth = 64

// Label returns what the ladder writes on a packet's arrow: the opcode
// (without the RC_ prefix), the PSN and the flags and fields that matter
// to the exchange: "SEND_ONLY psn=0x00007b ackreq len=8". A management
// datagram is named by its message: "CM REQ psn=0x000000".
func (e *Event) Label() string {
	var b strings.Builder
	if e.MAD != "" {
		b.WriteString(e.MAD)
		b.WriteString(" psn=")
		b.WriteString(psnText(e.PSN))
		return b.String()
	}
	b.WriteString(strings.TrimPrefix(e.Opcode.String(), "RC_"))
	b.WriteString(" psn=")
	b.WriteString(psnText(e.PSN))
	if e.AckReq {
		b.WriteString(" ackreq")
	}
	if e.HasRETH {
		b.WriteString(" dmalen=")
		b.WriteString(strconv.FormatUint(uint64(e.DMALen), 10))
	}
	if e.HasAETH {
		s := e.Syndrome
		switch {
		case s.IsRNR():
			b.WriteString(" RNR")
		case s.IsNAK():
			b.WriteString(" NAK")
		}
		b.WriteString(" msn=")
		b.WriteString(strconv.FormatUint(uint64(e.MSN), 10))
	}
	if e.PayLen > 0 {
		b.WriteString(" len=")
		b.WriteString(strconv.Itoa(e.PayLen))
	}
	return b.String()
}

// Arrow returns the label drawn as an arrow from A to B ("---- label --->")
// or from B to A ("<--- label ----"), arrowWidth wide at least.
func (e *Event) Arrow() string {
	l := " " + e.Label() + " "
	fill := max(arrowWidth-len(l)-5, 2)
	if e.FromA {
		return "----" + l + strings.Repeat("-", fill) + ">"
	}
	return "<" + strings.Repeat("-", fill) + l + "----"
}

// Ladder writes the text ladder: Add gathers each connection's lines, Flush
// writes them, a connection at a time, with a header naming its two
// endpoints. Times are relative to the first packet added.
type Ladder struct {
	start   time.Time
	first   bool
	conns   []*Conn
	lines   map[*Conn][]string
	kept    int
	omitted map[*Conn]int
}

// MaxLadderLines bounds the lines a Ladder keeps until Flush (about 100
// bytes each); the packets beyond are counted per QP pair and said so.
// JSON output streams every packet instead.
const MaxLadderLines = 200000

// NewLadder returns an empty ladder.
func NewLadder() *Ladder {
	return &Ladder{first: true, lines: make(map[*Conn][]string), omitted: make(map[*Conn]int)}
}

// Add records one event's line.
func (l *Ladder) Add(e *Event) {
	if l.first {
		l.start, l.first = e.Time, false
	}
	if _, ok := l.lines[e.Conn]; !ok {
		if _, ok := l.omitted[e.Conn]; !ok {
			l.conns = append(l.conns, e.Conn)
		}
	}
	if l.kept >= MaxLadderLines {
		l.omitted[e.Conn]++
		return
	}
	l.kept++
	line := fmt.Sprintf("%6d %11s  %s", e.Frame, relTime(e.Time.Sub(l.start)), e.Arrow())
	if len(e.Analysis) > 0 {
		line += "  " + strings.Join(e.Analysis, "; ")
	}
	l.lines[e.Conn] = append(l.lines[e.Conn], line)
}

// relTime formats a time since the first packet in seconds, to the
// microsecond.
func relTime(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds(), 'f', 6, 64)
}

// Flush writes every connection's ladder and forgets them.
func (l *Ladder) Flush(w io.Writer) error {
	for i, c := range l.conns {
		if i > 0 {
			if _, err := io.WriteString(w, "\n"); err != nil {
				return err
			}
		}
		hdr := fmt.Sprintf("QP pair %d: A %s <-> B %s\n%6s %11s  %-*sB\n",
			c.ID, c.A, c.B, "frame", "time", arrowWidth-1, "A")
		if _, err := io.WriteString(w, hdr); err != nil {
			return err
		}
		for _, s := range l.lines[c] {
			if _, err := io.WriteString(w, s+"\n"); err != nil {
				return err
			}
		}
		if n := l.omitted[c]; n > 0 {
			note := fmt.Sprintf("   ... %d more packets of this QP pair not shown: the text ladder keeps %d lines (--json prints every packet)\n", n, MaxLadderLines)
			if _, err := io.WriteString(w, note); err != nil {
				return err
			}
		}
	}
	l.conns, l.lines, l.kept, l.omitted = nil, make(map[*Conn][]string), 0, make(map[*Conn]int)
	return nil
}

// jsonEvent is the JSON form of an event.
type jsonEvent struct {
	Frame          int      `json:"frame"`
	Time           string   `json:"time"`
	Conn           int      `json:"qp_pair"`
	Src            string   `json:"src"`
	Dst            string   `json:"dst"`
	DestQP         uint32   `json:"destqp"`
	Opcode         string   `json:"opcode"`
	MAD            string   `json:"mad,omitempty"`
	PSN            uint32   `json:"psn"`
	AckReq         bool     `json:"ackreq"`
	Syndrome       string   `json:"aeth,omitempty"`
	MSN            *uint32  `json:"msn,omitempty"`
	DMALen         *uint32  `json:"dmalen,omitempty"`
	PayLen         int      `json:"len"`
	ICRCOK         bool     `json:"icrc_ok"`
	Retransmission bool     `json:"retransmission"`
	Analysis       []string `json:"analysis"`
}

// AppendJSON appends e as one JSON object and a newline; rel is its time
// since the first packet.
func (e *Event) AppendJSON(b []byte, rel time.Duration) []byte {
	j := jsonEvent{
		Frame: e.Frame, Time: relTime(rel), Conn: e.Conn.ID,
		Src: e.Src.String(), Dst: e.Dst.String(), DestQP: uint32(e.DestQP),
		Opcode: e.Opcode.String(), MAD: e.MAD, PSN: uint32(e.PSN), AckReq: e.AckReq,
		PayLen: e.PayLen, ICRCOK: e.ICRCOK, Retransmission: e.Retransmission,
		Analysis: e.Analysis,
	}
	if j.Analysis == nil {
		j.Analysis = []string{}
	}
	if e.HasAETH {
		j.Syndrome = e.Syndrome.String()
		msn := uint32(e.MSN)
		j.MSN = &msn
	}
	if e.HasRETH {
		n := e.DMALen
		j.DMALen = &n
	}
	out, err := json.Marshal(&j)
	if err != nil { // cannot happen: every field marshals
		panic(err)
	}
	return append(append(b, out...), '\n')
}
