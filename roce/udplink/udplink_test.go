package udplink

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/sroce/sroce/bth"
	"golang.org/x/sys/unix"
)

func openPair(t *testing.T) (*Link, *Link) {
	t.Helper()
	a, err := Open(netip.MustParseAddr("127.0.0.1"), 0, 0)
	if err != nil {
		t.Skipf("cannot bind 127.0.0.1:4791 (%v)", err)
	}
	t.Cleanup(func() { a.Close() })
	// 127.0.0.2 is on lo on Linux without configuration.
	b, err := Open(netip.MustParseAddr("127.0.0.2"), 0, 65536)
	if err != nil {
		t.Skipf("cannot bind 127.0.0.2:4791 (%v)", err)
	}
	t.Cleanup(func() { b.Close() })
	return a, b
}

func frame(t *testing.T, src, dst netip.Addr, psn bth.PSN, payload []byte) []byte {
	e := bth.Encap{Src: src, Dst: dst, TTL: 64, ID: 0x777, SrcPort: 0xc001}
	h := bth.Headers{BTH: bth.BTHFields{Opcode: bth.RCSendOnly, PKey: 0xffff, DestQP: 0x11, PSN: psn, AckReq: true}}
	f := make([]byte, e.Len()+h.TransportLen(len(payload)))
	if _, err := bth.Build(f, &e, &h, payload); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestLoopbackBatch(t *testing.T) {
	a, b := openPair(t)
	if a.MTU() != 65536 {
		t.Logf("lo MTU %d", a.MTU())
	}
	const n = 100
	var frames [][]byte
	for i := 0; i < n; i++ {
		frames = append(frames, frame(t, a.LocalAddr(), b.LocalAddr(), bth.PSN(i), bytes.Repeat([]byte{byte(i)}, 1+i*10)))
	}
	if w, err := a.WriteBatch(frames); err != nil || w != n {
		t.Fatalf("WriteBatch %d %v", w, err)
	}
	bufs := make([][]byte, 16)
	for i := range bufs {
		bufs[i] = make([]byte, 9000)
	}
	sizes := make([]int, len(bufs))
	got := 0
	deadline := time.Now().Add(5 * time.Second)
	for got < n && time.Now().Before(deadline) {
		k, err := b.ReadBatch(bufs, sizes, 100*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < k; i++ {
			var p bth.Packet
			if err := p.Parse(bufs[i][:sizes[i]]); err != nil {
				t.Fatalf("parse received: %v", err)
			}
			psn := int(p.BTH().PSN())
			if psn != got {
				t.Fatalf("got PSN %d, want %d", psn, got)
			}
			if !bytes.Equal(p.PayloadBytes(), bytes.Repeat([]byte{byte(psn)}, 1+psn*10)) {
				t.Fatalf("payload %d differs", psn)
			}
			if p.SrcAddr() != a.LocalAddr() || p.DstAddr() != b.LocalAddr() || int(p.SrcPort()) != a.Port() {
				t.Fatalf("addresses %v:%d > %v", p.SrcAddr(), p.SrcPort(), p.DstAddr())
			}
			// Between two UDP links the kernel sends IP ID 0 with DF, which
			// is what the receiver assumes, so the ICRC checks out.
			if !p.VerifyICRC() {
				t.Fatalf("PSN %d: ICRC does not verify", psn)
			}
			got++
		}
	}
	if got != n {
		t.Fatalf("received %d of %d", got, n)
	}
	if s := b.Stats(); s.RxPackets != n {
		t.Errorf("stats %+v", s)
	}
}

func TestWakeAndTimeout(t *testing.T) {
	a, _ := openPair(t)
	bufs := [][]byte{make([]byte, 2000)}
	sizes := []int{0}
	start := time.Now()
	if n, err := a.ReadBatch(bufs, sizes, 30*time.Millisecond); n != 0 || err != nil {
		t.Fatalf("timeout read: %d %v", n, err)
	}
	if time.Since(start) < 25*time.Millisecond {
		t.Fatal("returned before the timeout")
	}
	go func() { time.Sleep(20 * time.Millisecond); a.Wake() }()
	start = time.Now()
	if n, err := a.ReadBatch(bufs, sizes, -1); n != 0 || err != nil {
		t.Fatalf("woken read: %d %v", n, err)
	}
	if time.Since(start) > 2*time.Second {
		t.Fatal("Wake did not interrupt the read")
	}
}

func TestMalformedNotSent(t *testing.T) {
	a, _ := openPair(t)
	if n, err := a.WriteBatch([][]byte{{1, 2, 3}}); n != 1 || err != nil {
		t.Fatalf("%d %v", n, err)
	}
	if a.Stats().TxMalformed != 1 || a.Stats().TxPackets != 0 {
		t.Fatalf("stats %+v", a.Stats())
	}
}

func TestPollTakesQueuedWithoutWaiting(t *testing.T) {
	a, b := openPair(t)
	bufs := [][]byte{make([]byte, 2000), make([]byte, 2000)}
	sizes := []int{0, 0}
	if n, err := b.ReadBatch(bufs, sizes, 0); n != 0 || err != nil {
		t.Fatalf("empty poll: %d %v", n, err)
	}
	// A pending wake-up must not hide queued datagrams from a poll, and
	// must still end the next blocking read.
	b.Wake()
	if _, err := a.WriteBatch([][]byte{frame(t, a.LocalAddr(), b.LocalAddr(), 7, []byte("x"))}); err != nil {
		t.Fatal(err)
	}
	var n int
	for i := 0; i < 1000 && n == 0; i++ {
		var err error
		if n, err = b.ReadBatch(bufs, sizes, 0); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	if n != 1 {
		t.Fatalf("poll read %d datagrams", n)
	}
	done := make(chan struct{})
	go func() {
		b.ReadBatch(bufs, sizes, -1)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		b.Close()
		t.Fatal("the pending wake-up was lost")
	}
}

// TestMulticastInterfaceAtOpen: a link sends datagrams to groups out of
// the interface that has its address from the start, not only after its
// first JoinGroup (a UD QP may send to a group it never attached to). The
// IPv6 socket would otherwise leave the choice to the multicast route.
func TestMulticastInterfaceAtOpen(t *testing.T) {
	l, err := Open(netip.MustParseAddr("::1"), 0, 65536)
	if err != nil {
		t.Skipf("skipping: no IPv6 loopback: %v", err)
	}
	defer l.Close()
	lo, err := interfaceOf(netip.MustParseAddr("::1"))
	if err != nil {
		t.Fatal(err)
	}
	rc, err := l.conn.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var idx int
	var gerr error
	if err := rc.Control(func(fd uintptr) {
		idx, gerr = unix.GetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_IF)
	}); err != nil || gerr != nil {
		t.Fatal(err, gerr)
	}
	if idx != lo.Index {
		t.Fatalf("IPV6_MULTICAST_IF is %d after Open, want %d (%s)", idx, lo.Index, lo.Name)
	}
}
