package xdp

import (
	"bytes"
	"errors"
	"net"
	"os/exec"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/sroce/sroce/bpf"
	"github.com/sroce/sroce/internal/nsutil"
	"golang.org/x/sys/unix"
)

// recvN receives n frames from s (copies), waiting up to timeout in all.
func recvN(tb testing.TB, s *Socket, n int, timeout time.Duration) [][]byte {
	tb.Helper()
	var got [][]byte
	frames := make([]Frame, 64)
	deadline := time.Now().Add(timeout)
	for len(got) < n && time.Now().Before(deadline) {
		m, err := s.Receive(frames)
		if err != nil {
			tb.Fatal(err)
		}
		for _, f := range frames[:m] {
			got = append(got, append([]byte(nil), f.Data...))
		}
		s.Release(frames[:m])
		if m == 0 {
			if _, err := s.Wait(time.Until(deadline)); err != nil {
				tb.Fatal(err)
			}
		}
	}
	return got
}

// sendAll transmits frames, retrying partial sends for a while.
func sendAll(tb testing.TB, s *Socket, frames [][]byte) {
	tb.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for len(frames) > 0 {
		n, err := s.Transmit(frames)
		if err != nil {
			tb.Fatalf("Transmit: %v", err)
		}
		frames = frames[n:]
		if n == 0 {
			if time.Now().After(deadline) {
				tb.Fatalf("Transmit stalled with %d frames left; stats %+v", len(frames), s.Stats())
			}
			time.Sleep(time.Millisecond)
		}
	}
}

func checkFrames(tb testing.TB, what string, got, want [][]byte) {
	tb.Helper()
	if len(got) != len(want) {
		tb.Fatalf("%s: received %d frames, want %d", what, len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			tb.Fatalf("%s: frame %d differs: got %d bytes, want %d", what, i, len(got[i]), len(want[i]))
		}
	}
}

func TestExchange(t *testing.T) {
	p := newVethPair(t, 1500, 1)
	a := openIn(t, p.nsA, p.ifA, 0, Options{})
	b := openIn(t, p.nsB, p.ifB, 0, Options{})
	t.Logf("mode %s, attach %s, chunk %d, multi-buffer %v, max frame %d, zero-copy refused: %s",
		a.Mode(), a.AttachMode(), a.ChunkSize(), a.MultiBuffer(), a.MaxFrameSize(), a.Stats().ZeroCopyRefusal)
	if a.Mode() != ModeCopy {
		t.Errorf("veth socket in mode %s, want copy (veth has no zero-copy)", a.Mode())
	}

	for _, dir := range []struct {
		name     string
		from, to *Socket
		mk       func(int, byte) []byte
	}{{"A->B", a, b, p.frameAtoB}, {"B->A", b, a, p.frameBtoA}} {
		var want [][]byte
		for i := 0; i < 20; i++ {
			want = append(want, dir.mk(60+i*70, byte(i)))
		}
		sendAll(t, dir.from, want)
		got := recvN(t, dir.to, len(want), 5*time.Second)
		checkFrames(t, dir.name, got, want)
	}
	st := b.Stats()
	if st.KernelStatsErr != nil {
		t.Errorf("XDP_STATISTICS: %v", st.KernelStatsErr)
	}
	if st.RxFrames != 20 || st.TxFrames != 20 || st.RxDropped != 0 {
		t.Errorf("stats of B: %+v", st)
	}
}

// TestKernelTraffic checks that what is not RoCEv2 still reaches the kernel
// with the steering program attached on both ends: a UDP datagram built and
// sent by the AF_XDP socket to another port, and kernel-to-kernel UDP (which
// needs ARP both ways through the programs).
func TestKernelTraffic(t *testing.T) {
	p := newVethPair(t, 1500, 1)
	a := openIn(t, p.nsA, p.ifA, 0, Options{})
	b := openIn(t, p.nsB, p.ifB, 0, Options{})

	var fdB, fdA int
	must(t, p.nsB.Do(func() (err error) {
		fdB, err = udpSocket(p.ipB, 9999)
		return err
	}))
	defer unix.Close(fdB)
	must(t, p.nsA.Do(func() (err error) {
		fdA, err = udpSocket(p.ipA, 0)
		return err
	}))
	defer unix.Close(fdA)

	// AF_XDP in A -> kernel in B, port 9999.
	f := udpFrame(p.macB, p.macA, p.ipA, p.ipB, 9999, 32, 7)
	sendAll(t, a, [][]byte{f})
	buf := make([]byte, 2048)
	n, _, err := unix.Recvfrom(fdB, buf, 0)
	if err != nil {
		t.Fatalf("kernel socket in B did not get the port-9999 datagram from AF_XDP: %v", err)
	}
	if !bytes.Equal(buf[:n], f[42:]) {
		t.Fatalf("payload differs")
	}

	// Kernel in A -> kernel in B (ARP request/reply pass the programs).
	msg := []byte("kernel to kernel")
	if err := unix.Sendto(fdA, msg, 0, &unix.SockaddrInet4{Port: 9999, Addr: [4]byte(p.ipB)}); err != nil {
		t.Fatal(err)
	}
	n, _, err = unix.Recvfrom(fdB, buf, 0)
	if err != nil || !bytes.Equal(buf[:n], msg) {
		t.Fatalf("kernel-to-kernel UDP: %q, %v", buf[:n], err)
	}

	// None of it went to the AF_XDP socket of B.
	if got := recvN(t, b, 1, 50*time.Millisecond); len(got) != 0 {
		t.Fatalf("AF_XDP socket of B received %d non-RoCE frames", len(got))
	}
	// RoCEv2 still goes to the socket.
	sendAll(t, a, [][]byte{p.frameAtoB(100, 1)})
	if got := recvN(t, b, 1, 2*time.Second); len(got) != 1 {
		t.Fatal("RoCEv2 frame not received")
	}
}

func udpSocket(ip net.IP, port int) (int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	tv := unix.NsecToTimeval(int64(2 * time.Second))
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	if err := unix.Bind(fd, &unix.SockaddrInet4{Port: port, Addr: [4]byte(ip.To4())}); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// TestLargeFrames sends frames around and above one chunk over a veth with
// MTU 9000, among them full RoCEv2 frames of path MTU 4096.
func TestLargeFrames(t *testing.T) {
	p := newVethPair(t, 9000, 1)
	a := openIn(t, p.nsA, p.ifA, 0, Options{})
	b := openIn(t, p.nsB, p.ifB, 0, Options{})
	max := b.MaxFrameSize()
	t.Logf("chunk %d, multi-buffer %v, MaxFrameSize %d", b.ChunkSize(), b.MultiBuffer(), max)
	// 4096 payload + Eth 14 + VLAN 4 + IPv6 40 + UDP 8 + BTH 12 + RETH 16 + ICRC 4
	const roce4096 = 4096 + 14 + 4 + 40 + 8 + 12 + 16 + 4
	sizes := []int{60, 1514, b.ChunkSize() - 256, b.ChunkSize() - 255, 4096, roce4096, 4096 + 14 + 20 + 8 + 12 + 28 + 4, max}
	var want [][]byte
	for i, sz := range sizes {
		if sz <= max {
			want = append(want, p.frameAtoB(sz, byte(i)))
		}
	}
	sendAll(t, a, want)
	got := recvN(t, b, len(want), 5*time.Second)
	checkFrames(t, "large frames", got, want)
	st := b.Stats()
	t.Logf("receiver: %d frames, %d gathered from several chunks", st.RxFrames, st.RxMultiBuffer)

	// Longer than MaxFrameSize: refused by Transmit.
	if n, err := a.Transmit([][]byte{p.frameAtoB(max+1, 0)}); n != 0 || !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("Transmit of %d bytes: %d, %v", max+1, n, err)
	}
}

// TestOversizeFrames records what happens to frames longer than a
// receiver can take, with and without multi-buffer.
func TestOversizeFrames(t *testing.T) {
	p := newVethPair(t, 9000, 1)
	a := openIn(t, p.nsA, p.ifA, 0, Options{MaxFrameSize: 9014})
	b := openIn(t, p.nsB, p.ifB, 0, Options{})
	if a.MaxFrameSize() != 9014 {
		t.Fatalf("sender MaxFrameSize %d", a.MaxFrameSize())
	}
	sendAll(t, a, [][]byte{p.frameAtoB(9014, 1), p.frameAtoB(200, 2)})
	got := recvN(t, b, 1, 2*time.Second)
	if len(got) != 1 || len(got[0]) != 200 {
		t.Fatalf("got %d frames", len(got))
	}
	st := b.Stats()
	t.Logf("9014-byte frame to a multi-buffer receiver with MaxFrameSize %d: RxTooLarge=%d RxDropped=%d", b.MaxFrameSize(), st.RxTooLarge, st.RxDropped)
	if st.RxTooLarge != 1 {
		t.Errorf("RxTooLarge = %d, want 1", st.RxTooLarge)
	}
	b.Close()

	// Without multi-buffer the kernel drops anything over chunk-256.
	c := openIn(t, p.nsB, p.ifB, 0, Options{NoMultiBuffer: true})
	if c.MultiBuffer() || c.MaxFrameSize() != c.ChunkSize()-256 {
		t.Fatalf("NoMultiBuffer socket: multi-buffer %v, max %d", c.MultiBuffer(), c.MaxFrameSize())
	}
	over := c.MaxFrameSize() + 1
	sendAll(t, a, [][]byte{p.frameAtoB(over, 1), p.frameAtoB(c.MaxFrameSize(), 2)})
	got = recvN(t, c, 1, 2*time.Second)
	if len(got) != 1 || len(got[0]) != c.MaxFrameSize() {
		t.Fatalf("got %d frames", len(got))
	}
	time.Sleep(10 * time.Millisecond)
	st = c.Stats()
	t.Logf("%d-byte frame to a single-buffer receiver (chunk %d): kernel RxDropped=%d", over, c.ChunkSize(), st.RxDropped)
	if st.RxDropped != 1 {
		t.Errorf("RxDropped = %d, want 1", st.RxDropped)
	}
}

// TestReopen closes and reopens a socket on the same queue at once: the
// kernel answers EBUSY for a while and Open retries.
func TestReopen(t *testing.T) {
	p := newVethPair(t, 1500, 1)
	a := openIn(t, p.nsA, p.ifA, 0, Options{})
	for i := 0; i < 3; i++ {
		var b *Socket
		must(t, p.nsB.Do(func() (err error) {
			b, err = Open(p.ifB, 0, Options{})
			return err
		}))
		want := [][]byte{p.frameAtoB(100, byte(i))}
		sendAll(t, a, want)
		checkFrames(t, "after reopen", recvN(t, b, 1, 2*time.Second), want)
		t.Logf("cycle %d: bind retries %d", i, b.Stats().BindRetries)
		if err := b.Close(); err != nil {
			t.Fatalf("close: %v", err)
		}
		if err := b.Close(); !errors.Is(err, ErrClosed) {
			t.Fatalf("second close: %v", err)
		}
		if _, err := b.Receive(make([]Frame, 1)); !errors.Is(err, ErrClosed) {
			t.Fatalf("Receive after close: %v", err)
		}
	}
	if xdpAttached(t, p.nsB, p.ifB) {
		t.Fatal("XDP program still attached after Close")
	}
}

// xdpAttached reports whether ip lists an XDP program on ifname in ns.
func xdpAttached(t *testing.T, ns *nsutil.Namespace, ifname string) bool {
	t.Helper()
	out, err := exec.Command("ip", "-n", ns.Name(), "-d", "link", "show", "dev", ifname).CombinedOutput()
	if err != nil {
		t.Fatalf("ip link show: %v\n%s", err, out)
	}
	return bytes.Contains(out, []byte("prog/xdp"))
}

// TestCloseCleansUp checks that Close removes the socket's XSKMAP entry of a
// shared program, and that closing the program detaches it.
func TestCloseCleansUp(t *testing.T) {
	p := newVethPair(t, 1500, 1)
	var st *bpf.Steering
	must(t, p.nsB.Do(func() (err error) {
		st, err = bpf.Attach(p.ifB, bpf.Options{})
		return err
	}))
	if !xdpAttached(t, p.nsB, p.ifB) {
		t.Fatal("no XDP program listed after Attach")
	}
	// The kernel has no user-space lookup for XSKMAP entries, so ask the
	// program: BPF_PROG_RUN on a RoCEv2 frame of queue 0 of ifB redirects
	// while a socket is registered and passes once it is gone.
	verdict := func() uint32 {
		var ret uint32
		must(t, p.nsB.Do(func() error {
			ifi, err := net.InterfaceByName(p.ifB)
			if err != nil {
				return err
			}
			f := p.frameAtoB(100, 0)
			ret, err = st.XDP().Run(&ebpf.RunOptions{Data: f, Context: [6]uint32{1: uint32(len(f)), 3: uint32(ifi.Index)}})
			return err
		}))
		return ret
	}
	if v := verdict(); v != bpf.XDPPass {
		t.Fatalf("verdict %d before Open, want XDP_PASS", v)
	}
	b := openIn(t, p.nsB, p.ifB, 0, Options{Steering: st})
	if v := verdict(); v != bpf.XDPRedirect {
		t.Fatalf("verdict %d with the socket open, want XDP_REDIRECT", v)
	}
	must(t, b.Close())
	if v := verdict(); v != bpf.XDPPass {
		t.Fatalf("verdict %d after Close, want XDP_PASS", v)
	}
	must(t, st.Close())
	if xdpAttached(t, p.nsB, p.ifB) {
		t.Fatal("XDP program still attached after Steering.Close")
	}
}

// TestBatch sends more than 32 frames (one kernel kick's worth) in one call.
func TestBatch(t *testing.T) {
	p := newVethPair(t, 1500, 1)
	a := openIn(t, p.nsA, p.ifA, 0, Options{})
	b := openIn(t, p.nsB, p.ifB, 0, Options{})
	var want [][]byte
	for i := 0; i < 300; i++ {
		want = append(want, p.frameAtoB(64+i, byte(i)))
	}
	n, err := a.Transmit(want)
	if err != nil || n != len(want) {
		t.Fatalf("Transmit: %d, %v", n, err)
	}
	checkFrames(t, "batch", recvN(t, b, len(want), 5*time.Second), want)
	st := a.Stats()
	// The kernel sends at most 32 frames per kick, but it also sends when
	// the runtime's poller polls the socket, so the count of kicks is not
	// fixed; that all 300 arrived is the point.
	t.Logf("300 frames in one Transmit: %d kicks", st.TxKicks)
	if st.TxKicks == 0 {
		t.Error("300 frames sent without a kick")
	}
	must(t, a.Flush())
	checkAccounting(t, a)
	checkAccounting(t, b)
}

func checkAccounting(t *testing.T, s *Socket) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reap()
	c := s.ownerCounts()
	rx := s.rxFrames
	tx := s.numFrames - s.rxFrames
	if c[ownKernelRx]+c[ownApp] != rx || c[ownTxFree]+c[ownKernelTx]+c[ownTxApp] != tx || len(c) > 5 {
		t.Fatalf("chunk owners %v, want %d receive and %d transmit chunks", c, rx, tx)
	}
	if c[ownTxFree] != len(s.txFree) {
		t.Fatalf("%d chunks marked free, free list has %d", c[ownTxFree], len(s.txFree))
	}
	// Receive chunks the kernel holds = fill ring entries + rx ring entries.
	inFill := s.fill.local - *s.fill.consumer
	inRx := *s.rx.producer - s.rx.local
	if c[ownKernelRx] < int(inFill+inRx) {
		t.Fatalf("%d chunks with the kernel, rings hold %d+%d", c[ownKernelRx], inFill, inRx)
	}
}

func TestZeroCopyTxAndOwnership(t *testing.T) {
	p := newVethPair(t, 1500, 1)
	a := openIn(t, p.nsA, p.ifA, 0, Options{})
	b := openIn(t, p.nsB, p.ifB, 0, Options{})

	tx := make([]TxFrame, 8)
	n := a.AllocTx(tx)
	if n != 8 {
		t.Fatalf("AllocTx: %d", n)
	}
	var want [][]byte
	for i := range tx {
		f := p.frameAtoB(100+i, byte(i))
		tx[i].Buf = tx[i].Buf[:copy(tx[i].Buf, f)]
		want = append(want, f)
	}
	// Give back the last two unsent.
	a.FreeTx(tx[6:])
	m, err := a.SubmitTx(tx[:6])
	if err != nil || m != 6 {
		t.Fatalf("SubmitTx: %d, %v", m, err)
	}

	// Receive without releasing: the chunks are the caller's.
	frames := make([]Frame, 16)
	got := 0
	deadline := time.Now().Add(2 * time.Second)
	for got < 6 && time.Now().Before(deadline) {
		k, _ := b.Receive(frames[got:])
		got += k
		if k == 0 {
			b.Wait(10 * time.Millisecond)
		}
	}
	if got != 6 {
		t.Fatalf("received %d", got)
	}
	for i := 0; i < 6; i++ {
		if !bytes.Equal(frames[i].Data, want[i]) {
			t.Fatalf("frame %d differs", i)
		}
	}
	if c := b.ownerCounts(); c[ownApp] != 6 {
		t.Fatalf("owners %v, want 6 held by the caller", c)
	}
	held := frames[0]
	b.Release(frames[:6])
	checkAccounting(t, b)
	mustPanic(t, "double release", func() { b.Release([]Frame{held}) })
	mustPanic(t, "double submit", func() { a.SubmitTx(tx[:1]) })
	must(t, a.Flush())
	checkAccounting(t, a)
}

func mustPanic(t *testing.T, what string, fn func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Errorf("%s did not panic", what)
		}
	}()
	fn()
}

// openLinks opens a Link on queue 0 of each end of p.
func openLinks(t *testing.T, p *vethPair) (la, lb *Link) {
	t.Helper()
	must(t, p.nsA.Do(func() (err error) {
		la, err = OpenLink(p.ifA, 0, Options{})
		return err
	}))
	must(t, p.nsB.Do(func() (err error) {
		lb, err = OpenLink(p.ifB, 0, Options{})
		return err
	}))
	return la, lb
}

func TestLink(t *testing.T) {
	p := newVethPair(t, 1500, 1)
	la, lb := openLinks(t, p)
	defer la.Close()
	if lb.MTU() != 1500 || !bytes.Equal(lb.HardwareAddr(), p.macB) {
		t.Errorf("MTU %d, MAC %v", lb.MTU(), lb.HardwareAddr())
	}

	var want [][]byte
	for i := 0; i < 100; i++ {
		want = append(want, p.frameAtoB(60+i*10, byte(i)))
	}
	if n, err := la.WriteBatch(want); n != len(want) || err != nil {
		t.Fatalf("WriteBatch: %d, %v", n, err)
	}
	bufs := make([][]byte, 32)
	for i := range bufs {
		bufs[i] = make([]byte, 2048)
	}
	sizes := make([]int, 32)
	var got [][]byte
	for len(got) < len(want) {
		n, err := lb.ReadBatch(bufs, sizes, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			t.Fatalf("ReadBatch timed out after %d frames", len(got))
		}
		for i := 0; i < n; i++ {
			got = append(got, append([]byte(nil), bufs[i][:sizes[i]]...))
		}
	}
	checkFrames(t, "link", got, want)

	// Timeout.
	start := time.Now()
	if n, err := lb.ReadBatch(bufs, sizes, 30*time.Millisecond); n != 0 || err != nil {
		t.Fatalf("idle ReadBatch: %d, %v", n, err)
	}
	if d := time.Since(start); d < 25*time.Millisecond || d > time.Second {
		t.Errorf("30ms ReadBatch took %v", d)
	}
	// Wake.
	done := make(chan time.Duration)
	go func() {
		start := time.Now()
		n, err := lb.ReadBatch(bufs, sizes, 10*time.Second)
		if n != 0 || err != nil {
			t.Errorf("woken ReadBatch: %d, %v", n, err)
		}
		done <- time.Since(start)
	}()
	time.Sleep(20 * time.Millisecond)
	lb.Wake()
	select {
	case d := <-done:
		t.Logf("Wake ended a ReadBatch after %v", d)
	case <-time.After(2 * time.Second):
		t.Fatal("Wake did not end ReadBatch")
	}
	// Close while blocked.
	errc := make(chan error)
	go func() {
		_, err := lb.ReadBatch(bufs, sizes, -1)
		errc <- err
	}()
	time.Sleep(20 * time.Millisecond)
	if err := lb.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("blocked ReadBatch after Close: %v", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Close did not end ReadBatch")
	}
}

func TestMultiQueue(t *testing.T) {
	p := newVethPair(t, 1500, 2)
	var ga, gb *Group
	must(t, p.nsA.Do(func() (err error) {
		n, err := QueueCount(p.ifA)
		if err != nil || n != 2 {
			t.Errorf("QueueCount = %d, %v; want 2", n, err)
		}
		ga, err = OpenAll(p.ifA, Options{})
		return err
	}))
	defer ga.Close()
	must(t, p.nsB.Do(func() (err error) {
		gb, err = OpenAll(p.ifB, Options{})
		return err
	}))
	defer gb.Close()
	t.Logf("%v / %v", ga, gb)
	if len(ga.Sockets) != 2 || len(gb.Sockets) != 2 {
		t.Fatalf("sockets: %d, %d", len(ga.Sockets), len(gb.Sockets))
	}
	// veth delivers a frame sent on tx queue q to rx queue q of its peer.
	for q := 0; q < 2; q++ {
		want := [][]byte{p.frameAtoB(100+q, byte(q))}
		sendAll(t, ga.Sockets[q], want)
		got := recvN(t, gb.Sockets[q], 1, 2*time.Second)
		other := recvN(t, gb.Sockets[1-q], 1, 20*time.Millisecond)
		if len(got) != 1 {
			t.Errorf("frame sent on queue %d: %d at queue %d, %d at queue %d", q, len(got), q, len(other), 1-q)
			continue
		}
		checkFrames(t, "multi-queue", got, want)
	}
}

// TestAttachModes records which XDP attach modes veth accepts at MTU 1500
// and 9000, with and without the frags flag, and that AF_XDP receives in
// each.
func TestAttachModes(t *testing.T) {
	for _, mtu := range []int{1500, 9000} {
		p := newVethPair(t, mtu, 1)
		a := openIn(t, p.nsA, p.ifA, 0, Options{})
		for _, mode := range []bpf.AttachMode{bpf.AttachDriver, bpf.AttachGeneric} {
			for _, noFrags := range []bool{false, true} {
				var st *bpf.Steering
				err := p.nsB.Do(func() (err error) {
					st, err = bpf.Attach(p.ifB, bpf.Options{Mode: mode, NoFrags: noFrags})
					return err
				})
				if err != nil {
					t.Logf("MTU %d, %s, frags %v: refused: %v", mtu, mode, !noFrags, err)
					if mode == bpf.AttachGeneric || mtu <= 3506 || noFrags == false {
						t.Errorf("unexpected refusal")
					}
					continue
				}
				var b *Socket
				must(t, p.nsB.Do(func() (err error) {
					b, err = Open(p.ifB, 0, Options{Steering: st})
					return err
				}))
				want := [][]byte{p.frameAtoB(min(4200, mtu+14), 1), p.frameAtoB(64, 2)}
				sendAll(t, a, want)
				got := recvN(t, b, 2, 2*time.Second)
				t.Logf("MTU %d, %s, frags %v: attached; received %d of 2 (sizes %d, %d)", mtu, mode, !noFrags, len(got), len(want[0]), len(want[1]))
				checkFrames(t, "attach mode", got, want)
				b.Close()
				st.Close()
			}
		}
	}
}

// TestChunkSizes checks the chunk sizes the kernel takes: 2048 and 4096
// work (with 2048-byte chunks a 4096-MTU RoCEv2 frame arrives in three
// chunks); 8192 is refused, as the kernel refuses chunks over a page.
func TestChunkSizes(t *testing.T) {
	p := newVethPair(t, 9000, 1)
	a := openIn(t, p.nsA, p.ifA, 0, Options{})
	b := openIn(t, p.nsB, p.ifB, 0, Options{ChunkSize: 2048, NumFrames: 1024})
	if b.ChunkSize() != 2048 || b.MaxFrameSize() != DefaultMaxFrameSize {
		t.Fatalf("chunk %d, max frame %d", b.ChunkSize(), b.MaxFrameSize())
	}
	want := [][]byte{p.frameAtoB(1792, 1), p.frameAtoB(3584, 2), p.frameAtoB(4222, 3), p.frameAtoB(64, 4)}
	sendAll(t, a, want)
	checkFrames(t, "2048-byte chunks", recvN(t, b, len(want), 2*time.Second), want)

	for _, chunk := range []int{1024, 3000, 8192} {
		err := p.nsB.Do(func() error {
			s, err := Open(p.ifB, 0, Options{ChunkSize: chunk, NoSteering: true})
			if err == nil {
				s.Close()
			}
			return err
		})
		if err == nil {
			t.Errorf("chunk size %d accepted", chunk)
		}
	}
}

func TestConcurrentRxTx(t *testing.T) {
	p := newVethPair(t, 1500, 1)
	a := openIn(t, p.nsA, p.ifA, 0, Options{})
	b := openIn(t, p.nsB, p.ifB, 0, Options{})
	// B echoes what it receives; A receives on one goroutine while it
	// transmits on another.
	const total = 2000
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(2)
	go func() {
		defer wg.Done()
		frames := make([]Frame, 64)
		out := make([][]byte, 64)
		for {
			select {
			case <-stop:
				return
			default:
			}
			n, _ := b.Receive(frames)
			for i := 0; i < n; i++ {
				d := frames[i].Data
				copy(d[0:6], p.macA)
				copy(d[6:12], p.macB)
				out[i] = d
			}
			for sent := 0; sent < n; {
				k, err := b.Transmit(out[sent:n])
				if err != nil {
					t.Error(err)
					return
				}
				sent += k
			}
			b.Release(frames[:n])
			if n == 0 {
				b.Wait(5 * time.Millisecond)
			}
		}
	}()
	var got int
	go func() {
		defer wg.Done()
		frames := make([]Frame, 64)
		for deadline := time.Now().Add(10 * time.Second); got < total && time.Now().Before(deadline); {
			n, _ := a.Receive(frames)
			got += n
			a.Release(frames[:n])
			if n == 0 {
				a.Wait(5 * time.Millisecond)
			}
		}
	}()
	frames := make([][]byte, total)
	for i := range frames {
		frames[i] = p.frameAtoB(128, byte(i))
	}
	for i := 0; i < total; i += 50 {
		sendAll(t, a, frames[i:i+50])
		time.Sleep(200 * time.Microsecond)
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		if a.Stats().RxFrames >= total {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(stop)
	b.Wake()
	wg.Wait()
	if got != total {
		t.Errorf("echoed %d of %d; A %+v; B %+v", got, total, a.Stats(), b.Stats())
	}
}

// leaveOnTxRing puts five frames from A to B on a's tx ring without a
// kick, as when the kernel stopped taking them, and returns them. It skips
// the test where that stall cannot happen (zero-copy, or a kernel that
// does not ask for tx wake-ups).
func leaveOnTxRing(t *testing.T, p *vethPair, a *Socket) [][]byte {
	t.Helper()
	if a.Mode() != ModeCopy {
		t.Skipf("mode %s: the stall is a copy-mode one", a.Mode())
	}
	if !a.tx.needWakeup() {
		t.Skip("the kernel does not ask for tx wake-ups here")
	}
	var want [][]byte
	a.mu.Lock()
	defer a.mu.Unlock()
	for i := 0; i < 5; i++ {
		f := p.frameAtoB(100+i, byte(i))
		want = append(want, f)
		addr := a.txFree[len(a.txFree)-1]
		a.txFree = a.txFree[:len(a.txFree)-1]
		a.owner[a.chunkIndex(addr)] = ownKernelTx
		n := copy(a.umem[addr:addr+a.chunkSize], f)
		d := &a.tx.descs[a.tx.local&a.tx.mask]
		d.Addr, d.Len, d.Options = addr, uint32(n), 0
		a.tx.local++
	}
	a.tx.submit() // on the ring, not kicked
	return want
}

// TestWaitTransmitsStuckFrames leaves frames on the tx ring without a kick,
// as when the kernel stopped taking them for lack of send buffer, and
// waits for a frame that cannot come as Link.ReadBatch does (its caller
// both receives and transmits): the wait must drive them out (in
// copy mode poll(2) transmits) instead of sleeping until something
// arrives, which on a peer waiting for those very frames is never.
func TestWaitTransmitsStuckFrames(t *testing.T) {
	p := newVethPair(t, 1500, 1)
	a := openIn(t, p.nsA, p.ifA, 0, Options{})
	b := openIn(t, p.nsB, p.ifB, 0, Options{})
	want := leaveOnTxRing(t, p, a)
	done := make(chan struct{})
	go func() {
		defer close(done)
		a.mu.RLock()
		a.wait(2*time.Second, true) // nothing will arrive at A
		a.mu.RUnlock()
	}()
	got := recvN(t, b, len(want), 5*time.Second)
	checkFrames(t, "frames stuck on A's tx ring", got, want)
	<-done
	if a.Stats().TxRetries == 0 {
		t.Error("the wait was not shortened for the stuck frames")
	}
	// As root the send buffer holds every transmit chunk.
	sb, err := unix.GetsockoptInt(a.fd, unix.SOL_SOCKET, unix.SO_SNDBUF)
	if want := (a.numFrames - a.rxFrames) * int(a.chunkSize) * 2; err != nil || sb < want {
		t.Errorf("SO_SNDBUF %d (%v), want at least %d", sb, err, want)
	}
}

// TestBusyPoll opens a socket that busy-polls its queue: as root the three
// socket options are accepted, and receiving with an empty ring enters the
// kernel to drive the queue, which still delivers every frame.
func TestBusyPoll(t *testing.T) {
	p := newVethPair(t, 1500, 1)
	a := openIn(t, p.nsA, p.ifA, 0, Options{})
	b := openIn(t, p.nsB, p.ifB, 0, Options{BusyPoll: 20 * time.Microsecond})
	if st := b.Stats(); st.BusyPoll != "on" {
		t.Fatalf("busy poll %q, want on (as root)", st.BusyPoll)
	}
	if st := a.Stats(); st.BusyPoll != "off" {
		t.Fatalf("busy poll of a socket without the option: %q", st.BusyPoll)
	}
	var want [][]byte
	for i := 0; i < 20; i++ {
		want = append(want, p.frameAtoB(100+i, byte(i)))
	}
	if n, err := a.Transmit(want); err != nil || n != len(want) {
		t.Fatalf("Transmit: %d, %v", n, err)
	}
	bufs := make([][]byte, 8)
	for i := range bufs {
		bufs[i] = make([]byte, 2048)
	}
	sizes := make([]int, len(bufs))
	var got [][]byte
	deadline := time.Now().Add(5 * time.Second)
	for len(got) < len(want) && time.Now().Before(deadline) {
		n, err := b.ReceiveCopy(bufs, sizes)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < n; i++ {
			got = append(got, append([]byte(nil), bufs[i][:sizes[i]]...))
		}
	}
	checkFrames(t, "busy-polled", got, want)
	if n, err := b.ReceiveCopy(bufs, sizes); n != 0 || err != nil { // the ring is empty now
		t.Fatalf("receive after the last frame: %d, %v", n, err)
	}
	if b.Stats().BusyPolls == 0 {
		t.Error("no receive entered the kernel to busy-poll")
	}
}

// TestSpinningReaderResumesStuckTx leaves frames on the tx ring as a kick
// the kernel could not finish does (its driver queue or send buffer was
// full), and then only polls A for frames (ReadBatch with a zero timeout,
// as an inline engine does while its program spins on a CQ). While the
// kernel has completed nothing since, the polls leave the ring alone (no
// system call per poll); once a completion shows room they kick the frames
// out, rather than leaving them until A transmits again.
func TestSpinningReaderResumesStuckTx(t *testing.T) {
	p := newVethPair(t, 1500, 1)
	var la *Link
	must(t, p.nsA.Do(func() (err error) {
		la, err = OpenLink(p.ifA, 0, Options{})
		return err
	}))
	defer la.Close()
	a := la.Socket()
	b := openIn(t, p.nsB, p.ifB, 0, Options{})
	want := leaveOnTxRing(t, p, a)
	a.mu.Lock()
	prod := atomic.LoadUint32(a.comp.producer)
	a.txBacklogComp.Store(prod) // a kick that began at this completion index
	a.txBacklog.Store(true)     // left them there
	a.mu.Unlock()
	// A waiter beside the transmitting goroutine (an inline engine's
	// loop) may not kick, but does not sleep long while they wait.
	start := time.Now()
	if _, err := a.Wait(3 * time.Second); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > time.Second {
		t.Fatalf("Wait slept %v with frames left on the tx ring", el)
	}
	bufs, sizes := [][]byte{make([]byte, 2048)}, []int{0}
	for i := 0; i < 100; i++ {
		if _, err := la.ReadBatch(bufs, sizes, 0); err != nil {
			t.Fatal(err)
		}
	}
	if st := a.Stats(); st.TxResumes != 0 || st.TxKicks != 0 {
		t.Fatalf("polls kicked with no completion since the stall: %+v", st)
	}
	a.txBacklogComp.Store(prod - 1) // the kernel has completed a frame since
	stop := make(chan struct{})
	polled := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				polled <- nil
				return
			default:
			}
			if _, err := la.ReadBatch(bufs, sizes, 0); err != nil {
				polled <- err
				return
			}
		}
	}()
	got := recvN(t, b, len(want), 5*time.Second)
	close(stop)
	if err := <-polled; err != nil {
		t.Fatal(err)
	}
	checkFrames(t, "frames left on A's tx ring while A only polled", got, want)
	if st := a.Stats(); st.TxResumes != 1 || a.txBacklog.Load() {
		t.Errorf("want one resumed kick and no backlog after it: %+v", st)
	}
}

// TestLinkLends receives through ReadLent: the frames arrive whole and in
// order, each lend gives its chunks back (the socket's accounting balances
// and a second round of 200 frames gets through a 64-chunk lend batch),
// and Close waits while frames are lent.
func TestLinkLends(t *testing.T) {
	p := newVethPair(t, 1500, 1)
	la, lb := openLinks(t, p)
	defer la.Close()
	lent := make([][]byte, 64)
	for round := 0; round < 2; round++ {
		var want [][]byte
		for i := 0; i < 200; i++ {
			want = append(want, p.frameAtoB(60+i*7, byte(i+round)))
		}
		var got [][]byte
		for sent := 0; sent < len(want); {
			n, err := la.WriteBatch(want[sent:min(sent+50, len(want))])
			if err != nil {
				t.Fatal(err)
			}
			sent += n
			deadline := time.Now().Add(5 * time.Second)
			for len(got) < sent {
				n, err := lb.ReadLent(lent)
				if err != nil {
					t.Fatal(err)
				}
				for i := 0; i < n; i++ {
					got = append(got, append([]byte(nil), lent[i]...))
				}
				lb.ReleaseLent()
				if n == 0 {
					if time.Now().After(deadline) {
						t.Fatalf("round %d: %d of %d frames after 5s", round, len(got), sent)
					}
					lb.WaitReady(10 * time.Millisecond)
				}
			}
		}
		checkFrames(t, "lent", got, want)
		checkAccounting(t, lb.Socket())
	}
	// Close while a frame is lent: it returns only after ReleaseLent.
	if n, err := la.WriteBatch([][]byte{p.frameAtoB(100, 1)}); n != 1 || err != nil {
		t.Fatalf("WriteBatch: %d, %v", n, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, err := lb.ReadLent(lent)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no frame to lend within 5s")
		}
		lb.WaitReady(10 * time.Millisecond)
	}
	closed := make(chan error, 1)
	go func() { closed <- lb.Close() }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while a frame was lent", err)
	case <-time.After(50 * time.Millisecond):
	}
	if len(lent[0]) != 100 {
		t.Errorf("the lent frame has %d bytes, want 100", len(lent[0]))
	}
	lb.ReleaseLent()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return after ReleaseLent")
	}
	if n, err := lb.ReadLent(lent); n != 0 || !errors.Is(err, ErrClosed) {
		t.Fatalf("ReadLent after Close: %d, %v", n, err)
	}
}

// TestLinkLendsTx builds frames in chunks the link lends (roce.Lender),
// submits them in partial batches, gives some back unsent, and checks that
// the peer receives exactly the submitted ones and that every chunk is
// accounted for; a buffer the link did not lend, or one already
// submitted, panics; a link whose chunks are all lent lends none.
func TestLinkLendsTx(t *testing.T) {
	p := newVethPair(t, 1500, 1)
	// Without multi-buffer the receive headroom makes MaxFrameSize smaller
	// than a chunk; a transmitted frame has none, and its buffer stays the
	// whole chunk (a device at the capped MTU still borrows it).
	var single *Link
	must(t, p.nsA.Do(func() (err error) {
		single, err = OpenLink(p.ifA, 0, Options{NoMultiBuffer: true})
		return err
	}))
	if single.TxBufSize() != single.Socket().ChunkSize() || single.Socket().MaxFrameSize() >= single.TxBufSize() {
		t.Errorf("without multi-buffer: TxBufSize %d, chunk %d, MaxFrameSize %d",
			single.TxBufSize(), single.Socket().ChunkSize(), single.Socket().MaxFrameSize())
	}
	single.Close()
	la, lb := openLinks(t, p)
	defer la.Close()
	defer lb.Close()
	if la.TxBufSize() != la.Socket().ChunkSize() {
		t.Fatalf("TxBufSize %d, chunk %d", la.TxBufSize(), la.Socket().ChunkSize())
	}
	bufs := make([][]byte, 64)
	rx := make([][]byte, 64)
	sizes := make([]int, 64)
	for i := range rx {
		rx[i] = make([]byte, 2048)
	}
	var want, got [][]byte
	for round := 0; round < 4; round++ {
		n := la.LendTx(bufs)
		if n != len(bufs) {
			t.Fatalf("round %d: LendTx lent %d of %d", round, n, len(bufs))
		}
		var frames [][]byte
		for i := 0; i < 50; i++ {
			f := p.frameAtoB(60+i*11, byte(i+round))
			frames = append(frames, bufs[i][:copy(bufs[i], f)])
			want = append(want, f)
		}
		la.ReturnTx(bufs[50:]) // never used
		for sent := 0; sent < len(frames); {
			n, err := la.SubmitLent(frames[sent:min(sent+17, len(frames))])
			if err != nil {
				t.Fatal(err)
			}
			sent += n
		}
		deadline := time.Now().Add(5 * time.Second)
		for len(got) < len(want) {
			n, err := lb.ReadBatch(rx, sizes, 10*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < n; i++ {
				got = append(got, append([]byte(nil), rx[i][:sizes[i]]...))
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: %d of %d frames after 5s", round, len(got), len(want))
			}
		}
		mustPanic(t, "a submitted buffer submitted again", func() { la.SubmitLent(frames[:1]) })
	}
	checkFrames(t, "built in lent chunks", got, want)
	must(t, la.Socket().Flush())
	checkAccounting(t, la.Socket())
	mustPanic(t, "a buffer the link did not lend", func() { la.SubmitLent([][]byte{make([]byte, 64)}) })
	mustPanic(t, "a buffer the link did not lend, given back", func() { la.ReturnTx([][]byte{make([]byte, 64)}) })

	// Lend every chunk: the next LendTx lends none; giving them back
	// restores the free list.
	var all [][]byte
	for {
		n := la.LendTx(bufs)
		all = append(all, bufs[:n]...)
		if n == 0 {
			break
		}
	}
	if s := la.Socket(); len(all) != int(s.numFrames-s.rxFrames) {
		t.Fatalf("lent %d chunks, the socket has %d for transmitting", len(all), s.numFrames-s.rxFrames)
	}
	// Send them all, with no Flush: once the kernel has sent them, LendTx
	// finds them again by itself.
	for i := range all {
		all[i] = all[i][:copy(all[i], want[0])]
	}
	for sent := 0; sent < len(all); {
		n, err := la.SubmitLent(all[sent:])
		if err != nil {
			t.Fatal(err)
		}
		sent += n
		if n == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	var again int
	for deadline := time.Now().Add(5 * time.Second); again == 0 && time.Now().Before(deadline); {
		if again = la.LendTx(bufs); again == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	if again == 0 {
		t.Fatal("after every chunk was sent, LendTx lent none for 5s")
	}
	la.ReturnTx(bufs[:again])
	must(t, la.Socket().Flush())
	checkAccounting(t, la.Socket())
}
