package daemon_test

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sroce/sroce/daemon"
	"github.com/sroce/sroce/daemon/ctl"
	"github.com/sroce/sroce/mr"
)

// regByAddr sends a REG_MR without a descriptor: the daemon maps
// [addr, addr+length) of the client's address space.
func regByAddr(c *cmClient, pd uint32, addr uintptr, length int, access mr.Access) (uint32, error) {
	reg := ctl.RegMR{PD: pd, Access: uint32(access), Addr: uint64(addr), Length: uint64(length), IOVA: uint64(addr)}
	b, fds, err := c.call(ctl.OpRegMR, ctl.Bytes(&reg))
	closeFDs(fds)
	if err != nil {
		return 0, err
	}
	m, _ := ctl.Get[ctl.MR](b)
	return m.Handle, nil
}

func addrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// TestRegMRByAddress: a registration without a descriptor maps the
// client's shared file pages, charged one mapping per VMA and released at
// DEREG_MR; it is refused with EFAULT where the client's own mapping does
// not allow the access (a read-only file mapping registered writable), is
// not there (a hole) or more VMAs than a registration may span, and with
// EINVAL for private memory (which the library remaps onto its memfd);
// each refusal keeps the connection.
func TestRegMRByAddress(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: mapping a client's memory through /proc/PID/map_files needs root")
	}
	r := newRig(t, daemon.Options{})
	c := dialOpen(t, r)
	pd := handleOf(c, ctl.OpAllocPD, nil)
	pg := os.Getpagesize()
	f, err := os.CreateTemp(t.TempDir(), "mr")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.Truncate(int64(200 * pg))
	rw, err := unix.Mmap(int(f.Fd()), 0, 4*pg, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(rw)
	before := r.srv.Budgets().Used
	h, err := regByAddr(c, pd, addrOf(rw)+10, 3*pg, mr.AccessLocalWrite|mr.AccessRemoteWrite)
	if err != nil {
		t.Fatalf("REG_MR by address of a shared file mapping: %v", err)
	}
	if got := r.srv.Budgets().Used; got[daemon.ResMaps] != before[daemon.ResMaps]+1 ||
		got[daemon.ResRegBytes] != before[daemon.ResRegBytes]+uint64(3*pg) || got[daemon.ResMRs] != before[daemon.ResMRs]+1 {
		t.Errorf("REG_MR by address took the budget from %v to %v; want one MR, one mapping and the range's bytes more", before, got)
	}
	hh := ctl.Handle{Handle: h}
	if _, _, err := c.call(ctl.OpDeregMR, ctl.Bytes(&hh)); err != nil {
		t.Fatalf("DEREG_MR: %v", err)
	}
	if got := r.srv.Budgets().Used; got != before {
		t.Errorf("after DEREG_MR the budget holds %+v, want %+v", got, before)
	}

	// The same file mapped read-only: readable registrations only.
	ro, err := os.Open(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	rom, err := unix.Mmap(int(ro.Fd()), 0, pg, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(rom)
	if _, err := regByAddr(c, pd, addrOf(rom), pg, mr.AccessLocalWrite); !errors.Is(err, unix.EFAULT) {
		t.Errorf("REG_MR by address, writable, of a read-only mapping: %v, want EFAULT", err)
	}
	if _, err := regByAddr(c, pd, addrOf(rom), pg, mr.AccessRemoteRead); err != nil {
		t.Errorf("REG_MR by address, read-only, of a read-only mapping: %v", err)
	}

	// Private memory, a hole, too many VMAs.
	anon, _ := unix.Mmap(-1, 0, 3*pg, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	defer unix.Munmap(anon)
	if _, err := regByAddr(c, pd, addrOf(anon), pg, mr.AccessLocalWrite); !errors.Is(err, unix.EINVAL) {
		t.Errorf("REG_MR by address of private memory: %v, want EINVAL", err)
	}
	unix.MunmapPtr(unsafe.Pointer(&rw[2*pg]), uintptr(pg))
	if _, err := regByAddr(c, pd, addrOf(rw), 4*pg, mr.AccessLocalWrite); !errors.Is(err, unix.EFAULT) {
		t.Errorf("REG_MR by address of a range with a hole: %v, want EFAULT", err)
	}
	// 100 VMAs: alternating protections keep them apart.
	many, err := unix.Mmap(int(f.Fd()), 0, 100*pg, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(many)
	for i := 0; i < 100; i += 2 {
		unix.Mprotect(many[i*pg:(i+1)*pg], unix.PROT_READ)
	}
	if _, err := regByAddr(c, pd, addrOf(many), 100*pg, mr.AccessRemoteRead); !errors.Is(err, unix.EINVAL) {
		t.Errorf("REG_MR by address over 100 VMAs: %v, want EINVAL", err)
	}
	if _, err := regByAddr(c, pd, addrOf(many), 10*pg, mr.AccessRemoteRead); err != nil {
		t.Errorf("REG_MR by address over 10 VMAs: %v", err)
	}
	c.uc.Close()
	zeroAfter(t, r)
}

// TestRegMRByAddressPeerGone: the process that connected is gone and its
// connection was passed on: a registration by address is refused with
// ESRCH, never resolved in whatever process has that pid now or in the
// process that holds the connection.
func TestRegMRByAddressPeerGone(t *testing.T) {
	if os.Getenv("SROCE_TEST_PASS_CONN") != "" {
		// The helper: connect, pass the connection on fd 3, exit.
		uc, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: os.Getenv("SROCE_TEST_PASS_CONN"), Net: "unixpacket"})
		if err != nil {
			os.Exit(2)
		}
		f, _ := uc.File()
		if err := unix.Sendmsg(3, []byte{0}, unix.UnixRights(int(f.Fd())), nil, 0); err != nil {
			os.Exit(3)
		}
		os.Exit(0)
	}
	if os.Geteuid() != 0 {
		t.Skip("skipping: mapping a client's memory through /proc/PID/map_files needs root")
	}
	r := newRig(t, daemon.Options{})
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pair[0])
	child := os.NewFile(uintptr(pair[1]), "pass")
	cmd := exec.Command(os.Args[0], "-test.run=^TestRegMRByAddressPeerGone$")
	cmd.Env = append(os.Environ(), "SROCE_TEST_PASS_CONN="+r.socket)
	cmd.ExtraFiles = []*os.File{child}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the helper that connects and passes the connection on: %v\n%s", err, out)
	}
	child.Close()
	oob := make([]byte, unix.CmsgSpace(4))
	_, oobn, _, _, err := unix.Recvmsg(pair[0], make([]byte, 1), oob, 0)
	if err != nil {
		t.Fatalf("receiving the connection: %v", err)
	}
	msgs, _ := unix.ParseSocketControlMessage(oob[:oobn])
	if len(msgs) != 1 {
		t.Fatal("no connection received")
	}
	fds, _ := unix.ParseUnixRights(&msgs[0])
	fc, err := net.FileConn(os.NewFile(uintptr(fds[0]), "conn"))
	if err != nil {
		t.Fatal(err)
	}
	c := helloOn(t, fc.(*net.UnixConn))
	c.open()
	pd := handleOf(c, ctl.OpAllocPD, nil)
	f, _ := os.CreateTemp(t.TempDir(), "mr")
	defer f.Close()
	f.Truncate(4096)
	m, _ := unix.Mmap(int(f.Fd()), 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	defer unix.Munmap(m)
	if _, err := regByAddr(c, pd, addrOf(m), 4096, mr.AccessLocalWrite); !errors.Is(err, unix.ESRCH) {
		t.Errorf("REG_MR by address on the connection of a process gone: %v, want ESRCH", err)
	}
}
