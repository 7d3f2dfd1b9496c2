package roce

import (
	"net"
	"time"

	"github.com/sroce/sroce/monotime"
)

// ICRCVerifier is implemented by links that may be unable to check the ICRC
// of what they receive, because it covers IP header fields they do not
// show. On a link that reports false a frame whose ICRC does not match is
// counted under icrc_unchecked and accepted, instead of being dropped as
// icrc_error. Links that do not implement it are assumed to verify. The UDP
// link (package udplink) verifies: it recovers the one hidden field, the
// IPv4 Identification, from the ICRC.
type ICRCVerifier interface {
	VerifiesICRC() bool
}

// SelfDelivering is implemented by links that deliver frames sent to the
// device's own addresses back to it themselves (a UDP socket does, through
// the kernel), and whose other addresses may belong to other devices on
// the same interface. A device on such a link sends those frames like any
// other; on the others (an AF_XDP socket, the in-memory link) it keeps them
// and receives them itself, so that its QPs can talk to each other.
type SelfDelivering interface {
	DeliversToSelf() bool
}

// Link moves whole Ethernet frames. Implementations: an AF_XDP socket, a
// UDP socket, and the in-memory router of package memlink.
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
}

// ReadyWaiter is implemented by links that can wait for a frame without
// taking it. An inline device's loop needs it: it waits while the
// goroutines that post and poll read the link themselves, so only the one
// holding the engine lock may take frames. A link without it runs inline
// devices in sleep mode.
type ReadyWaiter interface {
	// WaitReady returns when a frame is ready for ReadBatch, Wake was
	// called, or timeout (positive) has passed.
	WaitReady(timeout time.Duration) error
	// Ready reports, without waiting and cheaply, whether a frame may be
	// ready for ReadBatch; a link that cannot tell cheaply says true.
	Ready() bool
}

// FrameLender is implemented by links that can hand received frames to
// the engine where they lie (an AF_XDP socket's UMEM) instead of copying
// them into the engine's buffers. The engine handles the frames of one
// ReadLent, copying out what it keeps, and then calls ReleaseLent before
// it reads again.
type FrameLender interface {
	// ReadLent sets frames[i] to up to len(frames) received frames and
	// returns how many, without waiting.
	ReadLent(frames [][]byte) (int, error)
	// ReleaseLent gives the frames of the last ReadLent back.
	ReleaseLent()
}

// TxLender is implemented by links that let the engine build frames in
// the link's own transmit memory (an AF_XDP socket's UMEM chunks), so that
// a frame is written once, where the kernel sends it from, instead of
// being built in the engine's buffer and copied by WriteBatch. The engine
// uses it when a lent buffer holds its largest frame. SubmitLent, like
// PartialWriter's WriteBatchNow, never waits for room.
type TxLender interface {
	// TxBufSize returns the size of a lent buffer.
	TxBufSize() int
	// LendTx sets bufs[i] to up to len(bufs) free transmit buffers, each
	// TxBufSize bytes, and returns how many, without waiting.
	LendTx(bufs [][]byte) int
	// SubmitLent transmits frames, each a prefix of a buffer from LendTx,
	// and returns how many it took (a prefix): their buffers are the
	// link's again, the others still the caller's.
	SubmitLent(frames [][]byte) (int, error)
	// ReturnTx gives buffers from LendTx back unsent.
	ReturnTx(bufs [][]byte)
}

// PartialWriter is implemented by links whose WriteBatch may wait for room
// in the kernel. WriteBatchNow takes what fits now and returns at once; the
// device keeps the rest and offers it again after its next wait on the
// link, so it never waits for room while it holds its lock (control calls
// and posting goroutines then never wait behind a full transmit ring).
type PartialWriter interface {
	WriteBatchNow(frames [][]byte) (n int, err error)
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
