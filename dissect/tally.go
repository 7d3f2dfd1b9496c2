package dissect

import (
	"fmt"
	"slices"

	"github.com/gopacket/gopacket/layers"
)

// Tally counts decoded frames by kind. The zero value is an empty count.
type Tally struct {
	Packets   int // frames counted
	RoCE      int // RoCEv2 packets decoded, ICRC right or wrong
	Skipped   int // frames that are not RoCEv2 (unsupported link types included)
	Malformed int // datagrams to UDP port 4791 that bth.Parse rejects
	Truncated int // datagrams to UDP port 4791 cut short by the snap length
	ICRCBad   int // decoded RoCEv2 packets whose ICRC is wrong

	// Unsupported counts the skipped frames of each link type Decode does
	// not read (nil until there is one).
	Unsupported map[layers.LinkType]int
}

// Add counts f.
func (t *Tally) Add(f Frame) {
	t.Packets++
	switch f.Kind {
	case RoCE:
		t.RoCE++
		if !f.ICRCOK {
			t.ICRCBad++
		}
	case Skipped:
		t.Skipped++
	case Unsupported:
		t.Skipped++
		if t.Unsupported == nil {
			t.Unsupported = make(map[layers.LinkType]int)
		}
		t.Unsupported[f.Link]++
	case Malformed:
		t.Malformed++
	case Truncated:
		t.Truncated++
	}
}

// OK reports whether every RoCEv2 packet decoded and had a correct ICRC:
// no malformed packet and no ICRC failure. Packets cut short by the snap
// length do not count against it.
func (t *Tally) OK() bool {
	return t.ICRCBad == 0 && t.Malformed == 0
}

// Summary returns the closing line, e.g. "12 packets: 10 RoCEv2, 1 skipped
// (not RoCEv2), 1 malformed, 0 ICRC failures", followed by ", N cut short
// by the snap length" when there were such packets.
func (t *Tally) Summary() string {
	s := fmt.Sprintf("%d %s: %d RoCEv2, %d skipped (not RoCEv2), %d malformed, %d ICRC %s",
		t.Packets, plural(t.Packets, "packet", "packets"), t.RoCE, t.Skipped, t.Malformed,
		t.ICRCBad, plural(t.ICRCBad, "failure", "failures"))
	if t.Truncated > 0 {
		s += fmt.Sprintf(", %d cut short by the snap length", t.Truncated)
	}
	return s
}

// Notes returns one sentence per unsupported link type seen, in link type
// order, e.g. "skipped 3 packets of link type 105 (802.11), which dissect
// does not decode".
func (t *Tally) Notes() []string {
	links := make([]layers.LinkType, 0, len(t.Unsupported))
	for l := range t.Unsupported {
		links = append(links, l)
	}
	slices.Sort(links)
	var notes []string
	for _, l := range links {
		n := t.Unsupported[l]
		notes = append(notes, fmt.Sprintf("skipped %d %s of link type %d (%s), which dissect does not decode",
			n, plural(n, "packet", "packets"), uint16(l), l))
	}
	return notes
}

// plural returns one or many depending on n.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
