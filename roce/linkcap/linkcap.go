// Package linkcap names what a link can do beyond moving frames: one value
// of type Caps that a link returns from its Caps method (roce.Link), as
// gVisor's LinkEndpoint.Capabilities. A bit that needs methods names the
// interface of package roce the link then implements; the others are
// facts about the link. It is a leaf package, so that link kinds (xdp,
// udplink, memlink) say what they can do without importing roce.
package linkcap

import (
	"fmt"
	"strings"
)

// Caps is the set of capabilities of a link (roce.Link.Caps), as gVisor's
// LinkEndpoint.Capabilities. A bit that needs methods names the interface
// the link then implements; the others are facts about the link.
type Caps uint32

// The capabilities.
const (
	// WaitReady: the link implements roce.ReadyWaiter, a wait for a frame
	// that takes none. An inline device needs it on every link, else it
	// runs in sleep mode.
	WaitReady Caps = 1 << iota
	// WriteNow: the link implements roce.PartialWriter, a transmit that
	// never waits for room.
	WriteNow
	// LendRx: the link implements roce.Lender and lends received frames
	// (ReadLent, ReleaseLent). The engine uses it with WaitReady.
	LendRx
	// LendTx: the link implements roce.Lender and lends transmit buffers
	// (TxBufSize, LendTx, SubmitLent, ReturnTx). The engine uses it when
	// a lent buffer holds its largest frame.
	LendTx
	// Groups: the link implements roce.GroupJoiner: it receives multicast
	// frames only for the groups it was told to join.
	Groups
	// DeliversToSelf: the link delivers frames sent to the device's
	// own addresses back to it itself (a UDP socket does, through the
	// kernel), and its other addresses may belong to other devices on the
	// same interface. A device on such a link sends those frames like any
	// other; on the others (an AF_XDP socket, the in-memory link) it keeps
	// them and receives them itself, so that its QPs can talk to each
	// other.
	DeliversToSelf
	// ICRCBlind: the link cannot always show a received frame's IP
	// header as it was on the wire, so the ICRC, which covers it, may not
	// match: such a frame is counted under icrc_unchecked and accepted,
	// instead of being dropped as icrc_error. The UDP link verifies: it
	// recovers the one hidden field, the IPv4 Identification, from the
	// ICRC.
	ICRCBlind
)

// Lend is both halves of the lending fast path (roce.Lender).
const Lend = LendRx | LendTx

// capNames names the capabilities, by bit, for Caps.String.
var capNames = []string{"wait-ready", "write-now", "lend-rx", "lend-tx", "groups", "delivers-to-self", "icrc-blind"}

// String lists the capabilities, such as "wait-ready|lend-rx", or
// "none".
func (c Caps) String() string {
	var names []string
	for i, n := range capNames {
		if c&(1<<i) != 0 {
			names = append(names, n)
		}
	}
	if rest := c &^ (1<<len(capNames) - 1); rest != 0 {
		names = append(names, fmt.Sprintf("%#x", uint32(rest)))
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, "|")
}
