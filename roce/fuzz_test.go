package roce_test

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/roce/memlink"
	"github.com/sroce/sroce/verbs"
)

// choices feeds the hostile packet generator: from fuzz input bytes, or
// from a seeded random source.
type choices struct {
	data []byte
	rng  *rand.Rand
}

func (c *choices) u64() uint64 {
	if c.rng != nil {
		return c.rng.Uint64()
	}
	var b [8]byte
	n := copy(b[:], c.data)
	c.data = c.data[n:]
	return binary.LittleEndian.Uint64(b[:])
}

func (c *choices) n(k int) int { return int(c.u64() % uint64(k)) }

func (c *choices) done() bool { return c.rng == nil && len(c.data) == 0 }

// guarded is memory with canary bytes on both sides of the part that is
// registered.
type guarded struct {
	all  []byte
	mr   *roce.MR
	keep []byte // for regions peers must not change: their contents
}

const guard = 512

func newGuarded(t testing.TB, pd *roce.PD, size int, access mr.Access, readOnly bool) *guarded {
	g := &guarded{all: make([]byte, guard+size+guard)}
	for i := range g.all {
		g.all[i] = byte(i*13 + 5)
	}
	m, err := pd.RegMR(g.all[guard:guard+size], access)
	if err != nil {
		t.Fatal(err)
	}
	g.mr = m
	if readOnly {
		g.keep = append([]byte(nil), g.all...)
	}
	return g
}

func (g *guarded) check(t testing.TB, name string) {
	t.Helper()
	size := len(g.all) - 2*guard
	for i := 0; i < guard; i++ {
		if g.all[i] != byte(i*13+5) || g.all[guard+size+i] != byte((guard+size+i)*13+5) {
			t.Fatalf("%s: a byte outside the MR changed", name)
		}
	}
	if g.keep != nil && !bytes.Equal(g.keep, g.all) {
		t.Fatalf("%s: memory peers may not write changed", name)
	}
}

// victim is a device under attack from a raw port on the same router.
type victim struct {
	b        *testbed
	Dev      *roce.Device
	node     *node
	rc, uc   *roce.QP
	ud, gsi  *roce.QP
	legitA   *roce.QP // a legitimate RC pair between the victim and node 1
	legitB   *roce.QP
	attacker *memlink.Port
	atkAddr  netip.Addr
	atkMAC   [6]byte
	mrs      []*guarded
	recv     *guarded
	local    *guarded // the victim's own request buffers
	keys     []uint32
	frame    []byte
	psnRC    bth.PSN
	psnUC    bth.PSN
}

func newVictim(t testing.TB) *victim {
	b := newBed(t, bedOpts{Nodes: 2, LinkMTU: 1500, CQE: 1 << 14})
	v := &victim{b: b, node: b.Nodes[0], Dev: b.Nodes[0].Dev}
	v.atkMAC = [6]byte{0x02, 0xaa, 0, 0, 0, 1}
	v.attacker = b.Router.NewPort(net.HardwareAddr(v.atkMAC[:]), 1500)
	v.atkAddr = netip.AddrFrom4([4]byte{10, 0, 0, 99})
	n := v.node
	v.mrs = []*guarded{
		newGuarded(t, n.PD, 4096, allAccess, false),
		newGuarded(t, n.PD, 4096, mr.AccessRemoteRead, true),
		newGuarded(t, n.PD, 4096, mr.AccessLocalWrite, true),
		newGuarded(t, n.PD, 64, mr.AccessLocalWrite|mr.AccessRemoteAtomic, false),
	}
	v.recv = newGuarded(t, n.PD, 8192, mr.AccessLocalWrite, false)
	v.local = newGuarded(t, n.PD, 8192, mr.AccessLocalWrite, false)
	for _, g := range v.mrs {
		v.keys = append(v.keys, g.mr.RKey())
	}
	peer := &node{GID: bth.GIDFromAddr(v.atkAddr), MAC: v.atkMAC}
	o := rcOpts{MTU: verbs.MTU1024, MaxWR: 256, MaxSGE: 4, RdAtomic: 4, Timeout: 4, Retry: 7, RNR: 7}
	o.Defaults()
	v.rc = b.CreateQP(n, o, nil)
	b.Connect(v.rc, n, 0x123, peer, o, 1000, 5000)
	v.psnRC = 5000
	ou := o
	ou.QPType = verbs.QPTypeUC
	v.uc = b.CreateQP(n, ou, nil)
	b.Connect(v.uc, n, 0x124, peer, ou, 2000, 6000)
	v.psnUC = 6000
	v.ud = b.CreateQP(n, rcOpts{QPType: verbs.QPTypeUD, MaxWR: 256, MaxSGE: 2}, nil)
	toRTSUD(t, v.ud, 0x11111111)
	g, err := n.PD.CreateQP(&roce.QPInitAttr{Type: verbs.QPTypeGSI, SendCQ: n.SCQ, RecvCQ: n.RCQ, Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 256, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	g.Modify(&verbs.QPAttr{State: verbs.QPStateInit}, verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrQKey)
	g.Modify(&verbs.QPAttr{State: verbs.QPStateRTR}, verbs.AttrState)
	g.Modify(&verbs.QPAttr{State: verbs.QPStateRTS}, verbs.AttrState|verbs.AttrSQPSN)
	v.gsi = g
	v.legitA, v.legitB = b.PairQPs(rcOpts{})
	v.frame = make([]byte, 2048)
	return v
}

// refill keeps receives posted and the victim's requester busy, and brings
// QPs that the attack moved to the error state back to RTS.
func (v *victim) refill(t testing.TB, c *choices) {
	n := v.node
	for _, q := range []*roce.QP{v.rc, v.uc, v.ud, v.gsi} {
		if q.State() == verbs.QPStateErr {
			q.Modify(&verbs.QPAttr{State: verbs.QPStateReset}, verbs.AttrState)
			peer := &node{GID: bth.GIDFromAddr(v.atkAddr), MAC: v.atkMAC}
			o := rcOpts{MTU: verbs.MTU1024, MaxWR: 256, MaxSGE: 4, RdAtomic: 4, Timeout: 4}
			o.Defaults()
			switch q {
			case v.rc:
				v.b.Connect(q, n, 0x123, peer, o, 1000, v.psnRC)
			case v.uc:
				o.QPType = verbs.QPTypeUC
				v.b.Connect(q, n, 0x124, peer, o, 2000, v.psnUC)
			case v.ud:
				toRTSUD(t, q, 0x11111111)
			default:
				q.Modify(&verbs.QPAttr{State: verbs.QPStateInit}, verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrQKey)
				q.Modify(&verbs.QPAttr{State: verbs.QPStateRTR}, verbs.AttrState)
				q.Modify(&verbs.QPAttr{State: verbs.QPStateRTS}, verbs.AttrState|verbs.AttrSQPSN)
			}
		}
		attr, _ := q.Query()
		for i := 0; i < 4; i++ {
			off := c.n(8192 - 256)
			sgl := []mr.SGE{v.recv.mr.SGE(off, 256)}
			if c.n(4) == 0 {
				sgl = append(sgl, v.recv.mr.SGE(c.n(8192-64), 64))
			}
			q.PostRecv(&verbs.RecvWR{WRID: uint64(i), SGL: sgl})
		}
		_ = attr
	}
	// Requests toward the attacker, whose answers are forged.
	for i := 0; i < 2; i++ {
		off := 8 * c.n(8192/8-8)
		wr := verbs.SendWR{WRID: uint64(i), Flags: verbs.Signaled, SGL: []mr.SGE{v.local.mr.SGE(off, 8+c.n(200))},
			RemoteAddr: uint64(c.n(1 << 20)), RKey: uint32(c.u64())}
		switch c.n(4) {
		case 0:
			wr.Opcode = verbs.WROpRDMAWrite
		case 1:
			wr.Opcode = verbs.WROpRDMARead
		case 2:
			wr.Opcode = verbs.WROpSend
		default:
			wr.Opcode = verbs.WROpAtomicFetchAdd
			wr.SGL = []mr.SGE{v.local.mr.SGE(off, 8)}
			wr.RemoteAddr &^= 7
		}
		v.rc.PostSend(&wr)
	}
	var wcs [64]verbs.WC
	for n.SCQ.Poll(wcs[:]) > 0 {
	}
	for n.RCQ.Poll(wcs[:]) > 0 {
	}
}

// hostile builds one attack frame.
func (v *victim) hostile(c *choices) []byte {
	ops := [...]bth.Opcode{
		bth.RCSendFirst, bth.RCSendMiddle, bth.RCSendLast, bth.RCSendLastImm, bth.RCSendOnly, bth.RCSendOnlyImm,
		bth.RCWriteFirst, bth.RCWriteMiddle, bth.RCWriteLast, bth.RCWriteLastImm, bth.RCWriteOnly, bth.RCWriteOnlyImm,
		bth.RCReadRequest, bth.RCReadResponseFirst, bth.RCReadResponseMiddle, bth.RCReadResponseLast,
		bth.RCReadResponseOnly, bth.RCAcknowledge, bth.RCAtomicAcknowledge, bth.RCCompareSwap, bth.RCFetchAdd,
		bth.RCSendLastInvalidate, bth.RCSendOnlyInvalidate, bth.RCFlush, bth.RCAtomicWrite,
		bth.UCSendFirst, bth.UCSendMiddle, bth.UCSendLast, bth.UCSendOnlyImm, bth.UCWriteFirst, bth.UCWriteMiddle,
		bth.UCWriteLast, bth.UCWriteOnly, bth.UCWriteOnlyImm, bth.UDSendOnly, bth.UDSendOnlyImm, bth.CNP,
	}
	op := ops[c.n(len(ops))]
	info := op.Info()
	var dst bth.QPN
	var psn bth.PSN
	rcAttr, _ := v.rc.Query()
	switch c.n(8) {
	case 0, 1, 2:
		dst = v.rc.QPN()
		psn = rcAttr.RQPSN
		if !info.Request {
			psn = rcAttr.SQPSN.Add(uint32(c.n(400))).Add(bth.PSNMask - 200)
		}
	case 3:
		dst = v.uc.QPN()
		ua, _ := v.uc.Query()
		psn = ua.RQPSN
	case 4:
		dst = v.ud.QPN()
	case 5:
		dst = 1
	default:
		dst = bth.QPN(c.u64()) & bth.QPNMask
		if dst == v.legitA.QPN() || dst == v.legitB.QPN() {
			dst = 0xabcdef
		}
	}
	if c.n(3) == 0 {
		psn = psn.Add(uint32(c.n(8))).Add(bth.PSNMask - 3)
	}
	if c.n(20) == 0 {
		psn = bth.PSN(c.u64()) & bth.PSNMask
	}
	h := bth.Headers{BTH: bth.BTHFields{Opcode: op, SE: c.n(2) == 0, PKey: 0xffff, DestQP: dst, AckReq: c.n(2) == 0, PSN: psn}}
	if c.n(30) == 0 {
		h.BTH.PKey = uint16(c.u64())
	}
	key := func() uint32 {
		switch c.n(4) {
		case 0:
			return uint32(c.u64())
		case 1:
			return v.keys[c.n(len(v.keys))] + uint32(c.n(3))
		}
		return v.keys[c.n(len(v.keys))]
	}
	addr := func() uint64 {
		g := v.mrs[c.n(len(v.mrs))]
		switch c.n(6) {
		case 0:
			return c.u64()
		case 1:
			return g.mr.Addr() - uint64(c.n(64))
		case 2:
			return g.mr.Addr() + uint64(g.mr.Len()) - uint64(c.n(64))
		}
		return g.mr.Addr() + uint64(c.n(g.mr.Len()))
	}
	length := func() uint32 {
		switch c.n(5) {
		case 0:
			return uint32(c.u64())
		case 1:
			return 1 << 31
		}
		return uint32(c.n(5000))
	}
	h.RETH = bth.RETHFields{VA: addr(), RKey: key(), DMALen: length()}
	h.Atomic = bth.AtomicETHFields{VA: addr(), RKey: key(), SwapAdd: c.u64(), Compare: c.u64()}
	if c.n(2) == 0 {
		h.Atomic.VA &^= 7
	}
	syns := [...]bth.Syndrome{bth.SyndromeACKUnlimited, bth.SyndromeACKUnlimited, bth.RNRSyndrome(1), bth.NAKSyndrome(0),
		bth.NAKSyndrome(1), bth.NAKSyndrome(2), bth.NAKSyndrome(3), bth.NAKSyndrome(4), 0x40, 0x9f}
	h.AETH = bth.AETHFields{Syndrome: syns[c.n(len(syns))], MSN: bth.MSN(c.u64()) & bth.PSNMask}
	h.AtomicAck = c.u64()
	h.Imm = uint32(c.u64())
	h.IETH = key()
	h.DETH = bth.DETHFields{QKey: 0x11111111, SrcQP: bth.QPN(c.u64()) & bth.QPNMask}
	if dst == 1 {
		h.DETH.QKey = verbs.GSIQKey
	}
	if c.n(10) == 0 {
		h.DETH.QKey = uint32(c.u64())
	}
	n := 0
	if info.FixedPayload >= 0 {
		n = info.FixedPayload
	} else {
		switch c.n(4) {
		case 0:
			n = 1024
		case 1:
			n = c.n(1200)
		default:
			n = c.n(64)
		}
	}
	payload := v.frame[1500 : 1500+n%500]
	for i := range payload {
		payload[i] = byte(c.u64())
	}
	if n > 500 {
		payload = make([]byte, n)
	}
	e := bth.Encap{DstMAC: v.node.MAC, SrcMAC: v.atkMAC, Src: v.atkAddr, Dst: v.node.GID.Addr(), TTL: 64, DF: true, ID: 1, SrcPort: 0xc123}
	if c.n(15) == 0 {
		e.Src = netip.AddrFrom4([4]byte{10, 9, 9, 9})
	}
	if c.n(30) == 0 {
		e.Dst = netip.AddrFrom4([4]byte{10, 0, 0, 77})
	}
	buf := make([]byte, e.Len()+h.TransportLen(len(payload)))
	k, err := bth.Build(buf, &e, &h, payload)
	if err != nil {
		return nil
	}
	buf = buf[:k]
	switch c.n(25) {
	case 0:
		buf[c.n(len(buf))] ^= byte(1 << c.n(8)) // damaged in flight
	case 1:
		buf = buf[:c.n(len(buf))] // truncated
	}
	return buf
}

// attack fires packets at the victim and checks it after every few.
func attack(t testing.TB, v *victim, c *choices, maxPkts int) {
	legitSrc, lsrc := v.node.Reg(t, 1<<16, 0, 1)
	legitDst, ldst := v.b.Nodes[1].Reg(t, 1<<16, 0, 2)
	_ = lsrc
	for i := 0; i < maxPkts && !c.done(); i++ {
		if i%16 == 0 {
			v.refill(t, c)
		}
		if i%64 == 0 {
			// Legitimate traffic on another QP of the same device.
			v.legitA.PostSend(&verbs.SendWR{Opcode: verbs.WROpRDMAWrite, SGL: []mr.SGE{legitSrc.SGE(0, 1<<16)},
				RemoteAddr: legitDst.Addr(), RKey: legitDst.RKey()})
		}
		f := v.hostile(c)
		if f != nil {
			v.attacker.WriteBatch([][]byte{f})
		}
		// Drain what the victim sends to the attacker.
		var bufs [16][]byte
		var sizes [16]int
		for j := range bufs {
			bufs[j] = make([]byte, 2048)
		}
		v.b.Sim.RunFor(c2dur(c))
		for {
			k, _ := v.attacker.ReadBatch(bufs[:], sizes[:], 0)
			if k == 0 {
				break
			}
		}
		if i%32 == 0 {
			for j, g := range v.mrs {
				g.check(t, "mr"+string(rune('0'+j)))
			}
			v.recv.check(t, "recv")
			v.local.check(t, "local")
		}
	}
	for j, g := range v.mrs {
		g.check(t, "mr"+string(rune('0'+j)))
	}
	v.recv.check(t, "recv")
	v.local.check(t, "local")
	// Stop the attacked QPs' retries toward the attacker, then check that
	// the legitimate pair still works and its data is intact.
	v.rc.Modify(&verbs.QPAttr{State: verbs.QPStateErr}, verbs.AttrState)
	v.uc.Modify(&verbs.QPAttr{State: verbs.QPStateErr}, verbs.AttrState)
	v.legitA.PostSend(&verbs.SendWR{WRID: 77, Opcode: verbs.WROpRDMAWrite, Flags: verbs.Signaled,
		SGL: []mr.SGE{legitSrc.SGE(0, 1<<16)}, RemoteAddr: legitDst.Addr(), RKey: legitDst.RKey()})
	done := false
	err := v.b.Sim.RunUntil(func() bool {
		var wcs [16]verbs.WC
		for {
			k := v.node.SCQ.Poll(wcs[:])
			if k == 0 {
				break
			}
			for _, w := range wcs[:k] {
				if w.WRID == 77 && w.QPNum == v.legitA.QPN() {
					done = w.Status == verbs.WCSuccess
					if !done {
						t.Fatalf("legitimate write failed: %v", w.Status)
					}
				}
			}
		}
		return done
	}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if v.legitA.State() != verbs.QPStateRTS || v.legitB.State() != verbs.QPStateRTS {
		t.Fatalf("the legitimate QPs were disturbed: %v %v", v.legitA.State(), v.legitB.State())
	}
	if !bytes.Equal(legitSrc.Buf(), ldst) {
		t.Fatal("legitimate data corrupted")
	}
}

// c2dur picks how long the simulation runs after a packet: the victim's
// timers must fire in the middle of the attack too.
func c2dur(c *choices) time.Duration { return time.Duration(c.n(3)) * 3 * time.Microsecond }

// TestHostilePackets is the deterministic run of the hostile packet
// generator, part of the normal test suite.
func TestHostilePackets(t *testing.T) {
	pkts := 20000
	if testing.Short() || raceEnabled {
		pkts = 3000
	}
	v := newVictim(t)
	c := &choices{rng: rand.New(rand.NewPCG(soakSeed(t, 4242), 1))}
	attack(t, v, c, pkts)
	cnt := v.Dev.Counters()
	t.Logf("victim counters: %v", cnt)
	for _, name := range []string{"icrc_error", "malformed", "unknown_qpn", "bad_pkey", "bad_qkey", "bad_addr",
		"wrong_type", "out_of_seq_request", "duplicate_request", "nak_sent", "bad_response", "bad_dgid"} {
		if cnt[name] == 0 {
			t.Errorf("the attack never triggered %s", name)
		}
	}
}

// FuzzHostilePackets drives the generator from fuzz input:
// go test -fuzz FuzzHostilePackets ./roce/
func FuzzHostilePackets(f *testing.F) {
	f.Add([]byte("sroce"))
	f.Add(bytes.Repeat([]byte{0}, 256))
	f.Add(bytes.Repeat([]byte{0xff, 1, 2, 3, 4, 5, 6, 7}, 64))
	seed := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 4; i++ {
		b := make([]byte, 2048)
		for j := range b {
			b[j] = byte(seed.Uint32())
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v := newVictim(t)
		attack(t, v, &choices{data: data}, 400)
	})
}
