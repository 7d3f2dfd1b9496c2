package iface

import (
	"strings"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/roce/linkcap"
)

// lendingLink lends the frames of rx in place and takes lent transmit
// buffers; it is nothing else (its Link is nil: the tap must call only
// what its Caps name).
type lendingLink struct {
	roce.Link
	rx        [][]byte
	released  int
	submitted [][]byte
}

func (l *lendingLink) Caps() linkcap.Caps { return linkcap.Lend }

func (l *lendingLink) ReadLent(frames [][]byte) (int, error) {
	return copy(frames, l.rx), nil
}
func (l *lendingLink) ReleaseLent()   { l.released++ }
func (l *lendingLink) TxBufSize() int { return 2048 }
func (l *lendingLink) LendTx(bufs [][]byte) int {
	for i := range bufs {
		bufs[i] = make([]byte, 2048)
	}
	return len(bufs)
}
func (l *lendingLink) SubmitLent(frames [][]byte) (int, error) {
	n := min(len(frames), 2) // takes a prefix, as a full ring would
	l.submitted = append(l.submitted, frames[:n]...)
	return n, nil
}
func (l *lendingLink) ReturnTx([][]byte) {}

// TestTapPassesLendingOn checks that the tap wrapper keeps the lending
// fast path of the link under it: same Caps, its Lender found through the
// wrapper, the frames shown where the link lent them (no copy), and only
// the frames the link took shown as transmitted.
func TestTapPassesLendingOn(t *testing.T) {
	inner := &lendingLink{rx: [][]byte{[]byte("frame one"), []byte("frame two")}}
	var seen []struct {
		dir Direction
		f   []byte
	}
	tl, err := newTapLink(inner, func(d Direction, f []byte) {
		seen = append(seen, struct {
			dir Direction
			f   []byte
		}{d, f})
	})
	if err != nil {
		t.Fatal(err)
	}
	ops, err := roce.OpsOf(tl)
	if err != nil {
		t.Fatal(err)
	}
	if ops.Caps != linkcap.Lend || ops.Lender == nil {
		t.Fatalf("through the tap: caps %v, lender %v; want %v and the tap's", ops.Caps, ops.Lender, linkcap.Lend)
	}
	frames := make([][]byte, 4)
	n, err := ops.Lender.ReadLent(frames)
	if n != 2 || err != nil {
		t.Fatalf("ReadLent through the tap = %d, %v; want 2 frames", n, err)
	}
	ops.Lender.ReleaseLent()
	if inner.released != 1 {
		t.Errorf("ReleaseLent reached the link %d times, want 1", inner.released)
	}
	bufs := make([][]byte, 3)
	if k := ops.Lender.LendTx(bufs); k != 3 {
		t.Fatalf("LendTx through the tap lent %d, want 3", k)
	}
	out := [][]byte{append(bufs[0][:0], "tx a"...), append(bufs[1][:0], "tx b"...), append(bufs[2][:0], "tx c"...)}
	if k, err := ops.Lender.SubmitLent(out); k != 2 || err != nil {
		t.Fatalf("SubmitLent through the tap = %d, %v; want 2", k, err)
	}
	want := []struct {
		dir Direction
		f   []byte
	}{{RX, inner.rx[0]}, {RX, inner.rx[1]}, {TX, out[0]}, {TX, out[1]}}
	if len(seen) != len(want) {
		t.Fatalf("the tap saw %d frames, want %d (2 lent in, the 2 the link took out)", len(seen), len(want))
	}
	for i, w := range want {
		if seen[i].dir != w.dir || string(seen[i].f) != string(w.f) || unsafe.SliceData(seen[i].f) != unsafe.SliceData(w.f) {
			t.Errorf("tap frame %d: %v %q, want %v %q where the link keeps it", i, seen[i].dir, seen[i].f, w.dir, w.f)
		}
	}
}

// forwardsCapsOnly forwards Caps (by embedding) but none of the methods
// they name: the device must refuse it rather than lose the fast path.
type forwardsCapsOnly struct{ roce.Link }

func TestWrapperWithoutLenderRefused(t *testing.T) {
	_, err := roce.OpsOf(forwardsCapsOnly{&lendingLink{}})
	if err == nil || !strings.Contains(err.Error(), "roce.Lender") {
		t.Fatalf("OpsOf a wrapper that claims lend without Lender: %v; want an error naming roce.Lender", err)
	}
}

// TestTapLendsOverXDP runs the RC round trip between two AF_XDP ports
// whose links are tapped (as `sroce demo -v` taps them) and checks that
// the taps saw the frames both ways and that the AF_XDP links copied none:
// the engines took the lending path through the wrapper.
func TestTapLendsOverXDP(t *testing.T) {
	var rx, tx [2]atomic.Int64
	a, b := openPairWith(t, "l26", func(side int) Options {
		tap := func(d Direction, f []byte) {
			if len(f) < 14 {
				t.Errorf("tap %d: a %d-byte frame", side, len(f))
			}
			if d == RX {
				rx[side].Add(1)
			} else {
				tx[side].Add(1)
			}
		}
		return Options{Mode: ModeXDP, Queues: 1, Tap: tap}
	})
	x := a.XDPLink()
	tl, err := newTapLink(x, func(Direction, []byte) {})
	if err != nil {
		t.Fatal(err)
	}
	if tl.Caps() != x.Caps() || tl.Caps()&linkcap.Lend != linkcap.Lend {
		t.Errorf("tapped AF_XDP link: caps %v, the link's %v; want the same, with %v", tl.Caps(), x.Caps(), linkcap.Lend)
	}
	rcRoundTrip(t, a, b)
	for i, p := range []*Port{a, b} {
		if rx[i].Load() == 0 || tx[i].Load() == 0 {
			t.Errorf("port %d's tap saw %d frames in and %d out; want some each way", i, rx[i].Load(), tx[i].Load())
		}
		crx, ctx := p.XDPLink().Copies()
		if crx != 0 || ctx != 0 {
			t.Errorf("port %d's tapped AF_XDP link copied %d frames in and %d out; the engine must lend them", i, crx, ctx)
		}
		if got := p.LinkStats(); len(got) == 0 {
			t.Errorf("port %d: no link counters", i)
		}
	}
}
