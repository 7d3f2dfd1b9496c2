package roce_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/roce/memlink"
	"github.com/sroce/sroce/verbs"
)

// TestCQResize resizes a CQ holding completions nobody polled: they stay,
// in order; a size below their number, zero or above MaxCQE is refused;
// the new capacity takes completions the old one had no room for.
func TestCQResize(t *testing.T) {
	b := newBed(t, bedOpts{})
	a := b.Nodes[0]
	cq, err := a.Dev.CreateCQ(8, nil)
	if err != nil {
		t.Fatal(err)
	}
	a.SCQ = cq
	qa, _ := b.PairQPs(rcOpts{})
	lm, _ := a.Reg(t, 64, 0, 1)
	rm, _ := b.Nodes[1].Reg(t, 64, 0, 2)
	write := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			if err := qa.PostSend(&verbs.SendWR{WRID: uint64(i), Opcode: verbs.WROpRDMAWrite, Flags: verbs.Signaled,
				SGL: []mr.SGE{lm.SGE(0, 64)}, RemoteAddr: rm.Addr(), RKey: rm.RKey()}); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.Sim.RunUntil(func() bool { return cq.Len() >= to }, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	write(0, 6)
	for _, bad := range []int{5, 0, -1, roce.MaxCQE + 1} {
		if err := cq.Resize(bad); !errors.Is(err, roce.ErrInvalid) {
			t.Errorf("Resize(%d) with 6 completions waiting = %v, want ErrInvalid", bad, err)
		}
	}
	if err := cq.Resize(6); err != nil || cq.Cqe() != 6 || cq.Len() != 6 {
		t.Fatalf("Resize(6): %v, cqe %d, %d waiting", err, cq.Cqe(), cq.Len())
	}
	if err := cq.Resize(20); err != nil || cq.Cqe() != 20 {
		t.Fatalf("Resize(20): %v, cqe %d", err, cq.Cqe())
	}
	write(6, 20) // more than the CQ first held, none polled
	if cq.Overflowed() {
		t.Fatal("the resized CQ overflowed")
	}
	wcs := make([]verbs.WC, 32)
	if n := cq.Poll(wcs); n != 20 {
		t.Fatalf("polled %d completions, want 20", n)
	}
	for i, w := range wcs[:20] {
		if w.WRID != uint64(i) || w.Status != verbs.WCSuccess {
			t.Fatalf("completion %d: %+v", i, w)
		}
	}
	if err := qa.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := cq.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := cq.Resize(64); !errors.Is(err, roce.ErrDestroyed) {
		t.Errorf("Resize of a destroyed CQ = %v, want ErrDestroyed", err)
	}
}

// TestSRQResize grows an SRQ holding posted receives: they stay and take
// the messages in the order they were posted; the room the SRQ gained
// takes more; sizes below the posted count or the armed limit, zero and
// above MaxSRQWR are refused.
func TestSRQResize(t *testing.T) {
	b := newBed(t, bedOpts{})
	a, c := b.Nodes[0], b.Nodes[1]
	srq, err := c.PD.CreateSRQ(4, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	qa, _ := b.PairQPs(rcOpts{SRQB: srq})
	lm, _ := a.Reg(t, 64, 0, 1)
	rm, rbuf := c.Reg(t, 64*16, 0, 2)
	post := func(i int) error {
		return srq.PostRecv(&verbs.RecvWR{WRID: uint64(i), SGL: []mr.SGE{rm.SGE(i*64, 64)}})
	}
	for i := 0; i < 4; i++ {
		if err := post(i); err != nil {
			t.Fatal(err)
		}
	}
	if err := post(4); err == nil {
		t.Fatal("a fifth receive fit an SRQ of 4")
	}
	for _, bad := range []uint32{3, 0, roce.MaxSRQWR + 1} {
		if err := srq.Resize(bad); !errors.Is(err, roce.ErrInvalid) {
			t.Errorf("Resize(%d) with 4 posted = %v, want ErrInvalid", bad, err)
		}
	}
	if err := srq.Resize(16); err != nil {
		t.Fatal(err)
	}
	if maxWR, _, posted := srq.Query(); maxWR != 16 || posted != 4 {
		t.Fatalf("after Resize(16): max_wr %d, %d posted", maxWR, posted)
	}
	for i := 4; i < 16; i++ {
		if err := post(i); err != nil {
			t.Fatalf("receive %d after the resize: %v", i, err)
		}
	}
	if err := srq.Arm(12); err != nil {
		t.Fatal(err)
	}
	if err := srq.Resize(11); !errors.Is(err, roce.ErrInvalid) {
		t.Errorf("Resize below the armed limit = %v, want ErrInvalid", err)
	}
	for i := 0; i < 16; i++ {
		lm.Buf()[0] = byte(100 + i)
		if err := qa.PostSend(&verbs.SendWR{WRID: uint64(i), Opcode: verbs.WROpSend, SGL: []mr.SGE{lm.SGE(0, 1)}}); err != nil {
			t.Fatal(err)
		}
		b.Run(func() bool { return len(c.WCs) > i })
	}
	for i, w := range c.WCs {
		if w.WRID != uint64(i) || w.Status != verbs.WCSuccess || rbuf[i*64] != byte(100+i) {
			t.Fatalf("receive %d: %+v, byte %d", i, w, rbuf[i*64])
		}
	}
}

// TestResizeUnderTraffic resizes the CQs and the SRQ of a stream of SENDs
// over and over while the engines produce completions and take receives:
// every completion arrives once, in order, and no CQ overflows.
func TestResizeUnderTraffic(t *testing.T) { forEachEngine(t, testResizeUnderTraffic) }

func testResizeUnderTraffic(t *testing.T, engine roce.EngineMode) {
	b := linkedPair(t, 5, engine, 64, func(p *memlink.Port) roce.Link { return p })
	a, c := b.Nodes[0], b.Nodes[1]
	srq, err := c.PD.CreateSRQ(32, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	qa, _ := b.PairQPs(rcOpts{MaxWR: 64, MaxSGE: 1, SRQB: srq})
	lm, _ := a.Reg(t, 64, 0, 1)
	rm, _ := c.Reg(t, 64, 0, 2)
	const msgs, window = 3000, 24
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := make(chan error, 4)
	// consume polls cq until it has seen msgs completions, each once and
	// in order; before each poll refill may post more.
	consume := func(cq *roce.CQ, what string, refill func(done int) error) {
		var wcs [16]verbs.WC
		for done := 0; done < msgs; {
			if err := refill(done); err != nil {
				errs <- fmt.Errorf("%s: %v", what, err)
				return
			}
			n, err := cq.Wait(ctx, wcs[:])
			if err != nil {
				errs <- fmt.Errorf("%s after %d completions: %v", what, done, err)
				return
			}
			for _, w := range wcs[:n] {
				if w.Status != verbs.WCSuccess || w.WRID != uint64(done) {
					errs <- fmt.Errorf("%s completion %d: %+v", what, done, w)
					return
				}
				done++
			}
		}
		errs <- nil
	}
	// Halfway, the sender waits for a few rounds of resizing, so that
	// they surely happen with work in flight.
	const rounds = 3
	halfway := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // sender: at most window SENDs outstanding
		defer wg.Done()
		posted := 0
		consume(a.SCQ, "send", func(done int) error {
			for ; posted < msgs && posted-done < window; posted++ {
				if posted == msgs/2 {
					select {
					case <-halfway:
					case <-ctx.Done():
						return ctx.Err()
					}
				}
				if err := qa.PostSend(&verbs.SendWR{WRID: uint64(posted), Opcode: verbs.WROpSend, Flags: verbs.Signaled,
					SGL: []mr.SGE{lm.SGE(0, 8)}}); err != nil {
					return err
				}
			}
			return nil
		})
	}()
	go func() { // receiver: keeps window receives on the SRQ
		defer wg.Done()
		posted := 0
		consume(c.RCQ, "receive", func(done int) error {
			for ; posted < msgs && posted-done < window; posted++ {
				if err := srq.PostRecv(&verbs.RecvWR{WRID: uint64(posted), SGL: []mr.SGE{rm.SGE(0, 64)}}); err != nil {
					return err
				}
			}
			return nil
		})
	}()
	// The resizer: sizes that always hold the window, so that no
	// completion can be lost for want of room.
	stop := make(chan struct{})
	resized := make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				resized <- nil
				return
			default:
			}
			if i == rounds {
				close(halfway)
			}
			size := window + 8 + (i%5)*40
			for _, cq := range []*roce.CQ{a.SCQ, c.RCQ} {
				if err := cq.Resize(size); err != nil {
					resized <- fmt.Errorf("CQ Resize(%d): %v", size, err)
					return
				}
			}
			if err := srq.Resize(uint32(size)); err != nil {
				resized <- fmt.Errorf("SRQ Resize(%d): %v", size, err)
				return
			}
		}
	}()
	wg.Wait()
	close(stop)
	if err := <-resized; err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	if a.SCQ.Overflowed() || c.RCQ.Overflowed() {
		t.Fatal("a CQ overflowed while being resized")
	}
}
