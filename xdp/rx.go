// Receive side of the socket.
//
// Pipeline: the kernel takes chunk addresses from the fill ring, copies (or
// DMAs) a frame into each, and publishes descriptors on the rx ring ->
// Receive hands them out as Frames (a frame spread over several chunks is
// gathered into a per-socket buffer and its chunks go straight back) ->
// the caller processes them in place -> Release puts the chunks back on the
// fill ring. Wait blocks in ppoll(2) on the socket and the wake-up eventfd.
// The receiving goroutine owns the fill and rx rings, the receive chunks
// and the gather buffers.

package xdp

import (
	"fmt"
	"time"
	"unsafe"

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
		unix.Syscall6(unix.SYS_RECVFROM, uintptr(s.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	}
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
// end it early. A negative
// timeout waits without limit; zero only checks. It is part of the receive
// side.
func (s *Socket) Wait(timeout time.Duration) (bool, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return false, ErrClosed
	}
	return s.wait(timeout)
}

// txRetry bounds a wait while transmit descriptors are stuck on the ring.
const txRetry = time.Millisecond

func (s *Socket) wait(timeout time.Duration) (bool, error) {
	if s.rx.available() > 0 {
		return true, nil
	}
	if timeout == 0 {
		return false, nil
	}
	s.c.waits.Add(1)
	if s.mode != ModeZeroCopy && s.tx.outstanding() > 0 && (timeout < 0 || timeout > txRetry) {
		// Frames wait on the tx ring because the kernel stopped taking
		// them (its send buffer was full). In copy mode poll(2) makes the
		// kernel transmit, and nothing else would: no frame may arrive
		// until these are sent. So poll again soon.
		timeout = txRetry
		s.c.txRetries.Add(1)
	}
	var start time.Time
	if timeout > 0 {
		start = time.Now()
	}
	for {
		s.rxPoll[0] = unix.PollFd{Fd: int32(s.fd), Events: unix.POLLIN}
		s.rxPoll[1] = unix.PollFd{Fd: int32(s.efd), Events: unix.POLLIN}
		var tsp uintptr
		if timeout > 0 {
			left := timeout - time.Since(start)
			if left <= 0 {
				return false, nil
			}
			s.rxTS = unix.NsecToTimespec(int64(left))
			tsp = uintptr(unsafe.Pointer(&s.rxTS))
		}
		_, _, e := unix.Syscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&s.rxPoll[0])), 2, tsp, 0, 0, 0)
		if e == unix.EINTR {
			// A signal (the Go runtime preempts goroutines with SIGURG):
			// wait out the rest of the timeout.
			if s.closed.Load() {
				return false, ErrClosed
			}
			continue
		}
		if e != 0 {
			return false, fmt.Errorf("xdp: ppoll: %w", e)
		}
		break
	}
	if s.rxPoll[1].Revents&unix.POLLIN != 0 {
		s.c.wakeups.Add(1)
		unix.Syscall(unix.SYS_READ, uintptr(s.efd), uintptr(unsafe.Pointer(&s.efdBuf[0])), 8)
	}
	if s.closed.Load() {
		return false, ErrClosed
	}
	return s.rx.available() > 0, nil
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

// wake writes the eventfd; the caller keeps it open.
func (s *Socket) wake() {
	unix.Syscall(unix.SYS_WRITE, uintptr(s.efd), uintptr(unsafe.Pointer(&s.wakeVal[0])), 8)
}
