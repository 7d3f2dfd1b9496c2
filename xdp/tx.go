// Transmit side of the socket.
//
// Pipeline: Transmit copies each frame into free transmit chunks (one, or
// several chained with XDP_PKT_CONTD) -> descriptors on the tx ring -> kick
// (sendto) -> the kernel sends and posts the chunk addresses on the
// completion ring -> reap puts them back on the free list. AllocTx/SubmitTx
// let the caller build frames in the chunks instead. The transmitting
// goroutine owns the tx and completion rings, the free list and the
// transmit chunks.

package xdp

import (
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// reap moves completed transmit chunks back to the free list.
func (s *Socket) reap() {
	n := s.comp.available()
	if n == 0 {
		return
	}
	for k := uint32(0); k < n; k++ {
		addr := s.comp.get() &^ (s.chunkSize - 1)
		i := s.chunkIndex(addr)
		if i < s.rxFrames || i >= s.numFrames || s.owner[i] != ownKernelTx {
			panic(fmt.Sprintf("xdp: completion for chunk %d the kernel did not own", i))
		}
		s.owner[i] = ownTxFree
		s.txFree = append(s.txFree, addr)
	}
	s.comp.release()
	s.c.txCompleted.Add(uint64(n))
}

// Transmit copies frames into free transmit chunks, queues them on the tx
// ring and kicks the kernel. It returns how many frames (a prefix of
// frames) were queued: fewer than len(frames) when the ring or the free
// chunks run out, with a nil error, or up to an invalid frame, with
// ErrFrameTooLarge.
func (s *Socket) Transmit(frames [][]byte) (int, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return 0, ErrClosed
	}
	return s.transmit(frames)
}

func (s *Socket) transmit(frames [][]byte) (int, error) {
	s.reap()
	sent := 0
	var nbytes uint64
	var err error
	chunk := int(s.chunkSize)
	for _, f := range frames {
		if len(f) == 0 || len(f) > s.maxFrame {
			err = ErrFrameTooLarge
			break
		}
		need := (len(f) + chunk - 1) / chunk
		if len(s.txFree) < need || s.tx.free(uint32(need)) < uint32(need) {
			// Let the kernel send what is queued, then look again.
			s.tx.submit()
			if kerr := s.kick(); kerr != nil {
				err = kerr
				break
			}
			s.reap()
			if len(s.txFree) < need || s.tx.free(uint32(need)) < uint32(need) {
				break
			}
		}
		for off := 0; off < len(f); off += chunk {
			addr := s.txFree[len(s.txFree)-1]
			s.txFree = s.txFree[:len(s.txFree)-1]
			s.owner[s.chunkIndex(addr)] = ownKernelTx
			n := copy(s.umem[addr:addr+s.chunkSize], f[off:])
			d := &s.tx.descs[s.tx.local&s.tx.mask]
			d.Addr, d.Len, d.Options = addr, uint32(n), 0
			if off+n < len(f) {
				d.Options = unix.XDP_PKT_CONTD
			}
			s.tx.local++
		}
		nbytes += uint64(len(f))
		sent++
	}
	s.tx.submit()
	if kerr := s.kick(); kerr != nil && err == nil {
		err = kerr
	}
	if sent > 0 {
		s.c.txFrames.Add(uint64(sent))
		s.c.txBytes.Add(nbytes)
	}
	return sent, err
}

// kick asks the kernel to send what the tx ring holds, when the kernel
// wants to be asked (need-wakeup). In copy mode one sendto sends at most 32
// descriptors and answers EAGAIN while more remain, so it kicks until the
// ring is drained or the kernel stops making progress (its send buffer is
// full of frames not yet completed). Frames left on the ring then go out
// with the next Transmit or Flush, or when Wait polls the socket: in copy
// mode poll(2) drives transmission too.
func (s *Socket) kick() error {
	err := s.kickRing()
	backlog := s.mode != ModeZeroCopy && s.tx.outstanding() > 0
	if backlog {
		s.txBacklogComp.Store(s.kickComp)
	}
	s.txBacklog.Store(backlog)
	return err
}

// kickRing is kick without the backlog's bookkeeping.
func (s *Socket) kickRing() error {
	for {
		pending := s.tx.outstanding()
		if pending == 0 || !s.tx.needWakeup() {
			return nil
		}
		s.kickComp = atomic.LoadUint32(s.comp.producer)
		// A raw call (see the package documentation): it never blocks; in copy
		// mode it sends at most the kernel's batch of frames.
		_, _, e := unix.RawSyscall6(unix.SYS_SENDTO, uintptr(s.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
		s.c.txKicks.Add(1)
		switch e {
		case 0, unix.EAGAIN, unix.EBUSY, unix.ENOBUFS:
			if e != 0 && e != unix.EAGAIN {
				s.c.txKickErr.Add(1)
			}
		case unix.ENETDOWN, unix.ENXIO:
			return fmt.Errorf("xdp: transmit on %s: %w", s.ifname, e)
		default:
			s.c.txKickErr.Add(1)
			return fmt.Errorf("xdp: transmit kick: %w", e)
		}
		if s.mode == ModeZeroCopy {
			return nil // the driver sends asynchronously
		}
		if s.tx.outstanding() >= pending {
			s.c.txStalls.Add(1)
			return nil
		}
	}
}

// txResumable reports, from shared indices only (any goroutine may ask),
// whether frames wait on the tx ring after a kick the kernel could not
// finish and the kernel has completed frames since that kick, so that a kick now
// would send more. In copy mode nothing else sends them until the next
// transmit: a sender that spins (the inline engine) asks on every poll.
func (s *Socket) txResumable() bool {
	return s.txBacklog.Load() && atomic.LoadUint32(s.comp.producer) != s.txBacklogComp.Load()
}

// resumeIfDue kicks the frames a kick left on the tx ring once
// completions show room (the transmitting goroutine only).
func (s *Socket) resumeIfDue() error {
	if s.txResumable() {
		return s.resumeTx()
	}
	return nil
}

// resumeTx reaps completions and kicks the frames left on the tx ring
// (the transmitting goroutine only).
func (s *Socket) resumeTx() error {
	s.c.txResumes.Add(1)
	s.reap()
	return s.kick()
}

// Flush kicks the kernel to send frames still on the tx ring and reaps
// completions. Transmit does both; Flush is for a caller that wants the
// ring drained without sending more.
func (s *Socket) Flush() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return ErrClosed
	}
	err := s.kick()
	s.reap()
	return err
}

// AllocTx lends up to len(frames) free transmit chunks to the caller, for
// frames built in place (no copy). Each TxFrame.Buf has the chunk's full
// length. It returns how many were lent.
func (s *Socket) AllocTx(frames []TxFrame) int {
	return s.lendChunks(len(frames), func(k int, addr uint64) {
		frames[k] = TxFrame{Buf: s.chunk(addr)}
	})
}

// lendChunks reaps completions and lends up to n free transmit chunks to
// the caller, passing each to put; it returns how many. With none free it
// first lets the kernel send what waits on the tx ring (as transmit does),
// which may complete some.
func (s *Socket) lendChunks(n int, put func(k int, addr uint64)) int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return 0
	}
	s.reap()
	if len(s.txFree) == 0 && s.kick() == nil {
		s.reap()
	}
	n = min(n, len(s.txFree))
	for k := 0; k < n; k++ {
		addr := s.txFree[len(s.txFree)-1]
		s.txFree = s.txFree[:len(s.txFree)-1]
		s.owner[s.chunkIndex(addr)] = ownTxApp
		put(k, addr)
	}
	return n
}

// chunk returns the chunk at addr, capped at its end.
func (s *Socket) chunk(addr uint64) []byte { return s.umem[addr : addr+s.chunkSize : addr+s.chunkSize] }

// umemAddr returns the UMEM address where b starts, if it starts in the
// UMEM.
func (s *Socket) umemAddr(b []byte) (uint64, bool) {
	if cap(b) == 0 {
		return 0, false
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	base := uintptr(unsafe.Pointer(unsafe.SliceData(s.umem)))
	if p < base || p-base >= uintptr(len(s.umem)) {
		return 0, false
	}
	return uint64(p - base), true
}

// SubmitTx queues frames built in chunks from AllocTx, each of
// len(frames[i].Buf) bytes, and kicks the kernel. The chunks go back to the
// socket. It returns how many were queued (a prefix); the rest are still
// the caller's.
func (s *Socket) SubmitTx(frames []TxFrame) (int, error) {
	n, err := s.submitLent(len(frames), func(k int) []byte { return frames[k].Buf })
	clear(frames[:n])
	return n, err
}

// lentTx reports whether addr is a transmit chunk lent to the caller.
func (s *Socket) lentTx(addr uint64) bool {
	i := s.chunkIndex(addr)
	return addr&(s.chunkSize-1) == 0 && i >= s.rxFrames && i < s.numFrames && s.owner[i] == ownTxApp
}

// lentAddr returns the address of b, which must start a chunk lent by
// AllocTx or LendTx: anything else is a bug of the caller's, and panics.
func (s *Socket) lentAddr(b []byte) uint64 {
	addr, ok := s.umemAddr(b)
	if !ok || !s.lentTx(addr) {
		panic("xdp: transmit chunk not lent, or submitted or given back twice")
	}
	return addr
}

// submitLent queues n frames built in lent chunks, frame(k) being the
// k-th, kicks the kernel, and returns how many it queued (a prefix): it
// stops where the tx ring stays full after a kick, or at a frame that is
// empty or too large (ErrFrameTooLarge).
func (s *Socket) submitLent(n int, frame func(k int) []byte) (int, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return 0, ErrClosed
	}
	k := 0
	var nbytes uint64
	var err error
	for ; k < n; k++ {
		f := frame(k)
		addr := s.lentAddr(f)
		if len(f) == 0 || len(f) > s.maxFrame {
			err = ErrFrameTooLarge
			break
		}
		if s.tx.free(1) == 0 {
			s.tx.submit()
			if err = s.kick(); err != nil || s.tx.free(1) == 0 {
				break
			}
		}
		d := &s.tx.descs[s.tx.local&s.tx.mask]
		d.Addr, d.Len, d.Options = addr, uint32(len(f)), 0
		s.tx.local++
		s.owner[s.chunkIndex(addr)] = ownKernelTx
		nbytes += uint64(len(f))
	}
	s.tx.submit()
	if kerr := s.kick(); kerr != nil && err == nil {
		err = kerr
	}
	s.c.txFrames.Add(uint64(k))
	s.c.txBytes.Add(nbytes)
	return k, err
}

// FreeTx gives chunks from AllocTx back unsent.
func (s *Socket) FreeTx(frames []TxFrame) {
	s.freeLent(len(frames), func(k int) []byte { return frames[k].Buf })
	clear(frames)
}

// freeLent puts n lent chunks, buf(k) for k < n, back on the free list
// unsent (nothing once the socket is closed).
func (s *Socket) freeLent(n int, buf func(k int) []byte) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return
	}
	for k := range n {
		s.freeChunk(s.lentAddr(buf(k)))
	}
}

// freeChunk puts a lent transmit chunk back on the free list.
func (s *Socket) freeChunk(addr uint64) {
	s.owner[s.chunkIndex(addr)] = ownTxFree
	s.txFree = append(s.txFree, addr)
}

// waitTx blocks up to d for the socket to become writable (used by
// Link.WriteBatch when the kernel is behind).
func (s *Socket) waitTx(d time.Duration) {
	s.txPoll[0] = unix.PollFd{Fd: int32(s.fd), Events: unix.POLLOUT}
	s.txTS = unix.NsecToTimespec(int64(d))
	unix.Syscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&s.txPoll[0])), 1, uintptr(unsafe.Pointer(&s.txTS)), 0, 0, 0)
}
