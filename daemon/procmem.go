package daemon

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Registering memory the client shares with files (MAP_SHARED mappings of
// regular files, POSIX shm, memfds, hugetlbfs, MAP_SHARED|MAP_ANONYMOUS):
// the client names the range by its address alone (a REG_MR or a
// translating REREG_MR without a descriptor) and the daemon maps the same
// file pages itself, through /proc/PID/map_files of the connection's peer.
// The peer is the process that connected (SO_PEERPIDFD), never a pid the
// client sends; the daemon opens /proc/PID only while that pidfd says the
// process lives, so a reused pid is refused, and only when the process is
// the client's uid's and dumpable (a client that exec'd a set-user-ID
// program is refused). Every VMA of the range must be a shared file
// mapping; a piece is mapped writable only when the client's own mapping
// is, and the daemon checks after opening the file that the VMA still
// maps the file it opened, writable, so a client that swaps mappings under
// the daemon cannot make it write a file the client only reads.

// maxMRPieces bounds the VMAs one registration may span, and so the
// mappings and descriptors one request makes the daemon hold.
const maxMRPieces = 64

// vma is one line of /proc/PID/maps.
type vma struct {
	start, end uint64
	read       bool
	write      bool
	shared     bool
	off        uint64
	dev        uint64 // major<<32 | minor as printed
	ino        uint64
}

// parseMaps reads the lines of /proc/PID/maps that overlap [start, end).
func parseMaps(r io.Reader, start, end uint64) ([]vma, error) {
	var out []vma
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<16)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 5 {
			continue
		}
		se := strings.SplitN(f[0], "-", 2)
		if len(se) != 2 || len(f[1]) < 4 {
			continue
		}
		s, err1 := strconv.ParseUint(se[0], 16, 64)
		e, err2 := strconv.ParseUint(se[1], 16, 64)
		off, err3 := strconv.ParseUint(f[2], 16, 64)
		dm := strings.SplitN(f[3], ":", 2)
		ino, err4 := strconv.ParseUint(f[4], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil || err4 != nil || len(dm) != 2 {
			continue
		}
		maj, err5 := strconv.ParseUint(dm[0], 16, 32)
		min, err6 := strconv.ParseUint(dm[1], 16, 32)
		if err5 != nil || err6 != nil {
			continue
		}
		if e <= start {
			continue
		}
		if s >= end {
			break
		}
		out = append(out, vma{start: s, end: e, read: f[1][0] == 'r', write: f[1][1] == 'w',
			shared: f[1][3] == 's', off: off, dev: maj<<32 | min, ino: ino})
		if len(out) > maxMRPieces {
			return nil, fmt.Errorf("the range spans more than %d mappings: %w", maxMRPieces, unix.EINVAL)
		}
	}
	return out, sc.Err()
}

// peerProc opens /proc/PID of the process at the other end of the
// connection, and checks that it is still that process and that the
// client's uid may reach its memory. It returns the directory (O_PATH).
func (c *conn) peerProc() (int, error) {
	raw, err := c.uc.SyscallConn()
	if err != nil {
		return -1, err
	}
	pidfd, perr := -1, error(nil)
	raw.Control(func(fd uintptr) { pidfd, perr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PEERPIDFD) })
	if perr != nil {
		// Kernels before 6.5: the pid of SO_PEERCRED, checked below
		// as alive; a pid reused since the peer died is a process of
		// the same uid at worst (the checks below).
		if pidfd, perr = unix.PidfdOpen(int(c.pid), 0); perr != nil {
			return -1, fmt.Errorf("the client process is gone: %w", unix.ESRCH)
		}
	}
	defer unix.Close(pidfd)
	dir, err := unix.Open(fmt.Sprintf("/proc/%d", c.pid), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		// ESRCH first: it is the errno the request gets.
		return -1, fmt.Errorf("the client process is gone (%w): opening /proc/%d: %w", unix.ESRCH, c.pid, err)
	}
	// Alive after the open: the directory is the peer's, not a reused
	// pid's. (EPERM, a daemon without CAP_KILL, is alive too.)
	if err := unix.PidfdSendSignal(pidfd, 0, nil, 0); err != nil && err != unix.EPERM {
		unix.Close(dir)
		return -1, fmt.Errorf("the client process is gone: %w", unix.ESRCH)
	}
	if c.uid != 0 && !ownedBy(dir, c.uid) {
		unix.Close(dir)
		return -1, fmt.Errorf("the client process is not uid %d's or not dumpable: %w", c.uid, unix.EPERM)
	}
	return dir, nil
}

// ownedBy reports whether the process of /proc directory dir is dumpable
// and its real, effective, saved and filesystem uids are all uid.
func ownedBy(dir int, uid uint32) bool {
	fd, err := unix.Openat(dir, "status", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	f := os.NewFile(uintptr(fd), "status")
	defer f.Close()
	// The files in /proc/PID (not the directory itself) belong to the
	// process's euid while it is dumpable, to root otherwise.
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Uid != uid {
		return false
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return false
	}
	for _, l := range bytes.Split(b, []byte("\n")) {
		if rest, ok := bytes.CutPrefix(l, []byte("Uid:")); ok {
			f := strings.Fields(string(rest))
			if len(f) != 4 {
				return false
			}
			for _, s := range f {
				if s != strconv.FormatUint(uint64(uid), 10) {
					return false
				}
			}
			return true
		}
	}
	return false
}

// mapsOf reads the VMAs of the process of dir that overlap [start, end).
func mapsOf(dir int, start, end uint64) ([]vma, error) {
	fd, err := unix.Openat(dir, "maps", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("reading the client's maps: %w", err)
	}
	f := os.NewFile(uintptr(fd), "maps")
	defer f.Close()
	return parseMaps(bufio.NewReaderSize(f, 64<<10), start, end)
}

// piece is one VMA's part of a registration, opened.
type piece struct {
	v        vma
	fd       int
	s, e     uint64 // the client addresses mapped, aligned to pageSz
	pageSz   uint64
	writable bool
}

// mapProcMem maps [addr, addr+length) of the client's address space into
// the daemon: the shared file pages behind it, contiguous and at the same
// offsets within huge pages. write asks for a writable mapping (the MR
// has a write access). It returns the mapping and the number of mappings
// it made (what the registration holds of ResMaps).
func (c *conn) mapProcMem(addr, length uint64, write bool) (*clientMem, uint64, error) {
	end := addr + length
	if length == 0 || end < addr {
		return nil, 0, unix.EINVAL
	}
	pg := uint64(pageSize)
	start, stop := addr&^(pg-1), (end+pg-1)&^(pg-1)
	dir, err := c.peerProc()
	if err != nil {
		return nil, 0, err
	}
	defer unix.Close(dir)
	vs, err := mapsOf(dir, start, stop)
	if err != nil {
		return nil, 0, err
	}
	var ps []piece
	defer func() {
		for _, p := range ps {
			unix.Close(p.fd)
		}
	}()
	at := start
	for _, v := range vs {
		// rxe's pinning (FOLL_WRITE) fails with EFAULT on memory the
		// process cannot write; so does a hole or an unreadable page.
		if v.start > at || !v.read || (write && !v.write) {
			return nil, 0, unix.EFAULT
		}
		if !v.shared || v.ino == 0 {
			return nil, 0, unix.EINVAL // private memory goes through the library's memfd
		}
		flags := unix.O_RDONLY
		if write {
			flags = unix.O_RDWR
		}
		fd, err := unix.Openat(dir, fmt.Sprintf("map_files/%x-%x", v.start, v.end), flags|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, 0, fmt.Errorf("opening the client's mapping %x-%x: %w", v.start, v.end, err)
		}
		p := piece{v: v, fd: fd, pageSz: pg, writable: write}
		ps = append(ps, p)
		var st unix.Stat_t
		var sfs unix.Statfs_t
		if unix.Fstat(fd, &st) != nil || unix.Fstatfs(fd, &sfs) != nil || st.Ino != v.ino {
			return nil, 0, unix.EFAULT
		}
		if sfs.Type == unix.HUGETLBFS_MAGIC && sfs.Bsize > 0 {
			ps[len(ps)-1].pageSz = uint64(sfs.Bsize)
		}
		at = v.end
		if at >= stop {
			break
		}
	}
	if at < stop || len(ps) == 0 {
		return nil, 0, unix.EFAULT
	}
	// Check again, now that the files are open, that each VMA still maps
	// the file opened, with the rights it had: what the daemon maps
	// writable the client mapped writable after the open.
	again, err := mapsOf(dir, start, stop)
	if err != nil {
		return nil, 0, err
	}
	for _, p := range ps {
		ok := false
		for _, v := range again {
			if v.start == p.v.start && v.end == p.v.end {
				ok = v == p.v
				break
			}
		}
		if !ok {
			return nil, 0, unix.EFAULT
		}
	}
	align := pg
	for i := range ps {
		p := &ps[i]
		p.s = max(p.v.start, start) &^ (p.pageSz - 1)
		p.e = min(p.v.end, (stop+p.pageSz-1)&^(p.pageSz-1))
		align = max(align, p.pageSz)
	}
	// A reservation where client address x is at base + (x - first), with
	// base = first modulo align, so huge pages land on huge page
	// boundaries.
	first, last := ps[0].s, ps[len(ps)-1].e
	span := last - first
	resv, err := unix.MmapPtr(-1, 0, nil, uintptr(span+align), unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return nil, 0, fmt.Errorf("reserving %d bytes for a registration: %w", span+align, err)
	}
	rbase := uint64(uintptr(resv))
	lead := (align-rbase%align)%align + first%align // base - rbase
	if lead >= align {
		lead -= align
	}
	base := unsafe.Add(resv, lead)
	for _, p := range ps {
		prot := unix.PROT_READ
		if p.writable {
			prot |= unix.PROT_WRITE
		}
		off := p.v.off + (p.s - p.v.start)
		_, err := unix.MmapPtr(p.fd, int64(off), unsafe.Add(base, p.s-first), uintptr(p.e-p.s), prot, unix.MAP_SHARED|unix.MAP_FIXED)
		if err != nil {
			unix.MunmapPtr(resv, uintptr(span+align))
			return nil, 0, fmt.Errorf("mapping the client's %x-%x: %w", p.s, p.e, err)
		}
	}
	// The reservation's ends go; the pieces stay.
	if lead > 0 {
		unix.MunmapPtr(resv, uintptr(lead))
	}
	if tail := align - lead; tail > 0 {
		unix.MunmapPtr(unsafe.Add(base, span), uintptr(tail))
	}
	mem := unsafe.Slice((*byte)(base), span)
	o := addr - first
	return &clientMem{mapping: mem, bytes: mem[o : o+length : o+length], raw: true}, uint64(len(ps)), nil
}
