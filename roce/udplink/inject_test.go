package udplink_test

import (
	"bytes"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/roce/udplink"
	"github.com/sroce/sroce/verbs"
)

// TestForgedICRCDropped is a local user with an ordinary UDP socket writing
// into a connected RC QP's memory. It knows the QPN, the PSN, the rkey and
// the address, and sends from the QP's peer address. With a zeroed or wrong
// ICRC the device must drop the packet and count it under icrc_error; with
// the ICRC computed for the header the kernel puts on (IP ID 0, DF) the
// packet is indistinguishable from a real one and is accepted (the ICRC is
// not authentication). Over IPv4 the link has to recover the IP ID; over
// IPv6 nothing the ICRC covers is hidden.
func TestForgedICRCDropped(t *testing.T) {
	t.Run("IPv4", func(t *testing.T) {
		forgedICRC(t, netip.MustParseAddr("127.13.0.1"), netip.MustParseAddr("127.13.0.2"))
	})
	t.Run("IPv6", func(t *testing.T) {
		forgedICRC(t, netip.MustParseAddr("::1"), netip.MustParseAddr("::1"))
	})
}

func forgedICRC(t *testing.T, devAddr, peerAddr netip.Addr) {
	network := "udp4"
	if devAddr.Is6() {
		network = "udp6"
	}
	link, err := udplink.Open(devAddr, 0, 65536)
	if err != nil {
		t.Skipf("cannot bind %v port 4791 (%v)", devAddr, err)
	}
	dev, err := roce.Open(link, &roce.Options{GIDs: []bth.GID{bth.GIDFromAddr(devAddr)}})
	if err != nil {
		link.Close()
		t.Fatal(err)
	}
	defer dev.Close()
	if err := dev.Start(); err != nil {
		t.Fatal(err)
	}
	attacker, err := net.ListenUDP(network, net.UDPAddrFromAddrPort(netip.AddrPortFrom(peerAddr, 0)))
	if err != nil {
		t.Skipf("cannot bind %v (%v)", peerAddr, err)
	}
	defer attacker.Close()

	pd, err := dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := dev.CreateCQ(16, nil)
	if err != nil {
		t.Fatal(err)
	}
	m, err := pd.RegMR(make([]byte, 4096), mr.AccessLocalWrite|mr.AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	q, err := pd.CreateQP(&roce.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	const peerQPN = 0x99
	steps := []struct {
		attr verbs.QPAttr
		mask verbs.QPAttrMask
	}{
		{verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1, AccessFlags: mr.AccessRemoteWrite},
			verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrAccessFlags},
		{verbs.QPAttr{State: verbs.QPStateRTR, PathMTU: verbs.MTU1024, DestQPN: peerQPN, RQPSN: 0,
			MaxDestRdAtomic: 1, MinRNRTimer: 12, AH: verbs.AHAttr{DGID: bth.GIDFromAddr(peerAddr), HopLimit: 64}},
			verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN | verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer},
		{verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: 0, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
			verbs.AttrState | verbs.AttrSQPSN | verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrMaxQPRdAtomic},
	}
	for _, s := range steps {
		if err := q.Modify(&s.attr, s.mask); err != nil {
			t.Fatal(err)
		}
	}

	// write builds an RDMA WRITE ONLY of 8 bytes at offset off with the
	// given PSN, its ICRC computed for IP ID 0 and DF, and the ICRC bytes
	// then passed through forge.
	write := func(psn bth.PSN, off int, fill byte, forge func(icrc []byte)) []byte {
		e := bth.Encap{Src: peerAddr, Dst: devAddr, TTL: 64, DF: true,
			SrcPort: uint16(attacker.LocalAddr().(*net.UDPAddr).Port)}
		h := bth.Headers{BTH: bth.BTHFields{Opcode: bth.RCWriteOnly, PKey: 0xffff, DestQP: q.QPN(), PSN: psn},
			RETH: bth.RETHFields{VA: m.Addr() + uint64(off), RKey: m.RKey(), DMALen: 8}}
		payload := bytes.Repeat([]byte{fill}, 8)
		f := make([]byte, e.Len()+h.TransportLen(len(payload)))
		if _, err := bth.Build(f, &e, &h, payload); err != nil {
			t.Fatal(err)
		}
		forge(f[len(f)-bth.ICRCLen:])
		return f[e.Len():]
	}
	send := func(dgram []byte) {
		if _, err := attacker.WriteToUDPAddrPort(dgram, netip.AddrPortFrom(devAddr, 4791)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor := func(what string, cond func() bool) {
		deadline := time.Now().Add(5 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s; counters %v", what, dev.Counters())
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	buf := m.Buf()

	send(write(0, 0, 'z', func(icrc []byte) { clear(icrc) }))
	send(write(0, 8, 'r', func(icrc []byte) { copy(icrc, []byte{0xde, 0xad, 0xbe, 0xef}) }))
	waitFor("two icrc_error", func() bool { return dev.Counters()["icrc_error"] >= 2 })
	if c := dev.Counters(); c["icrc_error"] != 2 || c["icrc_unchecked"] != 0 {
		t.Fatalf("forged packets: icrc_error=%d icrc_unchecked=%d", c["icrc_error"], c["icrc_unchecked"])
	}
	if !bytes.Equal(buf[:16], make([]byte, 16)) {
		t.Fatalf("forged WRITEs reached memory: % x", buf[:16])
	}
	if s := link.Stats(); devAddr.Is4() && s.RxICRCMismatch != 2 {
		t.Fatalf("link stats %+v", s)
	}

	// The same WRITE with the ICRC a real sender would compute goes in:
	// whoever knows QPN, PSN and rkey can still write.
	// (The device's counters are read under its lock, which orders the
	// memory it wrote before them; reading buf while it may still write
	// would race.)
	send(write(0, 16, 'g', func([]byte) {}))
	waitFor("the WRITE with a correct ICRC", func() bool { return dev.Counters()["rcvd_pkts"] >= 1 })
	if buf[16] != 'g' {
		t.Fatalf("the WRITE with a correct ICRC was taken but its data is not in memory: % x", buf[:24])
	}
	if c := dev.Counters(); c["icrc_error"] != 2 {
		t.Fatalf("icrc_error=%d after a correct packet", c["icrc_error"])
	}
}
