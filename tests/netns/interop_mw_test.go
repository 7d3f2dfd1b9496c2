package netns

// Memory windows, fast-registration MRs and SEND with invalidate between
// sroce (the Go API, over AF_XDP in a host namespace on the shared guests'
// bridge) and rdma_rxe in guest rxe-a, over RC. On the guest side the
// program sroce-mw (internal/rxeguest/guest/sroce-mw.c) does what the test tells it
// over TCP, one verb a line.
//
// What rdma-core 44 and rxe (Linux 6.1) allow shapes the test:
//   - libibverbs has no REG_MR work request (fast registration is a
//     kernel-consumer verb), so only sroce registers a fast-registration
//     MR; rxe accesses and invalidates it.
//   - rxe checks an access through a window against the bounds of the
//     window's MR, not of the window (check_rkey calls mr_check_range on
//     the MR). An access beyond the window is refused only where it also
//     leaves the MR, so the test binds rxe's window to the end of its MR
//     and goes past that end; what rxe does with an access before the
//     window (inside the MR) is logged, not judged.
//   - rxe marks a receive completion of a SEND with invalidate with the
//     kernel's IB_WC_WITH_INVALIDATE (1<<2), which it copies to user space
//     as it is, where 1<<2 is IBV_WC_IP_CSUM_OK and IBV_WC_WITH_INV is
//     1<<3; the invalidated rkey is right. The test takes either flag.
//   - A type 2 window of rxe is reachable only through the QP that bound
//     it, and a remote access error moves both QPs to the error state, so
//     every case that ends in one gets a QP pair of its own.
//
// The RoCEv2 traffic on the guest's tap is captured: every frame must
// carry a correct ICRC, and the SENDs with invalidate on the wire must be
// those the test made, each with the rkey it named in its IETH.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/internal/nsutil"
	"github.com/sroce/sroce/internal/rxeguest"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/roce/iface"
	"github.com/sroce/sroce/verbs"
)

const (
	// mwTool is sroce-mw's place in the guest image.
	mwTool = "/usr/local/bin/sroce-mw"
	// mwPort is the TCP port sroce-mw listens on.
	mwPort = 18519
	// mwWait bounds every completion and every answer of sroce-mw (whose
	// own waits for send completions end after 30 s).
	mwWait = 45 * time.Second
	// mwStateWait bounds the wait for a QP's state to follow an error the
	// other side has already seen.
	mwStateWait = 5 * time.Second
)

// mwHostAddr is the address of the test's host namespace on the shared
// guests' LAN.
var mwHostAddr = netip.MustParsePrefix("192.0.2.31/24")

// Values of libibverbs' enums, as sroce-mw prints and takes them.
const (
	ibvAccessLocalWrite  = 1
	ibvAccessRemoteWrite = 2
	ibvAccessRemoteRead  = 4
	ibvAccessMWBind      = 16

	ibvWCSuccess      = 0
	ibvWCRemInvReqErr = 9
	ibvWCRemAccessErr = 10

	ibvWCSend     = 0
	ibvWCRDMARead = 2
	ibvWCBindMW   = 5
	ibvWCRecv     = 128

	ibvWCWithInv = 1 << 3
	// rxeWCWithInv is the flag rxe sets instead (IB_WC_WITH_INVALIDATE).
	rxeWCWithInv = 1 << 2

	ibvQPSRTS = 3
	ibvQPSErr = 6
)

func TestInteropRxeMW(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping the rdma_rxe interop tests in -short mode")
	}
	if os.Geteuid() != 0 {
		t.Skip("skipping: the rdma_rxe interop tests need root (namespaces, AF_XDP, qemu)")
	}
	p := sharedPair(t)
	ctx := testContext(t, 10*time.Minute)
	runInteropMW(t, ctx, p.LAN, p.A, mwTool)
}

// runInteropMW runs the cases against guest g on lan, with tool as the
// guest's sroce-mw.
func runInteropMW(t *testing.T, ctx context.Context, lan *rxeguest.LAN, g *rxeguest.Guest, tool string) {
	start := time.Now()
	h := newMWHost(t, ctx, lan)
	pcap := filepath.Join(t.TempDir(), "roce.pcap")
	capt, err := rxeguest.StartCapture(ctx, lan.NS, g.Tap(), pcap, "udp port 4791")
	if err != nil {
		t.Fatal(err)
	}
	stopCapture := sync.OnceFunc(func() { capt.Stop() })
	defer stopCapture()
	s := startRxeMW(t, ctx, g, h.ns, tool)
	// The rkeys each side's SENDs with invalidate name.
	wire := struct{ toRxe, fromRxe map[uint32]bool }{map[uint32]bool{}, map[uint32]bool{}}
	t.Logf("sroce %v and sroce-mw on %s (%v) ready in %v", h.port, g.Name(), g.IP(), time.Since(start).Round(time.Millisecond))

	t.Run("rxe-window", func(t *testing.T) {
		// rxe binds a type 2 window over the second half of an MR that
		// has no remote rights of its own; sroce writes and reads through
		// it, then revokes it with SEND with invalidate.
		hq, gq := h.pair(t, ctx, s)
		hm := h.reg(t, 8192, mr.AccessLocalWrite)
		gm := s.mr(t, 8192, ibvAccessLocalWrite|ibvAccessMWBind)
		key := s.bind(t, gq, gm, 4096, 4096, ibvAccessRemoteWrite|ibvAccessRemoteRead)

		data := mwPattern(2048, 1)
		copy(hm.Buf(), data)
		h.mustRDMA(t, hq, verbs.WROpRDMAWrite, hm, 0, 2048, gm.addr+4096, key, verbs.WCSuccess)
		if got := s.get(t, gm, 4096, 2048); !bytes.Equal(got, data) {
			t.Fatal("the WRITE through rxe's window left other bytes in rxe's memory")
		}
		if got := s.get(t, gm, 0, 4096); !bytes.Equal(got, make([]byte, 4096)) {
			t.Fatal("the WRITE through rxe's window changed rxe's memory outside the window")
		}
		back := mwPattern(2048, 2)
		s.put(t, gm, 6144, back)
		h.mustRDMA(t, hq, verbs.WROpRDMARead, hm, 4096, 2048, gm.addr+6144, key, verbs.WCSuccess)
		if !bytes.Equal(hm.Buf()[4096:6144], back) {
			t.Fatal("the READ through rxe's window returned other bytes than rxe's memory holds")
		}

		s.recv(t, gq, gm, 0, 64)
		msg := []byte("invalidate this!")
		copy(hm.Buf(), msg)
		wire.toRxe[key] = true
		wc := h.post(t, hq, &verbs.SendWR{WRID: 7, Opcode: verbs.WROpSendWithInv, Flags: verbs.Signaled,
			SGL: []mr.SGE{hm.SGE(0, len(msg))}, InvalidateRKey: key})
		if wc.Status != verbs.WCSuccess {
			t.Fatalf("sroce's SEND with invalidate of %#08x completed with %v", key, wc.Status)
		}
		rw := s.pollRecv(t, gq)
		if rw.status != ibvWCSuccess || rw.opcode != ibvWCRecv || rw.flags&(ibvWCWithInv|rxeWCWithInv) == 0 ||
			rw.inv != key || rw.byteLen != uint32(len(msg)) {
			t.Fatalf("rxe's receive completion %v, want success, IBV_WC_RECV, IBV_WC_WITH_INV (or rxe's 1<<2), rkey %#08x, %d bytes", rw, key, len(msg))
		}
		if got := s.get(t, gm, 0, len(msg)); !bytes.Equal(got, msg) {
			t.Fatalf("rxe received %q, sroce sent %q", got, msg)
		}

		copy(hm.Buf(), mwPattern(64, 3))
		h.mustRDMA(t, hq, verbs.WROpRDMAWrite, hm, 0, 64, gm.addr+4096, key, verbs.WCRemAccessErr)
		if got := s.get(t, gm, 4096, 64); !bytes.Equal(got, data[:64]) {
			t.Fatal("a WRITE through the invalidated window changed rxe's memory")
		}
		h.mustState(t, hq, verbs.QPStateErr)
		s.mustState(t, gq, ibvQPSErr)
	})

	t.Run("rxe-window-bounds", func(t *testing.T) {
		// A WRITE that starts in rxe's window, at the end of its MR, and
		// goes past both.
		hq, gq := h.pair(t, ctx, s)
		hm := h.reg(t, 256, mr.AccessLocalWrite)
		gm := s.mr(t, 8192, ibvAccessLocalWrite|ibvAccessMWBind)
		key := s.bind(t, gq, gm, 4096, 4096, ibvAccessRemoteWrite|ibvAccessRemoteRead)
		last := mwPattern(64, 4)
		copy(hm.Buf(), last)
		h.mustRDMA(t, hq, verbs.WROpRDMAWrite, hm, 0, 64, gm.addr+8192-64, key, verbs.WCSuccess)
		if got := s.get(t, gm, 8192-64, 64); !bytes.Equal(got, last) {
			t.Fatal("the WRITE to the last bytes of rxe's window left other bytes")
		}
		copy(hm.Buf(), mwPattern(128, 5))
		h.mustRDMA(t, hq, verbs.WROpRDMAWrite, hm, 0, 128, gm.addr+8192-64, key, verbs.WCRemAccessErr)
		if got := s.get(t, gm, 8192-64, 64); !bytes.Equal(got, last) {
			t.Fatal("a WRITE past the end of rxe's window changed rxe's memory")
		}
		h.mustState(t, hq, verbs.QPStateErr)
		s.mustState(t, gq, ibvQPSErr)

		// A WRITE of the bytes just before the window, inside the MR.
		hq, gq = h.pair(t, ctx, s)
		key = s.bind(t, gq, gm, 4096, 4096, ibvAccessRemoteWrite|ibvAccessRemoteRead)
		copy(hm.Buf(), mwPattern(64, 6))
		wc := h.rdma(t, hq, verbs.WROpRDMAWrite, hm, 0, 64, gm.addr+4096-64, key)
		placed := bytes.Equal(s.get(t, gm, 4096-64, 64), hm.Buf()[:64])
		t.Logf("a WRITE of the 64 bytes before rxe's window, inside its MR: sroce's completion %v, placed in rxe's memory: %v", wc.Status, placed)
	})

	t.Run("sroce-window", func(t *testing.T) {
		// sroce binds a type 2 window over the middle of an MR without
		// remote rights; rxe writes and reads through it, then revokes it.
		hq, gq := h.pair(t, ctx, s)
		hm := h.reg(t, 8192, mr.AccessLocalWrite|mr.AccessMWBind)
		w, err := h.pd.AllocMW(mr.MWType2)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Dealloc()
		key := w.NewKey()
		wc := h.post(t, hq, &verbs.SendWR{WRID: 1, Opcode: verbs.WROpBindMW, Flags: verbs.Signaled, RKey: key,
			Bind: mr.MWBind{LKey: hm.LKey(), Addr: hm.Addr() + 2048, Length: 4096,
				Access: mr.AccessRemoteWrite | mr.AccessRemoteRead}})
		if wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCBindMW {
			t.Fatalf("sroce's bind: %v %v", wc.Opcode, wc.Status)
		}
		h.remoteAccessAndInvalidate(t, s, hq, gq, hm.Buf(), hm.Addr(), 2048, key, wire.fromRxe)
		if _, _, _, ok := w.Bound(); ok {
			t.Fatal("sroce's window is still bound after rxe's SEND with invalidate")
		}
	})

	t.Run("sroce-fastreg", func(t *testing.T) {
		// sroce registers a fast-registration MR with REG_MR; rxe writes
		// and reads through it, then revokes it.
		hq, gq := h.pair(t, ctx, s)
		fr, err := h.pd.AllocMR(8192)
		if err != nil {
			t.Fatal(err)
		}
		defer fr.Dealloc()
		buf := make([]byte, 8192)
		if err := fr.Map(mr.Slice(buf), mr.AddrOf(buf)); err != nil {
			t.Fatal(err)
		}
		key := fr.NewKey()
		wc := h.post(t, hq, &verbs.SendWR{WRID: 2, Opcode: verbs.WROpRegMR, Flags: verbs.Signaled, RKey: key,
			RegAccess: mr.AccessLocalWrite | mr.AccessRemoteWrite | mr.AccessRemoteRead})
		if wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCRegMR {
			t.Fatalf("sroce's REG_MR: %v %v", wc.Opcode, wc.Status)
		}
		h.remoteAccessAndInvalidate(t, s, hq, gq, buf, mr.AddrOf(buf), 0, key, wire.fromRxe)
		if _, _, _, ok := fr.Registered(); ok {
			t.Fatal("sroce's fast-registration MR is still registered after rxe's SEND with invalidate")
		}
	})

	t.Run("inv-ordinary-mr-at-sroce", func(t *testing.T) {
		// rxe's SEND with invalidate names an ordinary sroce MR, which
		// cannot be invalidated: sroce acknowledges the SEND, completes
		// the receive with REM_INV_REQ_ERR and moves its QP to the error
		// state, as rxe does (its class J); the MR stays usable.
		hq, gq := h.pair(t, ctx, s)
		hq2, gq2 := h.pair(t, ctx, s)
		om := h.reg(t, 4096, mr.AccessLocalWrite|mr.AccessRemoteWrite|mr.AccessRemoteRead)
		rm := h.reg(t, 64, mr.AccessLocalWrite)
		gm := s.mr(t, 4096, ibvAccessLocalWrite|ibvAccessRemoteWrite)
		if err := hq.qp.PostRecv(&verbs.RecvWR{WRID: 3, SGL: []mr.SGE{rm.SGE(0, 64)}}); err != nil {
			t.Fatal(err)
		}
		s.put(t, gm, 0, []byte("not invalidable!"))
		wire.fromRxe[om.RKey()] = true
		if wc := s.sendInv(t, gq, gm, 0, 16, om.RKey()); wc.status != ibvWCSuccess || wc.opcode != ibvWCSend {
			t.Fatalf("rxe's SEND with invalidate of sroce's MR %#08x: %v, want success (sroce acknowledges it)", om.RKey(), wc)
		}
		rw := h.wait(t, hq.rcq, "the receive of rxe's SEND with invalidate")
		if rw.Status != verbs.WCRemInvReqErr || rw.WRID != 3 {
			t.Fatalf("sroce's receive completion %+v, want WRID 3 with %v", rw, verbs.WCRemInvReqErr)
		}
		h.mustState(t, hq, verbs.QPStateErr)
		s.mustState(t, gq, ibvQPSRTS)

		// The MR still works, for rxe through its rkey and for sroce,
		// its owner, through its lkey.
		in := mwPattern(4096, 7)
		s.put(t, gm, 0, in)
		if wc := s.rdma(t, "write", gq2, gm, 0, 4096, om.Addr(), om.RKey()); wc.status != ibvWCSuccess {
			t.Fatalf("rxe's WRITE to sroce's MR after the refused invalidation: %v", wc)
		}
		if !bytes.Equal(om.Buf(), in) {
			t.Fatal("rxe's WRITE to sroce's MR after the refused invalidation: other bytes arrived")
		}
		copy(om.Buf(), mwPattern(4096, 8))
		h.mustRDMA(t, hq2, verbs.WROpRDMAWrite, om, 0, 4096, gm.addr, gm.rkey, verbs.WCSuccess)
		if got := s.get(t, gm, 0, 4096); !bytes.Equal(got, om.Buf()) {
			t.Fatal("sroce's WRITE from its MR after the refused invalidation: other bytes arrived")
		}
	})

	t.Run("inv-ordinary-mr-at-rxe", func(t *testing.T) {
		// The same the other way round: what rxe does, and what sroce's
		// requester sees.
		hq, gq := h.pair(t, ctx, s)
		hq2, _ := h.pair(t, ctx, s)
		hm := h.reg(t, 4096, mr.AccessLocalWrite)
		gm := s.mr(t, 4096, ibvAccessLocalWrite|ibvAccessRemoteWrite|ibvAccessRemoteRead)
		s.recv(t, gq, gm, 0, 64)
		copy(hm.Buf(), "not invalidable!")
		wire.toRxe[gm.rkey] = true
		wc := h.post(t, hq, &verbs.SendWR{WRID: 4, Opcode: verbs.WROpSendWithInv, Flags: verbs.Signaled,
			SGL: []mr.SGE{hm.SGE(0, 16)}, InvalidateRKey: gm.rkey})
		if wc.Status != verbs.WCSuccess {
			t.Fatalf("sroce's SEND with invalidate of rxe's MR %#08x completed with %v, want success (rxe acknowledges it)", gm.rkey, wc.Status)
		}
		if rw := s.pollRecv(t, gq); rw.status != ibvWCRemInvReqErr {
			t.Fatalf("rxe's receive completion %v, want IBV_WC_REM_INV_REQ_ERR", rw)
		}
		s.mustState(t, gq, ibvQPSErr)
		h.mustState(t, hq, verbs.QPStateRTS)

		copy(hm.Buf(), mwPattern(4096, 9))
		h.mustRDMA(t, hq2, verbs.WROpRDMAWrite, hm, 0, 4096, gm.addr, gm.rkey, verbs.WCSuccess)
		if got := s.get(t, gm, 0, 4096); !bytes.Equal(got, hm.Buf()) {
			t.Fatal("sroce's WRITE to rxe's MR after the refused invalidation: other bytes arrived")
		}
	})

	s.quit(t, ctx)
	t.Logf("sroce counters: %s", h.counters())
	stopCapture()
	t.Run("wire", func(t *testing.T) { checkInvWire(t, capt, g.IP(), wire.toRxe, wire.fromRxe) })
	if t.Failed() {
		out, err := exec.Command(buildSroce(t), "dissect", pcap).CombinedOutput()
		t.Logf("RoCEv2 traffic on the guest's tap (sroce dissect, %v):\n%s", err, out)
	}
	t.Logf("done in %v", time.Since(start).Round(time.Millisecond))
}

// checkInvWire checks the capture: every frame is a whole RoCEv2 packet
// with a correct ICRC, and the rkeys in the IETHs of the SENDs with
// invalidate towards the guest at guest and from it are toRxe and fromRxe.
func checkInvWire(t *testing.T, capt *rxeguest.Capture, guest netip.Addr, toRxe, fromRxe map[uint32]bool) {
	if err := capt.Complete(); err != nil {
		t.Fatalf("the capture misses frames, so it cannot show what went on the wire: %v", err)
	}
	frames, _, err := rxeguest.ReadPcapFile(capt.Path)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[bool]map[uint32]bool{true: {}, false: {}} // by "sent by the guest"
	for i, f := range frames {
		r, err := parseRoCE(f.Data)
		if err != nil {
			t.Fatalf("frame %d: %v", i+1, err)
		}
		if !r.icrcOK {
			t.Errorf("frame %d (%s, PSN %#06x): bad ICRC", i+1, opcodeName(r.opcode), r.psn)
		}
		if r.opcode != 0x16 && r.opcode != 0x17 {
			continue
		}
		if r.ipv6 || r.payload < 12+4 {
			t.Fatalf("frame %d: %s without room for an IETH", i+1, opcodeName(r.opcode))
		}
		src, _ := netip.AddrFromSlice(f.Data[14+12 : 14+16])
		seen[src == guest][binary.BigEndian.Uint32(f.Data[r.bthOff+12:])] = true
	}
	for _, c := range []struct {
		who       string
		fromGuest bool
		want      map[uint32]bool
	}{{"sroce", false, toRxe}, {"rxe", true, fromRxe}} {
		if !maps.Equal(seen[c.fromGuest], c.want) {
			t.Errorf("%s's SENDs with invalidate on the wire name the rkeys %s, the test had it name %s",
				c.who, keyList(seen[c.fromGuest]), keyList(c.want))
		}
	}
	t.Logf("%d frames, ICRCs checked; SEND with invalidate from sroce: %s, from rxe: %s; %s",
		len(frames), keyList(seen[false]), keyList(seen[true]), capt.Summary())
}

// keyList formats a set of rkeys in order.
func keyList(m map[uint32]bool) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(m)) {
		fmt.Fprintf(&b, " %#08x", k)
	}
	if b.Len() == 0 {
		return "none"
	}
	return strings.TrimSpace(b.String())
}

// remoteAccessAndInvalidate has rxe (QP gq, connected to sroce's hq) write
// 2048 bytes at offset off of buf, sroce's memory at address addr reached
// through key, and read the 2048 after them; then revoke key with a SEND
// with invalidate (recorded in sent) and check that sroce's receive
// completion names it and that the next WRITE through it is refused.
func (h *mwHost) remoteAccessAndInvalidate(t *testing.T, s *rxeMW, hq *mwQP, gq int, buf []byte, addr uint64, off int, key uint32, sent map[uint32]bool) {
	t.Helper()
	gm := s.mr(t, 8192, ibvAccessLocalWrite)
	data := mwPattern(2048, 10)
	s.put(t, gm, 0, data)
	if wc := s.rdma(t, "write", gq, gm, 0, 2048, addr+uint64(off), key); wc.status != ibvWCSuccess {
		t.Fatalf("rxe's WRITE through key %#08x: %v", key, wc)
	}
	if !bytes.Equal(buf[off:off+2048], data) {
		t.Fatal("rxe's WRITE arrived as other bytes in sroce's memory")
	}
	back := mwPattern(2048, 11)
	copy(buf[off+2048:], back)
	if wc := s.rdma(t, "read", gq, gm, 2048, 2048, addr+uint64(off)+2048, key); wc.status != ibvWCSuccess || wc.opcode != ibvWCRDMARead {
		t.Fatalf("rxe's READ through key %#08x: %v", key, wc)
	}
	if got := s.get(t, gm, 2048, 2048); !bytes.Equal(got, back) {
		t.Fatal("rxe's READ returned other bytes than sroce's memory holds")
	}

	rm := h.reg(t, 64, mr.AccessLocalWrite)
	if err := hq.qp.PostRecv(&verbs.RecvWR{WRID: 5, SGL: []mr.SGE{rm.SGE(0, 64)}}); err != nil {
		t.Fatal(err)
	}
	msg := []byte("invalidate this!")
	s.put(t, gm, 0, msg)
	sent[key] = true
	if wc := s.sendInv(t, gq, gm, 0, len(msg), key); wc.status != ibvWCSuccess || wc.opcode != ibvWCSend {
		t.Fatalf("rxe's SEND with invalidate of %#08x: %v", key, wc)
	}
	rw := h.wait(t, hq.rcq, "the receive of rxe's SEND with invalidate")
	if rw.Status != verbs.WCSuccess || rw.Opcode != verbs.WCRecv || rw.Flags&verbs.WCWithInv == 0 ||
		rw.InvalidatedRKey != key || rw.ByteLen != uint32(len(msg)) {
		t.Fatalf("sroce's receive completion %+v, want success, WCRecv, WCWithInv, rkey %#08x, %d bytes", rw, key, len(msg))
	}
	if !bytes.Equal(rm.Buf()[:len(msg)], msg) {
		t.Fatalf("sroce received %q, rxe sent %q", rm.Buf()[:len(msg)], msg)
	}

	before := append([]byte(nil), buf...)
	s.put(t, gm, 0, mwPattern(64, 12))
	if wc := s.rdma(t, "write", gq, gm, 0, 64, addr+uint64(off), key); wc.status != ibvWCRemAccessErr {
		t.Fatalf("rxe's WRITE through the invalidated key %#08x: %v, want IBV_WC_REM_ACCESS_ERR", key, wc)
	}
	if !bytes.Equal(buf, before) {
		t.Fatal("rxe's WRITE through the invalidated key changed sroce's memory")
	}
	h.mustState(t, hq, verbs.QPStateErr)
	s.mustState(t, gq, ibvQPSErr)
}

// mwPattern returns n bytes that differ for each seed.
func mwPattern(n, seed int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + seed*31 + i>>8)
	}
	return b
}

// mwHost is sroce's side: a port on a host namespace of the LAN.
type mwHost struct {
	ns     *nsutil.Namespace
	port   *iface.Port
	pd     *roce.PD
	gidIdx int
	gid    bth.GID
}

// mwQP is one of sroce's RC QPs with its own CQs.
type mwQP struct {
	qp       *roce.QP
	scq, rcq *roce.CQ
	psn      bth.PSN
}

// newMWHost adds a host namespace to lan and opens a sroce port on its
// veth over AF_XDP; t's cleanup closes both.
func newMWHost(t *testing.T, ctx context.Context, lan *rxeguest.LAN) *mwHost {
	t.Helper()
	hc, err := lan.AddHost(ctx, rxeguest.HostConfig{IP: mwHostAddr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hc.Close() })
	ns, err := nsutil.Open(hc.NS.Name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	h := &mwHost{ns: ns}
	err = ns.Do(func() (err error) {
		octx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		h.port, err = iface.Open(octx, hc.Ifname, iface.Options{Mode: iface.ModeXDP})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.port.Close() })
	if h.pd, err = h.port.Device().AllocPD(); err != nil {
		t.Fatal(err)
	}
	h.gidIdx = h.port.DefaultGIDIndex()
	if h.gid, err = h.port.GID(h.gidIdx); err != nil {
		t.Fatal(err)
	}
	return h
}

// reg registers n zeroed bytes.
func (h *mwHost) reg(t *testing.T, n int, access mr.Access) *roce.MR {
	t.Helper()
	m, err := h.pd.RegMR(make([]byte, n), access)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// pair creates an RC QP on each side and connects them; it returns
// sroce's QP and the number of rxe's.
func (h *mwHost) pair(t *testing.T, ctx context.Context, s *rxeMW) (*mwQP, int) {
	t.Helper()
	dev := h.port.Device()
	q := &mwQP{psn: bth.PSN(time.Now().UnixNano() & 0xffffff)}
	var err error
	if q.scq, err = dev.CreateCQ(16, nil); err != nil {
		t.Fatal(err)
	}
	if q.rcq, err = dev.CreateCQ(16, nil); err != nil {
		t.Fatal(err)
	}
	q.qp, err = h.pd.CreateQP(&roce.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: q.scq, RecvCQ: q.rcq,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		q.qp.Destroy()
		q.scq.Destroy()
		q.rcq.Destroy()
	})
	f := s.cmd(t, "qp")
	gq := s.fieldInt(t, f, 1)
	gqpn, gpsn := s.fieldUint(t, f, 2), s.fieldUint(t, f, 3)
	ggid, err := bth.ParseGID(s.field(t, f, 4))
	if err != nil {
		t.Fatalf("rxe's GID %q: %v", f[4], err)
	}
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ah, err := h.port.AHAttr(actx, ggid, h.gidIdx)
	if err != nil {
		t.Fatal(err)
	}
	err = q.qp.Connect(&roce.ConnectAttr{
		Access: mr.AccessRemoteWrite | mr.AccessRemoteRead | mr.AccessRemoteAtomic,
		AH:     ah, PathMTU: min(h.port.ActiveMTU(), verbs.MTU1024), DestQPN: bth.QPN(gqpn), RQPSN: bth.PSN(gpsn),
		MaxDestRdAtomic: 4, MinRNRTimer: 12,
		SQPSN: q.psn, Timeout: 14, RetryCnt: 6, RNRRetry: 6, MaxRdAtomic: 4,
	})
	if err != nil {
		t.Fatal(err)
	}
	s.cmd(t, "rts %d %#x %#x %s", gq, uint32(q.qp.QPN()), uint32(q.psn), hex.EncodeToString(h.gid[:]))
	return q, gq
}

// wait returns the next completion of cq, waiting at most mwWait.
func (h *mwHost) wait(t *testing.T, cq *roce.CQ, what string) verbs.WC {
	t.Helper()
	var wc [1]verbs.WC
	if n, _ := cq.WaitTimeout(wc[:], mwWait); n == 1 {
		return wc[0]
	}
	t.Fatalf("sroce: no completion of %s within %v", what, mwWait)
	return verbs.WC{}
}

// post posts wr on q and returns its completion.
func (h *mwHost) post(t *testing.T, q *mwQP, wr *verbs.SendWR) verbs.WC {
	t.Helper()
	if err := q.qp.PostSend(wr); err != nil {
		t.Fatalf("posting %v: %v", wr.Opcode, err)
	}
	return h.wait(t, q.scq, fmt.Sprintf("sroce's %v", wr.Opcode))
}

// rdma has sroce READ or WRITE n bytes between offset off of lm and raddr
// under rkey, and returns the completion.
func (h *mwHost) rdma(t *testing.T, q *mwQP, op verbs.WROpcode, lm *roce.MR, off, n int, raddr uint64, rkey uint32) verbs.WC {
	t.Helper()
	return h.post(t, q, &verbs.SendWR{WRID: 9, Opcode: op, Flags: verbs.Signaled, SGL: []mr.SGE{lm.SGE(off, n)},
		RemoteAddr: raddr, RKey: rkey})
}

// mustRDMA is rdma that fails the test unless the completion has status
// want.
func (h *mwHost) mustRDMA(t *testing.T, q *mwQP, op verbs.WROpcode, lm *roce.MR, off, n int, raddr uint64, rkey uint32, want verbs.WCStatus) {
	t.Helper()
	if wc := h.rdma(t, q, op, lm, off, n, raddr, rkey); wc.Status != want {
		t.Fatalf("sroce's %v of %d bytes at %#x under rkey %#08x: %v, want %v", op, n, raddr, rkey, wc.Status, want)
	}
}

// mustState fails the test unless sroce's QP reaches state want within
// mwStateWait.
func (h *mwHost) mustState(t *testing.T, q *mwQP, want verbs.QPState) {
	t.Helper()
	deadline := time.Now().Add(mwStateWait)
	for st := q.qp.State(); st != want; st = q.qp.State() {
		if time.Now().After(deadline) {
			t.Fatalf("sroce's QP %v is %v, and did not reach %v within %v", q.qp.QPN(), st, want, mwStateWait)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// counters lists the port's nonzero engine counters.
func (h *mwHost) counters() string {
	var b strings.Builder
	for _, c := range h.port.Counters() {
		if c.Value != 0 {
			fmt.Fprintf(&b, "%s=%d ", c.Name, c.Value)
		}
	}
	return strings.TrimSpace(b.String())
}

// rxeMW is a session with sroce-mw in the guest.
type rxeMW struct {
	g      *rxeguest.Guest
	proc   *rxeguest.Proc
	conn   net.Conn
	r      *bufio.Reader
	broken error // why the session cannot go on
	done   bool
}

// rxeMR is an MR of sroce-mw.
type rxeMR struct {
	idx        int
	addr       uint64
	lkey, rkey uint32
}

// rxeWC is a work completion as sroce-mw prints it.
type rxeWC struct {
	status, opcode, flags, inv, byteLen, qpn uint32
	text                                     string
}

func (w rxeWC) String() string {
	return fmt.Sprintf("status %d (%s) opcode %d flags %#x invalidated rkey %#08x byte_len %d QPN %#x",
		w.status, w.text, w.opcode, w.flags, w.inv, w.byteLen, w.qpn)
}

// startRxeMW starts tool in g and connects to it from the namespace ns;
// t's cleanup stops it.
func startRxeMW(t *testing.T, ctx context.Context, g *rxeguest.Guest, ns *nsutil.Namespace, tool string) *rxeMW {
	t.Helper()
	proc, err := g.Start(ctx, fmt.Sprintf("exec %s -d rxe0 -g 1 -p %d -t 300", tool, mwPort))
	if err != nil {
		t.Fatal(err)
	}
	s := &rxeMW{g: g, proc: proc}
	t.Cleanup(func() { s.stop(t) })
	lctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := g.WaitListening(lctx, mwPort, proc); err != nil {
		t.Fatalf("waiting for sroce-mw to listen on port %d: %v", mwPort, err)
	}
	err = ns.Do(func() (err error) {
		d := net.Dialer{Timeout: 10 * time.Second}
		s.conn, err = d.DialContext(ctx, "tcp", netip.AddrPortFrom(g.IP(), mwPort).String())
		return err
	})
	if err != nil {
		t.Fatalf("connecting to sroce-mw: %v", err)
	}
	s.r = bufio.NewReaderSize(s.conn, 1<<17)
	return s
}

// stop ends the program if quit did not, and logs what it printed.
func (s *rxeMW) stop(t *testing.T) {
	if s.conn != nil {
		s.conn.Close()
	}
	if s.done {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s.proc.Kill(ctx)
	if res, err := s.proc.Wait(ctx); err == nil {
		t.Logf("sroce-mw ended with status %d; stderr: %s", res.ExitCode, bytes.TrimSpace(res.Stderr))
	} else {
		t.Logf("sroce-mw did not end within a minute of being killed: %v", err)
	}
}

// quit ends the session and checks that the program exited 0.
func (s *rxeMW) quit(t *testing.T, ctx context.Context) {
	t.Helper()
	if s.broken != nil {
		return
	}
	s.cmd(t, "quit")
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	res, err := s.proc.Wait(wctx)
	if err != nil {
		t.Fatalf("sroce-mw did not exit within a minute of quit: %v", err)
	}
	s.done = true
	if res.ExitCode != 0 {
		t.Fatalf("sroce-mw exited with status %d: %s", res.ExitCode, bytes.TrimSpace(res.Stderr))
	}
}

// cmd sends one command and returns the fields of the answer, failing the
// test on "err", on no answer within mwWait, or if an earlier command
// broke the session.
func (s *rxeMW) cmd(t *testing.T, format string, args ...any) []string {
	t.Helper()
	line := fmt.Sprintf(format, args...)
	if s.broken != nil {
		t.Fatalf("sroce-mw: not sending %q: %v", line, s.broken)
	}
	s.conn.SetDeadline(time.Now().Add(mwWait))
	if _, err := s.conn.Write([]byte(line + "\n")); err != nil {
		s.broken = fmt.Errorf("sending %q: %w", line, err)
		t.Fatalf("sroce-mw: %v", s.broken)
	}
	ans, err := s.r.ReadString('\n')
	if err != nil {
		s.broken = fmt.Errorf("no answer to %q within %v: %w", line, mwWait, err)
		t.Fatalf("sroce-mw: %v", s.broken)
	}
	ans = strings.TrimSuffix(ans, "\n")
	f := strings.Fields(ans)
	if len(f) == 0 || f[0] == "err" {
		t.Fatalf("sroce-mw: %q: %s", line, ans)
	}
	return f
}

func (s *rxeMW) field(t *testing.T, f []string, i int) string {
	t.Helper()
	if i >= len(f) {
		t.Fatalf("sroce-mw: answer %q has no field %d", strings.Join(f, " "), i)
	}
	return f[i]
}

func (s *rxeMW) fieldUint(t *testing.T, f []string, i int) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(s.field(t, f, i), 0, 64)
	if err != nil {
		t.Fatalf("sroce-mw: answer %q: field %d: %v", strings.Join(f, " "), i, err)
	}
	return v
}

func (s *rxeMW) fieldInt(t *testing.T, f []string, i int) int { return int(s.fieldUint(t, f, i)) }

// wc parses a "wc" answer; "none" fails the test.
func (s *rxeMW) wc(t *testing.T, f []string, what string) rxeWC {
	t.Helper()
	if f[0] == "none" {
		t.Fatalf("rxe: no completion of %s within sroce-mw's wait", what)
	}
	if f[0] != "wc" || len(f) < 7 {
		t.Fatalf("sroce-mw: answer %q is not a work completion", strings.Join(f, " "))
	}
	return rxeWC{status: uint32(s.fieldUint(t, f, 1)), opcode: uint32(s.fieldUint(t, f, 2)), flags: uint32(s.fieldUint(t, f, 3)),
		inv: uint32(s.fieldUint(t, f, 4)), byteLen: uint32(s.fieldUint(t, f, 5)), qpn: uint32(s.fieldUint(t, f, 6)),
		text: strings.Join(f[7:], " ")}
}

// mr registers n zeroed bytes in the guest.
func (s *rxeMW) mr(t *testing.T, n, access int) rxeMR {
	t.Helper()
	f := s.cmd(t, "mr %d %#x", n, access)
	return rxeMR{idx: s.fieldInt(t, f, 1), addr: s.fieldUint(t, f, 2), lkey: uint32(s.fieldUint(t, f, 3)), rkey: uint32(s.fieldUint(t, f, 4))}
}

// bind allocates a type 2 window and binds it on rxe's QP gq to n bytes
// at off of m with the rights access; it returns the window's new key.
func (s *rxeMW) bind(t *testing.T, gq int, m rxeMR, off, n, access int) uint32 {
	t.Helper()
	f := s.cmd(t, "mw 2")
	w, old := s.fieldInt(t, f, 1), uint32(s.fieldUint(t, f, 2))
	key := old&^0xff | (old+1)&0xff // ibv_inc_rkey
	wc := s.wc(t, s.cmd(t, "bind %d %d %d %d %d %#x %#x", gq, w, m.idx, off, n, access, key), "rxe's bind")
	if wc.status != ibvWCSuccess || wc.opcode != ibvWCBindMW {
		t.Fatalf("rxe's bind of its type 2 window: %v", wc)
	}
	return key
}

// rdma has rxe "write" or "read" n bytes between offset off of m and raddr
// under rkey.
func (s *rxeMW) rdma(t *testing.T, op string, gq int, m rxeMR, off, n int, raddr uint64, rkey uint32) rxeWC {
	t.Helper()
	return s.wc(t, s.cmd(t, "%s %d %d %d %d %#x %#x", op, gq, m.idx, off, n, raddr, rkey), "rxe's "+op)
}

// sendInv has rxe SEND n bytes at off of m with invalidate of rkey.
func (s *rxeMW) sendInv(t *testing.T, gq int, m rxeMR, off, n int, rkey uint32) rxeWC {
	t.Helper()
	return s.wc(t, s.cmd(t, "sendinv %d %d %d %d %#x", gq, m.idx, off, n, rkey), "rxe's SEND with invalidate")
}

// recv posts a receive of n bytes at off of m on rxe's QP gq.
func (s *rxeMW) recv(t *testing.T, gq int, m rxeMR, off, n int) {
	t.Helper()
	s.cmd(t, "recv %d %d %d %d", gq, m.idx, off, n)
}

// pollRecv returns rxe's next receive completion on gq, waiting at most
// 30 s.
func (s *rxeMW) pollRecv(t *testing.T, gq int) rxeWC {
	t.Helper()
	return s.wc(t, s.cmd(t, "pollrecv %d 30000", gq), "a receive on rxe's QP")
}

// put stores b at off of m.
func (s *rxeMW) put(t *testing.T, m rxeMR, off int, b []byte) {
	t.Helper()
	s.cmd(t, "put %d %d %s", m.idx, off, hex.EncodeToString(b))
}

// get loads n bytes at off of m.
func (s *rxeMW) get(t *testing.T, m rxeMR, off, n int) []byte {
	t.Helper()
	f := s.cmd(t, "get %d %d %d", m.idx, off, n)
	b, err := hex.DecodeString(s.field(t, f, 1))
	if err != nil || len(b) != n {
		t.Fatalf("sroce-mw: get of %d bytes answered %d bytes (%v)", n, len(b), err)
	}
	return b
}

// mustState fails the test unless rxe's QP gq reaches state want (enum
// ibv_qp_state) within mwStateWait.
func (s *rxeMW) mustState(t *testing.T, gq, want int) {
	t.Helper()
	deadline := time.Now().Add(mwStateWait)
	for st := s.fieldInt(t, s.cmd(t, "state %d", gq), 1); st != want; st = s.fieldInt(t, s.cmd(t, "state %d", gq), 1) {
		if time.Now().After(deadline) {
			t.Fatalf("rxe's QP %d is in state %d, and did not reach state %d within %v", gq, st, want, mwStateWait)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
