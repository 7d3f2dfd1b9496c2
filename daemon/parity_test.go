package daemon_test

// The same verbs program run twice through package rdma: on two in-process
// roce devices, and through the daemon on two devices of the same kind.
// Every completion (status, opcode, length, immediate data) and every byte
// of memory must come out the same.

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/daemon"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/rdma"
	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/roce/memlink"
	"github.com/sroce/sroce/verbs"
)

// end is one side of the program: an RC QP, its CQ, 64 KiB of registered
// memory, and a UD QP with an address handle toward the other side, all
// through package rdma's interfaces.
type end struct {
	qp, ud     rdma.QP
	poll       func([]verbs.WC) int
	buf        []byte
	base       uint64
	lkey, rkey uint32
	gid        bth.GID
	dmac       [6]byte // where peers send (in process; the daemon resolves it)
	peerMAC    [6]byte // the other side's, for the AH (in process)
	ah         func(dgid bth.GID) *verbs.AH
}

const parityAccess = mr.AccessLocalWrite | mr.AccessRemoteWrite | mr.AccessRemoteRead | mr.AccessRemoteAtomic

var parityCap = verbs.QPCap{MaxSendWR: 32, MaxRecvWR: 32, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInlineData: 64}

// newEnd sets up one side on dev, the same calls whatever dev is.
func newEnd(t *testing.T, dev rdma.Device, dmac [6]byte) *end {
	t.Helper()
	pd, err := dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	buf, err := dev.Alloc(1 << 16)
	if err != nil {
		t.Fatal(err)
	}
	m, err := pd.RegMR(buf, parityAccess)
	if err != nil {
		t.Fatal(err)
	}
	cq, err := dev.CreateCQ(64)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateQP(&rdma.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: parityCap})
	if err != nil {
		t.Fatal(err)
	}
	ud, err := pd.CreateQP(&rdma.QPInitAttr{Type: verbs.QPTypeUD, SendCQ: cq, RecvCQ: cq, Cap: parityCap})
	if err != nil {
		t.Fatal(err)
	}
	gid, err := dev.QueryGID(0)
	if err != nil {
		t.Fatal(err)
	}
	e := &end{qp: qp, ud: ud, poll: cq.Poll, buf: buf, base: m.Addr(), lkey: m.LKey(), rkey: m.RKey(), gid: gid, dmac: dmac}
	e.ah = func(dgid bth.GID) *verbs.AH {
		ah, err := pd.CreateAH(&verbs.AHAttr{DGID: dgid, HopLimit: 64, DMAC: e.peerMAC})
		if err != nil {
			t.Fatal(err)
		}
		return ah
	}
	return e
}

// memDevice is a roce device of this process on a memlink router, as
// package rdma sees it, and its MAC.
type memDevice struct {
	dev rdma.Device
	mac [6]byte
}

// inProcessDevices opens two roce devices on a memlink router.
func inProcessDevices(t *testing.T) [2]memDevice {
	return inProcessDevicesOn(t, memlink.NewRouter(roce.SystemClock(), 1, memlink.Impairments{}))
}

// inProcessDevicesOn is inProcessDevices on router.
func inProcessDevicesOn(t *testing.T, router *memlink.Router) [2]memDevice {
	var devs [2]memDevice
	for i := range devs {
		gid := bth.GIDFromAddr(netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)}))
		mac := [6]byte{2, 0, 0, 0, 0, byte(i + 1)}
		d, err := roce.Open(router.NewPort(net.HardwareAddr(mac[:]), 1500), &roce.Options{GIDs: []bth.GID{gid}})
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		devs[i] = memDevice{rdma.InProcess(d), mac}
	}
	return devs
}

// inProcessEnds sets up the program's two ends on in-process devices.
func inProcessEnds(t *testing.T) [2]*end {
	var ends [2]*end
	for i, d := range inProcessDevices(t) {
		ends[i] = newEnd(t, d.dev, d.mac)
	}
	ends[0].peerMAC, ends[1].peerMAC = ends[1].dmac, ends[0].dmac
	return ends
}

// daemonEnds opens two devices of a daemon serving two memlink devices.
func daemonEnds(t *testing.T) [2]*end {
	r := newRig(t, daemon.Options{})
	var ends [2]*end
	for i := range ends {
		dev, err := rdma.Daemon(r.socket, fmt.Sprintf("sroce_mem%d", i))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { dev.Close() })
		ends[i] = newEnd(t, dev, [6]byte{})
	}
	return ends
}

// completion is what the program compares of a work completion.
type completion struct {
	WRID    uint64
	Status  verbs.WCStatus
	Opcode  verbs.WCOpcode
	ByteLen uint32
	Imm     uint32
	Flags   verbs.WCFlags
}

// program runs the verbs program on two ends and returns its completions
// and both ends' memory.
func program(t *testing.T, e [2]*end) ([]completion, [2][]byte) {
	a, b := e[0], e[1]
	for i, x := range e {
		y := e[1-i]
		if err := x.qp.Connect(&roce.ConnectAttr{Access: parityAccess, AH: verbs.AHAttr{DGID: y.gid, HopLimit: 64, DMAC: y.dmac},
			PathMTU: verbs.MTU1024, DestQPN: y.qp.QPN(), RQPSN: 7, MaxDestRdAtomic: 4, MinRNRTimer: 12,
			SQPSN: 7, Timeout: 14, RetryCnt: 3, RNRRetry: 7, MaxRdAtomic: 4}); err != nil {
			t.Fatal(err)
		}
		if err := x.ud.Connect(&roce.ConnectAttr{QKey: 0x1111, SQPSN: 1}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range a.buf {
		a.buf[i], b.buf[i] = byte(i*7), byte(i*13)
	}
	var got []completion
	wait := func(x *end, what string) {
		t.Helper()
		wcs := make([]verbs.WC, 1)
		deadline := time.Now().Add(10 * time.Second)
		for x.poll(wcs) == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("no completion of %s within 10 s", what)
			}
			// wall clock: waits for another process's (the daemon's) engine
			time.Sleep(20 * time.Microsecond)
		}
		w := wcs[0]
		got = append(got, completion{w.WRID, w.Status, w.Opcode, w.ByteLen, w.Imm, w.Flags})
	}
	sge := func(x *end, off, n int) []mr.SGE {
		return []mr.SGE{{Addr: x.base + uint64(off), Length: uint32(n), LKey: x.lkey}}
	}
	post := func(x *end, wr verbs.SendWR) {
		t.Helper()
		wr.Flags |= verbs.Signaled
		if err := x.qp.PostSend(&wr); err != nil {
			t.Fatalf("posting wr %d: %v", wr.WRID, err)
		}
	}
	// SEND with immediate over two SGEs into one receive.
	b.qp.PostRecv(&verbs.RecvWR{WRID: 100, SGL: sge(b, 0, 5000)})
	post(a, verbs.SendWR{WRID: 1, Opcode: verbs.WROpSendWithImm, Imm: 0xabcd,
		SGL: append(sge(a, 100, 1000), sge(a, 5000, 2500)...)})
	wait(a, "SEND")
	wait(b, "receive")
	// WRITE, WRITE with immediate (which consumes a receive), inline SEND.
	post(a, verbs.SendWR{WRID: 2, Opcode: verbs.WROpRDMAWrite, SGL: sge(a, 0, 9000), RemoteAddr: b.base + 10000, RKey: b.rkey})
	wait(a, "WRITE")
	b.qp.PostRecv(&verbs.RecvWR{WRID: 101, SGL: sge(b, 0, 16)})
	post(a, verbs.SendWR{WRID: 3, Opcode: verbs.WROpRDMAWriteWithImm, Imm: 77, SGL: sge(a, 20000, 3000),
		RemoteAddr: b.base + 30000, RKey: b.rkey})
	wait(a, "WRITE with immediate")
	wait(b, "WRITE with immediate's receive")
	b.qp.PostRecv(&verbs.RecvWR{WRID: 102, SGL: sge(b, 40000, 64)})
	post(a, verbs.SendWR{WRID: 4, Opcode: verbs.WROpSend, Flags: verbs.Inline, InlineData: []byte("inline payload")})
	wait(a, "inline SEND")
	wait(b, "inline receive")
	// READ of several packets, then both atomics.
	post(a, verbs.SendWR{WRID: 5, Opcode: verbs.WROpRDMARead, SGL: sge(a, 40000, 7000), RemoteAddr: b.base + 1000, RKey: b.rkey})
	wait(a, "READ")
	post(a, verbs.SendWR{WRID: 6, Opcode: verbs.WROpAtomicFetchAdd, SGL: sge(a, 50000, 8), RemoteAddr: b.base + 800, RKey: b.rkey, CompareAdd: 5})
	wait(a, "FETCH_ADD")
	post(a, verbs.SendWR{WRID: 7, Opcode: verbs.WROpAtomicCmpSwp, SGL: sge(a, 50008, 8), RemoteAddr: b.base + 800, RKey: b.rkey,
		CompareAdd: 1, Swap: 2}) // a compare that fails
	wait(a, "COMPARE_SWAP")
	// UD SEND with immediate.
	b.ud.PostRecv(&verbs.RecvWR{WRID: 103, SGL: sge(b, 60000, 1100)})
	ud := verbs.SendWR{WRID: 8, Opcode: verbs.WROpSendWithImm, Imm: 9, Flags: verbs.Signaled, SGL: sge(a, 0, 1000),
		AH: a.ah(b.gid), RemoteQPN: b.ud.QPN(), RemoteQKey: 0x1111}
	if err := a.ud.PostSend(&ud); err != nil {
		t.Fatal(err)
	}
	wait(a, "UD SEND")
	wait(b, "UD receive")
	// A bad rkey: remote access error, and the QP in the error state.
	post(a, verbs.SendWR{WRID: 9, Opcode: verbs.WROpRDMAWrite, SGL: sge(a, 0, 8), RemoteAddr: b.base, RKey: b.rkey ^ 0x80})
	wait(a, "WRITE with a bad rkey")
	deadline := time.Now().Add(5 * time.Second)
	for a.qp.State() != verbs.QPStateErr && time.Now().Before(deadline) {
		// wall clock: waits for the engine's loop, not for a timer
		time.Sleep(time.Millisecond)
	}
	if s := a.qp.State(); s != verbs.QPStateErr {
		t.Errorf("QP state after the NAK: %v", s)
	}
	return got, [2][]byte{slices.Clone(a.buf), slices.Clone(b.buf[:60000])}
}

// TestSameProgramInProcessAndThroughDaemon runs the program both ways and
// compares everything it saw.
func TestSameProgramInProcessAndThroughDaemon(t *testing.T) {
	wantC, wantM := program(t, inProcessEnds(t))
	gotC, gotM := program(t, daemonEnds(t))
	if !slices.Equal(gotC, wantC) {
		t.Errorf("completions through the daemon:\n%+v\nin process:\n%+v", gotC, wantC)
	}
	for i := range gotM {
		if !slices.Equal(gotM[i], wantM[i]) {
			t.Errorf("side %d's memory differs between the daemon's run and the in-process one", i)
		}
	}
	if len(wantC) != 13 || wantC[len(wantC)-1].Status != verbs.WCRemAccessErr {
		t.Errorf("the program saw %d completions, the last %+v", len(wantC), wantC[len(wantC)-1])
	}
}

// TestRDMAOpen checks rdma.Open's one call: a daemon that serves the
// device gets it; with none, an interface that does not exist is a clear
// error.
func TestRDMAOpen(t *testing.T) {
	r := newRig(t, daemon.Options{})
	t.Setenv("SROCE_SOCKET", r.socket)
	dev, err := rdma.Open("sroce_mem1")
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	if dev.Name() != "sroce_mem1" || len(r.srv.Clients()) != 1 {
		t.Errorf("rdma.Open gave %q, the daemon has %d clients", dev.Name(), len(r.srv.Clients()))
	}
	t.Setenv("SROCE_SOCKET", r.socket+".none")
	if _, err := rdma.Open("sroce_nosuchif9"); err == nil || !strings.Contains(err.Error(), "no daemon serves sroce_nosuchif9") {
		t.Errorf("rdma.Open of a missing interface: %v", err)
	}
}
