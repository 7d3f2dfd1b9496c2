package hostile

import (
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"time"
	"unsafe"

	"github.com/sroce/sroce/daemon/ctl"
	"github.com/sroce/sroce/ring"
	"github.com/sroce/sroce/verbs"
)

// The soak's attacks run until cfg.Duration ends, connecting again
// whenever the daemon disconnects them, and return ErrGone if its socket
// stops answering.

// soak runs one round after another until cfg.Duration; a round's error
// other than ErrGone is counted as what.
func soak(ctx context.Context, cfg *Config, t *Tally, what string, round func(ctx context.Context, rng *rand.Rand) error) error {
	ctx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	rng := rand.New(rand.NewPCG(cfg.Seed, 1))
	for ctx.Err() == nil {
		err := round(ctx, rng)
		if errors.Is(err, ErrGone) {
			return err
		}
		if err != nil && ctx.Err() == nil {
			t.Err(what, err)
		}
	}
	return nil
}

// RandomRings writes random bytes over the rings of its QP and CQ, their
// indices, the CQ's control block and the context page, ringing the
// doorbell, and asks the daemon something after each burst; every other
// session, for up to two seconds, it races writers against the daemon's
// reads of the send WQEs instead, as DoubleRead does.
func RandomRings(ctx context.Context, cfg *Config, t *Tally) error {
	session := 0
	return soak(ctx, cfg, t, "random ring writes", func(ctx context.Context, rng *rand.Rand) error {
		if session++; session%2 == 0 {
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			return doubleReadOnce(rctx, cfg, t)
		}
		s, err := newSession(cfg, 256, ctl.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: 64})
		if err != nil {
			return err
		}
		defer s.close()
		t.Got("sessions", 1)
		for burst := 0; burst < 200 && ctx.Err() == nil; burst++ {
			for k := 0; k < 32; k++ {
				scribble(rng, s)
			}
			s.doorbell()
			t.Got("ring writes", 32)
			if err := s.alive(); err != nil {
				return err
			}
			time.Sleep(time.Millisecond) // leave the CPUs to the daemon and its other clients
		}
		return nil
	})
}

// scribble does one random write on the session's shared memory.
func scribble(rng *rand.Rand, s *session) {
	u32 := func(p unsafe.Pointer, v uint32) { *(*uint32)(p) = v }
	switch rng.IntN(8) {
	case 0: // a send slot, random throughout, published
		i := s.sq.Prod()
		randomize(rng, unsafe.Slice((*byte)(unsafe.Pointer(s.sq.At(i))), s.sq.Stride()))
		s.sq.Publish()
	case 1: // a plausible send WQE with random fields that matter
		i := s.sq.Prod()
		e := s.sq.At(i)
		*e = ring.SendWQE{WRID: rng.Uint64(), Opcode: uint8(rng.IntN(16)), NumSGE: uint8(rng.IntN(6)), InlineLen: uint16(rng.IntN(80)),
			Flags: uint32(verbs.Signaled) | uint32(rng.IntN(2))*uint32(verbs.Inline), RemoteAddr: rng.Uint64(), RKey: rng.Uint32(),
			Length: rng.Uint32() % 100000, AH: rng.Uint32() % 4}
		randomize(rng, s.sq.Tail(i))
		s.sq.Publish()
	case 2: // a receive slot
		if s.rq != nil {
			i := s.rq.Prod()
			randomize(rng, unsafe.Slice((*byte)(unsafe.Pointer(s.rq.At(i))), s.rq.Stride()))
			s.rq.Publish()
		}
	case 3: // the send ring's producer index
		s.sq.Header().Prod.Store(s.sq.Header().Prod.Load() + uint32(rng.IntN(3)) - 1 + uint32(rng.IntN(2))*rng.Uint32())
	case 4: // the receive ring's indices
		if s.rq != nil {
			s.rq.Header().Prod.Store(rng.Uint32())
		}
	case 5: // the CQ's consumer index and control block
		s.cq.Header().Cons.Store(rng.Uint32())
		u32(unsafe.Pointer(&s.cqCtl.Arm), rng.Uint32()%4)
		u32(unsafe.Pointer(&s.cqCtl.Overflow), rng.Uint32())
	case 6: // the context page
		randomize(rng, s.page.mem[:64])
	case 7: // a ring header's static fields (the daemon must not trust them)
		h := s.sq.Header()
		u32(unsafe.Pointer(&h.Size), rng.Uint32())
		u32(unsafe.Pointer(&h.Stride), rng.Uint32())
	}
}

func randomize(rng *rand.Rand, b []byte) {
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
}

// RandomControl sends control messages with a valid header and a random
// operation and body, some before OPEN and some after, and reads the
// replies.
func RandomControl(ctx context.Context, cfg *Config, t *Tally) error {
	return soak(ctx, cfg, t, "random control messages", func(ctx context.Context, rng *rand.Rand) error {
		c, err := Dial(cfg.Socket)
		if err != nil {
			return err
		}
		defer c.Close()
		t.Got("connections", 1)
		if rng.IntN(4) != 0 {
			o, err := c.Open(cfg.Device)
			if err != nil {
				return err
			}
			o.Close()
			c.AllocPD()
			c.CreateCQ(16, 0)
		}
		for k := 0; k < 100 && ctx.Err() == nil; k++ {
			op := ctl.Op(rng.IntN(90))
			body := make([]byte, rng.IntN(600))
			if rng.IntN(2) == 0 {
				// Small numbers, so that handles name real objects.
				for i := 0; i+4 <= len(body); i += 4 {
					binary.LittleEndian.PutUint32(body[i:], uint32(rng.IntN(6)))
				}
			} else {
				randomize(rng, body)
			}
			c.seq++
			if err := c.Send(ctl.Append(nil, ctl.Hdr{Op: op, Seq: c.seq}, body), nil); err != nil {
				return err
			}
			h, _, fds, err := c.Recv()
			closeAll(fds)
			if err != nil {
				return err
			}
			if h.Err != 0 {
				t.Got("requests refused", 1)
			} else {
				t.Got("requests answered", 1)
			}
		}
		return nil
	})
}

// Churn connects and disconnects as fast as it can: some connections
// close at once, some after OPEN, some after making a QP.
func Churn(ctx context.Context, cfg *Config, t *Tally) error {
	return soak(ctx, cfg, t, "churn", func(ctx context.Context, rng *rand.Rand) error {
		c, err := Dial(cfg.Socket)
		if err != nil {
			return err
		}
		defer c.Close()
		t.Got("connections", 1)
		switch rng.IntN(3) {
		case 0:
			return nil
		case 1:
			o, err := c.Open(cfg.Device)
			if err == nil {
				o.Close()
			}
			return err
		}
		pd, err := openPD(c, cfg.Device)
		if err != nil {
			return err
		}
		cq, fds, err := c.CreateCQ(64, 0)
		closeAll(fds)
		if err != nil {
			return err
		}
		_, fds, err = c.CreateQP(ctl.CreateQP{PD: pd, SendCQ: cq.Handle, RecvCQ: cq.Handle, QPType: uint8(verbs.QPTypeRC),
			Cap: ctl.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 2, MaxRecvSGE: 2}})
		closeAll(fds)
		return err
	})
}

// Flood makes objects of every kind on a connection until each is
// refused or cfg.PerConn of each were made, drops the connection (the
// daemon frees everything) and starts again.
func Flood(ctx context.Context, cfg *Config, t *Tally) error {
	return soak(ctx, cfg, t, "flood", func(ctx context.Context, rng *rand.Rand) error {
		c, err := Dial(cfg.Socket)
		if err != nil {
			return err
		}
		defer c.Close()
		t.Got("connections", 1)
		pd, err := openPD(c, cfg.Device)
		if err != nil {
			return err
		}
		cq, fds, err := c.CreateCQ(1, 0)
		closeAll(fds)
		if err != nil {
			return err
		}
		memfd, err := SealedMemfd(1 << 20)
		if err != nil {
			return err
		}
		defer closeAll([]int{memfd})
		steps := []step{
			{"completion channels", one(func() error { _, fds, err := c.CreateCompChannel(); closeAll(fds); return err })},
			{"CQs", one(func() error { _, fds, err := c.CreateCQ(uint32(1+rng.IntN(4096)), 0); closeAll(fds); return err })},
			{"QPs", one(func() error {
				_, fds, err := c.CreateQP(ctl.CreateQP{PD: pd, SendCQ: cq.Handle, RecvCQ: cq.Handle, QPType: uint8(verbs.QPTypeRC),
					Cap: ctl.QPCap{MaxSendWR: uint32(1 + rng.IntN(4096)), MaxRecvWR: uint32(1 + rng.IntN(4096)), MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: 128}})
				closeAll(fds)
				return err
			})},
			{"SRQs", one(func() error { _, fds, err := c.CreateSRQ(pd, uint32(1+rng.IntN(4096)), 4); closeAll(fds); return err })},
			{"MRs", one(func() error {
				off := uint64(rng.IntN(255)) * 4096
				_, err := c.RegMR(pd, memfd, 0x10000000+off, off, 4096*uint64(1+rng.IntN(2)))
				return err
			})},
		}
		for k := 0; k < max(cfg.PerConn, 1) && ctx.Err() == nil; k++ {
			for _, st := range steps {
				n, err := st.do(1)
				t.Got(st.what, n)
				var r *Refused
				switch {
				case err == nil:
				case errors.As(err, &r):
					t.Err(st.what, err)
				default:
					return err
				}
			}
		}
		return nil
	})
}
