package daemon

import (
	"fmt"
	"os"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// pageSize is the system's page size.
var pageSize = os.Getpagesize()

// shm is memory the daemon shares with one client: a sealed memfd the
// daemon created (queues, the context page) and its mapping here.
type shm struct {
	fd  int
	mem []byte
}

// newShm creates a memfd of size bytes, rounded up to pages, maps it and
// seals its size, so that the client it is passed to can neither shrink it
// under the daemon's mapping (which would make the daemon fault) nor grow
// it.
func newShm(name string, size int) (*shm, error) {
	size = (size + pageSize - 1) &^ (pageSize - 1)
	fd, err := unix.MemfdCreate("sroce-"+name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, internalf("memfd for %s: %w", name, err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		return nil, internalf("sizing the memfd for %s: %w", name, err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		unix.Close(fd)
		return nil, internalf("sealing the memfd for %s: %w", name, err)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return nil, internalf("mapping the memfd for %s: %w", name, err)
	}
	return &shm{fd: fd, mem: mem}, nil
}

// cacheLine rounds n up to a 64-byte boundary.
func cacheLine(n int) int { return (n + 63) &^ 63 }

// close unmaps the memory and closes the daemon's descriptor.
func (s *shm) close() {
	if s == nil {
		return
	}
	if s.mem != nil {
		unix.Munmap(s.mem)
		s.mem = nil
	}
	if s.fd >= 0 {
		unix.Close(s.fd)
		s.fd = -1
	}
}

// clientMem is a client's registered memory as the daemon maps it: the
// pages of a client memfd that cover one MR.
type clientMem struct {
	mapping []byte // the whole mapping, page-aligned
	bytes   []byte // the registered range within it
	raw     bool   // mapped by mapProcMem (unix.MmapPtr), not unix.Mmap
}

// Bytes returns the registered range (mr.Region).
func (m *clientMem) Bytes() []byte { return m.bytes }

// memFault is a registration the client got wrong: the descriptor is not
// a memfd, not sealed against shrinking, or the range is outside it. It
// ends the connection; any other error of mapClientMem is the daemon's
// shortage (an errno the client gets).
type memFault struct {
	reason string
	err    error // the cause, if any
}

func (e *memFault) Error() string {
	if e.err != nil {
		return e.reason + ": " + e.err.Error()
	}
	return e.reason
}

func (e *memFault) Unwrap() error { return e.err }

// mmapClientFault, when a test sets it, is the error mapClientMem's mmap
// fails with (ENOMEM: the daemon short of mappings).
var mmapClientFault atomic.Pointer[error]

// mmapClient maps a client's memfd for mapClientMem.
func mmapClient(fd int, off int64, n int, prot, flags int) ([]byte, error) {
	if e := mmapClientFault.Load(); e != nil {
		return nil, *e
	}
	return unix.Mmap(fd, off, n, prot, flags)
}

// mapClientMem maps length bytes at offset off of the client's memfd fd.
// The memfd must be sealed against shrinking (F_SEAL_SHRINK) and hold the
// whole range, or a client could truncate it and make the daemon fault on
// its next access. A *memFault is the client's fault; other errors wrap
// the errno of fstat or mmap (ENOMEM when the daemon is out of mappings,
// EACCES or EPERM for a descriptor that cannot be mapped writable).
func mapClientMem(fd int, off, length uint64) (*clientMem, error) {
	if length == 0 {
		return nil, &memFault{reason: "zero-length registration"}
	}
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil {
		return nil, &memFault{"the descriptor passed is not a memfd (F_GET_SEALS)", err}
	}
	if seals&unix.F_SEAL_SHRINK == 0 {
		return nil, &memFault{reason: "the memfd passed is not sealed against shrinking (F_SEAL_SHRINK)"}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("fstat of the memfd: %w", err)
	}
	end := off + length
	if end < off || end > uint64(st.Size) {
		return nil, &memFault{reason: fmt.Sprintf("range [%d, %d) is outside the memfd's %d bytes", off, end, st.Size)}
	}
	start := off &^ uint64(pageSize-1)
	mapEnd := (end + uint64(pageSize) - 1) &^ uint64(pageSize-1)
	if mapEnd > uint64(st.Size) {
		// The file's last page is partial: mapping past the end would
		// fault on access, so map only whole bytes of the file.
		mapEnd = uint64(st.Size)
	}
	mem, err := mmapClient(fd, int64(start), int(mapEnd-start), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mapping %d bytes of the memfd: %w", mapEnd-start, err)
	}
	return &clientMem{mapping: mem, bytes: mem[off-start : end-start : end-start]}, nil
}

// unmap releases the mapping; the MR must be deregistered first.
func (m *clientMem) unmap() {
	if m != nil && m.mapping != nil {
		if m.raw {
			unix.MunmapPtr(unsafe.Pointer(unsafe.SliceData(m.mapping)), uintptr(len(m.mapping)))
		} else {
			unix.Munmap(m.mapping)
		}
		m.mapping, m.bytes = nil, nil
	}
}
