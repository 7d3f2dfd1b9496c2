package roce_test

import (
	"context"
	"testing"
	"time"

	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/ring"
	"github.com/sroce/sroce/verbs"
)

// TestRecvRingInPlace: a QP's receive queue may be a ring another party
// writes as the C library does (AttachRecvRing), beside a QP whose
// receives are posted in process (PostRecv): both are the same queue type
// over package ring's entries and take SENDs alike. A ring whose producer
// index runs beyond its limit is then never read again: EventQPFatal, and
// RecvRingFault says why.
func TestRecvRingInPlace(t *testing.T) {
	b := newBed(t, bedOpts{})
	o := rcOpts{}
	o.Defaults()
	na, nb := b.Nodes[0], b.Nodes[1]
	qa := b.CreateQP(na, o, nil)
	qb := b.CreateQP(nb, o, nil)
	g, err := ring.New[ring.RecvWQE](ring.KindRecv, o.MaxWR, ring.Stride[ring.RecvWQE](int(o.MaxSGE)*16))
	if err != nil {
		t.Fatal(err)
	}
	if err := qb.AttachRecvRing(g); err != nil {
		t.Fatalf("attaching a receive ring: %v", err)
	}
	b.Connect(qa, na, qb.QPN(), nb, o, 1, 1)
	b.Connect(qb, nb, qa.QPN(), na, o, 1, 1)
	if err := qb.AttachRecvRing(g); err == nil {
		t.Error("a ring attached to a QP out of RESET")
	}
	ma, bufA := na.Reg(t, 4096, 0, 1)
	mb, bufB := nb.Reg(t, 4096, 0, 2)

	// b's receive, written into the ring as a client writes it.
	e := g.Next()
	*e = ring.RecvWQE{WRID: 77, NumSGE: 1, Length: 1 << 30} // the length is the engine's to sum, not the client's to say
	g.SGEs(g.Prod(), 1)[0] = mr.SGE{Addr: mb.Addr(), Length: 64, LKey: mb.LKey()}
	g.Publish()
	// a's receive, posted in process.
	if err := qa.PostRecv(&verbs.RecvWR{WRID: 88, SGL: []mr.SGE{{Addr: ma.Addr(), Length: 64, LKey: ma.LKey()}}}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []struct {
		q    interface{ PostSend(*verbs.SendWR) error }
		msg  string
		n    *node
		wrid uint64
		buf  []byte
	}{{qa, "to the ring in place", nb, 77, bufB}, {qb, "to the queue in process", na, 88, bufA}} {
		if err := s.q.PostSend(&verbs.SendWR{WRID: 1, Opcode: verbs.WROpSend, Flags: verbs.Inline, InlineData: []byte(s.msg)}); err != nil {
			t.Fatal(err)
		}
		var got *verbs.WC
		b.Run(func() bool {
			for i := range s.n.WCs {
				if s.n.WCs[i].Opcode == verbs.WCRecv {
					got = &s.n.WCs[i]
				}
			}
			return got != nil
		})
		if got.WRID != s.wrid || got.Status != verbs.WCSuccess || got.ByteLen != uint32(len(s.msg)) || string(s.buf[:len(s.msg)]) != s.msg {
			t.Errorf("%s: %+v, buffer %q", s.msg, *got, s.buf[:len(s.msg)])
		}
		s.n.WCs = nil
	}
	if g.Cons() != 1 {
		t.Errorf("the ring's consumer index is %d after one receive completed, want 1", g.Cons())
	}

	// A producer index far beyond the limit: nothing is taken (within
	// the limit, zeroed entries would be taken and fail one by one).
	g.Header().Prod.Store(g.Cons() + g.Limit() + 1000)
	qa.PostSend(&verbs.SendWR{WRID: 2, Opcode: verbs.WROpSend, Flags: verbs.Inline, InlineData: []byte("to a corrupt ring")})
	b.RunLimit(qb.RecvRingFault, 10*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ev, err := nb.Dev.GetAsyncEvent(ctx)
	if err != nil {
		t.Fatalf("no async event within 5 s after the corrupt ring: %v", err)
	}
	if ev.Type != verbs.EventQPFatal || ev.QP != qb {
		t.Errorf("event %v for %v, want EventQPFatal for the QP of the corrupt ring", ev.Type, ev.QP)
	}
	if g.Cons() != 1 {
		t.Errorf("the consumer index moved to %d over a corrupt ring", g.Cons())
	}
}
