package roce

// Links: how frames move. A link kind implements Link (frame batches, a
// wake-up, the interface's MTU and address) and says in one value, Caps,
// what more it can do. Each capability that needs methods names the one
// interface that carries them; the device finds those interfaces once,
// when it opens (linkOps), and never asks the link again. A wrapper (a tap,
// a tracer) forwards the capabilities it passes on and implements their
// interfaces itself: one that forwards Caps without the interface behind
// a bit fails at Open, instead of silently losing a fast path.

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"time"

	"github.com/sroce/sroce/monotime"
	"github.com/sroce/sroce/roce/linkcap"
)

// Link moves whole Ethernet frames. Implementations: an AF_XDP socket
// (package xdp), a UDP socket (package udplink), and the in-memory router
// of package memlink.
type Link interface {
	// ReadBatch copies up to len(bufs) received frames into bufs and their
	// lengths into sizes. It waits up to timeout for the first frame and
	// returns 0, nil when none arrived; a zero timeout polls. It returns
	// early, possibly with no frame, after Wake.
	ReadBatch(bufs [][]byte, sizes []int, timeout time.Duration) (n int, err error)
	// WriteBatch transmits frames and returns how many it took. The link
	// copies them: the caller reuses the buffers when it returns.
	WriteBatch(frames [][]byte) (n int, err error)
	// Wake makes a blocked ReadBatch return early. A Wake that comes while
	// no ReadBatch is waiting makes the next waiting one return at once; a
	// zero-timeout ReadBatch (a poll) must leave it pending, or the loop
	// sleeps with work posted.
	Wake()
	// MTU returns the interface MTU (the largest IP datagram).
	MTU() int
	// HardwareAddr returns the Ethernet address of the interface.
	HardwareAddr() net.HardwareAddr
	// Close releases the link; a blocked ReadBatch returns an error.
	Close() error
	// Caps says what the link can do beyond these methods. It must not
	// change while the link is open: the device reads it once, at Open.
	Caps() linkcap.Caps
}

// ReadyWaiter is the interface of links with linkcap.WaitReady. An inline
// device's loop needs it: it waits while the goroutines that post and
// poll read the link themselves, so only the one holding the engine lock
// may take frames.
type ReadyWaiter interface {
	// WaitReady returns when a frame is ready for ReadBatch, Wake was
	// called, or timeout (positive) has passed.
	WaitReady(timeout time.Duration) error
	// Ready reports, without waiting and cheaply, whether a frame may be
	// ready for ReadBatch; a link that cannot tell cheaply says true.
	Ready() bool
}

// PartialWriter is the interface of links with linkcap.WriteNow, whose
// WriteBatch may wait for room in the kernel. WriteBatchNow takes what
// fits now and returns at once; the device keeps the rest and offers it
// again after its next wait on the link, so it never waits for room while
// it holds its lock (control calls and posting goroutines then never wait
// behind a full transmit ring).
type PartialWriter interface {
	WriteBatchNow(frames [][]byte) (n int, err error)
}

// Lender is the lending fast path: the engine works on frames where the
// link keeps them (an AF_XDP socket's UMEM) instead of copying them in and
// out of its own buffers. linkcap.LendRx and linkcap.LendTx say which half a link
// lends; the other half's methods are then never called. A wrapper that
// must see every frame (a tap) implements Lender itself, looking at the
// frames on their way, and passes the calls on.
type Lender interface {
	// ReadLent sets frames[i] to up to len(frames) received frames and
	// returns how many, without waiting. The engine handles them,
	// copying out what it keeps, and calls ReleaseLent before it reads
	// again.
	ReadLent(frames [][]byte) (int, error)
	// ReleaseLent gives the frames of the last ReadLent back.
	ReleaseLent()

	// TxBufSize returns the size of a lent transmit buffer.
	TxBufSize() int
	// LendTx sets bufs[i] to up to len(bufs) free transmit buffers, each
	// TxBufSize bytes, and returns how many, without waiting. The engine
	// builds frames in them, so that a frame is written once, where the
	// kernel sends it from.
	LendTx(bufs [][]byte) int
	// SubmitLent transmits frames, each a prefix of a buffer from LendTx,
	// and returns how many it took (a prefix): their buffers are the
	// link's again, the others still the caller's. Like WriteBatchNow it
	// never waits for room.
	SubmitLent(frames [][]byte) (int, error)
	// ReturnTx gives buffers from LendTx back unsent.
	ReturnTx(bufs [][]byte)
}

// GroupJoiner is the interface of links with linkcap.Groups. The device keeps
// the multicast groups and their QPs (mcast.go) and tells the link only
// when to start and stop receiving a group: it joins a group once, on its
// first link (the links of a device share the interface), when the first
// QP attaches, and closes the membership when the last one detaches or the
// device closes. An AF_XDP link joins the group on its interface, so that
// the NIC takes the group's frames and the kernel answers IGMP or MLD
// queries; the UDP link joins it on a socket of its own.
type GroupJoiner interface {
	// JoinGroup makes the link receive the frames to group until the
	// returned membership is closed.
	JoinGroup(group netip.Addr) (io.Closer, error)
}

// LinkOps is what stands behind a link's Caps: the link's interfaces for
// the capabilities it has, nil for the others.
type LinkOps struct {
	Caps     linkcap.Caps
	Waiter   ReadyWaiter   // with linkcap.WaitReady
	WriteNow PartialWriter // with linkcap.WriteNow
	Lender   Lender        // with linkcap.LendRx or linkcap.LendTx
	Groups   GroupJoiner   // with linkcap.Groups
}

// OpsOf reads l's Caps and returns the interfaces its capabilities name.
// A link that claims a capability without its interface (a wrapper that
// forwards Caps but not the methods) is an error that names both.
func OpsOf(l Link) (LinkOps, error) {
	o := LinkOps{Caps: l.Caps()}
	var ok bool
	missing := func(c linkcap.Caps, iface string) error {
		return fmt.Errorf("roce: link %T says %v but does not implement roce.%s", l, c, iface)
	}
	if o.Caps&linkcap.WaitReady != 0 {
		if o.Waiter, ok = l.(ReadyWaiter); !ok {
			return o, missing(linkcap.WaitReady, "ReadyWaiter")
		}
	}
	if o.Caps&linkcap.WriteNow != 0 {
		if o.WriteNow, ok = l.(PartialWriter); !ok {
			return o, missing(linkcap.WriteNow, "PartialWriter")
		}
	}
	if o.Caps&linkcap.Lend != 0 {
		if o.Lender, ok = l.(Lender); !ok {
			return o, missing(o.Caps&linkcap.Lend, "Lender")
		}
	}
	if o.Caps&linkcap.Groups != 0 {
		if o.Groups, ok = l.(GroupJoiner); !ok {
			return o, missing(linkcap.Groups, "GroupJoiner")
		}
	}
	return o, nil
}

// Clock tells the device the time, as an instant on a monotonic clock
// (monotime.Time). Tests drive devices with a virtual clock; SystemClock follows the
// monotonic system clock.
type Clock interface {
	Now() monotime.Time
}

type systemClock struct{ epoch time.Time }

func (c systemClock) Now() monotime.Time { return monotime.Time(time.Since(c.epoch)) }

// SystemClock returns a clock that reads the monotonic system clock, with
// its epoch at the call.
func SystemClock() Clock { return systemClock{epoch: time.Now()} }
