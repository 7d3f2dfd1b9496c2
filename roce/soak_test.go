package roce_test

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/roce/memlink"
	"github.com/sroce/sroce/verbs"
)

// soakSeed returns the router seed: SROCE_SEED replays a failure.
func soakSeed(t testing.TB, def uint64) uint64 {
	if s := os.Getenv("SROCE_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 0, 64)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	return def
}

const (
	soakDepth = 8        // operations in flight per QP
	soakSlot  = 64 << 10 // bytes per slot
)

type soakOp struct {
	kind   verbs.WROpcode
	size   int
	slot   int
	add    uint64 // FETCH_ADD addend
	expect uint64 // CMP_SWAP: the value the word holds
	data   []byte // what the destination must hold
}

// soakQP is one requester QP and its peer.
type soakQP struct {
	q, peer       *roce.QP
	me, other     *node
	local, remote *roce.MR // local: this side's slots; remote: the peer's slots
	lbuf, rbuf    []byte
	recvMR        *roce.MR // the peer's receive slots
	recvBuf       []byte
	ctr           *roce.MR // the peer's FETCH_ADD counter (shared) and CMP_SWAP words
	ctrBuf        []byte
	idx           int // this QP's index: its CMP_SWAP word
	word          uint64
	posted        uint64 // operations posted
	completed     uint64
	recvPosted    uint64
	recvDone      uint64
	ops           map[uint64]*soakOp // by wrid
	recvOps       map[uint64]*soakOp // by recv wrid
	left          int
}

func TestSoakLossDupReorder(t *testing.T) {
	total := 10000
	if testing.Short() || raceEnabled {
		total = 1600
	}
	seed := soakSeed(t, 20240601)
	b := newBed(t, bedOpts{Seed: seed, Imp: memlink.Impairments{
		Loss: 0.10, Duplicate: 0.05, Reorder: 0.10,
		Delay: 2 * time.Microsecond, Jitter: 3 * time.Microsecond, ReorderDelay: 30 * time.Microsecond,
	}})
	t.Logf("router seed %d (set SROCE_SEED to replay)", b.Router.Seed())
	rng := rand.New(rand.NewPCG(seed, 99))
	const nqp = 8
	var sums [2]uint64
	ctrMR := [2]*roce.MR{}
	ctrBuf := [2][]byte{}
	for i := 0; i < 2; i++ {
		ctrMR[i], ctrBuf[i] = b.Nodes[i].Reg(t, 8*(nqp+1), 0, 0)
		clear(ctrBuf[i])
		binary.NativeEndian.PutUint64(ctrBuf[i], 1_000_000)
	}
	var qps []*soakQP
	for i := 0; i < nqp; i++ {
		o := rcOpts{MTU: verbs.MTU1024, Timeout: 8, MaxWR: 64, MaxSGE: 4, RdAtomic: 4, MinRNR: 1}
		o.Defaults()
		me, other := b.Nodes[i%2], b.Nodes[1-i%2]
		q := b.CreateQP(me, o, nil)
		peer := b.CreateQP(other, o, nil)
		psnQ, psnP := bth24(rng.Uint32()), bth24(rng.Uint32())
		if i == 0 {
			psnQ = 0xffffff - 40 // wraps early in the run
		}
		b.Connect(q, me, peer.QPN(), other, o, psnQ, psnP)
		b.Connect(peer, other, q.QPN(), me, o, psnP, psnQ)
		s := &soakQP{q: q, peer: peer, me: me, other: other, idx: i,
			ctr: ctrMR[1-i%2], ctrBuf: ctrBuf[1-i%2],
			ops: map[uint64]*soakOp{}, recvOps: map[uint64]*soakOp{}, left: total / nqp}
		s.local, s.lbuf = me.Reg(t, soakDepth*soakSlot, 0, byte(i))
		s.remote, s.rbuf = other.Reg(t, soakDepth*soakSlot, 0, byte(i+1))
		s.recvMR, s.recvBuf = other.Reg(t, soakDepth*soakSlot, 0, byte(i+2))
		qps = append(qps, s)
	}
	// Re-check the connection: the peer's RQ PSN must be our SQ PSN.
	for _, s := range qps {
		a, _ := s.q.Query()
		p, _ := s.peer.Query()
		if a.SQPSN != p.RQPSN || p.SQPSN != a.RQPSN {
			t.Fatalf("PSNs do not match: %v/%v %v/%v", a.SQPSN, p.RQPSN, p.SQPSN, a.RQPSN)
		}
	}

	var fail string
	post := func(s *soakQP) {
		for s.left > 0 && s.posted-s.completed < soakDepth {
			s.left--
			wrid := s.posted + 1
			slot := int(s.posted % soakDepth)
			op := &soakOp{slot: slot}
			r := rng.IntN(100)
			size := rng.IntN(8 << 10)
			if rng.IntN(20) == 0 {
				size = rng.IntN(soakSlot + 1)
			}
			if rng.IntN(30) == 0 {
				size = 0
			}
			op.size = size
			off := slot * soakSlot
			wr := verbs.SendWR{WRID: wrid, Flags: verbs.Signaled}
			fill := func(buf []byte) {
				for i := range size {
					buf[off+i] = byte(rng.Uint32())
				}
				op.data = append([]byte(nil), buf[off:off+size]...)
			}
			switch {
			case r < 30:
				op.kind = verbs.WROpRDMAWrite
				fill(s.lbuf)
				wr.SGL = split(s.local, off, size, 2)
				wr.RemoteAddr, wr.RKey = s.remote.Addr()+uint64(off), s.remote.RKey()
			case r < 45, r < 65:
				op.kind = verbs.WROpSend
				if r < 45 {
					op.kind = verbs.WROpRDMAWriteWithImm
					wr.RemoteAddr, wr.RKey = s.remote.Addr()+uint64(off), s.remote.RKey()
				} else if r < 55 {
					op.kind = verbs.WROpSendWithImm
				}
				fill(s.lbuf)
				wr.SGL = split(s.local, off, size, 3)
				wr.Imm = uint32(wrid)
				// The receive goes up first; it may also arrive late and
				// cost an RNR NAK, which is fine too.
				s.recvPosted++
				rw := verbs.RecvWR{WRID: s.recvPosted, SGL: []mr.SGE{s.recvMR.SGE(off, soakSlot)}}
				if err := s.peer.PostRecv(&rw); err != nil {
					fail = "post recv: " + err.Error()
					return
				}
				s.recvOps[s.recvPosted] = op
			case r < 85:
				op.kind = verbs.WROpRDMARead
				fill(s.rbuf)
				clear(s.lbuf[off : off+size])
				wr.SGL = split(s.local, off, size, 2)
				wr.RemoteAddr, wr.RKey = s.remote.Addr()+uint64(off), s.remote.RKey()
			case r < 95:
				op.kind = verbs.WROpAtomicFetchAdd
				op.add = uint64(rng.IntN(1000) + 1)
				sums[1-s.idx%2] += op.add
				wr.SGL = []mr.SGE{s.local.SGE(off, 8)}
				wr.RemoteAddr, wr.RKey, wr.CompareAdd = s.ctr.Addr(), s.ctr.RKey(), op.add
			default:
				op.kind = verbs.WROpAtomicCmpSwp
				op.expect = s.word
				next := rng.Uint64()
				wr.SGL = []mr.SGE{s.local.SGE(off, 8)}
				wr.RemoteAddr, wr.RKey = s.ctr.Addr()+8*uint64(s.idx+1), s.ctr.RKey()
				wr.CompareAdd, wr.Swap = s.word, next
				s.word = next
			}
			wr.Opcode = op.kind
			s.ops[wrid] = op
			s.posted++
			if err := s.q.PostSend(&wr); err != nil {
				fail = "post send: " + err.Error()
				return
			}
		}
	}
	check := func() bool {
		did := false
		var wcs [32]verbs.WC
		// Receives first: their buffers are reused once the send completes.
		for _, s := range qps {
			for {
				n := s.other.RCQ.Poll(wcs[:])
				if n == 0 {
					break
				}
				did = true
				for _, w := range wcs[:n] {
					owner := findByPeer(qps, w.QPNum)
					if owner == nil {
						fail = "recv completion for an unknown QP"
						return true
					}
					owner.recvDone++
					if w.Status != verbs.WCSuccess || w.WRID != owner.recvDone {
						fail = "recv completion out of order or failed: " + w.Status.String()
						return true
					}
					op := owner.recvOps[w.WRID]
					delete(owner.recvOps, w.WRID)
					off := op.slot * soakSlot
					got := owner.recvBuf[off : off+op.size]
					if op.kind == verbs.WROpRDMAWriteWithImm {
						got = owner.rbuf[off : off+op.size]
					}
					if int(w.ByteLen) != op.size || !bytes.Equal(got, op.data) {
						fail = "received data differs"
						return true
					}
				}
			}
		}
		for _, s := range qps {
			for {
				n := s.me.SCQ.Poll(wcs[:])
				if n == 0 {
					break
				}
				did = true
				for _, w := range wcs[:n] {
					owner := findByQP(qps, w.QPNum)
					owner.completed++
					if w.Status != verbs.WCSuccess || w.WRID != owner.completed {
						fail = "send completion out of order or failed: " + w.Status.String()
						return true
					}
					op := owner.ops[w.WRID]
					delete(owner.ops, w.WRID)
					off := op.slot * soakSlot
					switch op.kind {
					case verbs.WROpRDMAWrite, verbs.WROpRDMAWriteWithImm:
						if op.kind == verbs.WROpRDMAWrite && !bytes.Equal(owner.rbuf[off:off+op.size], op.data) {
							fail = "written data differs"
						}
					case verbs.WROpRDMARead:
						if !bytes.Equal(owner.lbuf[off:off+op.size], op.data) {
							fail = "read data differs"
						}
					case verbs.WROpAtomicCmpSwp:
						if got := binary.NativeEndian.Uint64(owner.lbuf[off:]); got != op.expect {
							fail = "compare-swap returned a wrong value"
						}
					}
				}
			}
		}
		for _, s := range qps {
			post(s)
		}
		return did
	}
	b.Sim.Idle = check
	for _, s := range qps {
		post(s)
	}
	err := b.Sim.RunUntil(func() bool {
		if fail != "" {
			return true
		}
		for _, s := range qps {
			if s.left > 0 || s.completed != s.posted || s.recvDone != s.recvPosted {
				return false
			}
		}
		return true
	}, time.Hour)
	if err != nil {
		for i, s := range qps {
			in, sp, rp := s.q.Outstanding()
			t.Logf("qp %d (%v): left %d posted %d completed %d recv %d/%d state %v; inflight %d sq %v rq %v",
				i, s.q.QPN(), s.left, s.posted, s.completed, s.recvDone, s.recvPosted, s.q.State(), in, sp, rp)
		}
		t.Fatalf("%v (router seed %d, virtual time %v)", err, b.Router.Seed(), b.Clock.Now())
	}
	if fail != "" {
		t.Fatalf("%s (router seed %d)", fail, b.Router.Seed())
	}
	for i := 0; i < 2; i++ {
		if got := binary.NativeEndian.Uint64(ctrBuf[i]); got != 1_000_000+sums[i] {
			t.Fatalf("node %d: FETCH_ADD counter %d, want %d: an atomic ran twice or not at all", i, got, 1_000_000+sums[i])
		}
	}
	for _, s := range qps {
		if s.q.State() != verbs.QPStateRTS || s.peer.State() != verbs.QPStateRTS {
			t.Fatalf("QP left RTS: %v %v", s.q.State(), s.peer.State())
		}
	}
	st := b.Router.Stats()
	t.Logf("virtual time %v; router %+v", b.Clock.Now(), st)
	for i, n := range b.Nodes {
		c := n.Dev.Counters()
		t.Logf("node %d: sent %d rcvd %d dup_req %d oos_req %d seq_nak_rcvd %d rnr %d retries %d timeouts %d icrc %d",
			i, c["sent_pkts"], c["rcvd_pkts"], c["duplicate_request"], c["out_of_seq_request"],
			c["rcvd_seq_err"], c["rcvd_rnr_err"], c["completer_retry_err"], c["timeouts"], c["icrc_error"])
	}
	if st.Lost == 0 || st.Duplicated == 0 || st.Reordered == 0 {
		t.Fatal("the router did not impair the traffic")
	}
}

func bth24(v uint32) bthPSN { return bthPSN(v & 0xffffff) }

func findByQP(qps []*soakQP, n bthQPN) *soakQP {
	for _, s := range qps {
		if s.q.QPN() == n {
			return s
		}
	}
	return nil
}

func findByPeer(qps []*soakQP, n bthQPN) *soakQP {
	for _, s := range qps {
		if s.peer.QPN() == n {
			return s
		}
	}
	return nil
}
