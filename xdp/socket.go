// The AF_XDP socket: set-up, bind, statistics, close (receive side in rx.go,
// transmit side in tx.go).
//
// Pipeline: NIC queue -> XDP steering program -> rx ring -> Receive (Frames
// in UMEM, owned by the caller until Release) -> engine; engine -> Transmit
// (copied into free tx chunks) -> tx ring -> kick -> kernel -> completion ring
// -> reaped back to the tx free list. The receive side owns the fill and rx
// rings and the receive chunks; the transmit side owns the tx and completion
// rings and the transmit chunks. The owner table records, per chunk, which
// of these places holds it.

package xdp

import (
	"errors"
	"fmt"
	"math/bits"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/sroce/sroce/bpf"
	"golang.org/x/sys/unix"
)

// Mode is the data path of a bound socket.
type Mode int

const (
	// ModeCopy: the kernel copies frames between its buffers and the UMEM.
	ModeCopy Mode = iota + 1
	// ModeZeroCopy: the driver DMAs straight into and out of the UMEM.
	ModeZeroCopy
)

// String returns "copy" or "zero-copy".
func (m Mode) String() string {
	switch m {
	case ModeCopy:
		return "copy"
	case ModeZeroCopy:
		return "zero-copy"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Errors returned by Socket methods.
var (
	// ErrClosed is returned by methods of a closed Socket or Link.
	ErrClosed = errors.New("xdp: socket closed")
	// ErrFrameTooLarge is returned by Transmit for a frame longer than
	// MaxFrameSize (or empty); the frames before it were queued.
	ErrFrameTooLarge = errors.New("xdp: frame larger than MaxFrameSize")
	// ErrTxFull is returned by Link.WriteBatch when the kernel accepted no
	// frame for a while.
	ErrTxFull = errors.New("xdp: transmit ring stalled")
)

// Options tune Open. The zero value is a good default.
type Options struct {
	// NumFrames is the number of UMEM chunks, half for receiving and half
	// for transmitting. Default 4096. Rounded up to a power of two.
	NumFrames int
	// ChunkSize is the UMEM chunk size: 2048 or 4096 (the page size, the
	// largest the kernel accepts). Zero means the page size.
	ChunkSize int
	// MaxFrameSize caps the frames of a multi-buffer socket. Zero means
	// DefaultMaxFrameSize.
	MaxFrameSize int
	// NoMultiBuffer does not request XDP_USE_SG; frames are then limited
	// to one chunk (ChunkSize - 256 bytes) and the kernel drops longer
	// ones, counting them in Stats.RxDropped.
	NoMultiBuffer bool
	// CopyOnly skips the zero-copy attempt.
	CopyOnly bool
	// RxBatch is the largest batch ReceiveCopy and Link.ReadBatch gather,
	// and the number of gather buffers for multi-buffer frames. Default 64.
	RxBatch int
	// BindTimeout bounds the retries of bind while the kernel still holds
	// the queue for a socket closed moments ago (EBUSY). Default 2s.
	BindTimeout time.Duration
	// Steering is a steering program already attached to the interface
	// (shared by the sockets of several queues). Nil: Open attaches its
	// own, with AttachMode, and Close detaches it; an interface takes one
	// program, so sockets on several queues need a shared one (OpenAll).
	Steering *bpf.Steering
	// NoSteering attaches no program and registers the socket nowhere; the
	// caller redirects frames to it (see Socket.FD).
	NoSteering bool
	// AttachMode is the attach mode of a program Open attaches.
	AttachMode bpf.AttachMode
	// BusyPoll, when positive, asks the kernel to busy-poll the queue's
	// NAPI context for up to this long in each receive call instead of
	// waiting for its interrupt (SO_BUSY_POLL, with SO_PREFER_BUSY_POLL
	// and SO_BUSY_POLL_BUDGET): receives with an empty ring then enter the
	// kernel to drive it. For a busy-polling engine. SO_PREFER_BUSY_POLL
	// and a budget above the default need CAP_NET_ADMIN; what was refused
	// is in Stats.BusyPoll.
	BusyPoll time.Duration
	// BusyPollBudget is the packets per busy poll (default 64).
	BusyPollBudget int
}

// Owners of a UMEM chunk.
const (
	ownKernelRx byte = iota + 1 // in the fill ring, the kernel, or the rx ring
	ownApp                      // received frame held by the caller
	ownTxFree                   // on the transmit free list
	ownTxApp                    // lent to the caller (AllocTx, Link.LendTx)
	ownKernelTx                 // in the tx ring, the kernel, or the completion ring
)

// noSlot marks a Frame that points into the UMEM, not a gather buffer.
const noSlot = -1

// Frame is a received frame. Data points into the socket's UMEM (or, for a
// frame the kernel spread over several chunks, into a gather buffer of the
// socket) and is valid until the Frame is passed to Release.
type Frame struct {
	Data []byte
	addr uint64 // chunk base address
	slot int32  // gather buffer index, or noSlot
}

// TxFrame is a transmit chunk lent to the caller by AllocTx. The caller
// writes a frame at the start of Buf, reslices Buf to the frame's length and
// passes it to SubmitTx (or gives it back with FreeTx).
type TxFrame struct {
	Buf []byte
}

// Stats are the socket's counters: the kernel's (XDP_STATISTICS) and its own.
type Stats struct {
	// Kernel counters.
	RxDropped      uint64 // frames dropped: too large, or no fill buffer
	RxInvalidDescs uint64 // bad addresses in the fill ring
	TxInvalidDescs uint64 // bad descriptors in the tx ring
	RxRingFull     uint64 // frames dropped because the rx ring was full
	FillRingEmpty  uint64 // times the kernel found the fill ring empty
	TxRingEmpty    uint64 // times the kernel found the tx ring empty
	KernelStatsErr error  // why the kernel counters are missing, if they are

	// The socket's own counters.
	RxFrames        uint64 // frames handed to the caller
	RxBytes         uint64
	RxMultiBuffer   uint64 // frames gathered from several chunks
	RxTooLarge      uint64 // frames over MaxFrameSize, dropped here
	RxShortBuffer   uint64 // frames dropped by ReceiveCopy: buffer too small
	RxNoGather      uint64 // times Receive stopped: all gather buffers in use
	RxBadDesc       uint64 // descriptors naming a chunk the kernel did not own
	TxFrames        uint64 // frames queued on the tx ring
	TxBytes         uint64
	TxCompleted     uint64 // chunks back from the completion ring
	TxKicks         uint64 // sendto calls that kicked the kernel
	TxKickErrors    uint64 // kicks answered with an error other than EAGAIN
	TxStalls        uint64 // kicks after which the kernel consumed nothing
	TxRetries       uint64 // waits shortened because frames were stuck on the tx ring
	TxResumes       uint64 // kicks for frames left on the tx ring, once completions showed room
	FillWakeups     uint64 // fill ring kicks (need-wakeup set)
	Waits           uint64 // Wait calls that blocked
	Wakeups         uint64 // Wait calls ended by Wake
	BindRetries     uint64 // bind attempts refused with EBUSY before success
	ZeroCopyRefusal string // why zero-copy was not used ("" if it is)
	BusyPoll        string // "off", "on", or what the kernel refused
	BusyPolls       uint64 // receive calls that entered the kernel to busy-poll
}

type counters struct {
	rxFrames, rxBytes, rxMulti, rxTooLarge, rxShort, rxNoGather, rxBad atomic.Uint64
	txFrames, txBytes, txCompleted, txKicks, txKickErr, txStalls       atomic.Uint64
	txRetries, txResumes                                               atomic.Uint64
	fillWakeups, waits, wakeups, busyPolls                             atomic.Uint64
}

// Socket is an AF_XDP socket bound to one queue of one interface.
type Socket struct {
	fd    int
	pf    *os.File        // a duplicate of fd in the runtime's poller
	rc    syscall.RawConn // pf's raw access, where Wait blocks
	woken atomic.Bool     // Wake was called; the next or current Wait ends
	// txBacklog says the last kick left frames on the tx ring (copy mode:
	// the driver's queue or the send buffer was full). The kernel does
	// not come back for them; a completion means room again.
	txBacklog atomic.Bool
	// txBacklogComp is the completion ring's producer index when the kick
	// that left the backlog began; kickComp is that of the latest kick.
	txBacklogComp atomic.Uint32
	kickComp      uint32
	readyFn       func(uintptr) bool
	ifname        string
	ifindex       int
	queue         int
	mode          Mode
	sg            bool
	attach        bpf.AttachMode

	umem       []byte
	chunkSize  uint64
	chunkShift uint
	rxFrameLen int // bytes one chunk receives: chunk - 256
	maxFrame   int
	numFrames  int
	rxFrames   int // chunks [0, rxFrames) receive, the rest transmit
	owner      []byte

	fill addrRing
	comp addrRing
	rx   descRing
	tx   descRing

	// Receive side.
	gather     []byte // RxBatch buffers of maxFrame bytes
	gatherFree []int32
	gatherUsed []bool
	rxTmp      []Frame

	// Transmit side.
	txFree []uint64
	txPoll [1]unix.PollFd
	txTS   unix.Timespec

	steering    *bpf.Steering
	ownSteering bool

	mu          sync.RWMutex // held shared by every operation, exclusively by Close
	closed      atomic.Bool
	bindRetries uint64
	zcRefusal   string
	// busyPoll: receives with an empty ring enter the kernel to drive the
	// queue's NAPI (Options.BusyPoll); busyPollState says what was set.
	busyPoll      bool
	busyPollState string
	c             counters
}

const xdpPacketHeadroom = unix.XDP_PACKET_HEADROOM

// DefaultMaxFrameSize is the frame size limit of a multi-buffer socket
// unless Options.MaxFrameSize says otherwise: the receive space of two
// 4096-byte chunks, 2*(4096-256). It holds a RoCEv2 frame at path MTU 4096
// (about 4.2 KB) with room to spare, and sizes the per-socket gather
// buffers (RxBatch of them).
const DefaultMaxFrameSize = 2 * (4096 - xdpPacketHeadroom)

// Open creates an AF_XDP socket on queue of the interface ifname (looked up
// in the calling thread's network namespace), registers its UMEM and rings,
// binds it (zero-copy first, then copy mode) and steers RoCEv2 frames of
// that queue to it.
func Open(ifname string, queue int, opts Options) (*Socket, error) {
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		return nil, fmt.Errorf("xdp: %w", err)
	}
	s := &Socket{fd: -1, ifname: ifname, ifindex: ifi.Index, queue: queue}
	if err := s.open(opts); err != nil {
		s.release()
		return nil, fmt.Errorf("xdp: open %s queue %d: %w", ifname, queue, err)
	}
	return s, nil
}

func (s *Socket) open(opts Options) error {
	if s.queue < 0 {
		return fmt.Errorf("negative queue")
	}
	n := opts.NumFrames
	if n <= 0 {
		n = 4096
	}
	if n < 4 {
		n = 4
	}
	s.numFrames = 1 << bits.Len(uint(n-1))
	s.rxFrames = s.numFrames / 2

	if err := s.allocUMEM(opts.ChunkSize); err != nil {
		return err
	}
	s.rxFrameLen = int(s.chunkSize) - xdpPacketHeadroom
	s.owner = make([]byte, s.numFrames)

	rxBatch := opts.RxBatch
	if rxBatch <= 0 {
		rxBatch = 64
	}
	s.rxTmp = make([]Frame, rxBatch)
	s.txFree = make([]uint64, 0, s.numFrames-s.rxFrames)

	if err := s.bind(opts); err != nil {
		return err
	}
	if err := s.openPoller(); err != nil {
		return err
	}
	s.setBusyPoll(opts)
	if s.sg {
		s.maxFrame = opts.MaxFrameSize
		if s.maxFrame <= 0 {
			s.maxFrame = DefaultMaxFrameSize
		}
		// The kernel chains at most MAX_SKB_FRAGS+1 = 18 buffers.
		if limit := 18 * s.rxFrameLen; s.maxFrame > limit {
			s.maxFrame = limit
		}
		s.gather = make([]byte, rxBatch*s.maxFrame)
		s.gatherFree = make([]int32, rxBatch)
		s.gatherUsed = make([]bool, rxBatch)
		for i := range s.gatherFree {
			s.gatherFree[i] = int32(rxBatch - 1 - i)
		}
	} else {
		s.maxFrame = s.rxFrameLen
	}

	switch {
	case opts.NoSteering:
	case opts.Steering != nil:
		s.steering = opts.Steering
	default:
		st, err := bpf.Attach(s.ifname, bpf.Options{Queues: s.queue + 1, Mode: opts.AttachMode})
		if err != nil {
			return err
		}
		s.steering, s.ownSteering = st, true
	}
	if s.steering != nil {
		s.attach = s.steering.Mode()
		if err := s.steering.Register(s.queue, s.fd); err != nil {
			return err
		}
	}
	return nil
}

// allocUMEM maps the packet memory. The kernel takes chunks of 2048 bytes
// up to the page size, powers of two (larger ones get EINVAL, huge pages or
// not, on 6.18).
func (s *Socket) allocUMEM(chunk int) error {
	page := os.Getpagesize()
	if chunk == 0 {
		chunk = page
	}
	if chunk < 2048 || chunk > page || chunk&(chunk-1) != 0 {
		return fmt.Errorf("chunk size %d: need a power of two from 2048 to the page size %d", chunk, page)
	}
	mem, err := unix.Mmap(-1, 0, s.numFrames*chunk, unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return fmt.Errorf("mmap UMEM: %w", err)
	}
	s.umem, s.chunkSize = mem, uint64(chunk)
	s.chunkShift = uint(bits.TrailingZeros(uint(chunk)))
	return nil
}

// bind creates and binds the socket, trying zero-copy before copy mode and
// multi-buffer before single-buffer, retrying EBUSY with backoff.
func (s *Socket) bind(opts Options) error {
	type attempt struct {
		zc, sg bool
	}
	var attempts []attempt
	sgs := []bool{true, false}
	if opts.NoMultiBuffer {
		sgs = []bool{false}
	}
	if !opts.CopyOnly {
		for _, sg := range sgs {
			attempts = append(attempts, attempt{true, sg})
		}
	} else {
		s.zcRefusal = "copy mode requested"
	}
	for _, sg := range sgs {
		attempts = append(attempts, attempt{false, sg})
	}
	timeout := opts.BindTimeout
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	deadline := time.Now().Add(timeout)
	var errs []error
	for _, a := range attempts {
		flags := uint16(unix.XDP_USE_NEED_WAKEUP)
		if a.zc {
			flags |= unix.XDP_ZEROCOPY
		} else {
			flags |= unix.XDP_COPY
		}
		if a.sg {
			flags |= unix.XDP_USE_SG
		}
		backoff := time.Millisecond
		for {
			err := s.setupSocket(flags)
			if err == nil {
				s.sg = a.sg
				s.mode = ModeCopy
				if s.zeroCopyActive() {
					s.mode = ModeZeroCopy
				}
				return nil
			}
			s.teardownSocket()
			if errors.Is(err, unix.EBUSY) && time.Now().Before(deadline) {
				s.bindRetries++
				time.Sleep(backoff)
				if backoff < 32*time.Millisecond {
					backoff *= 2
				}
				continue
			}
			errs = append(errs, fmt.Errorf("zerocopy=%v multibuffer=%v: %w", a.zc, a.sg, err))
			if a.zc && s.zcRefusal == "" {
				s.zcRefusal = err.Error()
			}
			if errors.Is(err, unix.EBUSY) {
				return errors.Join(errs...)
			}
			break
		}
	}
	return errors.Join(errs...)
}

// setupSocket makes one attempt: a new socket, UMEM registration, rings,
// a full fill ring, bind.
func (s *Socket) setupSocket(flags uint16) error {
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket(AF_XDP): %w", err)
	}
	s.fd = fd
	s.sizeSendBuffer()
	reg := unix.XDPUmemReg{
		Addr: uint64(uintptr(unsafe.Pointer(&s.umem[0]))),
		Len:  uint64(s.numFrames) * s.chunkSize,
		Size: uint32(s.chunkSize),
	}
	if err := setsockopt(fd, unix.XDP_UMEM_REG, unsafe.Pointer(&reg), unsafe.Sizeof(reg)); err != nil {
		return fmt.Errorf("XDP_UMEM_REG (chunk %d): %w", s.chunkSize, err)
	}
	rxN := uint32(s.rxFrames)
	txN := uint32(s.numFrames - s.rxFrames)
	for _, o := range []struct {
		opt  int
		size uint32
	}{
		{unix.XDP_UMEM_FILL_RING, rxN},
		{unix.XDP_UMEM_COMPLETION_RING, txN},
		{unix.XDP_RX_RING, rxN},
		{unix.XDP_TX_RING, txN},
	} {
		if err := unix.SetsockoptInt(fd, unix.SOL_XDP, o.opt, int(o.size)); err != nil {
			return fmt.Errorf("ring size option %d: %w", o.opt, err)
		}
	}
	var off unix.XDPMmapOffsets
	if err := getsockopt(fd, unix.XDP_MMAP_OFFSETS, unsafe.Pointer(&off), unsafe.Sizeof(off)); err != nil {
		return fmt.Errorf("XDP_MMAP_OFFSETS: %w", err)
	}
	if s.fill, err = mapAddrRing(fd, unix.XDP_UMEM_PGOFF_FILL_RING, off.Fr, rxN); err != nil {
		return err
	}
	if s.comp, err = mapAddrRing(fd, unix.XDP_UMEM_PGOFF_COMPLETION_RING, off.Cr, txN); err != nil {
		return err
	}
	if s.rx, err = mapDescRing(fd, unix.XDP_PGOFF_RX_RING, off.Rx, rxN); err != nil {
		return err
	}
	if s.tx, err = mapDescRing(fd, unix.XDP_PGOFF_TX_RING, off.Tx, txN); err != nil {
		return err
	}

	// Hand every receive chunk to the kernel; put every transmit chunk on
	// the free list.
	for i := 0; i < s.rxFrames; i++ {
		s.fill.put(uint64(i) << s.chunkShift)
		s.owner[i] = ownKernelRx
	}
	s.fill.submit()
	s.txFree = s.txFree[:0]
	for i := s.numFrames - 1; i >= s.rxFrames; i-- {
		s.txFree = append(s.txFree, uint64(i)<<s.chunkShift)
		s.owner[i] = ownTxFree
	}

	sa := unix.SockaddrXDP{Flags: flags, Ifindex: uint32(s.ifindex), QueueID: uint32(s.queue)}
	if err := unix.Bind(fd, &sa); err != nil {
		return fmt.Errorf("bind: %w", err)
	}
	return nil
}

// sizeSendBuffer makes the socket's send buffer hold every transmit
// chunk. In copy mode each frame handed to the driver is charged to it
// until the driver frees the frame; with the default (net.core.wmem_default,
// 208 KiB: about 90 frames on virtio-net) the kernel stops taking frames
// from the tx ring while a burst is in flight, which a slow guest turns
// into stalls. SO_SNDBUFFORCE needs CAP_NET_ADMIN; without it SO_SNDBUF
// is capped at net.core.wmem_max. Both failing leaves the default, and
// the stall is then bounded by Wait's transmit retry.
func (s *Socket) sizeSendBuffer() {
	want := (s.numFrames - s.rxFrames) * int(s.chunkSize) * 2
	if unix.SetsockoptInt(s.fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, want) != nil {
		unix.SetsockoptInt(s.fd, unix.SOL_SOCKET, unix.SO_SNDBUF, want)
	}
}

// setBusyPoll applies Options.BusyPoll. The socket works without it, so
// refusals are recorded, not returned.
func (s *Socket) setBusyPoll(opts Options) {
	s.busyPollState = "off"
	if opts.BusyPoll <= 0 {
		return
	}
	budget := opts.BusyPollBudget
	if budget <= 0 {
		budget = 64
	}
	us := int(max(opts.BusyPoll/time.Microsecond, 1))
	var refused []string
	for _, o := range []struct {
		name string
		opt  int
		val  int
	}{
		{"SO_PREFER_BUSY_POLL", unix.SO_PREFER_BUSY_POLL, 1},
		{"SO_BUSY_POLL", unix.SO_BUSY_POLL, us},
		{"SO_BUSY_POLL_BUDGET", unix.SO_BUSY_POLL_BUDGET, budget},
	} {
		if err := unix.SetsockoptInt(s.fd, unix.SOL_SOCKET, o.opt, o.val); err != nil {
			refused = append(refused, fmt.Sprintf("%s: %v", o.name, err))
		}
	}
	if len(refused) == 0 {
		s.busyPollState = "on"
	} else {
		s.busyPollState = "refused: " + strings.Join(refused, "; ")
	}
	s.busyPoll = len(refused) < 3
}

// openPoller registers a duplicate of the bound socket's descriptor with
// the runtime's network poller, where Wait blocks (the socket is set
// non-blocking; AF_XDP's poll reports POLLIN while the rx ring holds
// frames).
func (s *Socket) openPoller() error {
	fd, err := unix.FcntlInt(uintptr(s.fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("dup: %w", err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return fmt.Errorf("non-blocking: %w", err)
	}
	s.pf = os.NewFile(uintptr(fd), "xsk")
	if err := s.pf.SetReadDeadline(time.Time{}); err != nil {
		return fmt.Errorf("the runtime poller does not take the socket: %w", err)
	}
	if s.rc, err = s.pf.SyscallConn(); err != nil {
		return fmt.Errorf("the runtime poller does not take the socket: %w", err)
	}
	s.readyFn = s.ready
	return nil
}

func (s *Socket) teardownSocket() {
	s.fill.unmap()
	s.comp.unmap()
	s.rx.unmap()
	s.tx.unmap()
	if s.fd >= 0 {
		unix.Close(s.fd)
		s.fd = -1
	}
}

func (s *Socket) zeroCopyActive() bool {
	var o struct{ flags uint32 }
	if err := getsockopt(s.fd, unix.XDP_OPTIONS, unsafe.Pointer(&o), unsafe.Sizeof(o)); err != nil {
		return false
	}
	return o.flags&unix.XDP_OPTIONS_ZEROCOPY != 0
}

func setsockopt(fd, opt int, p unsafe.Pointer, size uintptr) error {
	_, _, e := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_XDP, uintptr(opt), uintptr(p), size, 0)
	if e != 0 {
		return e
	}
	return nil
}

func getsockopt(fd, opt int, p unsafe.Pointer, size uintptr) error {
	l := uint32(size)
	_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_XDP, uintptr(opt), uintptr(p), uintptr(unsafe.Pointer(&l)), 0)
	if e != 0 {
		return e
	}
	return nil
}

// FD returns the socket's file descriptor (for an XSKMAP of the caller's).
func (s *Socket) FD() int { return s.fd }

// Mode returns ModeZeroCopy or ModeCopy.
func (s *Socket) Mode() Mode { return s.mode }

// AttachMode returns how the steering program (its own or the shared one)
// is attached, driver or generic; AttachAuto with Options.NoSteering.
func (s *Socket) AttachMode() bpf.AttachMode { return s.attach }

// MultiBuffer reports whether the socket was bound with XDP_USE_SG.
func (s *Socket) MultiBuffer() bool { return s.sg }

// ChunkSize returns the UMEM chunk size.
func (s *Socket) ChunkSize() int { return int(s.chunkSize) }

// MaxFrameSize returns the longest frame (Ethernet header to the last byte
// before the FCS) the socket can receive and transmit.
func (s *Socket) MaxFrameSize() int { return s.maxFrame }

// Interface returns the interface name and index.
func (s *Socket) Interface() (string, int) { return s.ifname, s.ifindex }

// Queue returns the queue the socket is bound to.
func (s *Socket) Queue() int { return s.queue }

func (s *Socket) chunkIndex(addr uint64) int { return int(addr >> s.chunkShift) }

// Stats returns the socket's counters.
func (s *Socket) Stats() Stats {
	st := Stats{
		RxFrames:        s.c.rxFrames.Load(),
		RxBytes:         s.c.rxBytes.Load(),
		RxMultiBuffer:   s.c.rxMulti.Load(),
		RxTooLarge:      s.c.rxTooLarge.Load(),
		RxShortBuffer:   s.c.rxShort.Load(),
		RxNoGather:      s.c.rxNoGather.Load(),
		RxBadDesc:       s.c.rxBad.Load(),
		TxFrames:        s.c.txFrames.Load(),
		TxBytes:         s.c.txBytes.Load(),
		TxCompleted:     s.c.txCompleted.Load(),
		TxKicks:         s.c.txKicks.Load(),
		TxKickErrors:    s.c.txKickErr.Load(),
		TxStalls:        s.c.txStalls.Load(),
		TxRetries:       s.c.txRetries.Load(),
		TxResumes:       s.c.txResumes.Load(),
		FillWakeups:     s.c.fillWakeups.Load(),
		Waits:           s.c.waits.Load(),
		Wakeups:         s.c.wakeups.Load(),
		BindRetries:     s.bindRetries,
		ZeroCopyRefusal: s.zcRefusal,
		BusyPoll:        s.busyPollState,
		BusyPolls:       s.c.busyPolls.Load(),
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		st.KernelStatsErr = ErrClosed
		return st
	}
	var ks unix.XDPStatistics
	if err := getsockopt(s.fd, unix.XDP_STATISTICS, unsafe.Pointer(&ks), unsafe.Sizeof(ks)); err != nil {
		st.KernelStatsErr = err
		return st
	}
	st.RxDropped = ks.Rx_dropped
	st.RxInvalidDescs = ks.Rx_invalid_descs
	st.TxInvalidDescs = ks.Tx_invalid_descs
	st.RxRingFull = ks.Rx_ring_full
	st.FillRingEmpty = ks.Rx_fill_ring_empty_descs
	st.TxRingEmpty = ks.Tx_ring_empty_descs
	return st
}

// Close removes the socket from the steering map, detaches a steering
// program Open attached, closes the socket and unmaps its rings and UMEM.
// Frames from Receive and TxFrames from AllocTx must not be used after
// Close. A Wait in progress returns ErrClosed.
func (s *Socket) Close() error {
	if s.closed.Swap(true) {
		return ErrClosed
	}
	s.wake()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.release()
}

func (s *Socket) release() error {
	var errs []error
	if s.steering != nil && s.fd >= 0 {
		errs = append(errs, s.steering.Unregister(s.queue))
	}
	if s.ownSteering {
		errs = append(errs, s.steering.Close())
	}
	s.steering = nil
	s.teardownSocket()
	if s.umem != nil {
		errs = append(errs, unix.Munmap(s.umem))
		s.umem = nil
	}
	if s.pf != nil {
		s.pf.Close()
		s.pf = nil
	}
	return errors.Join(errs...)
}

// ownerCounts returns how many chunks each owner holds (for tests).
func (s *Socket) ownerCounts() map[byte]int {
	m := map[byte]int{}
	for _, o := range s.owner {
		m[o]++
	}
	return m
}
