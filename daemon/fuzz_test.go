package daemon

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/daemon/ctl"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/ring"
	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/roce/memlink"
	"github.com/sroce/sroce/verbs"
	"golang.org/x/sys/unix"
)

// fuzzDev is a device on memlink's in-memory Ethernet, with a CM.
type fuzzDev struct {
	dev *roce.Device
	mac net.HardwareAddr
	gid bth.GID
}

func (d *fuzzDev) Device() *roce.Device   { return d.dev }
func (d *fuzzDev) Ifname() string         { return "fz0" }
func (d *fuzzDev) Ifindex() int           { return 1 }
func (d *fuzzDev) NodeGUID() [8]byte      { return [8]byte{2, 0, 0, 0xff, 0xfe, 0, 0, 1} }
func (d *fuzzDev) State() verbs.PortState { return verbs.PortActive }
func (d *fuzzDev) ActiveMTU() verbs.MTU   { return verbs.MTU1024 }
func (d *fuzzDev) MTU() int               { return 1500 }

func (d *fuzzDev) SourceGIDIndex(bth.GID) (int, error) { return 0, nil }
func (d *fuzzDev) AHAttr(_ context.Context, dgid bth.GID, sgid int) (verbs.AHAttr, error) {
	if dgid != d.gid {
		return verbs.AHAttr{}, errors.New("no neighbour")
	}
	a := verbs.AHAttr{DGID: dgid, SGIDIndex: uint8(sgid), PortNum: 1}
	copy(a.DMAC[:], d.mac)
	return a, nil
}

// fuzzServer is one server per process, serving one device, for the
// fuzz targets (it is never closed: the process ends).
var fuzzServer = sync.OnceValues(func() (*Server, error) {
	router := memlink.NewRouter(roce.SystemClock(), 1, memlink.Impairments{})
	d := &fuzzDev{mac: net.HardwareAddr{2, 0, 0, 0, 0, 1}, gid: bth.GIDFromAddr(netip.AddrFrom4([4]byte{10, 0, 0, 1}))}
	var err error
	if d.dev, err = roce.Open(router.NewPort(d.mac, 1500), &roce.Options{Name: "fz", GIDs: []bth.GID{d.gid}}); err != nil {
		return nil, err
	}
	if err := d.dev.Start(); err != nil {
		return nil, err
	}
	return New([]Device{d}, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
})

// fuzzConn is a connection of the fuzz server whose requests the test
// hands to the request handling itself, as serve would.
type fuzzConn struct {
	c    *conn
	peer *os.File // the client's end of the socket
}

func newFuzzConn(t testing.TB) *fuzzConn {
	s, err := fuzzServer()
	if err != nil {
		t.Fatal(err)
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fds[0]), "daemon end")
	nc, err := net.FileConn(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.newConn(nc.(*net.UnixConn))
	if err != nil {
		t.Fatal(err)
	}
	return &fuzzConn{c: c, peer: os.NewFile(uintptr(fds[1]), "client end")}
}

// close ends the connection as serve does.
func (f *fuzzConn) close() {
	f.c.uc.Close()
	f.c.cleanup()
	f.peer.Close()
}

// request hands one datagram to the request handling with fds, checks it
// as serve does, and says whether the connection goes on (a client that
// broke the protocol is disconnected). The descriptors of the reply are
// closed.
func (f *fuzzConn) request(msg []byte, fds []int) (reply []byte, ok bool) {
	h, body, err := ctl.Parse(msg)
	if err != nil || int(h.NFDs) != len(fds) {
		return nil, false
	}
	reply, rfds, err := f.c.handle(h, body, fds)
	closeFDs(rfds)
	var ce *errClient
	return reply, !errors.As(err, &ce)
}

// call is request for a well-formed request that must succeed.
func (f *fuzzConn) call(t testing.TB, op ctl.Op, body []byte, fds ...int) []byte {
	t.Helper()
	h := ctl.Hdr{Op: op, Seq: 1, NFDs: uint32(len(fds))}
	r, rfds, err := f.c.handle(h, body, fds)
	closeFDs(fds)
	if err != nil {
		t.Fatalf("%s: %v", op, err)
	}
	closeFDs(rfds)
	return r
}

// fuzzMemfd returns a sealed memfd of n bytes, as REG_MR takes.
func fuzzMemfd(n int) int {
	fd, err := unix.MemfdCreate("fuzz", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return -1
	}
	unix.Ftruncate(fd, int64(n))
	unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW)
	return fd
}

func msg[T any](op ctl.Op, v T) []byte {
	return ctl.Append(nil, ctl.Hdr{Op: op, Seq: 1}, ctl.Bytes(&v))
}

// fuzzRequestSeeds returns a well-formed request of every operation, in
// an order that makes each one's objects (handles count from 1: PD 1, MR
// 2, channel 3, CQ 4, QP 5, SRQ 6, QP 7 on it, AH 8, MW 9, CM channel 10,
// CM ID 11).
func fuzzRequestSeeds() [][]byte {
	var open ctl.Open
	ctl.SetName(open.Name[:], "sroce_fz0")
	h := func(n uint32) ctl.Handle { return ctl.Handle{Handle: n} }
	qcap := ctl.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInlineData: 64}
	addr := ctl.CMAddr{Family: unix.AF_INET}
	copy(addr.Addr[:], []byte{10, 0, 0, 1})
	regIn := ctl.RegMR{PD: 1, Access: uint32(mr.AccessLocalWrite | mr.AccessRemoteWrite), Addr: 1 << 20, Length: 4096, IOVA: 1 << 20}
	reg := ctl.Append(nil, ctl.Hdr{Op: ctl.OpRegMR, Seq: 1, NFDs: 1}, ctl.Bytes(&regIn)) // the memfd
	qa := ctl.QPAttrOf(&verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1, AccessFlags: mr.AccessRemoteWrite})
	return [][]byte{
		msg(ctl.OpHello, ctl.Hello{ABI: ctl.Version}),
		ctl.Append(nil, ctl.Hdr{Op: ctl.OpListDevices, Seq: 1}),
		msg(ctl.OpQueryStats, open),
		msg(ctl.OpOpen, open),
		ctl.Append(nil, ctl.Hdr{Op: ctl.OpQueryDevice, Seq: 1}),
		msg(ctl.OpQueryPort, ctl.Port{PortNum: 1}),
		msg(ctl.OpQueryGID, ctl.Port{PortNum: 1}),
		msg(ctl.OpQueryPKey, ctl.Port{PortNum: 1}),
		ctl.Append(nil, ctl.Hdr{Op: ctl.OpAllocPD, Seq: 1}),
		reg,
		ctl.Append(nil, ctl.Hdr{Op: ctl.OpCreateCompChannel, Seq: 1}),
		msg(ctl.OpCreateCQ, ctl.CreateCQ{CQE: 16, Channel: 3}),
		msg(ctl.OpResizeCQ, ctl.ResizeCQ{Handle: 4, CQE: 32}),
		msg(ctl.OpCreateQP, ctl.CreateQP{PD: 1, SendCQ: 4, RecvCQ: 4, QPType: uint8(verbs.QPTypeRC), Cap: qcap}),
		msg(ctl.OpModifyQP, ctl.ModifyQP{Handle: 5, AttrMask: uint32(verbs.AttrState | verbs.AttrPort | verbs.AttrAccessFlags | verbs.AttrPKeyIndex), Attr: qa}),
		msg(ctl.OpQueryQP, ctl.ModifyQP{Handle: 5}),
		msg(ctl.OpCreateSRQ, ctl.SRQ{PDOrHandle: 1, MaxWR: 8, MaxSGE: 1}),
		msg(ctl.OpModifySRQ, ctl.SRQ{PDOrHandle: 6, AttrMask: 1, MaxWR: 16}),
		msg(ctl.OpQuerySRQ, h(6)),
		msg(ctl.OpCreateQP, ctl.CreateQP{PD: 1, SendCQ: 4, RecvCQ: 4, SRQ: 6, QPType: uint8(verbs.QPTypeUD), Cap: qcap}),
		msg(ctl.OpAttachMcast, ctl.Mcast{QP: 7, GID: [16]byte{0xff, 0x0e, 10: 0xff, 11: 0xff, 12: 239, 15: 1}}),
		msg(ctl.OpDetachMcast, ctl.Mcast{QP: 7, GID: [16]byte{0xff, 0x0e, 10: 0xff, 11: 0xff, 12: 239, 15: 1}}),
		msg(ctl.OpCreateAH, ctl.AH{PDOrHandle: 1, Attr: ctl.AHOf(&verbs.AHAttr{DGID: bth.GIDFromAddr(netip.AddrFrom4([4]byte{10, 0, 0, 1})), HopLimit: 64, PortNum: 1})}),
		msg(ctl.OpAllocMW, ctl.MW{PDOrHandle: 1, TypeOrRKey: 2}),
		msg(ctl.OpReregMR, ctl.ReregMR{Handle: 2, Flags: uint32(mr.ReregChangeAccess), Reg: ctl.RegMR{Access: uint32(mr.AccessLocalWrite)}}),
		ctl.Append(nil, ctl.Hdr{Op: ctl.OpCMCreateChannel, Seq: 1}),
		msg(ctl.OpCMCreateID, ctl.CMCreateID{Channel: 10, PS: 0x0106, QPType: uint8(verbs.QPTypeRC)}),
		msg(ctl.OpCMBind, ctl.CMAddrReq{ID: 11, Src: addr}),
		msg(ctl.OpCMResolveAddr, ctl.CMAddrReq{ID: 11, TimeoutMS: 10, Dst: addr}),
		msg(ctl.OpCMResolveRoute, ctl.CMIDArg{ID: 11, Arg: 10}),
		msg(ctl.OpCMQuery, ctl.CMIDArg{ID: 11}),
		msg(ctl.OpCMListen, ctl.CMIDArg{ID: 11, Arg: 4}),
		msg(ctl.OpCMConnect, ctl.CMConn{ID: 11, QPNum: 5}),
		msg(ctl.OpCMAccept, ctl.CMConn{ID: 11}),
		msg(ctl.OpCMReject, ctl.CMConn{ID: 11}),
		msg(ctl.OpCMDisconnect, ctl.CMIDArg{ID: 11}),
		msg(ctl.OpCMInitQPAttr, ctl.CMIDArg{ID: 11, Arg: uint32(verbs.QPStateInit)}),
		msg(ctl.OpCMNotify, ctl.CMIDArg{ID: 11}),
		msg(ctl.OpCMSetOption, ctl.CMOption{ID: 11, OptName: 0, Value: 0}),
		msg(ctl.OpCMMigrateID, ctl.CMIDArg{ID: 11, Arg: 10}),
		msg(ctl.OpCMJoinMcast, ctl.CMMcast{ID: 11, Addr: addr}),
		msg(ctl.OpCMLeaveMcast, ctl.CMMcast{ID: 11, Addr: addr}),
		msg(ctl.OpOpenXRCD, ctl.OpenXRCD{}),
		msg(ctl.OpCreateSRQ, ctl.SRQ{PDOrHandle: 1, MaxWR: 8, MaxSGE: 1, XRCD: 12, CQ: 4}),
		msg(ctl.OpCreateQP, ctl.CreateQP{PD: 12, QPType: uint8(verbs.QPTypeXRCRecv), Cap: qcap}),
		msg(ctl.OpCreateQP, ctl.CreateQP{PD: 1, SendCQ: 4, QPType: uint8(verbs.QPTypeXRCSend), Cap: qcap}),
		msg(ctl.OpDestroyQP, h(15)),
		msg(ctl.OpDestroyQP, h(14)),
		msg(ctl.OpCloseXRCD, h(12)), // EBUSY: SRQ 13 is of it
		msg(ctl.OpDestroySRQ, h(13)),
		msg(ctl.OpCloseXRCD, h(12)),
		msg(ctl.OpCMDestroyID, ctl.CMIDArg{ID: 11}),
		msg(ctl.OpCMDestroyChannel, h(10)),
		msg(ctl.OpDeallocMW, h(9)),
		msg(ctl.OpDestroyAH, h(8)),
		msg(ctl.OpDestroyQP, h(7)),
		msg(ctl.OpDestroySRQ, h(6)),
		msg(ctl.OpDestroyQP, h(5)),
		msg(ctl.OpDestroyCQ, h(4)),
		msg(ctl.OpDestroyCompChannel, h(3)),
		msg(ctl.OpDeregMR, h(2)),
		msg(ctl.OpDeallocPD, h(1)),
	}
}

// FuzzRequests hands arbitrary requests to a connection's request
// handling, as serve does with what a client sends: an input is a run of
// datagrams, each as long as its header says (REG_MR and REREG_MR that
// announce a descriptor get a sealed memfd). No input may panic; a
// request that breaks the protocol ends the run, as it ends the
// connection. The seeds are every operation, one by one and all in a row
// on one connection.
func FuzzRequests(f *testing.F) {
	seeds := fuzzRequestSeeds()
	var all []byte
	for _, s := range seeds {
		f.Add(s)
		all = append(all, s...)
	}
	f.Add(all)
	f.Fuzz(func(t *testing.T, data []byte) {
		fc := newFuzzConn(t)
		defer fc.close()
		for n := 0; len(data) >= ctl.HdrSize && n < 64; n++ {
			h, _ := ctl.Get[ctl.Hdr](data)
			l := len(data)
			if int(h.Len) >= ctl.HdrSize && int(h.Len) < l {
				l = int(h.Len)
			}
			m := data[:l]
			data = data[l:]
			var fds []int
			if h.NFDs == 1 && (h.Op == ctl.OpRegMR || h.Op == ctl.OpReregMR) {
				fds = []int{fuzzMemfd(4096)}
			}
			_, ok := fc.request(m, fds)
			closeFDs(fds) // handlers dup what they keep
			if !ok {
				return
			}
		}
	})
}

// ringRig is a connection with the objects a fuzzed ring needs: an RC QP
// with its own receive ring connected to an RC QP of an SRQ (loopback),
// a UD QP, a CQ, an AH and registered memory; the bridge's goroutine is
// stopped, and the test runs its passes.
type ringRig struct {
	fc    *fuzzConn
	qps   []*qpObj
	srq   *srqObj
	cq    *cqObj
	inUse int
}

func newRingRig(t testing.TB) *ringRig {
	fc := newFuzzConn(t)
	var open ctl.Open
	ctl.SetName(open.Name[:], "sroce_fz0")
	fc.call(t, ctl.OpOpen, ctl.Bytes(&open))
	fc.c.br.stop()
	fc.call(t, ctl.OpAllocPD, nil) // 1
	buf := make([]byte, 1<<16)
	a := uint64(uintptr(unsafe.Pointer(&buf[0])))
	reg := ctl.RegMR{PD: 1, Access: uint32(mr.AccessLocalWrite | mr.AccessRemoteWrite), Addr: a, Length: 1 << 16, IOVA: a}
	fc.call(t, ctl.OpRegMR, ctl.Bytes(&reg), fuzzMemfd(1<<16)) // 2
	cq := ctl.CreateCQ{CQE: 64}
	fc.call(t, ctl.OpCreateCQ, ctl.Bytes(&cq)) // 3
	srq := ctl.SRQ{PDOrHandle: 1, MaxWR: 8, MaxSGE: 2}
	fc.call(t, ctl.OpCreateSRQ, ctl.Bytes(&srq)) // 4
	qcap := ctl.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInlineData: 64}
	for _, q := range []ctl.CreateQP{
		{PD: 1, SendCQ: 3, RecvCQ: 3, QPType: uint8(verbs.QPTypeRC), Cap: qcap},         // 5
		{PD: 1, SendCQ: 3, RecvCQ: 3, SRQ: 4, QPType: uint8(verbs.QPTypeRC), Cap: qcap}, // 6
		{PD: 1, SendCQ: 3, RecvCQ: 3, QPType: uint8(verbs.QPTypeUD), Cap: qcap},         // 7
	} {
		fc.call(t, ctl.OpCreateQP, ctl.Bytes(&q))
	}
	gid := bth.GIDFromAddr(netip.AddrFrom4([4]byte{10, 0, 0, 1}))
	ah := ctl.AH{PDOrHandle: 1, Attr: ctl.AHOf(&verbs.AHAttr{DGID: gid, HopLimit: 64, PortNum: 1})}
	fc.call(t, ctl.OpCreateAH, ctl.Bytes(&ah)) // 8
	c := fc.c
	r := &ringRig{fc: fc, qps: []*qpObj{c.qps[5], c.qps[6], c.qps[7]}, srq: c.srqs[4], cq: c.cqs[3]}
	connect := func(q, peer *qpObj) {
		steps := []struct {
			a    verbs.QPAttr
			mask verbs.QPAttrMask
		}{
			{verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1, AccessFlags: mr.AccessRemoteWrite, QKey: 0x11}, verbs.AttrState | verbs.AttrPort | verbs.AttrPKeyIndex},
			{verbs.QPAttr{State: verbs.QPStateRTR, AH: verbs.AHAttr{DGID: gid, HopLimit: 64}, PathMTU: verbs.MTU1024, DestQPN: peer.qp.QPN(), RQPSN: 1, MinRNRTimer: 1, MaxDestRdAtomic: 1}, verbs.AttrState},
			{verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: 1, Timeout: 1, RetryCnt: 1, RNRRetry: 1, MaxRdAtomic: 1}, verbs.AttrState | verbs.AttrSQPSN},
		}
		for k, s := range steps {
			mask := s.mask
			if q.typ == verbs.QPTypeUD {
				if k == 0 {
					mask |= verbs.AttrQKey
				}
			} else {
				switch k {
				case 0:
					mask |= verbs.AttrAccessFlags
				case 1:
					mask |= verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN | verbs.AttrMinRNRTimer | verbs.AttrMaxDestRdAtomic
				case 2:
					mask |= verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrMaxQPRdAtomic
				}
			}
			in := ctl.ModifyQP{Handle: q.handle, AttrMask: uint32(mask), Attr: ctl.QPAttrOf(&s.a)}
			fc.call(t, ctl.OpModifyQP, ctl.Bytes(&in))
		}
	}
	connect(r.qps[0], r.qps[1])
	connect(r.qps[1], r.qps[0])
	connect(r.qps[2], r.qps[2])
	return r
}

// fill copies up to one slot's worth of data into the slot at the ring's
// producer index, zeroing the rest, and publishes it; it returns what
// is left of data.
func fill[T ring.Entry](r *ring.Ring[T], data []byte) []byte {
	mem := r.Memory()
	p := r.Prod()
	off := ring.HeaderSize + int(p&(r.Header().Size-1))*int(r.Stride())
	slot := mem[off : off+int(r.Stride())]
	n := copy(slot, data)
	clear(slot[n:])
	r.Header().Prod.Store(p + 1)
	return data[n:]
}

// FuzzRingEntries publishes arbitrary bytes as send WQEs (on an RC and a
// UD QP) and receive WQEs (on a QP's ring and an SRQ's) and runs the
// bridge's pass over them, as the daemon does with what a client writes
// in its rings. An input is a run of (ring, count, entries) groups, or a
// producer index moved by a given amount. No input may panic; a bad entry
// is refused (the connection would end: the test then drops what is
// left in the rings) or completes in error. A connection serves 1000
// inputs, then a fresh one takes over.
func FuzzRingEntries(f *testing.F) {
	wqe := func(e ring.SendWQE, tail []byte) []byte {
		b := append([]byte(nil), unsafe.Slice((*byte)(unsafe.Pointer(&e)), unsafe.Sizeof(e))...)
		return append(b, tail...)
	}
	rwqe := func(e ring.RecvWQE, tail []byte) []byte {
		b := append([]byte(nil), unsafe.Slice((*byte)(unsafe.Pointer(&e)), unsafe.Sizeof(e))...)
		return append(b, tail...)
	}
	sge := func(s mr.SGE) []byte {
		return append([]byte(nil), unsafe.Slice((*byte)(unsafe.Pointer(&s)), unsafe.Sizeof(s))...)
	}
	pad := func(b []byte, n int) []byte { return append(b, make([]byte, n-len(b))...) }
	group := func(sel byte, entries ...[]byte) []byte {
		b := []byte{sel, byte(len(entries))}
		for _, e := range entries {
			b = append(b, e...)
		}
		return b
	}
	r := newRingRig(f)
	sqStride, rqStride := int(r.qps[0].sq.Stride()), int(r.qps[0].rq.Stride())
	srqStride := int(r.srq.rq.Stride())
	r.fc.close()
	inline := pad(wqe(ring.SendWQE{WRID: 1, Opcode: uint8(verbs.WROpSend), Flags: uint32(verbs.Inline | verbs.Signaled), InlineLen: 5}, []byte("hello")), sqStride)
	sges := pad(wqe(ring.SendWQE{WRID: 2, Opcode: uint8(verbs.WROpRDMAWrite), NumSGE: 2, Flags: uint32(verbs.Signaled), RKey: 1}, append(sge(mr.SGE{Length: 8, LKey: 1}), sge(mr.SGE{Length: 8})...)), sqStride)
	ud := pad(wqe(ring.SendWQE{WRID: 3, Opcode: uint8(verbs.WROpSend), Flags: uint32(verbs.Inline), InlineLen: 2, AH: 8, UD: ring.UDAddr{RemoteQPN: 7, RemoteQKey: 0x11}}, []byte("ud")), sqStride)
	recv := pad(rwqe(ring.RecvWQE{WRID: 4, NumSGE: 1}, sge(mr.SGE{Length: 64, LKey: 1})), rqStride)
	srecv := pad(rwqe(ring.RecvWQE{WRID: 5, NumSGE: 2}, append(sge(mr.SGE{Length: 64}), sge(mr.SGE{Length: 64})...)), srqStride)
	f.Add(group(0, inline, sges))
	f.Add(group(2, ud))
	f.Add(append(group(3, recv, recv), group(1, inline)...))
	f.Add(append(group(4, srecv), group(0, inline)...))
	f.Add(group(0, pad(wqe(ring.SendWQE{Flags: uint32(verbs.Inline), InlineLen: 0xffff}, nil), sqStride)))
	f.Add(group(3, pad(rwqe(ring.RecvWQE{NumSGE: 0xffffffff}, nil), rqStride)))
	f.Add([]byte{5, 0, 200}) // a producer index far ahead
	var rr *ringRig
	f.Fuzz(func(t *testing.T, data []byte) {
		if rr == nil || rr.inUse == 1000 {
			if rr != nil {
				rr.fc.close()
			}
			rr = newRingRig(t)
		}
		rr.inUse++
		c := rr.fc.c
		sqs := []*ring.Ring[ring.SendWQE]{rr.qps[0].sq, rr.qps[1].sq, rr.qps[2].sq}
		// The receive rings are the engine's queues in place: no message
		// comes here to take from them, so what is written in them
		// stays, unread, and is dropped after each group.
		rqs := []*ring.Ring[ring.RecvWQE]{rr.qps[0].rq, rr.srq.rq}
		for len(data) >= 2 {
			sel, n := data[0]%6, int(data[1])%9
			data = data[2:]
			switch {
			case sel < 3:
				for k := 0; k < n && len(data) > 0; k++ {
					data = fill(sqs[sel], data)
				}
			case sel < 5:
				q := rqs[sel-3]
				for k := 0; k < n && len(data) > 0; k++ {
					data = fill(q, data)
				}
				q.Header().Prod.Store(q.Cons())
			default: // move a producer index
				if len(data) > 0 {
					sqs[n%3].Header().Prod.Add(uint32(data[0]))
					data = data[1:]
				}
			}
			for _, t := range c.br.tab() { // the client rings every doorbell
				if t != nil {
					atomic.OrUint64(&c.br.page.Bells[t.bell/64], 1<<(t.bell%64))
				}
			}
			if _, err := c.br.pass(false); err != nil {
				// The daemon would disconnect the client: start again
				// from empty rings.
				c.qpMu.Lock()
				for _, o := range rr.qps {
					o.sq.Header().Prod.Store(o.sqSeen)
				}
				c.qpMu.Unlock()
				c.ringErr.Store(nil)
			}
			// The client polls everything.
			h := (*ring.Header)(unsafe.Pointer(&rr.cq.mem.mem[cqRingOffset]))
			h.Cons.Store(h.Prod.Load())
		}
	})
	if rr != nil {
		rr.fc.close()
	}
}
