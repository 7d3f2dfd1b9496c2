package roce_test

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/roce/memlink"
	"github.com/sroce/sroce/verbs"
)

// Example_rcWrite moves 4 KiB with an RDMA WRITE between two devices on an
// in-memory Ethernet, each run by its own real-time loop.
func Example_rcWrite() {
	// Two ports on an in-memory router, 1500-byte MTU (path MTU 1024).
	clock := roce.SystemClock()
	router := memlink.NewRouter(clock, 1, memlink.Impairments{})
	open := func(mac net.HardwareAddr, ip string) *roce.Device {
		port := router.NewPort(mac, 1500)
		gid := bth.GIDFromAddr(netip.MustParseAddr(ip))
		dev, err := roce.Open(port, &roce.Options{Clock: clock, GIDs: []bth.GID{gid}})
		if err != nil {
			panic(err)
		}
		dev.Start()
		return dev
	}
	macA, macB := net.HardwareAddr{2, 0, 0, 0, 0, 1}, net.HardwareAddr{2, 0, 0, 0, 0, 2}
	devA := open(macA, "192.168.7.1")
	devB := open(macB, "192.168.7.2")
	defer devA.Close()
	defer devB.Close()

	// Each side: a PD, a CQ, a registered buffer and an RC QP.
	type side struct {
		pd  *roce.PD
		cq  *roce.CQ
		mr  *roce.MR
		qp  *roce.QP
		gid bth.GID
		mac [6]byte
	}
	setup := func(dev *roce.Device, mac net.HardwareAddr, fill byte) *side {
		s := &side{}
		s.pd, _ = dev.AllocPD()
		s.cq, _ = dev.CreateCQ(16, nil)
		buf := bytes.Repeat([]byte{fill}, 4096)
		s.mr, _ = s.pd.RegMR(buf, mr.AccessLocalWrite|mr.AccessRemoteWrite)
		s.qp, _ = s.pd.CreateQP(&roce.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: s.cq, RecvCQ: s.cq,
			Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
		s.gid, _ = dev.QueryGID(0)
		copy(s.mac[:], mac)
		return s
	}
	a, b := setup(devA, macA, 'a'), setup(devB, macB, 'b')

	// Connect: RESET -> INIT -> RTR -> RTS, as ibv_rc_pingpong does.
	connect := func(s, peer *side) {
		must(s.qp.Modify(&verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1,
			AccessFlags: mr.AccessRemoteWrite}, verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags))
		must(s.qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTR, PathMTU: verbs.MTU1024, DestQPN: peer.qp.QPN(),
			RQPSN: 0, MaxDestRdAtomic: 1, MinRNRTimer: 12,
			AH: verbs.AHAttr{DGID: peer.gid, DMAC: peer.mac, HopLimit: 64}},
			verbs.AttrState|verbs.AttrAV|verbs.AttrPathMTU|verbs.AttrDestQPN|verbs.AttrRQPSN|verbs.AttrMaxDestRdAtomic|verbs.AttrMinRNRTimer))
		must(s.qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: 0, Timeout: 14, RetryCnt: 7,
			RNRRetry: 7, MaxRdAtomic: 1},
			verbs.AttrState|verbs.AttrSQPSN|verbs.AttrTimeout|verbs.AttrRetryCnt|verbs.AttrRNRRetry|verbs.AttrMaxQPRdAtomic))
	}
	connect(a, b)
	connect(b, a)

	// WRITE a's buffer into b's, and wait for the completion.
	err := a.qp.PostSend(&verbs.SendWR{WRID: 1, Opcode: verbs.WROpRDMAWrite, Flags: verbs.Signaled,
		SGL: []mr.SGE{a.mr.SGE(0, 4096)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	must(err)
	var wc [1]verbs.WC
	if _, err := a.cq.WaitTimeout(wc[:], 5*time.Second); err != nil {
		panic(err)
	}
	fmt.Printf("wr_id %d: %s, %d bytes\n", wc[0].WRID, wc[0].Status, wc[0].ByteLen)
	fmt.Println("remote buffer now holds:", string(b.mr.Buf()[:8]), "...")
	// Output:
	// wr_id 1: success, 4096 bytes
	// remote buffer now holds: aaaaaaaa ...
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}
