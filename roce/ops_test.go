package roce_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/verbs"
)

const canary = 64 // guard bytes around every transfer

type opKind int

const (
	opSend opKind = iota
	opSendImm
	opSendInv
	opWrite
	opWriteImm
	opRead
	opSendInline
	opWriteInline
)

var opNames = []string{"SEND", "SEND_IMM", "SEND_INV", "WRITE", "WRITE_IMM", "READ", "SEND_INLINE", "WRITE_INLINE"}

// split cuts [off, off+n) of m into up to k SGEs of uneven lengths.
func split(m *roce.MR, off, n, k int) []mr.SGE {
	if n == 0 {
		return nil
	}
	var sgl []mr.SGE
	for i := 0; i < k-1 && n > 1; i++ {
		l := n / (k - i) / 2
		if l == 0 {
			continue
		}
		if i == 1 {
			l = n / 3
		}
		sgl = append(sgl, m.SGE(off, l))
		off += l
		n -= l
	}
	return append(sgl, m.SGE(off, n))
}

// xfer runs one operation of size bytes from node a (QP qa) to node c (QP
// qc) and checks the data byte for byte, and that no byte around it
// changed.
type xfer struct {
	b          *testbed
	qa, qc     *roce.QP
	aMR, cMR   *roce.MR
	abuf, cbuf []byte
	rng        *rand.Rand
	wrid       uint64
}

func (x *xfer) Run(t *testing.T, op opKind, size int) {
	t.Helper()
	b := x.b
	a, c := b.Nodes[0], b.Nodes[1]
	// Source and destination, with fresh contents.
	var src, dst []byte
	var srcMR, dstMR *roce.MR
	if op == opRead {
		src, dst, srcMR, dstMR = x.cbuf, x.abuf, x.cMR, x.aMR
	} else {
		src, dst, srcMR, dstMR = x.abuf, x.cbuf, x.aMR, x.cMR
	}
	_ = srcMR
	region := canary + size + canary
	for i := 0; i < region; i++ {
		src[i] = byte(x.rng.Uint32())
		dst[i] = 0xee
	}
	want := append([]byte(nil), src[canary:canary+size]...)
	x.wrid++
	wr := verbs.SendWR{WRID: x.wrid, Flags: verbs.Signaled, Imm: uint32(x.wrid) * 2654435761}
	needRecv := false
	var inv *mr.FastMR
	var invKey uint32
	switch op {
	case opSend, opSendImm, opSendInv, opSendInline:
		needRecv = true
		wr.Opcode = verbs.WROpSend
		if op == opSendImm {
			wr.Opcode = verbs.WROpSendWithImm
		}
		if op == opSendInv {
			wr.Opcode = verbs.WROpSendWithInv
			inv, _, invKey = b.fastReg(c, x.qc, 64, allAccess)
			wr.InvalidateRKey = invKey
		}
	case opWrite, opWriteImm, opWriteInline:
		wr.Opcode = verbs.WROpRDMAWrite
		if op == opWriteImm {
			wr.Opcode = verbs.WROpRDMAWriteWithImm
			needRecv = true
		}
		wr.RemoteAddr, wr.RKey = dstMR.Addr()+canary, dstMR.RKey()
	case opRead:
		wr.Opcode = verbs.WROpRDMARead
		wr.RemoteAddr, wr.RKey = x.cMR.Addr()+canary, x.cMR.RKey()
	}
	if op == opSendInline || op == opWriteInline {
		wr.Flags |= verbs.Inline
		wr.InlineData = x.abuf[canary : canary+size]
	} else if op == opRead {
		wr.SGL = split(x.aMR, canary, size, 3)
	} else {
		wr.SGL = split(x.aMR, canary, size, 2)
	}
	if needRecv {
		rwr := verbs.RecvWR{WRID: 1000 + x.wrid}
		if op != opWriteImm {
			rwr.SGL = split(x.cMR, canary, size, 3)
			if size == 0 {
				rwr.SGL = []mr.SGE{x.cMR.SGE(canary, 0)}
			}
		}
		if err := x.qc.PostRecv(&rwr); err != nil {
			t.Fatal(err)
		}
	}
	if err := x.qa.PostSend(&wr); err != nil {
		t.Fatalf("%s %d: post: %v", opNames[op], size, err)
	}
	wcs := b.WaitWCs(a, 1)
	w := wcs[0]
	if len(wcs) != 1 || w.Status != verbs.WCSuccess || w.WRID != wr.WRID {
		t.Fatalf("%s %d: send completions %+v", opNames[op], size, wcs)
	}
	if op == opRead && w.Opcode != verbs.WCRDMARead || int(w.ByteLen) != size {
		t.Fatalf("%s %d: send completion %+v", opNames[op], size, w)
	}
	if needRecv {
		rw := b.WaitWCs(c, 1)
		r := rw[0]
		if len(rw) != 1 || r.Status != verbs.WCSuccess || r.WRID != 1000+x.wrid || int(r.ByteLen) != size || r.QPNum != x.qc.QPN() {
			t.Fatalf("%s %d: recv completions %+v", opNames[op], size, rw)
		}
		wantOp := verbs.WCRecv
		if op == opWriteImm {
			wantOp = verbs.WCRecvRDMAWithImm
		}
		if r.Opcode != wantOp {
			t.Fatalf("%s %d: recv opcode %v", opNames[op], size, r.Opcode)
		}
		hasImm := op == opSendImm || op == opWriteImm
		if hasImm != (r.Flags&verbs.WCWithImm != 0) || hasImm && r.Imm != wr.Imm {
			t.Fatalf("%s %d: imm flags %v imm %#x want %#x", opNames[op], size, r.Flags, r.Imm, wr.Imm)
		}
		if op == opSendInv {
			_, _, _, valid := inv.Registered()
			if r.Flags&verbs.WCWithInv == 0 || r.InvalidatedRKey != invKey || valid {
				t.Fatalf("SEND_INV: wc %+v, still registered %v", r, valid)
			}
			inv.Dealloc()
		}
	}
	if !bytes.Equal(dst[canary:canary+size], want) {
		i := 0
		for i < size && dst[canary+i] == want[i] {
			i++
		}
		t.Fatalf("%s %d: data differs at byte %d", opNames[op], size, i)
	}
	for i := 0; i < canary; i++ {
		if dst[i] != 0xee || dst[canary+size+i] != 0xee {
			t.Fatalf("%s %d: byte outside the transfer changed", opNames[op], size)
		}
	}
}

// TestAllOperations runs every operation between two devices for sizes
// from 0 to 1 MiB at every path MTU, checking the data byte for byte.
func TestAllOperations(t *testing.T) {
	for _, mtu := range []verbs.MTU{verbs.MTU256, verbs.MTU512, verbs.MTU1024, verbs.MTU2048, verbs.MTU4096} {
		t.Run(fmt.Sprint(mtu), func(t *testing.T) {
			t.Parallel()
			b := newBed(t, bedOpts{})
			qa, qc := b.PairQPs(rcOpts{MTU: mtu, MaxWR: 16, MaxSGE: 4, MaxInline: 256})
			const max = 1 << 20
			aMR, abuf := b.Nodes[0].Reg(t, max+2*canary, 0, 1)
			cMR, cbuf := b.Nodes[1].Reg(t, max+2*canary, 0, 2)
			x := &xfer{b: b, qa: qa, qc: qc, aMR: aMR, cMR: cMR, abuf: abuf, cbuf: cbuf,
				rng: rand.New(rand.NewPCG(uint64(mtu), 1))}
			m := mtu.Bytes()
			sizes := []int{0, 1, 3, 4, 255, m - 1, m, m + 1, 2 * m, 3*m + 5, 65536 + 13, max}
			for _, size := range sizes {
				for op := opSend; op <= opRead; op++ {
					x.Run(t, op, size)
				}
				if size <= 256 {
					x.Run(t, opSendInline, size)
					x.Run(t, opWriteInline, size)
				}
			}
			// Atomics: a counter and a compare-and-swap word in the middle
			// of c's region.
			x.atomics(t)
			ca, cc := b.Nodes[0].Dev.Counters(), b.Nodes[1].Dev.Counters()
			if ca["retransmit_pkts"] != 0 || cc["duplicate_request"] != 0 || ca["bad_response"] != 0 {
				t.Fatalf("unexpected retries on a clean link: %v %v", ca, cc)
			}
		})
	}
}

func (x *xfer) atomics(t *testing.T) {
	b := x.b
	a := b.Nodes[0]
	word := x.cbuf[1024 : 1024+8]
	binary.NativeEndian.PutUint64(word, 100)
	res := x.abuf[2048 : 2048+8]
	post := func(wr verbs.SendWR) uint64 {
		t.Helper()
		x.wrid++
		wr.WRID = x.wrid
		wr.Flags = verbs.Signaled
		wr.SGL = []mr.SGE{x.aMR.SGE(2048, 8)}
		wr.RKey = x.cMR.RKey()
		wr.RemoteAddr = x.cMR.Addr() + 1024
		if err := x.qa.PostSend(&wr); err != nil {
			t.Fatal(err)
		}
		w := b.WaitWCs(a, 1)
		if w[0].Status != verbs.WCSuccess || w[0].WRID != wr.WRID {
			t.Fatalf("atomic completion %+v", w[0])
		}
		return binary.NativeEndian.Uint64(res)
	}
	if old := post(verbs.SendWR{Opcode: verbs.WROpAtomicFetchAdd, CompareAdd: 5}); old != 100 {
		t.Fatalf("fetch_add returned %d", old)
	}
	if old := post(verbs.SendWR{Opcode: verbs.WROpAtomicCmpSwp, CompareAdd: 105, Swap: 7}); old != 105 {
		t.Fatalf("cmp_swp returned %d", old)
	}
	if old := post(verbs.SendWR{Opcode: verbs.WROpAtomicCmpSwp, CompareAdd: 105, Swap: 9}); old != 7 {
		t.Fatalf("failed cmp_swp returned %d", old)
	}
	if v := binary.NativeEndian.Uint64(word); v != 7 {
		t.Fatalf("word is %d", v)
	}
}

// TestLargeReadStreams checks that a READ larger than one step's transmit
// budget streams to the end without waiting for a retransmission.
func TestLargeReadStreams(t *testing.T) {
	b := newBed(t, bedOpts{})
	qa, _ := b.PairQPs(rcOpts{MTU: verbs.MTU1024})
	a, c := b.Nodes[0], b.Nodes[1]
	lm, lbuf := a.Reg(t, 4<<20, 0, 1)
	rm, rbuf := c.Reg(t, 4<<20, 0, 2)
	qa.PostSend(&verbs.SendWR{WRID: 7, Opcode: verbs.WROpRDMARead, Flags: verbs.Signaled,
		SGL: []mr.SGE{lm.SGE(0, 4<<20)}, RemoteAddr: rm.Addr(), RKey: rm.RKey()})
	b.expectWC(a, verbs.WCSuccess)
	if b.Clock.Now() != 0 || a.Dev.Counter(verbs.CntTimeouts) != 0 || !bytes.Equal(lbuf, rbuf) {
		t.Fatalf("virtual time %v, timeouts %d", b.Clock.Now(), a.Dev.Counter(verbs.CntTimeouts))
	}
}
