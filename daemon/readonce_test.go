package daemon_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/daemon"
	"github.com/sroce/sroce/daemon/ctl"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/ring"
	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/verbs"
	"golang.org/x/sys/unix"
)

// hostile is a client that speaks the protocol itself and keeps every
// piece of memory it shares with the daemon, to scribble on it: its QPs'
// send and receive rings, an SRQ's ring, a CQ's ring and control block.
type hostile struct {
	t        *testing.T
	c        *cmClient
	doorbell int
	fds      []int    // descriptors to close
	maps     [][]byte // mappings to unmap
	buf      []byte   // registered memory
	lkey     uint32
	ah       uint32
	sqs      []*ring.Ring[ring.SendWQE]
	rqs      []*ring.Ring[ring.RecvWQE] // QP1's receive ring, the SRQ's ring
	cqRing   *ring.Ring[ring.CQE]
	cqCtl    *ctl.CQCtl
	page     *ctl.CtxPage
	bells    []uint32 // its QPs' and SRQ's doorbell numbers
}

// rawQP is a hostile client's QP, for roce.ConnectQP.
type rawQP struct {
	c   *cmClient
	h   uint32
	qpn bth.QPN
	typ verbs.QPType
	mem []byte
}

func (q *rawQP) Type() verbs.QPType { return q.typ }
func (q *rawQP) QPN() bth.QPN       { return q.qpn }
func (q *rawQP) State() verbs.QPState {
	return verbs.QPState(atomic.LoadUint32((*uint32)(unsafe.Pointer(&q.mem[0]))))
}
func (q *rawQP) Modify(a *verbs.QPAttr, mask verbs.QPAttrMask) error {
	in := ctl.ModifyQP{Handle: q.h, AttrMask: uint32(mask), Attr: ctl.QPAttrOf(a)}
	_, fds, err := q.c.call(ctl.OpModifyQP, ctl.Bytes(&in))
	closeFDs(fds)
	return err
}

// mapOf maps a descriptor the daemon passed.
func (h *hostile) mapOf(fd int, size uint64) []byte {
	h.t.Helper()
	m, err := unix.Mmap(fd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	unix.Close(fd)
	if err != nil {
		h.t.Fatal(err)
	}
	h.maps = append(h.maps, m)
	return m
}

// must fails the test on a request's error; a request whose reply should
// pass n descriptors gets them checked.
func must(t *testing.T, what string, n int) func([]byte, []int, error) ([]byte, []int) {
	return func(b []byte, fds []int, err error) ([]byte, []int) {
		t.Helper()
		if err != nil || len(fds) != n {
			closeFDs(fds)
			t.Fatalf("%s: %v, %d descriptors", what, err, len(fds))
		}
		return b, fds
	}
}

// newHostile opens sroce_mem0 and makes a CQ with a completion channel,
// an SRQ, an RC QP with its own receive ring connected to an RC QP of
// the SRQ (loopback), a UD QP and an address handle, and registered
// memory for their SGEs.
func newHostile(t *testing.T, r *rig) *hostile {
	t.Helper()
	c := dialCM(t, r)
	h := &hostile{t: t, c: c}
	var open ctl.Open
	ctl.SetName(open.Name[:], "sroce_mem0")
	_, fds := must(t, "OPEN", 3)(c.call(ctl.OpOpen, ctl.Bytes(&open)))
	h.doorbell = fds[1]
	h.fds = append(h.fds, fds[:2]...)
	h.page = (*ctl.CtxPage)(unsafe.Pointer(&h.mapOf(fds[2], ctl.CtxPageSize)[0]))
	pd := handleOf(c, ctl.OpAllocPD, nil)

	// Registered memory: a sealed memfd.
	mfd, err := unix.MemfdCreate("hostile", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		t.Fatal(err)
	}
	unix.Ftruncate(mfd, 1<<16)
	unix.FcntlInt(uintptr(mfd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW)
	h.buf, err = unix.Mmap(mfd, 0, 1<<16, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	h.maps = append(h.maps, h.buf)
	addr := uint64(uintptr(unsafe.Pointer(&h.buf[0])))
	reg := ctl.RegMR{PD: pd, Access: uint32(mr.AccessLocalWrite | mr.AccessRemoteWrite | mr.AccessRemoteRead),
		Addr: addr, Length: 1 << 16, IOVA: addr}
	b, _ := must(t, "REG_MR", 0)(c.callFDs(ctl.OpRegMR, ctl.Bytes(&reg), []int{mfd}))
	unix.Close(mfd)
	m, _ := ctl.Get[ctl.MR](b)
	h.lkey = m.LKey

	b, fds = must(t, "CREATE_COMP_CHANNEL", 1)(c.call(ctl.OpCreateCompChannel, nil))
	h.fds = append(h.fds, fds...)
	chh, _ := ctl.Get[ctl.Handle](b)
	cqIn := ctl.CreateCQ{CQE: 64, Channel: chh.Handle}
	b, fds = must(t, "CREATE_CQ", 1)(c.call(ctl.OpCreateCQ, ctl.Bytes(&cqIn)))
	cq, _ := ctl.Get[ctl.CQ](b)
	cqMem := h.mapOf(fds[0], cq.MemSize)
	h.cqCtl = (*ctl.CQCtl)(unsafe.Pointer(&cqMem[0]))
	if h.cqRing, err = ring.Attach[ring.CQE](cqMem[cq.RingOffset:], ring.KindCQ); err != nil {
		t.Fatal(err)
	}

	srqIn := ctl.SRQ{PDOrHandle: pd, MaxWR: 16, MaxSGE: 2}
	b, fds = must(t, "CREATE_SRQ", 1)(c.call(ctl.OpCreateSRQ, ctl.Bytes(&srqIn)))
	srq, _ := ctl.Get[ctl.SRQCreated](b)
	h.bells = append(h.bells, srq.Bell)
	srqMem := h.mapOf(fds[0], srq.MemSize)
	srqRing, err := ring.Attach[ring.RecvWQE](srqMem[srq.RingOffset:], ring.KindRecv)
	if err != nil {
		t.Fatal(err)
	}

	qpCap := ctl.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInlineData: 64}
	mkQP := func(typ verbs.QPType, srq uint32) *rawQP {
		in := ctl.CreateQP{PD: pd, SendCQ: cq.Handle, RecvCQ: cq.Handle, SRQ: srq, QPType: uint8(typ), Cap: qpCap}
		b, fds := must(t, "CREATE_QP", 1)(c.call(ctl.OpCreateQP, ctl.Bytes(&in)))
		out, _ := ctl.Get[ctl.QP](b)
		h.bells = append(h.bells, out.Bell)
		q := &rawQP{c: c, h: out.Handle, qpn: bth.QPN(out.QPN), typ: typ, mem: h.mapOf(fds[0], out.MemSize)}
		sq, err := ring.Attach[ring.SendWQE](q.mem[out.SQOffset:], ring.KindSend)
		if err != nil {
			t.Fatal(err)
		}
		h.sqs = append(h.sqs, sq)
		if out.RQOffset != 0 {
			rq, err := ring.Attach[ring.RecvWQE](q.mem[out.RQOffset:], ring.KindRecv)
			if err != nil {
				t.Fatal(err)
			}
			h.rqs = append(h.rqs, rq)
		}
		return q
	}
	q1 := mkQP(verbs.QPTypeRC, 0)
	q2 := mkQP(verbs.QPTypeRC, srq.Handle)
	q3 := mkQP(verbs.QPTypeUD, 0)
	h.rqs = append(h.rqs, srqRing)
	ca := func(dest bth.QPN) *roce.ConnectAttr {
		return &roce.ConnectAttr{Access: mr.AccessRemoteWrite | mr.AccessRemoteRead,
			AH: verbs.AHAttr{DGID: r.gids[0], HopLimit: 64}, PathMTU: verbs.MTU1024, DestQPN: dest, RQPSN: 1,
			MinRNRTimer: 1, SQPSN: 1, Timeout: 8, RetryCnt: 1, RNRRetry: 1, QKey: 0x11}
	}
	for _, p := range [][2]*rawQP{{q1, q2}, {q2, q1}, {q3, q3}} {
		if err := roce.ConnectQP(p[0], ca(p[1].qpn)); err != nil {
			t.Fatalf("connecting a hostile QP: %v", err)
		}
	}
	ahIn := ctl.AH{PDOrHandle: pd, Attr: ctl.AHOf(&verbs.AHAttr{DGID: r.gids[1], HopLimit: 64, PortNum: 1})}
	b, _ = must(t, "CREATE_AH", 0)(c.call(ctl.OpCreateAH, ctl.Bytes(&ahIn)))
	ah, _ := ctl.Get[ctl.AH](b)
	h.ah = ah.PDOrHandle
	return h
}

// close ends the hostile client's connection and frees its side.
func (h *hostile) close() {
	h.c.uc.Close()
	closeFDs(h.fds)
	for _, m := range h.maps {
		unix.Munmap(m)
	}
}

// ring rings the doorbells of all its QPs and its SRQ.
func (h *hostile) ring() {
	for _, b := range h.bells {
		atomic.OrUint64(&h.page.Bells[b/64], 1<<(b%64))
	}
	var v [8]byte
	binary.NativeEndian.PutUint64(v[:], 1)
	unix.Write(h.doorbell, v[:])
}

// gone reports whether the daemon closed the connection.
func (h *hostile) gone() bool {
	var b [64]byte
	rc, err := h.c.uc.SyscallConn()
	if err != nil {
		return true
	}
	gone := false
	rc.Control(func(fd uintptr) {
		n, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_DONTWAIT|unix.MSG_PEEK)
		gone = n == 0 && err == nil || err != nil && err != unix.EAGAIN
	})
	return gone
}

// post publishes a well-formed WQE on send ring k: an inline SEND, a
// SEND with SGEs, or a UD send naming the AH.
func (h *hostile) post(rng *rand.Rand, k int) {
	sq := h.sqs[k]
	s := sq.Next()
	if s == nil {
		return
	}
	i := sq.Produced()
	*s = ring.SendWQE{WRID: rng.Uint64(), Opcode: uint8(verbs.WROpSend), Flags: uint32(verbs.Signaled), AH: h.ah}
	s.UD.RemoteQPN, s.UD.RemoteQKey = 0x123456, 0x11
	if rng.IntN(2) == 0 {
		s.Flags |= uint32(verbs.Inline)
		s.InlineLen = uint16(rng.IntN(65))
		copy(sq.Tail(i), "hostile inline payload")
	} else {
		s.NumSGE = 2
		sg := sq.SGEs(i, 2)
		sg[0] = mr.SGE{Addr: uint64(uintptr(unsafe.Pointer(&h.buf[0]))), Length: 16, LKey: h.lkey}
		sg[1] = sg[0]
	}
	sq.Publish()
}

// postInline publishes an inline SEND of 8 bytes on QP1's ring and
// reports whether there was room.
func (h *hostile) postInline() bool {
	sq := h.sqs[0]
	s := sq.Next()
	if s == nil {
		return false
	}
	*s = ring.SendWQE{WRID: 8, Opcode: uint8(verbs.WROpSend), Flags: uint32(verbs.Inline), InlineLen: 8}
	sq.Publish()
	return true
}

// postRecv publishes a well-formed receive WQE on receive ring k.
func (h *hostile) postRecv(k int) {
	rq := h.rqs[k]
	s := rq.Next()
	if s == nil {
		return
	}
	*s = ring.RecvWQE{WRID: 1, NumSGE: 1}
	rq.SGEs(rq.Produced(), 1)[0] = mr.SGE{Addr: uint64(uintptr(unsafe.Pointer(&h.buf[4096]))), Length: 4096, LKey: h.lkey}
	rq.Publish()
}

// flipInline flips, for a moment, the inline length of the send WQE the
// daemon reads next on QP1's ring to one that does not fit its slot: the
// double read of issue 23 took the short length for its check and the
// long one for its copy.
func (h *hostile) flipInline() {
	sq := h.sqs[0]
	e := sq.At(sq.Header().Cons.Load())
	w := (*uint32)(unsafe.Pointer(&e.Opcode))
	small := uint32(verbs.WROpSend) | 8<<16
	for k := 0; k < 100; k++ {
		atomic.StoreUint32(w, uint32(verbs.WROpSend)|0xffff<<16)
		atomic.StoreUint32(w, small)
		atomic.StoreUint32(w, small)
	}
}

// scribble rewrites one client-writable field the daemon reads, at
// random: a WQE field (the inline length above all, flipping between a
// length that fits and one that does not), an SGE, a producer index, the
// CQ's consumer index or arm word.
func (h *hostile) scribble(rng *rand.Rand) {
	switch rng.IntN(12) {
	case 0, 1, 2, 3: // the inline length, the double read of issue 23
		sq := h.sqs[rng.IntN(len(h.sqs))]
		i := sq.Prod() - uint32(rng.IntN(2))
		e := sq.At(i)
		for k := 0; k < 200; k++ {
			atomic.StoreUint32((*uint32)(unsafe.Pointer(&e.Opcode)), uint32(verbs.WROpSend)|8<<16)
			atomic.StoreUint32((*uint32)(unsafe.Pointer(&e.Opcode)), uint32(verbs.WROpSend)|0xffff<<16)
		}
		atomic.StoreUint32((*uint32)(unsafe.Pointer(&e.Opcode)), uint32(verbs.WROpSend)|8<<16)
	case 4: // the other fields of a send WQE
		sq := h.sqs[rng.IntN(len(h.sqs))]
		e := sq.At(sq.Prod() - uint32(rng.IntN(3)))
		switch rng.IntN(5) {
		case 0:
			e.NumSGE = uint8(rng.IntN(256))
		case 1:
			e.Opcode = uint8(rng.IntN(256))
		case 2:
			e.Flags = rng.Uint32()
		case 3:
			e.AH = uint32(rng.IntN(4))
		case 4:
			e.RKey, e.RemoteAddr, e.BindLKey, e.BindLength = rng.Uint32(), rng.Uint64(), rng.Uint32(), rng.Uint64()
		}
	case 5: // a send WQE's SGEs
		sq := h.sqs[rng.IntN(len(h.sqs))]
		sg := sq.SGEs(sq.Prod()-uint32(rng.IntN(3)), sq.MaxSGEs())
		sg[rng.IntN(len(sg))] = mr.SGE{Addr: rng.Uint64(), Length: rng.Uint32(), LKey: rng.Uint32()}
	case 6: // a receive WQE (QP1's ring or the SRQ's)
		rq := h.rqs[rng.IntN(len(h.rqs))]
		i := rq.Prod() - uint32(rng.IntN(3))
		if rng.IntN(2) == 0 {
			e := rq.At(i)
			for k := 0; k < 100; k++ {
				atomic.StoreUint32(&e.NumSGE, 1)
				atomic.StoreUint32(&e.NumSGE, 0xffffffff)
			}
			atomic.StoreUint32(&e.NumSGE, 1)
		} else {
			sg := rq.SGEs(i, rq.MaxSGEs())
			sg[rng.IntN(len(sg))] = mr.SGE{Addr: rng.Uint64(), Length: rng.Uint32(), LKey: rng.Uint32()}
		}
	case 7: // a producer index: a little ahead, back, or anywhere
		var p *atomic.Uint32
		if rng.IntN(2) == 0 {
			p = &h.sqs[rng.IntN(len(h.sqs))].Header().Prod
		} else {
			p = &h.rqs[rng.IntN(len(h.rqs))].Header().Prod
		}
		switch rng.IntN(4) {
		case 0:
			p.Store(rng.Uint32())
		case 1:
			p.Add(^uint32(0))
		default:
			p.Add(1)
		}
	case 8, 9: // the CQ's consumer index
		c := &h.cqRing.Header().Cons
		switch rng.IntN(3) {
		case 0:
			c.Store(rng.Uint32())
		default:
			c.Store(h.cqRing.Prod()) // as a client that polled everything
		}
	case 10, 11: // the arm word
		for k := 0; k < 100; k++ {
			atomic.StoreUint32(&h.cqCtl.Arm, uint32(rng.IntN(4)))
		}
		if rng.IntN(8) == 0 {
			atomic.StoreUint32(&h.cqCtl.Arm, rng.Uint32())
		}
	}
}

// TestHostileRingWriter races a hostile client's writes of every field
// the daemon takes from shared memory (send WQE fields, the inline length
// among them, SGEs, receive WQEs of a QP and of an SRQ, producer indices,
// a CQ's consumer index and arm word) against the daemon's reads, client
// after client for a few seconds, while a well-behaved pair of clients
// moves data that is checked. The daemon never panics (a contained panic
// would be logged), the victim's every operation completes with the
// right data, and each hostile client is disconnected or goes on.
func TestHostileRingWriter(t *testing.T) {
	r := newRig(t, daemon.Options{})
	a, b := pair(t, r, false)
	dur := 5 * time.Second
	if d, err := time.ParseDuration(os.Getenv("SROCE_HOSTILE_TIME")); err == nil {
		dur = d // a longer hunt by hand
	}
	stop := make(chan struct{})
	var victimOps atomic.Int64
	var victimErr atomic.Pointer[string]
	fail := func(format string, args ...any) {
		s := fmt.Sprintf(format, args...)
		victimErr.CompareAndSwap(nil, &s)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the victim: SENDs and WRITEs whose data is checked
		defer wg.Done()
		wcs := make([]verbs.WC, 1)
		waitWC := func(e *endpoint, what string, wrid uint64) bool {
			n, err := e.cq.Wait(wcs, 10*time.Second)
			if err != nil || n != 1 || wcs[0].Status != verbs.WCSuccess || wcs[0].WRID != wrid {
				fail("victim %s: %d %+v %v", what, n, wcs[0], err)
				return false
			}
			return true
		}
		for i := uint64(1); ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			msg := bytes.Repeat([]byte{byte(i)}, 1000+int(i%3000))
			copy(a.buf.Buf[0:], msg)
			clear(b.buf.Buf[8192 : 8192+len(msg)])
			if err := a.qp.PostSend(&verbs.SendWR{WRID: i, Opcode: verbs.WROpRDMAWrite, Flags: verbs.Signaled,
				SGL: []mr.SGE{{Addr: a.buf.Addr(0), Length: uint32(len(msg)), LKey: a.mr.LKey()}}, RemoteAddr: b.buf.Addr(8192), RKey: b.mr.RKey()}); err != nil {
				fail("victim WRITE: %v", err)
				return
			}
			if !waitWC(a, "WRITE", i) {
				return
			}
			if !bytes.Equal(b.buf.Buf[8192:8192+len(msg)], msg) {
				fail("victim WRITE %d: wrong data", i)
				return
			}
			if err := b.qp.PostRecv(&verbs.RecvWR{WRID: i, SGL: []mr.SGE{{Addr: b.buf.Addr(0), Length: 4096, LKey: b.mr.LKey()}}}); err != nil {
				fail("victim receive: %v", err)
				return
			}
			if err := a.qp.PostSend(&verbs.SendWR{WRID: i, Opcode: verbs.WROpSend, Flags: verbs.Signaled | verbs.Inline, InlineData: msg[:32]}); err != nil {
				fail("victim SEND: %v", err)
				return
			}
			if !waitWC(a, "SEND", i) || !waitWC(b, "receive", i) {
				return
			}
			if !bytes.Equal(b.buf.Buf[:32], msg[:32]) || wcs[0].ByteLen != 32 {
				fail("victim SEND %d: wrong data", i)
				return
			}
			victimOps.Add(1)
		}
	}()

	rng := rand.New(rand.NewPCG(1, 2))
	rounds, disconnected := 0, 0
	for start := time.Now(); time.Since(start) < dur; rounds++ {
		h := newHostile(t, r)
		for k := range h.rqs {
			for j := 0; j < 4; j++ {
				h.postRecv(k)
			}
		}
		// One goroutine scribbles while this one posts, for at most 50 ms
		// or until the daemon disconnects the client.
		done := make(chan struct{})
		var sw sync.WaitGroup
		sw.Add(1)
		srng := rand.New(rand.NewPCG(uint64(rounds), 7))
		inlineOnly := rounds%2 == 0
		go func() {
			defer sw.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				if inlineOnly {
					h.flipInline()
				} else {
					h.scribble(srng)
				}
			}
		}()
		end := time.Now().Add(50 * time.Millisecond)
		for time.Now().Before(end) {
			for k := range h.sqs {
				if inlineOnly && k == 0 {
					for h.postInline() {
					}
					continue
				}
				h.post(rng, k)
			}
			for k := range h.rqs {
				h.postRecv(k)
			}
			h.ring()
			if h.gone() {
				disconnected++
				break
			}
		}
		close(done)
		sw.Wait()
		h.close()
		if strings.Contains(r.logText(), "panicked") {
			break
		}
	}
	close(stop)
	wg.Wait()
	if log := r.logText(); strings.Contains(log, "panicked") {
		i := strings.Index(log, "panicked")
		t.Fatalf("the daemon panicked reading a hostile client's memory (round %d):\n%s", rounds, log[max(0, i-200):min(len(log), i+3000)])
	}
	if p := victimErr.Load(); p != nil {
		t.Fatal(*p)
	}
	if victimOps.Load() == 0 {
		t.Fatal("the victim completed no operation")
	}
	// The daemon still serves a newcomer.
	c, d := pair(t, r, false)
	d.qp.PostRecv(&verbs.RecvWR{WRID: 1, SGL: []mr.SGE{{Addr: d.buf.Addr(0), Length: 64, LKey: d.mr.LKey()}}})
	c.qp.PostSend(&verbs.SendWR{WRID: 1, Opcode: verbs.WROpSend, Flags: verbs.Inline, InlineData: []byte("after")})
	if wc := wait(t, d, "receive after the hostile clients"); wc.Status != verbs.WCSuccess || string(d.buf.Buf[:5]) != "after" {
		t.Errorf("receive: %+v", wc)
	}
	t.Logf("%d hostile clients, %d disconnected by the daemon; the victim completed %d WRITE+SEND rounds", rounds, disconnected, victimOps.Load())
}
