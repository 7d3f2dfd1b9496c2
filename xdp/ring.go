// Rings shared with the kernel.
//
// An AF_XDP socket has four single-producer single-consumer rings in memory
// mapped from the socket:
//
//	fill       user -> kernel  UMEM addresses the kernel may receive into
//	rx         kernel -> user  descriptors of received frames
//	tx         user -> kernel  descriptors of frames to send
//	completion kernel -> user  UMEM addresses of frames the kernel sent
//
// Each ring is a power-of-two array plus a producer and a consumer index that
// run freely (they wrap at 2^32, the slot is index & mask). The side that
// produces writes entries, then publishes them with an atomic store of the
// producer index; the side that consumes reads the producer index atomically,
// reads the entries, then hands the slots back with an atomic store of the
// consumer index. sync/atomic gives the ordering the kernel's
// smp_load_acquire/smp_store_release pairs expect. Each user-side index is
// owned by exactly one goroutine (the receive side owns fill and rx, the
// transmit side owns tx and completion), so only the shared words are atomic.

package xdp

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ring is the part common to the four rings: the shared indices and flags
// and this side's cached view of them.
type ring struct {
	producer *uint32
	consumer *uint32
	flags    *uint32
	mask     uint32
	size     uint32
	// local is this side's own index (the producer index of a ring we fill,
	// the consumer index of a ring we drain); cached is the last value read
	// of the other side's index.
	local  uint32
	cached uint32
	mem    []byte
}

// mapRing maps one ring of the socket fd at page offset pgoff and wires the
// index pointers from the kernel's offsets.
func mapRing(fd int, pgoff int64, off unix.XDPRingOffset, size uint32, entry uintptr) (ring, unsafe.Pointer, error) {
	length := int(off.Desc) + int(size)*int(entry)
	mem, err := unix.Mmap(fd, pgoff, length, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return ring{}, nil, fmt.Errorf("mmap ring at %#x: %w", pgoff, err)
	}
	r := ring{
		producer: (*uint32)(unsafe.Pointer(&mem[off.Producer])),
		consumer: (*uint32)(unsafe.Pointer(&mem[off.Consumer])),
		flags:    (*uint32)(unsafe.Pointer(&mem[off.Flags])),
		mask:     size - 1,
		size:     size,
		mem:      mem,
	}
	return r, unsafe.Pointer(&mem[off.Desc]), nil
}

func (r *ring) unmap() error {
	if r.mem == nil {
		return nil
	}
	err := unix.Munmap(r.mem)
	*r = ring{}
	return err
}

// needWakeup reports whether the kernel asked to be kicked (XDP_RING_NEED_WAKEUP).
func (r *ring) needWakeup() bool {
	return atomic.LoadUint32(r.flags)&unix.XDP_RING_NEED_WAKEUP != 0
}

// Producer side (fill, tx).

// free returns how many entries can be produced, up to want, reading the
// kernel's consumer index only when the cached value does not show enough.
func (r *ring) free(want uint32) uint32 {
	n := r.size - (r.local - r.cached)
	if n >= want {
		return n
	}
	r.cached = atomic.LoadUint32(r.consumer)
	return r.size - (r.local - r.cached)
}

// submit publishes every entry produced so far.
func (r *ring) submit() {
	atomic.StoreUint32(r.producer, r.local)
}

// outstanding returns how many produced entries the kernel has not consumed.
func (r *ring) outstanding() uint32 {
	return r.local - atomic.LoadUint32(r.consumer)
}

// Consumer side (rx, completion).

// pending reports whether the producer has published entries the consumer
// has not released. It reads only the two shared indices (atomically), so
// a goroutine other than the consumer may ask; entries the consumer holds
// but has not released yet count as pending.
func (r *ring) pending() bool {
	return atomic.LoadUint32(r.producer) != atomic.LoadUint32(r.consumer)
}

// available returns how many entries can be consumed, reading the kernel's
// producer index when the cached value shows none left.
func (r *ring) available() uint32 {
	n := r.cached - r.local
	if n == 0 {
		r.cached = atomic.LoadUint32(r.producer)
		n = r.cached - r.local
	}
	return n
}

// release hands every consumed entry back to the kernel.
func (r *ring) release() {
	atomic.StoreUint32(r.consumer, r.local)
}

// addrRing is a fill or completion ring: entries are UMEM addresses.
type addrRing struct {
	ring
	addrs []uint64
}

func mapAddrRing(fd int, pgoff int64, off unix.XDPRingOffset, size uint32) (addrRing, error) {
	r, p, err := mapRing(fd, pgoff, off, size, 8)
	if err != nil {
		return addrRing{}, err
	}
	return addrRing{ring: r, addrs: unsafe.Slice((*uint64)(p), size)}, nil
}

func (r *addrRing) unmap() error {
	r.addrs = nil
	return r.ring.unmap()
}

// put writes addr at the next producer slot; the caller has checked free.
func (r *addrRing) put(addr uint64) {
	r.addrs[r.local&r.mask] = addr
	r.local++
}

// get reads the next consumer slot; the caller has checked available.
func (r *addrRing) get() uint64 {
	a := r.addrs[r.local&r.mask]
	r.local++
	return a
}

// descRing is an rx or tx ring: entries are frame descriptors.
type descRing struct {
	ring
	descs []unix.XDPDesc
}

func mapDescRing(fd int, pgoff int64, off unix.XDPRingOffset, size uint32) (descRing, error) {
	r, p, err := mapRing(fd, pgoff, off, size, unsafe.Sizeof(unix.XDPDesc{}))
	if err != nil {
		return descRing{}, err
	}
	return descRing{ring: r, descs: unsafe.Slice((*unix.XDPDesc)(p), size)}, nil
}

func (r *descRing) unmap() error {
	r.descs = nil
	return r.ring.unmap()
}

// at returns the descriptor i entries past the local index.
func (r *descRing) at(i uint32) *unix.XDPDesc {
	return &r.descs[(r.local+i)&r.mask]
}
