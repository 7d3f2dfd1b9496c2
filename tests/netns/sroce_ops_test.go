package netns

// sroce to sroce between two network namespaces: every RC operation the
// demo performs, with the data checked, over AF_XDP and over the UDP link,
// on a clean veth and on one that loses and reorders packets.

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/sroce/sroce/internal/nsutil"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/roce/iface"
	"github.com/sroce/sroce/verbs"
)

func TestSroceOps(t *testing.T) {
	srSkip(t)
	// Reordering (25% of the frames overtake the others, which wait 1 ms)
	// costs go-back-N many retransmissions: those cases move less data.
	reorder := &nsutil.Netem{Delay: time.Millisecond, Reorder: 25}
	cases := []struct {
		name               string
		mode               iface.Mode
		mtu                int
		netem              *nsutil.Netem
		size, iters, burst int
	}{
		{"xdp", iface.ModeXDP, 1500, nil, 100000, 5, 64},
		{"xdp-mtu9000", iface.ModeXDP, 9000, nil, 100000, 5, 64},
		{"udp", iface.ModeUDP, 1500, nil, 100000, 5, 64},
		{"xdp-loss2", iface.ModeXDP, 1500, &nsutil.Netem{Loss: 2}, 100000, 5, 64},
		{"xdp-reorder", iface.ModeXDP, 1500, reorder, 20000, 3, 16},
		{"udp-loss2", iface.ModeUDP, 1500, &nsutil.Netem{Loss: 2}, 100000, 5, 64},
		{"udp-reorder", iface.ModeUDP, 1500, reorder, 20000, 3, 16},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srLeakCheck(t)
			r := newSrRig(t, srConfig{mode: c.mode, mtu: c.mtu, netem: c.netem})
			if c.mode == iface.ModeXDP && r.a.port.LinkMode() != iface.LinkXDPCopy {
				t.Errorf("link mode %q", r.a.port.LinkMode())
			}
			srOps(t, r, c.size, c.iters)
			srBurst(t, r, 65536, c.burst)
			a, b := r.a, r.b
			t.Logf("A: sent %d, retransmitted %d, timeouts %d, seq NAKs got %d; B: out_of_seq %d, duplicates %d",
				a.stat("sent_pkts"), a.stat("retransmit_pkts"), a.stat("timeouts"), a.stat("rcvd_seq_err"),
				b.stat("out_of_seq_request"), b.stat("duplicate_request"))
			if f := r.pair.Forwarder; f != nil {
				t.Logf("forwarder: %+v", f.Stats())
			}
			if c.netem != nil {
				if a.stat("retransmit_pkts") == 0 {
					t.Errorf("no retransmissions under %v", c.netem)
				}
				if c.netem.Loss > 0 && b.stat("out_of_seq_request")+a.stat("timeouts") == 0 {
					t.Errorf("loss %v%% left no trace in the counters", c.netem.Loss)
				}
			} else if n := a.stat("retransmit_pkts"); n != 0 {
				t.Errorf("%d retransmissions on a clean link", n)
			}
			for _, s := range []*srSide{a, b} {
				for _, name := range []string{"icrc_error", "malformed", "bad_dgid", "unknown_qpn", "bad_addr", "retry_exceeded_err"} {
					if v := s.stat(name); v != 0 {
						t.Errorf("%s: %s = %d", s.name, name, v)
					}
				}
			}
			r.a.port.Close()
			r.b.port.Close()
			srNoXDP(t, r.pair.A)
			srNoXDP(t, r.pair.B)
		})
	}
}

// srFill writes a pattern that depends on seed.
func srFill(b []byte, seed int) {
	x := uint32(seed)*2654435761 + 1
	for i := range b {
		x = x*1664525 + 1013904223
		b[i] = byte(x >> 24)
	}
}

// srOps runs SEND, WRITE, WRITE with immediate, READ, FETCH_ADD and
// COMPARE_SWAP from A to B, iters times each, with messages of size bytes,
// checking all data. Memory layout of each side: [0,size) message area,
// [size,2size) READ source, then an 8-byte atomic word.
func srOps(t *testing.T, r *srRig, size, iters int) {
	t.Helper()
	a, b := r.a, r.b
	am, bm := a.mr.Buf(), b.mr.Buf()
	word := (2*size + 7) &^ 7
	if word+8 > len(am) {
		t.Fatalf("memory too small for %d-byte messages", size)
	}
	post := func(wr verbs.SendWR) {
		t.Helper()
		wr.Flags |= verbs.Signaled
		if err := a.qp.PostSend(&wr); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < iters; i++ {
		// SEND
		clear(bm[:size])
		if err := b.qp.PostRecv(&verbs.RecvWR{WRID: 1, SGL: []mr.SGE{b.mr.SGE(0, size)}}); err != nil {
			t.Fatal(err)
		}
		srFill(am[:size], 10*i)
		post(verbs.SendWR{WRID: 1, Opcode: verbs.WROpSend, SGL: []mr.SGE{a.mr.SGE(0, size)}})
		a.mustWait(t, a.scq, verbs.WCSend)
		if wc := b.mustWait(t, b.rcq, verbs.WCRecv); int(wc.ByteLen) != size || !bytes.Equal(am[:size], bm[:size]) {
			t.Fatalf("SEND %d: %d bytes, data equal %v", i, wc.ByteLen, bytes.Equal(am[:size], bm[:size]))
		}
		// RDMA WRITE
		clear(bm[:size])
		srFill(am[:size], 10*i+1)
		post(verbs.SendWR{WRID: 2, Opcode: verbs.WROpRDMAWrite, SGL: []mr.SGE{a.mr.SGE(0, size)},
			RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
		a.mustWait(t, a.scq, verbs.WCRDMAWrite)
		if !bytes.Equal(am[:size], bm[:size]) {
			t.Fatalf("WRITE %d: data differs", i)
		}
		// RDMA WRITE with immediate
		clear(bm[:size])
		if err := b.qp.PostRecv(&verbs.RecvWR{WRID: 3}); err != nil {
			t.Fatal(err)
		}
		srFill(am[:size], 10*i+2)
		imm := uint32(0xabc00000 + i)
		post(verbs.SendWR{WRID: 3, Opcode: verbs.WROpRDMAWriteWithImm, SGL: []mr.SGE{a.mr.SGE(0, size)},
			RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey(), Imm: imm})
		a.mustWait(t, a.scq, verbs.WCRDMAWrite)
		if wc := b.mustWait(t, b.rcq, verbs.WCRecvRDMAWithImm); wc.Imm != imm || !bytes.Equal(am[:size], bm[:size]) {
			t.Fatalf("WRITE_WITH_IMM %d: imm %#x, data equal %v", i, wc.Imm, bytes.Equal(am[:size], bm[:size]))
		}
		// RDMA READ
		clear(am[:size])
		srFill(bm[size:2*size], 10*i+3)
		post(verbs.SendWR{WRID: 4, Opcode: verbs.WROpRDMARead, SGL: []mr.SGE{a.mr.SGE(0, size)},
			RemoteAddr: b.mr.Addr() + uint64(size), RKey: b.mr.RKey()})
		a.mustWait(t, a.scq, verbs.WCRDMARead)
		if !bytes.Equal(am[:size], bm[size:2*size]) {
			t.Fatalf("READ %d: data differs", i)
		}
		// FETCH_ADD and COMPARE_SWAP
		binary.NativeEndian.PutUint64(bm[word:], 100)
		post(verbs.SendWR{WRID: 5, Opcode: verbs.WROpAtomicFetchAdd, SGL: []mr.SGE{a.mr.SGE(word, 8)},
			RemoteAddr: b.mr.Addr() + uint64(word), RKey: b.mr.RKey(), CompareAdd: uint64(i + 1)})
		a.mustWait(t, a.scq, verbs.WCFetchAdd)
		if old, now := binary.NativeEndian.Uint64(am[word:]), binary.NativeEndian.Uint64(bm[word:]); old != 100 || now != 100+uint64(i+1) {
			t.Fatalf("FETCH_ADD %d: returned %d, word %d", i, old, now)
		}
		cur := 100 + uint64(i+1)
		post(verbs.SendWR{WRID: 6, Opcode: verbs.WROpAtomicCmpSwp, SGL: []mr.SGE{a.mr.SGE(word, 8)},
			RemoteAddr: b.mr.Addr() + uint64(word), RKey: b.mr.RKey(), CompareAdd: cur, Swap: 0xfeedface})
		a.mustWait(t, a.scq, verbs.WCCompSwap)
		if old, now := binary.NativeEndian.Uint64(am[word:]), binary.NativeEndian.Uint64(bm[word:]); old != cur || now != 0xfeedface {
			t.Fatalf("COMPARE_SWAP %d: returned %#x, word %#x", i, old, now)
		}
	}
}

// srBurst posts n WRITEs of size bytes at once (the last one signaled) to
// consecutive areas of B and checks all of them.
func srBurst(t *testing.T, r *srRig, size, n int) {
	t.Helper()
	a, b := r.a, r.b
	am, bm := a.mr.Buf(), b.mr.Buf()
	slots := len(am) / size
	srFill(am, 77)
	clear(bm)
	for i := 0; i < n; i++ {
		off := (i % slots) * size
		wr := verbs.SendWR{WRID: uint64(i), Opcode: verbs.WROpRDMAWrite, SGL: []mr.SGE{a.mr.SGE(off, size)},
			RemoteAddr: b.mr.Addr() + uint64(off), RKey: b.mr.RKey()}
		if i == n-1 {
			wr.Flags = verbs.Signaled
		}
		if err := a.qp.PostSend(&wr); err != nil {
			t.Fatal(err)
		}
	}
	a.mustWait(t, a.scq, verbs.WCRDMAWrite)
	k := min(n, slots) * size
	if !bytes.Equal(am[:k], bm[:k]) {
		t.Fatal(fmt.Sprintf("burst of %d WRITEs: B's memory differs", n))
	}
}
