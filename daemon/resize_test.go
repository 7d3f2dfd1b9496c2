package daemon_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sroce/sroce/client"
	"github.com/sroce/sroce/daemon"
	"github.com/sroce/sroce/daemon/ctl"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/ring"
	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/verbs"
	"golang.org/x/sys/unix"
)

// waitFor polls cond until it holds, failing the test if it does not
// within 10 s (a bound against hangs, not a measurement).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10 s", what)
		}
		// wall clock: waits for the daemon's goroutines, not for a timer
		time.Sleep(100 * time.Microsecond)
	}
}

func wantErrno(t *testing.T, what string, err error, want unix.Errno) {
	t.Helper()
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Errno != want {
		t.Errorf("%s: %v, want %v", what, err, want)
	}
}

// TestResizeCQ resizes a client's CQ with completions it has not polled
// and while the engine produces more: every completion is polled once,
// in order, from the new memory; sizes out of range or below the
// completions waiting are refused.
func TestResizeCQ(t *testing.T) {
	r := newRig(t, daemon.Options{})
	a, b := pair(t, r, true)
	write := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			if err := a.qp.PostSend(&verbs.SendWR{WRID: uint64(i), Opcode: verbs.WROpRDMAWrite, Flags: verbs.Signaled,
				SGL: []mr.SGE{a.mr.SGE(0, 64)}, RemoteAddr: b.buf.Addr(0), RKey: b.mr.RKey()}); err != nil {
				t.Fatal(err)
			}
		}
	}
	write(0, 20)
	waitFor(t, "20 completions", func() bool { return a.cq.Len() == 20 })
	wantErrno(t, "resize below the completions waiting", a.cq.Resize(19), unix.EINVAL)
	wantErrno(t, "resize above max_cqe", a.cq.Resize(roce.MaxCQE+1), unix.EINVAL)
	if err := a.cq.Resize(20); err != nil || a.cq.Cqe() != 20 || a.cq.Len() != 20 {
		t.Fatalf("Resize(20): %v, cqe %d, %d waiting", err, a.cq.Cqe(), a.cq.Len())
	}
	// Resizes while the engine completes more, past the first size of
	// 64, none polled (the CQ always has room for them). The send queue
	// holds 32 requests until they complete (the client's ring is the
	// engine's queue, as on rxe): a batch of 16 waits for the one two
	// batches back.
	if err := a.cq.Resize(99); err != nil {
		t.Fatal(err)
	}
	for k := 0; k < 4; k++ {
		waitFor(t, "the completions of two batches back", func() bool { return a.cq.Len() >= 20+max(k-1, 0)*16 })
		write(20+k*16, 36+k*16)
		if err := a.cq.Resize(100 + k); err != nil {
			t.Fatalf("Resize(%d) under traffic: %v", 100+k, err)
		}
	}
	waitFor(t, "84 completions", func() bool { return a.cq.Len() >= 84 })
	if a.cq.Cqe() != 103 || a.cq.Overflowed() {
		t.Fatalf("cqe %d, overflowed %v", a.cq.Cqe(), a.cq.Overflowed())
	}
	wcs := make([]verbs.WC, 128)
	if n := a.cq.Poll(wcs); n != 84 {
		t.Fatalf("polled %d, want 84", n)
	}
	for i, w := range wcs[:84] {
		if w.WRID != uint64(i) || w.Status != verbs.WCSuccess {
			t.Fatalf("completion %d: %+v", i, w)
		}
	}
	// The armed state moves with the CQ: armed before the resize, the CQ
	// raises an event for the next completion after it, with no arming
	// after the resize.
	if err := a.cq.ReqNotify(false); err != nil {
		t.Fatal(err)
	}
	if err := a.cq.Resize(16); err != nil {
		t.Fatal(err)
	}
	write(84, 85)
	if err := a.cq.GetEvent(10 * time.Second); err != nil {
		t.Fatalf("no event for the completion after a resize of an armed CQ: %v", err)
	}
	if n := a.cq.Poll(wcs); n != 1 || wcs[0].WRID != 84 {
		t.Errorf("completion after the resizes: %+v", wcs[:n])
	}
}

// TestReregMR re-registers a client's MR: new access flags are enforced,
// a new translation is written to by the peer while the old memory stays
// untouched, the keys stay; a range past the byte limit is ENOMEM and
// leaves the MR as it was.
func TestReregMR(t *testing.T) {
	r := newRig(t, daemon.Options{Limits: daemon.Limits{RegBytes: 3 << 16}})
	a, b := pair(t, r, false)
	lkey, rkey := b.mr.LKey(), b.mr.RKey()
	writeTo := func(wrid uint64, addr uint64, rk uint32) verbs.WC {
		t.Helper()
		copy(a.buf.Buf[0:], "rereg!!!")
		if err := a.qp.PostSend(&verbs.SendWR{WRID: wrid, Opcode: verbs.WROpRDMAWrite, Flags: verbs.Signaled,
			SGL: []mr.SGE{a.mr.SGE(0, 8)}, RemoteAddr: addr, RKey: rk}); err != nil {
			t.Fatal(err)
		}
		return wait(t, a, "write")
	}
	// No flag at all is EINVAL, as the kernel's rereg answers.
	wantErrno(t, "rereg with no flag", b.mr.Rereg(0, nil, nil, 0, 0, 0), unix.EINVAL)
	// Access: remote write taken away, then the peer's write fails.
	if err := b.mr.Rereg(mr.ReregChangeAccess, nil, nil, 0, 0, mr.AccessLocalWrite|mr.AccessRemoteRead); err != nil {
		t.Fatal(err)
	}
	if b.mr.LKey() != lkey || b.mr.RKey() != rkey {
		t.Errorf("keys changed: %#x/%#x, were %#x/%#x", b.mr.LKey(), b.mr.RKey(), lkey, rkey)
	}
	if wc := writeTo(1, b.buf.Addr(0), rkey); wc.Status != verbs.WCRemAccessErr {
		t.Errorf("write without remote write access: %+v", wc)
	}
	// A fresh pair: a's QP is in the error state now.
	a, b = pair(t, r, false)
	nb, err := b.x.Alloc(1 << 16)
	if err != nil {
		t.Fatal(err)
	}
	keys := [2]uint32{b.mr.LKey(), b.mr.RKey()}
	big, _ := b.x.Alloc(4 << 16)
	wantErrno(t, "rereg past the byte limit", b.mr.Rereg(mr.ReregChangeTranslation, nil, big, 0, 3<<16+1, 0), unix.ENOMEM)
	old := b.mr.Addr()
	if err := b.mr.Rereg(mr.ReregChangeTranslation|mr.ReregChangeAccess, nil, nb, 4096, 4096,
		mr.AccessLocalWrite|mr.AccessRemoteWrite); err != nil {
		t.Fatal(err)
	}
	if b.mr.Addr() != nb.Addr(4096) || [2]uint32{b.mr.LKey(), b.mr.RKey()} != keys {
		t.Fatalf("MR address %#x, keys %#x/%#x after rereg; want %#x and the keys %#x", b.mr.Addr(), b.mr.LKey(), b.mr.RKey(),
			nb.Addr(4096), keys)
	}
	if wc := writeTo(2, nb.Addr(4096+100), b.mr.RKey()); wc.Status != verbs.WCSuccess {
		t.Fatalf("write into the new translation: %+v", wc)
	}
	if string(nb.Buf[4096+100:4096+108]) != "rereg!!!" {
		t.Error("the write did not land in the new memory")
	}
	if string(b.buf.Buf[100:108]) == "rereg!!!" {
		t.Error("the write landed in the old memory")
	}
	if wc := writeTo(3, old+100, b.mr.RKey()); wc.Status != verbs.WCRemAccessErr {
		t.Errorf("write to the old range: %+v, want a remote access error", wc)
	}
	// Another PD: the MR moves, and its new PD can no longer be freed.
	pd2, err := b.x.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	if err := b.mr.Rereg(mr.ReregChangePD, pd2, nil, 0, 0, 0); err != nil {
		t.Fatalf("rereg to another PD: %v", err)
	}
	wantErrno(t, "freeing the MR's new PD", pd2.Dealloc(), unix.EBUSY)
	// b's registered bytes follow the new translation (the others hold
	// their first MR's).
	small := 0
	for _, c := range r.srv.Clients() {
		switch c.Bytes {
		case 4096:
			small++
		case 1 << 16:
		default:
			t.Errorf("client %d holds %d registered bytes", c.ID, c.Bytes)
		}
	}
	if small != 1 {
		t.Errorf("%d clients hold the 4096 bytes of the new translation, want 1", small)
	}
}

// dialOpen is a raw connection to the daemon with sroce_mem0 open.
func dialOpen(t *testing.T, r *rig) *cmClient {
	c := dialCM(t, r)
	c.open()
	return c
}

// open opens sroce_mem0 on the connection.
func (c *cmClient) open() {
	c.t.Helper()
	var in ctl.Open
	ctl.SetName(in.Name[:], "sroce_mem0")
	_, fds, err := c.call(ctl.OpOpen, ctl.Bytes(&in))
	closeFDs(fds)
	if err != nil {
		c.t.Fatalf("OPEN: %v", err)
	}
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// handleOf sends a request whose reply is a handle and returns it.
func handleOf(c *cmClient, op ctl.Op, body []byte) uint32 {
	c.t.Helper()
	b, fds, err := c.call(op, body)
	closeFDs(fds)
	if err != nil {
		c.t.Fatalf("%s: %v", op, err)
	}
	h, _ := ctl.Get[ctl.Handle](b)
	return h.Handle
}

// ended reports whether err says the daemon ended the connection.
func ended(err error) bool {
	var en unix.Errno
	return err != nil && !errors.As(err, &en)
}

// TestResizeBadInput sends resize and re-registration requests a client
// may not make: handles it does not own and sizes out of range get
// EINVAL; descriptors that do not match the flags, or a CQ ring whose
// consumer index is out of range, end the connection with a logged
// reason.
func TestResizeBadInput(t *testing.T) {
	r := newRig(t, daemon.Options{})
	c := dialOpen(t, r)
	pd := handleOf(c, ctl.OpAllocPD, nil)
	cqIn := ctl.CreateCQ{CQE: 8}
	cq := handleOf(c, ctl.OpCreateCQ, ctl.Bytes(&cqIn))
	srqIn := ctl.SRQ{PDOrHandle: pd, MaxWR: 4, MaxSGE: 1}
	srq := handleOf(c, ctl.OpCreateSRQ, ctl.Bytes(&srqIn))
	for _, tc := range []struct {
		what string
		op   ctl.Op
		body any
	}{
		{"RESIZE_CQ of a CQ it does not own", ctl.OpResizeCQ, ctl.ResizeCQ{Handle: cq + 100, CQE: 16}},
		{"RESIZE_CQ to 0", ctl.OpResizeCQ, ctl.ResizeCQ{Handle: cq, CQE: 0}},
		{"RESIZE_CQ above max_cqe", ctl.OpResizeCQ, ctl.ResizeCQ{Handle: cq, CQE: roce.MaxCQE + 1}},
		{"MODIFY_SRQ of an SRQ it does not own", ctl.OpModifySRQ, ctl.SRQ{PDOrHandle: srq + 100, AttrMask: 1, MaxWR: 8}},
		{"MODIFY_SRQ to max_wr 0", ctl.OpModifySRQ, ctl.SRQ{PDOrHandle: srq, AttrMask: 1, MaxWR: 0}},
		{"MODIFY_SRQ above max_srq_wr", ctl.OpModifySRQ, ctl.SRQ{PDOrHandle: srq, AttrMask: 1, MaxWR: roce.MaxSRQWR + 1}},
		{"MODIFY_SRQ with a limit above max_wr", ctl.OpModifySRQ, ctl.SRQ{PDOrHandle: srq, AttrMask: 3, MaxWR: 8, SRQLimit: 9}},
		{"REREG_MR of an MR it does not own", ctl.OpReregMR, ctl.ReregMR{Handle: 999, Flags: uint32(mr.ReregChangeAccess)}},
	} {
		var b []byte
		switch v := tc.body.(type) {
		case ctl.ResizeCQ:
			b = ctl.Bytes(&v)
		case ctl.SRQ:
			b = ctl.Bytes(&v)
		case ctl.ReregMR:
			b = ctl.Bytes(&v)
		}
		_, fds, err := c.call(tc.op, b)
		closeFDs(fds)
		if !errors.Is(err, unix.EINVAL) {
			t.Errorf("%s: %v, want EINVAL", tc.what, err)
		}
	}
	// A resize that works, through the raw protocol: the SRQ's new ring.
	ok := ctl.SRQ{PDOrHandle: srq, AttrMask: 1, MaxWR: 64}
	b, fds, err := c.call(ctl.OpModifySRQ, ctl.Bytes(&ok))
	if err != nil || len(fds) != 1 {
		t.Fatalf("MODIFY_SRQ max_wr 64: %v, %d descriptors", err, len(fds))
	}
	got, _ := ctl.Get[ctl.SRQCreated](b)
	mem, err := unix.Mmap(fds[0], 0, int(got.MemSize), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	unix.Close(fds[0])
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	if rg, err := ring.Attach[ring.RecvWQE](mem[got.RingOffset:], ring.KindRecv); err != nil || rg.Limit() != 64 || got.MaxWR != 64 {
		t.Errorf("the SRQ's new ring: %v, max_wr %d", err, got.MaxWR)
	}
	q := ctl.Handle{Handle: srq}
	if b, _, err := c.call(ctl.OpQuerySRQ, ctl.Bytes(&q)); err != nil {
		t.Error(err)
	} else if a, _ := ctl.Get[ctl.SRQ](b); a.MaxWR != 64 {
		t.Errorf("QUERY_SRQ max_wr %d after the resize, want 64", a.MaxWR)
	}

	// Descriptors that do not match REREG_MR's flags.
	mfd, _ := unix.MemfdCreate("t", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	defer unix.Close(mfd)
	access := ctl.ReregMR{Handle: 1, Flags: uint32(mr.ReregChangeAccess)}
	if _, _, err := c.callFDs(ctl.OpReregMR, ctl.Bytes(&access), []int{mfd}); !ended(err) {
		t.Errorf("REREG_MR of access with a descriptor: %v, want the connection ended", err)
	}
	c = dialOpen(t, r)
	// A translation without a descriptor is one by address (the daemon
	// maps the client's shared pages), here of an MR that does not exist.
	trans := ctl.ReregMR{Handle: 1, Flags: uint32(mr.ReregChangeTranslation), Reg: ctl.RegMR{Length: 4096}}
	if _, _, err := c.call(ctl.OpReregMR, ctl.Bytes(&trans)); !errors.Is(err, unix.EINVAL) {
		t.Errorf("REREG_MR of the translation of no MR, by address: %v, want EINVAL", err)
	}
	// A CQ ring whose consumer index the client moved past the producer.
	x, err := client.Open(r.socket, "sroce_mem0")
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	xcq, err := x.CreateCQ(8, false)
	if err != nil {
		t.Fatal(err)
	}
	xcq.Ring().Header().Cons.Store(1000)
	if err := xcq.Resize(16); err == nil {
		t.Error("RESIZE_CQ of a corrupt ring succeeded")
	}
	waitFor(t, "the disconnections logged", func() bool {
		return strings.Count(r.logText(), "client disconnected") >= 2
	})
	for _, want := range []string{"REREG_MR request: REREG_MR with 1 descriptors", "RESIZE_CQ request: CQ"} {
		if !strings.Contains(r.logText(), want) {
			t.Errorf("log lacks %q:\n%s", want, r.logText())
		}
	}
}
