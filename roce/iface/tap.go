package iface

// The tap wrapper (Options.Tap): a link that shows every frame to a
// function on its way through and passes on every capability of the link
// under it (roce.LinkOps), the lending fast path included, so that a
// tapped AF_XDP link (`sroce demo -v`) moves frames as the bare one does.

import (
	"io"
	"net/netip"
	"time"

	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/roce/linkcap"
)

// tapLink shows every frame to tap on its way through. It implements each
// interface a capability names by passing the call to the link under it
// and has the same Caps: the device calls a method only when the link
// under the tap has its capability.
type tapLink struct {
	roce.Link
	ops roce.LinkOps // the link under the tap's
	tap func(Direction, []byte)
}

// newTapLink wraps l in a tap.
func newTapLink(l roce.Link, tap func(Direction, []byte)) (*tapLink, error) {
	ops, err := roce.OpsOf(l)
	if err != nil {
		return nil, err
	}
	return &tapLink{Link: l, ops: ops, tap: tap}, nil
}

// Caps returns the capabilities of the link under the tap: the tap passes
// each on.
func (t *tapLink) Caps() linkcap.Caps { return t.ops.Caps }

// ReadBatch reads from the link and shows what it read.
func (t *tapLink) ReadBatch(bufs [][]byte, sizes []int, timeout time.Duration) (int, error) {
	n, err := t.Link.ReadBatch(bufs, sizes, timeout)
	for i := 0; i < n; i++ {
		t.tap(RX, bufs[i][:sizes[i]])
	}
	return n, err
}

// WriteBatch writes to the link and shows what it took (after the link's
// own rewriting, as the UDP link does).
func (t *tapLink) WriteBatch(frames [][]byte) (int, error) {
	n, err := t.Link.WriteBatch(frames)
	t.showTx(frames, n)
	return n, err
}

// showTx shows the first n frames as transmitted.
func (t *tapLink) showTx(frames [][]byte, n int) {
	for i := 0; i < n && i < len(frames); i++ {
		t.tap(TX, frames[i])
	}
}

// WaitReady passes roce.ReadyWaiter on.
func (t *tapLink) WaitReady(timeout time.Duration) error { return t.ops.Waiter.WaitReady(timeout) }

// Ready passes roce.ReadyWaiter on.
func (t *tapLink) Ready() bool { return t.ops.Waiter.Ready() }

// WriteBatchNow passes roce.PartialWriter on and shows what the link took.
func (t *tapLink) WriteBatchNow(frames [][]byte) (int, error) {
	n, err := t.ops.WriteNow.WriteBatchNow(frames)
	t.showTx(frames, n)
	return n, err
}

// JoinGroup passes roce.GroupJoiner on.
func (t *tapLink) JoinGroup(group netip.Addr) (io.Closer, error) {
	return t.ops.Groups.JoinGroup(group)
}

// ReadLent passes roce.Lender on and shows the frames lent, in place.
func (t *tapLink) ReadLent(frames [][]byte) (int, error) {
	n, err := t.ops.Lender.ReadLent(frames)
	for i := 0; i < n; i++ {
		t.tap(RX, frames[i])
	}
	return n, err
}

// ReleaseLent passes roce.Lender on.
func (t *tapLink) ReleaseLent() { t.ops.Lender.ReleaseLent() }

// TxBufSize passes roce.Lender on.
func (t *tapLink) TxBufSize() int { return t.ops.Lender.TxBufSize() }

// LendTx passes roce.Lender on.
func (t *tapLink) LendTx(bufs [][]byte) int { return t.ops.Lender.LendTx(bufs) }

// SubmitLent passes roce.Lender on and shows the frames the link took:
// the kernel only reads them, and only the engine, which is calling,
// could lend their buffers again.
func (t *tapLink) SubmitLent(frames [][]byte) (int, error) {
	n, err := t.ops.Lender.SubmitLent(frames)
	t.showTx(frames, n)
	return n, err
}

// ReturnTx passes roce.Lender on.
func (t *tapLink) ReturnTx(bufs [][]byte) { t.ops.Lender.ReturnTx(bufs) }
