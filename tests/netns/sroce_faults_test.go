package netns

// Bad input between two sroce engines: a peer that disappears mid-run, a
// frame too large for the receiver's UMEM chunks, an interface that goes
// down mid-run. Each must end in a clear error or a counted drop, within a
// bounded time, and leave no namespace, XDP program or socket behind.

import (
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sroce/sroce/internal/nsutil"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/roce/iface"
	"github.com/sroce/sroce/verbs"
	"github.com/sroce/sroce/xdp"
)

// srPostWrites posts n signaled WRITEs of size bytes from a to b.
func srPostWrites(t *testing.T, r *srRig, n, size int) {
	t.Helper()
	for i := 0; i < n; i++ {
		wr := verbs.SendWR{WRID: uint64(i), Opcode: verbs.WROpRDMAWrite, Flags: verbs.Signaled,
			SGL: []mr.SGE{r.a.mr.SGE(0, size)}, RemoteAddr: r.b.mr.Addr(), RKey: r.b.mr.RKey()}
		if err := r.a.qp.PostSend(&wr); err != nil {
			t.Fatal(err)
		}
	}
}

// srDrain waits for n completions on A's send CQ and returns the first
// failed one, if any; a completion that does not come within d fails the
// test (a hang).
func srDrain(t *testing.T, s *srSide, n int, d time.Duration) (first verbs.WC, failed int, lostErr error) {
	t.Helper()
	for i := 0; i < n; i++ {
		wc, err := s.wait(s.scq, d)
		if err != nil {
			if strings.Contains(err.Error(), "no completion within") {
				t.Fatalf("hang: %v after %d of %d completions", err, i, n)
			}
			// The port reported the loss; its QPs are flushed: the rest
			// of the completions are there.
			lostErr = err
			wc, err = s.wait(s.scq, d)
			if err != nil && strings.Contains(err.Error(), "no completion within") {
				t.Fatalf("hang after the port was lost: %v", err)
			}
		}
		if wc.Status != verbs.WCSuccess {
			if failed == 0 {
				first = wc
			}
			failed++
		}
	}
	return first, failed, lostErr
}

// TestSrocePeerDisappears closes B's device while A is writing to it: A's
// requests fail with RETRY_EXC_ERR (retry_cnt 6, 16.8 ms timeout), the
// rest are flushed, and nothing waits forever.
func TestSrocePeerDisappears(t *testing.T) {
	srSkip(t)
	for _, mode := range []iface.Mode{iface.ModeXDP, iface.ModeUDP} {
		t.Run(string(mode), func(t *testing.T) {
			srLeakCheck(t)
			r := newSrRig(t, srConfig{mode: mode})
			srOps(t, r, 4096, 1)
			const n = 64
			srPostWrites(t, r, n, 65536)
			start := time.Now()
			if err := r.b.port.Close(); err != nil {
				t.Fatal(err)
			}
			// The first batch may all land before the close on a fast
			// machine; a second batch posted after it cannot.
			srPostWrites(t, r, n, 65536)
			first, failed, _ := srDrain(t, r.a, 2*n, 10*time.Second)
			took := time.Since(start)
			if failed == 0 {
				t.Fatal("every WRITE succeeded although the peer was closed")
			}
			if first.Status != verbs.WCRetryExcErr {
				t.Errorf("first failed completion %v, want %v", first.Status, verbs.WCRetryExcErr)
			}
			if got := r.a.stat("retry_exceeded_err"); got != 1 {
				t.Errorf("retry_exceeded_err = %d, want 1", got)
			}
			if st := r.a.qp.State(); st != verbs.QPStateErr {
				t.Errorf("A's QP in %v, want ERR", st)
			}
			t.Logf("%d of %d WRITEs failed, first with %v, %v after the peer closed; %d timeouts",
				failed, 2*n, first.Status, took.Round(time.Millisecond), r.a.stat("timeouts"))
			if took > 5*time.Second {
				t.Errorf("the failure took %v", took)
			}
		})
	}
}

// TestSroceOversizeFrame sends UDP 4791 datagrams larger than the
// receiving AF_XDP socket takes: a socket without multi-buffer (one
// 4096-byte chunk: 3840 bytes) and a multi-buffer one (MaxFrameSize 7680).
// The kernel or the socket drops and counts them, the engine never sees
// them, and RDMA traffic that fits goes on.
func TestSroceOversizeFrame(t *testing.T) {
	srSkip(t)
	for _, c := range []struct {
		name  string
		xo    xdp.Options
		bytes int
	}{
		{"single-chunk", xdp.Options{NoMultiBuffer: true}, 5000},
		{"multi-buffer", xdp.Options{}, 8500},
	} {
		t.Run(c.name, func(t *testing.T) {
			srLeakCheck(t)
			r := newSrRig(t, srConfig{mode: iface.ModeXDP, mtu: 9000, xdpB: c.xo})
			t.Logf("A path MTU %d, B path MTU %d (B's link carries at most %d-byte frames)",
				r.a.port.PathMTU(), r.b.port.PathMTU(), r.b.port.XDPLink().Socket().MaxFrameSize())
			srOps(t, r, 20000, 1)
			before := r.b.stat("rx_dropped") + r.b.stat("rx_too_large")
			rcvd := r.b.stat("rcvd_pkts")
			malformed := r.b.stat("malformed")
			// A kernel UDP socket in A sends the big datagrams to B's port
			// 4791: B's steering program hands them to B's AF_XDP socket.
			const count = 5
			err := r.pair.A.Do(func() error {
				c2, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(nsutil.DefaultAddrB.Addr(), 4791)))
				if err != nil {
					return err
				}
				defer c2.Close()
				for i := 0; i < count; i++ {
					if _, err := c2.Write(make([]byte, c.bytes)); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			var dropped uint64
			for i := 0; i < 100; i++ {
				dropped = r.b.stat("rx_dropped") + r.b.stat("rx_too_large") - before
				if dropped >= count {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			if dropped < count {
				t.Errorf("%d of %d oversized frames counted (rx_dropped %d, rx_too_large %d)",
					dropped, count, r.b.stat("rx_dropped"), r.b.stat("rx_too_large"))
			}
			if got := r.b.stat("rcvd_pkts"); got != rcvd {
				t.Errorf("the engine accepted %d packets from the oversized frames", got-rcvd)
			}
			if got := r.b.stat("malformed"); got != malformed {
				t.Errorf("oversized frames reached the engine: malformed %d", got-malformed)
			}
			srOps(t, r, 20000, 1)
		})
	}
}

// TestSroceLinkDown takes B's end of the veth down while A writes: both
// ports go DOWN (A sees its carrier go) and count link_downed, and stay
// usable, as rxe devices do. As on rxe the QPs are left alone: A's
// requests retransmit into the dead link until their retry budget
// (retry_cnt 6, 16.8 ms timeout) is spent, then fail with RETRY_EXC_ERR
// and the rest are flushed; nothing waits forever. When the link is back
// both ports are ACTIVE again.
func TestSroceLinkDown(t *testing.T) {
	srSkip(t)
	srLeakCheck(t)
	r := newSrRig(t, srConfig{mode: iface.ModeXDP})
	srOps(t, r, 4096, 1)
	const n = 200
	srPostWrites(t, r, n, 65536)
	start := time.Now()
	if err := r.pair.B.SetLinkUp(r.pair.Veth.NameB, false); err != nil {
		t.Fatal(err)
	}
	first, failed, lostErr := srDrain(t, r.a, n, 10*time.Second)
	took := time.Since(start)
	t.Logf("%d of %d WRITEs failed (first %v) %v after the link went down", failed, n, first.Status, took.Round(time.Millisecond))
	if lostErr != nil {
		t.Errorf("A's port was lost: %v", lostErr)
	}
	if failed == 0 {
		t.Log("all WRITEs completed before the link went down")
	} else if first.Status != verbs.WCRetryExcErr {
		t.Errorf("first failed completion %v, want RETRY_EXC_ERR (the QP's retries spent, as on rxe)", first.Status)
	}
	for _, s := range []*srSide{r.a, r.b} {
		for deadline := time.Now().Add(5 * time.Second); s.port.State() != verbs.PortDown; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: port %v 5s after the link went down", s.name, s.port.State())
			}
		}
		if got := s.stat("link_downed"); got != 1 {
			t.Errorf("%s: link_downed = %d, want 1", s.name, got)
		}
		select {
		case <-s.port.Lost():
			t.Errorf("%s: the port was lost: %v", s.name, s.port.Err())
		default:
		}
	}
	if took > 5*time.Second {
		t.Errorf("the failure took %v", took)
	}
	if err := r.pair.B.SetLinkUp(r.pair.Veth.NameB, true); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*srSide{r.a, r.b} {
		for deadline := time.Now().Add(5 * time.Second); s.port.State() != verbs.PortActive; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: port %v 5s after the link came back", s.name, s.port.State())
			}
		}
	}
}
