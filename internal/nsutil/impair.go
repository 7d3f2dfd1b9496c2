package nsutil

// A user-space stand-in for netem, for kernels built without sch_netem.
//
//	ns A: veth0 <--> ma  [ns M: forwarder]  mb <--> veth1 :ns B
//
// The forwarder reads every frame arriving on ma with an AF_PACKET socket,
// applies the impairment (loss, duplication, corruption, delay with jitter,
// reordering) and writes it to mb, and the same from mb to ma. A and B see
// one Ethernet segment (ARP and neighbour discovery pass through), and M
// has no addresses and IPv6 off, so it takes no part in the traffic.
//
// Frames carry their virtio-net header through (PACKET_VNET_HDR on both
// sockets): a frame whose checksum the sender left to offload
// (CHECKSUM_PARTIAL, as TCP and UDP sockets send over veth) keeps that
// state, and a GSO frame larger than the MTU is passed whole, so the
// kernel completes both on the other side as it would on a plain veth.

import (
	"container/heap"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// vnetHdrLen is sizeof(struct virtio_net_hdr).
const vnetHdrLen = 10

// forwarderRcvBuf is the receive buffer of each forwarder socket.
const forwarderRcvBuf = 16 << 20

// ForwarderStats counts what a forwarder did, over both directions.
type ForwarderStats struct {
	Received   uint64 // frames read
	Sent       uint64 // frames written (duplicates included)
	Lost       uint64 // dropped by Loss
	Duplicated uint64 // extra copies sent by Duplicate
	Corrupted  uint64 // frames with a flipped bit
	Reordered  uint64 // frames sent ahead of delayed ones
	QueueDrops uint64 // dropped because Limit frames were waiting
	// SocketDrops are frames the kernel dropped because the forwarder's
	// receive queue was full (PACKET_STATISTICS): losses of the stand-in
	// itself, on top of Loss.
	SocketDrops uint64
	Errors      uint64 // failed writes
}

// Forwarder is the user-space impairment between two interfaces of one
// namespace (see NewForwarder).
type Forwarder struct {
	n     Netem
	socks [2]*os.File
	rcs   [2]syscall.RawConn
	wg    sync.WaitGroup
	done  chan struct{}
	once  sync.Once

	received, sent, lost, duplicated, corrupted, reordered, queueDrops, errs atomic.Uint64
	socketDrops                                                              atomic.Uint64
}

// NewForwarder starts forwarding frames between interfaces ifA and ifB of
// namespace ns in both directions, each direction impaired by n the way
// netem would impair it on egress. Seed, if nonzero, makes the random
// choices repeatable. Close stops it.
func NewForwarder(ns *Namespace, ifA, ifB string, n Netem, seed uint64) (*Forwarder, error) {
	f := &Forwarder{n: n, done: make(chan struct{})}
	for i, name := range []string{ifA, ifB} {
		var sock *os.File
		err := ns.Do(func() (err error) {
			sock, err = openPacketSocket(name)
			return err
		})
		if err != nil {
			f.closeSockets()
			return nil, fmt.Errorf("nsutil: forwarder on %s/%s: %w", ns.name, name, err)
		}
		f.socks[i] = sock
		if f.rcs[i], err = sock.SyscallConn(); err != nil {
			f.closeSockets()
			return nil, err
		}
	}
	if seed == 0 {
		seed = rand.Uint64()
	}
	for dir := 0; dir < 2; dir++ {
		d := &direction{
			f:   f,
			in:  f.rcs[dir],
			out: f.rcs[1-dir],
			rng: rand.New(rand.NewPCG(seed, uint64(dir))),
			// Buffered so the reader never waits for the sender.
			queued: make(chan *frame, 1024),
		}
		f.wg.Add(2)
		go d.read()
		go d.send()
	}
	return f, nil
}

func openPacketSocket(ifname string) (*os.File, error) {
	ifi, err := interfaceIndex(ifname)
	if err != nil {
		return nil, err
	}
	proto := htons(unix.ETH_P_ALL)
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, int(proto))
	if err != nil {
		return nil, fmt.Errorf("packet socket: %w", err)
	}
	for _, o := range []struct{ opt, val int }{
		{unix.PACKET_VNET_HDR, 1},
		{unix.PACKET_IGNORE_OUTGOING, 1}, // not our own transmissions
	} {
		if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, o.opt, o.val); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("packet socket option %d: %w", o.opt, err)
		}
	}
	// Room for bursts: a full receive queue drops frames the impairment
	// never chose to drop (still counted, in SocketDrops). FORCE passes
	// net.core.rmem_max as root; the plain option is the fallback.
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, forwarderRcvBuf) != nil {
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, forwarderRcvBuf)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: proto, Ifindex: ifi}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("bind packet socket: %w", err)
	}
	mreq := unix.PacketMreq{Ifindex: int32(ifi), Type: unix.PACKET_MR_PROMISC}
	if err := unix.SetsockoptPacketMreq(fd, unix.SOL_PACKET, unix.PACKET_ADD_MEMBERSHIP, &mreq); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("promiscuous mode: %w", err)
	}
	return os.NewFile(uintptr(fd), "packet:"+ifname), nil
}

func interfaceIndex(name string) (int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return 0, err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFINDEX, ifr); err != nil {
		return 0, fmt.Errorf("interface %s: %w", name, err)
	}
	return int(ifr.Uint32()), nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// Stats returns the counters so far.
func (f *Forwarder) Stats() ForwarderStats {
	f.collectSocketDrops()
	return ForwarderStats{
		Received:    f.received.Load(),
		Sent:        f.sent.Load(),
		Lost:        f.lost.Load(),
		Duplicated:  f.duplicated.Load(),
		Corrupted:   f.corrupted.Load(),
		Reordered:   f.reordered.Load(),
		QueueDrops:  f.queueDrops.Load(),
		SocketDrops: f.socketDrops.Load(),
		Errors:      f.errs.Load(),
	}
}

// collectSocketDrops adds the kernel's drop counts of both sockets since
// the last call (reading PACKET_STATISTICS resets them).
func (f *Forwarder) collectSocketDrops() {
	for _, rc := range f.rcs {
		if rc == nil {
			continue
		}
		rc.Control(func(fd uintptr) {
			if st, err := unix.GetsockoptTpacketStats(int(fd), unix.SOL_PACKET, unix.PACKET_STATISTICS); err == nil {
				f.socketDrops.Add(uint64(st.Drops))
			}
		})
	}
}

// Close stops forwarding and closes the sockets. Frames still delayed are
// dropped.
func (f *Forwarder) Close() error {
	f.once.Do(func() {
		f.collectSocketDrops()
		close(f.done)
		f.closeSockets()
		f.wg.Wait()
	})
	return nil
}

func (f *Forwarder) closeSockets() {
	for _, s := range f.socks {
		if s != nil {
			s.Close()
		}
	}
}

// frame is a frame with its virtio-net header, waiting to be sent.
type frame struct {
	b   []byte
	at  time.Time
	seq uint64
}

// frameHeap orders frames by send time, then arrival.
type frameHeap []*frame

// Len, Less, Swap, Push and Pop implement heap.Interface.
func (h frameHeap) Len() int { return len(h) }

// Less orders by send time, then arrival.
func (h frameHeap) Less(i, j int) bool {
	if !h[i].at.Equal(h[j].at) {
		return h[i].at.Before(h[j].at)
	}
	return h[i].seq < h[j].seq
}

// Swap swaps two frames.
func (h frameHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }

// Push adds a frame.
func (h *frameHeap) Push(x any) { *h = append(*h, x.(*frame)) }

// Pop removes the last frame.
func (h *frameHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// direction forwards one way.
type direction struct {
	f       *Forwarder
	in, out syscall.RawConn
	rng     *rand.Rand // used by read only
	seq     uint64
	queued  chan *frame
	pending atomic.Int64 // frames read but not yet sent
}

func (d *direction) chance(pct float64) bool {
	return pct > 0 && d.rng.Float64()*100 < pct
}

func (d *direction) read() {
	defer d.f.wg.Done()
	defer close(d.queued)
	n := d.f.n
	limit := n.Limit
	if limit <= 0 {
		limit = 1000
	}
	buf := make([]byte, vnetHdrLen+65536)
	for {
		var nr int
		var rerr error
		err := d.in.Read(func(fd uintptr) bool {
			nr, _, rerr = unix.Recvfrom(int(fd), buf, 0)
			return rerr != unix.EAGAIN
		})
		if err != nil {
			return // closed
		}
		if rerr != nil || nr <= vnetHdrLen {
			continue
		}
		d.f.received.Add(1)
		if d.chance(n.Loss) {
			d.f.lost.Add(1)
			continue
		}
		b := append([]byte(nil), buf[:nr]...)
		// Keep only NEEDS_CSUM: DATA_VALID describes the receive side.
		b[0] &= unix.VIRTIO_NET_HDR_F_NEEDS_CSUM
		if d.chance(n.Corrupt) && nr > vnetHdrLen {
			i := vnetHdrLen + d.rng.IntN(nr-vnetHdrLen)
			b[i] ^= 1 << d.rng.IntN(8)
			d.f.corrupted.Add(1)
		}
		copies := 1
		if d.chance(n.Duplicate) {
			copies = 2
			d.f.duplicated.Add(1)
		}
		now := time.Now()
		at := now
		if n.Delay > 0 {
			if d.chance(n.Reorder) {
				d.f.reordered.Add(1) // sent at once, ahead of the delayed
			} else {
				delay := n.Delay
				if n.Jitter > 0 {
					delay += time.Duration(d.rng.Int64N(int64(2*n.Jitter)+1)) - n.Jitter
				}
				at = now.Add(max(delay, 0))
			}
		}
		for c := 0; c < copies; c++ {
			if d.pending.Load() >= int64(limit) {
				d.f.queueDrops.Add(1)
				continue
			}
			d.pending.Add(1)
			d.seq++
			fr := &frame{b: b, at: at, seq: d.seq}
			select {
			case d.queued <- fr:
			case <-d.f.done:
				return
			}
		}
	}
}

func (d *direction) send() {
	defer d.f.wg.Done()
	var h frameHeap
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	in := d.queued
	for {
		// Send everything due.
		now := time.Now()
		for len(h) > 0 && !h[0].at.After(now) {
			fr := heap.Pop(&h).(*frame)
			d.pending.Add(-1)
			d.write(fr.b)
		}
		if in == nil && len(h) == 0 {
			return
		}
		var wake <-chan time.Time
		if len(h) > 0 {
			timer.Reset(time.Until(h[0].at))
			wake = timer.C
		}
		select {
		case fr, ok := <-in:
			if !ok {
				in = nil
				h = h[:0] // closing: drop what is still delayed
				continue
			}
			heap.Push(&h, fr)
		case <-wake:
		case <-d.f.done:
			return
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}

func (d *direction) write(b []byte) {
	var werr error
	err := d.out.Write(func(fd uintptr) bool {
		_, werr = unix.Write(int(fd), b)
		return werr != unix.EAGAIN
	})
	if err != nil || werr != nil {
		d.f.errs.Add(1)
		return
	}
	d.f.sent.Add(1)
}

// ImpairMethod says how NewPair impairs the link between A and B.
type ImpairMethod int

// Impairment methods.
const (
	// ImpairAuto uses the netem qdisc when the kernel and tc have it,
	// and the user-space forwarder otherwise.
	ImpairAuto ImpairMethod = iota
	// ImpairQdisc puts a netem qdisc on both veth ends (needs tc and
	// sch_netem).
	ImpairQdisc
	// ImpairForwarder joins A and B through a third namespace whose
	// forwarder impairs the frames (works on any kernel).
	ImpairForwarder
)

// String names the method.
func (m ImpairMethod) String() string {
	switch m {
	case ImpairAuto:
		return "auto"
	case ImpairQdisc:
		return "netem qdisc"
	case ImpairForwarder:
		return "user-space forwarder"
	}
	return fmt.Sprintf("ImpairMethod(%d)", int(m))
}

// netemWorks reports whether a netem qdisc can be installed: tc exists and
// the kernel has sch_netem. It tries once, on a dummy veth in a scratch
// namespace.
var netemWorks = sync.OnceValue(func() error {
	if err := HaveTC(); err != nil {
		return err
	}
	ns, err := New("sroce-netem-probe")
	if err != nil {
		return err
	}
	defer ns.Close()
	if _, err := NewVeth(ns, ns, VethConfig{NameA: "probe0", NameB: "probe1", Down: true}); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return ns.SetNetem(ctx, "probe0", Netem{Delay: time.Millisecond})
})

// NetemAvailable reports whether the netem qdisc can be used here (tc is
// installed and the kernel has sch_netem), or why not.
func NetemAvailable() error { return netemWorks() }
