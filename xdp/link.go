// Link: the frame-batch interface the engine uses for every kind of link,
// implemented over one AF_XDP socket.
//
// Pipeline: engine loop -> ReadBatch (copies frames out of the UMEM, waits
// on the socket and an eventfd when none are ready) and WriteBatch (copies
// frames into transmit chunks). The engine goroutine of the queue owns the
// Link; Wake and Close may come from any goroutine.

package xdp

import (
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sroce/sroce/roce/linkcap"
)

// Link adapts a Socket to the engine's link interface: batches of frames
// copied in and out, a blocking read with a timeout, and a wake-up.
type Link struct {
	s   *Socket
	mtu int
	hw  net.HardwareAddr

	// lendMu is held from a ReadLent that lent frames to its ReleaseLent,
	// and by Close before the socket goes: the UMEM stays mapped while
	// its frames are out.
	lendMu sync.Mutex
	lent   []Frame
	nlent  int

	// copiedRx and copiedTx count the frames ReadBatch, WriteBatch and
	// WriteBatchNow copied (Copies).
	copiedRx, copiedTx atomic.Uint64
}

// OpenLink opens a socket on queue of ifname (see Open) and wraps it.
func OpenLink(ifname string, queue int, opts Options) (*Link, error) {
	s, err := Open(ifname, queue, opts)
	if err != nil {
		return nil, err
	}
	l, err := NewLink(s)
	if err != nil {
		s.Close()
		return nil, err
	}
	return l, nil
}

// NewLink wraps an open socket. Closing the Link closes the socket.
func NewLink(s *Socket) (*Link, error) {
	ifi, err := net.InterfaceByIndex(s.ifindex)
	if err != nil {
		return nil, err
	}
	mtu := ifi.MTU
	// The largest IP packet is bounded by what a frame of MaxFrameSize
	// holds after the Ethernet header and one VLAN tag.
	if lim := s.MaxFrameSize() - 18; mtu > lim {
		mtu = lim
	}
	return &Link{s: s, mtu: mtu, hw: ifi.HardwareAddr}, nil
}

// Socket returns the underlying socket.
func (l *Link) Socket() *Socket { return l.s }

// ReadBatch copies up to len(bufs) received frames into bufs and sets
// sizes[i] to the length of frame i. When no frame is ready it waits up to
// timeout (a negative timeout waits until a frame arrives or Wake is
// called); it returns 0, nil on timeout or wake-up. Frames longer than their
// buffer are dropped and counted (Stats.RxShortBuffer). Frames a kick left
// on the tx ring are kicked again first once completions show room.
func (l *Link) ReadBatch(bufs [][]byte, sizes []int, timeout time.Duration) (int, error) {
	s := l.s
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return 0, ErrClosed
	}
	if err := s.resumeIfDue(); err != nil {
		return 0, err
	}
	if n := s.receiveCopy(bufs, sizes); n > 0 || timeout == 0 {
		l.copiedRx.Add(uint64(n))
		return n, nil
	}
	ready, err := s.wait(timeout, true)
	if err != nil || !ready {
		return 0, err
	}
	n := s.receiveCopy(bufs, sizes)
	l.copiedRx.Add(uint64(n))
	return n, nil
}

// Copies returns how many frames ReadBatch copied out of the UMEM (rx)
// and WriteBatch and WriteBatchNow copied into it (tx): the frames that
// did not take the lending path (roce.Lender). An engine that lends both
// ways copies none.
func (l *Link) Copies() (rx, tx uint64) { return l.copiedRx.Load(), l.copiedTx.Load() }

// WriteBatch transmits frames and returns how many were queued. When the
// kernel falls behind it kicks and waits briefly for transmit chunks to
// complete; if nothing moves for about 100 ms it returns the count so far
// and ErrTxFull. A frame over MaxFrameSize stops the batch with
// ErrFrameTooLarge.
func (l *Link) WriteBatch(frames [][]byte) (int, error) {
	s := l.s
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return 0, ErrClosed
	}
	sent := 0
	idle := 0
	defer func() { l.copiedTx.Add(uint64(sent)) }()
	for sent < len(frames) {
		n, err := s.transmit(frames[sent:])
		sent += n
		if err != nil {
			return sent, err
		}
		if n > 0 {
			idle = 0
			continue
		}
		if idle++; idle > 100 {
			return sent, ErrTxFull
		}
		s.waitTx(time.Millisecond)
	}
	return sent, nil
}

// WaitReady implements roce.ReadyWaiter: it waits up to timeout until a
// frame is on the rx ring, or Wake is called, and takes nothing. It may run
// beside the goroutine that receives and transmits (it leaves the transmit
// side alone: the device retries a stuck transmit itself).
func (l *Link) WaitReady(timeout time.Duration) error {
	s := l.s
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return ErrClosed
	}
	_, err := s.wait(timeout, false)
	return err
}

// Ready implements roce.ReadyWaiter: it reports whether the rx ring holds
// a frame, or frames left on the tx ring can go now (a few atomic loads,
// no system call); ReadBatch then receives the one and kicks the other.
// Any goroutine may ask.
func (l *Link) Ready() bool { return l.s.rx.pending() || l.s.txResumable() }

// WriteBatchNow implements roce.PartialWriter: it queues what the tx ring
// and the free chunks take now, kicks the kernel and returns how many
// frames it took, without waiting for room.
func (l *Link) WriteBatchNow(frames [][]byte) (int, error) {
	s := l.s
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return 0, ErrClosed
	}
	n, err := s.transmit(frames)
	l.copiedTx.Add(uint64(n))
	return n, err
}

// Wake makes a blocked ReadBatch return early (with 0, nil).
func (l *Link) Wake() { l.s.Wake() }

// Caps implements roce.Link: the link waits without reading
// (roce.ReadyWaiter), transmits without waiting for room
// (roce.PartialWriter), lends received frames and transmit buffers in its
// UMEM (roce.Lender), and joins multicast groups on its interface
// (roce.GroupJoiner).
func (l *Link) Caps() linkcap.Caps {
	return linkcap.WaitReady | linkcap.WriteNow | linkcap.Lend | linkcap.Groups
}

// MTU returns the largest IP packet the link carries: the interface MTU,
// capped by the socket's MaxFrameSize less an Ethernet header and a VLAN
// tag.
func (l *Link) MTU() int { return l.mtu }

// HardwareAddr returns the interface's MAC address.
func (l *Link) HardwareAddr() net.HardwareAddr { return l.hw }

// Close closes the socket (see Socket.Close).
func (l *Link) Close() error {
	l.lendMu.Lock()
	defer l.lendMu.Unlock()
	return l.s.Close()
}

// ReadLent implements roce.Lender: it returns up to len(frames)
// received frames in place (in the UMEM, or in a gather buffer for a
// frame that came in several chunks), without waiting and without a
// copy. They are the caller's until ReleaseLent, which must come before
// the next ReadLent; Close waits for it.
func (l *Link) ReadLent(frames [][]byte) (int, error) {
	s := l.s
	l.lendMu.Lock()
	s.mu.RLock()
	if s.closed.Load() {
		s.mu.RUnlock()
		l.lendMu.Unlock()
		return 0, ErrClosed
	}
	if err := s.resumeIfDue(); err != nil {
		s.mu.RUnlock()
		l.lendMu.Unlock()
		return 0, err
	}
	s.pollIfIdle()
	if len(l.lent) < len(frames) {
		l.lent = make([]Frame, len(frames))
	}
	n := s.receive(l.lent[:len(frames)])
	s.mu.RUnlock()
	if n == 0 {
		l.lendMu.Unlock()
		return 0, nil
	}
	for i := 0; i < n; i++ {
		frames[i] = l.lent[i].Data
	}
	l.nlent = n
	return n, nil
}

// ReleaseLent implements roce.Lender: the frames of the last
// ReadLent go back to the kernel. lendMu, held since that ReadLent, keeps
// Close out, so the socket is open.
func (l *Link) ReleaseLent() {
	if l.nlent == 0 {
		return
	}
	l.s.release1(l.lent[:l.nlent])
	l.nlent = 0
	l.lendMu.Unlock()
}

// TxBufSize implements roce.Lender: a lent transmit buffer is one UMEM
// chunk. A transmitted frame has no headroom, so it may fill the chunk;
// the receive headroom that makes MaxFrameSize smaller without
// multi-buffer does not apply (NewLink caps the MTU so that no frame
// exceeds MaxFrameSize, which SubmitLent checks as Transmit does).
func (l *Link) TxBufSize() int { return l.s.ChunkSize() }

// LendTx implements roce.Lender: it lends up to len(bufs) free transmit
// chunks, each a whole chunk (at least TxBufSize bytes), for frames built where the kernel sends
// them from. It reaps completions first and never waits.
func (l *Link) LendTx(bufs [][]byte) int {
	return l.s.lendChunks(len(bufs), func(k int, addr uint64) { bufs[k] = l.s.chunk(addr) })
}

// SubmitLent implements roce.Lender: it queues frames, each the start
// of a chunk from LendTx, kicks the kernel, and returns how many it took
// (a prefix) without waiting for room. A frame that is not a lent chunk
// is a bug of the caller's and panics.
func (l *Link) SubmitLent(frames [][]byte) (int, error) {
	return l.s.submitLent(len(frames), func(k int) []byte { return frames[k] })
}

// ReturnTx implements roce.Lender: chunks from LendTx go back to the
// free list unsent.
func (l *Link) ReturnTx(bufs [][]byte) {
	l.s.freeLent(len(bufs), func(k int) []byte { return bufs[k] })
}
