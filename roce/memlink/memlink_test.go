package memlink

import (
	"bytes"
	"encoding/binary"
	"net"
	"testing"
	"time"

	"github.com/sroce/sroce/monotime"
)

func frame(dst [6]byte, seq uint32, n int) []byte {
	f := make([]byte, n)
	copy(f, dst[:])
	binary.BigEndian.PutUint32(f[14:], seq)
	return f
}

// drain reads everything deliverable at the clock's time.
func drain(p *Port) [][]byte {
	var out [][]byte
	bufs := make([][]byte, 8)
	sizes := make([]int, 8)
	for i := range bufs {
		bufs[i] = make([]byte, 2000)
	}
	for {
		n, err := p.ReadBatch(bufs, sizes, 0)
		if err != nil || n == 0 {
			return out
		}
		for i := 0; i < n; i++ {
			out = append(out, append([]byte(nil), bufs[i][:sizes[i]]...))
		}
	}
}

func pair(imp Impairments, seed uint64) (*VirtualClock, *Router, *Port, *Port) {
	c := new(VirtualClock)
	r := NewRouter(c, seed, imp)
	a := r.NewPort(net.HardwareAddr{2, 0, 0, 0, 0, 1}, 1500)
	b := r.NewPort(net.HardwareAddr{2, 0, 0, 0, 0, 2}, 1500)
	return c, r, a, b
}

// run sends k frames from a to b, one per microsecond, and returns the
// sequence numbers in delivery order.
func run(c *VirtualClock, r *Router, a, b *Port, k int) []uint32 {
	var got []uint32
	for i := 0; i < k; i++ {
		a.WriteBatch([][]byte{frame(b.mac, uint32(i), 100)})
		c.Advance(time.Microsecond)
		for _, f := range drain(b) {
			got = append(got, binary.BigEndian.Uint32(f[14:]))
		}
	}
	for {
		t, ok := r.NextDelivery()
		if !ok {
			break
		}
		c.Set(t)
		for _, f := range drain(b) {
			got = append(got, binary.BigEndian.Uint32(f[14:]))
		}
	}
	return got
}

func TestInOrderWithoutImpairments(t *testing.T) {
	c, r, a, b := pair(Impairments{Delay: 10 * time.Microsecond}, 1)
	got := run(c, r, a, b, 1000)
	if len(got) != 1000 {
		t.Fatalf("%d delivered", len(got))
	}
	for i, s := range got {
		if s != uint32(i) {
			t.Fatalf("frame %d delivered as %d", s, i)
		}
	}
	if r.InFlight() != 0 || len(a.fifo) > 256 {
		t.Fatal("queues not drained")
	}
}

func TestImpairmentsReplayFromSeed(t *testing.T) {
	imp := Impairments{Loss: 0.1, Duplicate: 0.05, Reorder: 0.2, Corrupt: 0.05, Delay: 3 * time.Microsecond, Jitter: 2 * time.Microsecond}
	c1, r1, a1, b1 := pair(imp, 42)
	c2, r2, a2, b2 := pair(imp, 42)
	g1, g2 := run(c1, r1, a1, b1, 3000), run(c2, r2, a2, b2, 3000)
	if len(g1) != len(g2) || r1.Stats() != r2.Stats() {
		t.Fatalf("same seed, different runs: %+v %+v", r1.Stats(), r2.Stats())
	}
	for i := range g1 {
		if g1[i] != g2[i] {
			t.Fatal("same seed, different order")
		}
	}
	st := r1.Stats()
	if st.Lost < 200 || st.Duplicated < 80 || st.Reordered < 400 || st.Corrupted < 80 {
		t.Fatalf("rates far from configured: %+v", st)
	}
	if st.Delivered != uint64(len(g1)) || st.Delivered != st.Sent-st.Lost+st.Duplicated {
		t.Fatalf("%+v, %d delivered", st, len(g1))
	}
	inversions := 0
	for i := 1; i < len(g1); i++ {
		if g1[i] < g1[i-1] {
			inversions++
		}
	}
	if inversions == 0 {
		t.Fatal("nothing reordered")
	}
	_, r3, _, _ := pair(imp, 0)
	if r3.Seed() == 0 {
		t.Fatal("no seed chosen")
	}
}

func TestRoutingAndLimits(t *testing.T) {
	c, r, a, b := pair(Impairments{}, 1)
	x := r.NewPort(net.HardwareAddr{2, 0, 0, 0, 0, 3}, 1500)
	bcast := frame([6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, 7, 60)
	a.WriteBatch([][]byte{bcast, frame(b.mac, 1, 1518), frame(b.mac, 2, 1519), frame([6]byte{2, 9}, 3, 60)})
	_ = c
	gb, gx, ga := drain(b), drain(x), drain(a)
	if len(gb) != 2 || len(gx) != 1 || len(ga) != 0 || !bytes.Equal(gx[0], bcast) {
		t.Fatalf("b %d x %d a %d", len(gb), len(gx), len(ga))
	}
	if st := r.Stats(); st.Oversize != 1 || st.NoRoute != 1 {
		t.Fatalf("%+v", st)
	}
	b.Close()
	if _, err := b.ReadBatch([][]byte{make([]byte, 10)}, []int{0}, 0); err != ErrClosed {
		t.Fatalf("read after close: %v", err)
	}
}

func TestRealTimeWakeAndDelay(t *testing.T) {
	clock := systemClock{start: time.Now()}
	r := NewRouter(clock, 1, Impairments{Delay: 2 * time.Millisecond})
	a := r.NewPort(net.HardwareAddr{2, 0, 0, 0, 0, 1}, 1500)
	b := r.NewPort(net.HardwareAddr{2, 0, 0, 0, 0, 2}, 1500)
	bufs, sizes := [][]byte{make([]byte, 200)}, []int{0}
	// Wake makes a blocked read return early.
	go func() { time.Sleep(5 * time.Millisecond); b.Wake() }()
	st := time.Now()
	if n, _ := b.ReadBatch(bufs, sizes, time.Second); n != 0 || time.Since(st) > 500*time.Millisecond {
		t.Fatalf("read after wake: %d after %v", n, time.Since(st))
	}
	// A delayed frame arrives after its delay, not before.
	st = time.Now()
	a.WriteBatch([][]byte{frame(b.mac, 1, 100)})
	n := 0
	for n == 0 && time.Since(st) < time.Second {
		n, _ = b.ReadBatch(bufs, sizes, 100*time.Millisecond)
	}
	if el := time.Since(st); n != 1 || el < 2*time.Millisecond {
		t.Fatalf("%d frames after %v", n, el)
	}
}

type systemClock struct{ start time.Time }

func (c systemClock) Now() monotime.Time { return monotime.Time(time.Since(c.start)) }

// TestRateQueue: a port with a bandwidth takes frames one after another at
// that rate and drops the ones that find its queue full.
func TestRateQueue(t *testing.T) {
	c, r, a, b := pair(Impairments{Rate: 1_000_000, Queue: 3500, Delay: 10 * time.Microsecond}, 1)
	var burst [][]byte
	for i := 0; i < 10; i++ {
		burst = append(burst, frame(b.mac, uint32(i), 1000))
	}
	a.WriteBatch(burst)
	if st := r.Stats(); st.QueueDrops != 7 {
		t.Fatalf("queue drops %d, want 7", st.QueueDrops)
	}
	for i, want := range []time.Duration{1010 * time.Microsecond, 2010 * time.Microsecond, 3010 * time.Microsecond} {
		at, ok := r.NextDelivery()
		if !ok || at != monotime.Time(0).Add(want) {
			t.Fatalf("frame %d due at %v, want %v", i, at, want)
		}
		c.Set(at)
		got := drain(b)
		if len(got) != 1 || binary.BigEndian.Uint32(got[0][14:]) != uint32(i) {
			t.Fatalf("at %v got %d frames", at, len(got))
		}
	}
	// The queue has drained: a new burst is taken again.
	a.WriteBatch(burst[:3])
	if st := r.Stats(); st.QueueDrops != 7 {
		t.Fatalf("queue drops %d after the queue drained", st.QueueDrops)
	}
}
