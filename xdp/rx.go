// Receive side of the socket.
//
// Pipeline: the kernel takes chunk addresses from the fill ring, copies (or
// DMAs) a frame into each, and publishes descriptors on the rx ring ->
// Receive hands them out as Frames (a frame spread over several chunks is
// gathered into a per-socket buffer and its chunks go straight back) ->
// the caller processes them in place -> Release puts the chunks back on the
// fill ring. Wait parks the goroutine in the runtime's network poller on
// the socket; Wake ends it by moving the poller's deadline.
// The receiving goroutine owns the fill and rx rings, the receive chunks
// and the gather buffers.

package xdp

import (
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Receive fills frames with up to len(frames) received frames without
// copying and returns how many. It does not block (see Wait). The frames
// belong to the caller until passed to Release; a socket whose receive
// chunks are all held by the caller receives nothing (the kernel counts the
// drops in FillRingEmpty/RxDropped).
func (s *Socket) Receive(frames []Frame) (int, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return 0, ErrClosed
	}
	return s.receive(frames), nil
}

func (s *Socket) receive(frames []Frame) int {
	avail := s.rx.available()
	n := 0
	var nbytes uint64
	refilled := false
	for n < len(frames) && avail > 0 {
		d := s.rx.at(0)
		if d.Options&unix.XDP_PKT_CONTD == 0 {
			s.rx.local++
			avail--
			base := d.Addr &^ (s.chunkSize - 1)
			i := s.chunkIndex(base)
			end := d.Addr + uint64(d.Len)
			if i >= s.rxFrames || s.owner[i] != ownKernelRx || end > uint64(len(s.umem)) || end-base > s.chunkSize {
				s.c.rxBad.Add(1)
				continue
			}
			s.owner[i] = ownApp
			frames[n] = Frame{Data: s.umem[d.Addr:end:end], addr: base, slot: noSlot}
			nbytes += uint64(d.Len)
			n++
			continue
		}
		// A frame in several chunks: find the end of the chain.
		cnt := uint32(1)
		total := int(d.Len)
		for cnt < avail && s.rx.at(cnt-1).Options&unix.XDP_PKT_CONTD != 0 {
			total += int(s.rx.at(cnt).Len)
			cnt++
		}
		if s.rx.at(cnt-1).Options&unix.XDP_PKT_CONTD != 0 {
			break // the rest of the chain is not published yet
		}
		slot := int32(noSlot)
		if total <= s.maxFrame {
			if len(s.gatherFree) == 0 {
				s.c.rxNoGather.Add(1)
				break
			}
			slot = s.gatherFree[len(s.gatherFree)-1]
			s.gatherFree = s.gatherFree[:len(s.gatherFree)-1]
			s.gatherUsed[slot] = true
		} else {
			s.c.rxTooLarge.Add(1)
		}
		var buf []byte
		if slot != noSlot {
			buf = s.gather[int(slot)*s.maxFrame : (int(slot)+1)*s.maxFrame]
		}
		off := 0
		for k := uint32(0); k < cnt; k++ {
			dk := s.rx.at(k)
			base := dk.Addr &^ (s.chunkSize - 1)
			i := s.chunkIndex(base)
			end := dk.Addr + uint64(dk.Len)
			if i >= s.rxFrames || s.owner[i] != ownKernelRx || end > uint64(len(s.umem)) || end-base > s.chunkSize {
				s.c.rxBad.Add(1)
				continue
			}
			if buf != nil {
				off += copy(buf[off:], s.umem[dk.Addr:end])
			}
			s.fill.put(base) // chunk stays with the kernel: straight back
		}
		refilled = true
		s.rx.local += cnt
		avail -= cnt
		if slot == noSlot {
			continue
		}
		s.c.rxMulti.Add(1)
		frames[n] = Frame{Data: buf[:off:off], slot: slot}
		nbytes += uint64(off)
		n++
	}
	s.rx.release()
	if refilled {
		s.submitFill()
	}
	if n > 0 {
		s.c.rxFrames.Add(uint64(n))
		s.c.rxBytes.Add(nbytes)
	}
	return n
}

// Release gives received frames back to the socket. Each Frame must come
// from Receive on this socket and be released once; the slice's entries are
// cleared.
func (s *Socket) Release(frames []Frame) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return
	}
	s.release1(frames)
}

func (s *Socket) release1(frames []Frame) {
	put := false
	for k := range frames {
		f := &frames[k]
		if f.slot != noSlot {
			if f.Data == nil || int(f.slot) >= len(s.gatherUsed) || !s.gatherUsed[f.slot] {
				panic("xdp: Frame released twice or not from Receive")
			}
			s.gatherUsed[f.slot] = false
			s.gatherFree = append(s.gatherFree, f.slot)
		} else {
			i := s.chunkIndex(f.addr)
			if f.Data == nil || i >= s.rxFrames || s.owner[i] != ownApp {
				panic("xdp: Frame released twice or not from Receive")
			}
			s.owner[i] = ownKernelRx
			s.fill.put(f.addr)
			put = true
		}
		*f = Frame{}
	}
	if put {
		s.submitFill()
	}
}

// submitFill publishes the fill ring and kicks the kernel if it asked.
func (s *Socket) submitFill() {
	s.fill.submit()
	if s.fill.needWakeup() {
		s.c.fillWakeups.Add(1)
		unix.RawSyscall6(unix.SYS_RECVFROM, uintptr(s.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	}
}

// pollIfIdle busy-polls the queue (Options.BusyPoll) when the rx ring is
// empty.
func (s *Socket) pollIfIdle() {
	if s.busyPoll && s.rx.available() == 0 {
		s.drivePoll()
	}
}

// drivePoll enters the kernel with a non-blocking receive, which busy-polls
// the queue's NAPI context when Options.BusyPoll is set.
func (s *Socket) drivePoll() {
	s.c.busyPolls.Add(1)
	unix.Syscall6(unix.SYS_RECVFROM, uintptr(s.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
}

// ReceiveCopy copies up to len(bufs) received frames into bufs, sets
// sizes[i] to the length of frame i and returns the number of frames. It
// does not block. A frame longer than its buffer is dropped and counted in
// Stats.RxShortBuffer.
func (s *Socket) ReceiveCopy(bufs [][]byte, sizes []int) (int, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return 0, ErrClosed
	}
	return s.receiveCopy(bufs, sizes), nil
}

func (s *Socket) receiveCopy(bufs [][]byte, sizes []int) int {
	s.pollIfIdle()
	n := 0
	want := min(len(bufs), len(sizes))
	for n < want {
		m := s.receive(s.rxTmp[:min(want-n, len(s.rxTmp))])
		if m == 0 {
			break
		}
		for _, f := range s.rxTmp[:m] {
			if len(f.Data) > len(bufs[n]) {
				s.c.rxShort.Add(1)
				continue
			}
			sizes[n] = copy(bufs[n], f.Data)
			n++
		}
		s.release1(s.rxTmp[:m])
	}
	return n
}

// Wait blocks until a frame is ready to be received, Wake is called, or
// the timeout passes, and reports whether a frame is ready. Signals do not
// end it early. A negative timeout waits without limit; zero only checks.
// It is part of the receive side and leaves the transmit side alone
// (Link.ReadBatch, whose caller does both, also kicks a stuck tx ring),
// except that frames a kick left on the tx ring shorten it to txRetry.
func (s *Socket) Wait(timeout time.Duration) (bool, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return false, ErrClosed
	}
	return s.wait(timeout, false)
}

// txRetry bounds a wait while transmit descriptors are stuck on the ring.
const txRetry = time.Millisecond

// wait is Wait; with tx it also minds the transmit side (the caller is the
// goroutine that transmits), without it it touches only the rx ring's
// shared indices and the poller, so it may run beside a goroutine that
// receives and transmits.
func (s *Socket) wait(timeout time.Duration, tx bool) (bool, error) {
	if s.rx.pending() {
		return true, nil
	}
	if timeout == 0 {
		return false, nil
	}
	s.c.waits.Add(1)
	if tx && s.mode != ModeZeroCopy && s.tx.outstanding() > 0 && (timeout < 0 || timeout > txRetry) {
		// Frames wait on the tx ring because the kernel stopped taking
		// them (its send buffer was full). In copy mode only a kick makes
		// the kernel transmit, and no frame may arrive until these are
		// sent. So kick, and look again soon.
		timeout = txRetry
		s.c.txRetries.Add(1)
		if err := s.kick(); err != nil {
			return false, err
		}
	} else if !tx && s.txBacklog.Load() && (timeout < 0 || timeout > txRetry) {
		// The same, for a waiter beside the transmitting goroutine (an
		// inline engine's loop): it may not kick, but it must not sleep
		// while nobody else may, so it looks again soon and its step's
		// ReadBatch sends the frames.
		timeout = txRetry
		s.c.txRetries.Add(1)
	}
	// The goroutine waits in the runtime's network poller, not in a
	// blocking system call: a frame's arrival then costs a goroutine
	// switch instead of an OS thread wake-up, and a one-CPU process does
	// not wait for the runtime to take its processor back from a thread
	// blocked in the kernel.
	if s.woken.Swap(false) {
		s.c.wakeups.Add(1)
		return s.rx.pending(), nil
	}
	var dl time.Time
	if timeout > 0 {
		dl = time.Now().Add(timeout)
	}
	if err := s.pf.SetReadDeadline(dl); err != nil {
		return false, s.pollErr(err)
	}
	if s.woken.Swap(false) { // Wake raced with the deadline just set
		s.c.wakeups.Add(1)
		return s.rx.pending(), nil
	}
	err := s.rc.Read(s.readyFn)
	switch {
	case s.closed.Load():
		return false, ErrClosed
	case errors.Is(err, os.ErrDeadlineExceeded):
		if s.woken.Swap(false) {
			s.c.wakeups.Add(1)
		}
	case err != nil:
		return false, s.pollErr(err)
	}
	return s.rx.pending(), nil
}

// ready is the poller's test: a frame on the rx ring, or a Wake.
func (s *Socket) ready(uintptr) bool { return s.rx.pending() || s.woken.Load() }

func (s *Socket) pollErr(err error) error {
	if s.closed.Load() {
		return ErrClosed
	}
	return fmt.Errorf("xdp: wait for frames: %w", err)
}

// Wake makes a blocked (or the next) Wait return early. It may be called
// from any goroutine.
func (s *Socket) Wake() {
	if s.closed.Load() {
		return
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if !s.closed.Load() {
		s.wake()
	}
}

// wake ends a wait in the poller by moving its deadline into the past;
// the caller keeps the socket open.
func (s *Socket) wake() {
	if !s.woken.Swap(true) && s.pf != nil {
		_ = s.pf.SetReadDeadline(time.Unix(1, 0))
	}
}
