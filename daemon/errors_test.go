package daemon_test

import (
	"errors"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sroce/sroce/daemon"
	"github.com/sroce/sroce/daemon/ctl"
	"github.com/sroce/sroce/mr"
)

// sealedMemfd returns a memfd of size bytes sealed against shrinking, as
// a client registers one; it is closed when the test ends.
func sealedMemfd(t *testing.T, size int64) int {
	t.Helper()
	mfd, err := unix.MemfdCreate("t", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(mfd) })
	if err := unix.Ftruncate(mfd, size); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.FcntlInt(uintptr(mfd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK); err != nil {
		t.Fatal(err)
	}
	return mfd
}

// TestShortageIsNotMisbehaviour makes the daemon's mmap of a client's
// memfd fail with ENOMEM, as at vm.max_map_count: the REG_MR gets ENOMEM,
// the client stays connected and registers once the daemon has mappings
// again, and the log says the daemon was short, at debug, never that the
// client misbehaved or was disconnected.
func TestShortageIsNotMisbehaviour(t *testing.T) {
	r := newRig(t, daemon.Options{})
	c := dialOpen(t, r)
	pd := handleOf(c, ctl.OpAllocPD, nil)
	mfd := sealedMemfd(t, 8192)
	reg := ctl.RegMR{PD: pd, Length: 8192, Access: uint32(mr.AccessLocalWrite)}

	t.Cleanup(func() { daemon.SetMmapFault(nil) })
	daemon.SetMmapFault(unix.ENOMEM)
	_, _, err := c.callFDs(ctl.OpRegMR, ctl.Bytes(&reg), []int{mfd})
	daemon.SetMmapFault(nil)
	if !errors.Is(err, unix.ENOMEM) {
		t.Fatalf("REG_MR with the daemon out of mappings: %v, want ENOMEM with the connection kept", err)
	}
	b, _, err := c.callFDs(ctl.OpRegMR, ctl.Bytes(&reg), []int{mfd})
	if err != nil {
		t.Fatalf("REG_MR on the same connection once the daemon has mappings: %v", err)
	}
	if m, _ := ctl.Get[ctl.MR](b); m.LKey == 0 {
		t.Errorf("REG_MR afterwards gave no key: %+v", m)
	}
	if n := len(r.srv.Clients()); n != 1 {
		t.Errorf("%d clients after the shortage, want the 1 still connected", n)
	}

	log := r.logText()
	for _, bad := range []string{"client disconnected", "misbehav", "level=WARN", "level=ERROR"} {
		if strings.Contains(log, bad) {
			t.Errorf("the daemon's shortage is logged with %q:\n%s", bad, log)
		}
	}
	var short string
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, "REG_MR") && strings.Contains(line, "short") {
			short = line
		}
	}
	if !strings.Contains(short, "level=DEBUG") || !strings.Contains(short, "cannot allocate memory") {
		t.Errorf("no debug line saying the daemon was short (with mmap's errno):\n%s", log)
	}
	c.uc.Close()
	zeroAfter(t, r)
}

// TestRegistrationDoesNotStallSends holds every client's MR lock, as a
// registration mapping a large range holds it, while another local user
// lists every QP without pause (QUERY_RES): the QPs' sends and receives
// still move both ways, since the data path takes only the locks of the
// tables it reads (QPs, SRQs, CQs, AHs), and a listing takes them for
// reading only.
func TestRegistrationDoesNotStallSends(t *testing.T) {
	r := newRig(t, daemon.Options{})
	a, b := pair(t, r, false)
	sendRecv(t, a, b, "before")
	lister := dialCM(t, r)
	stop, listed := make(chan struct{}), make(chan int)
	go func() {
		n := 0
		defer func() { listed <- n }()
		q := ctl.ResQuery{Kind: ctl.ResKindQP}
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, _, err := lister.call(ctl.OpQueryRes, ctl.Bytes(&q)); err != nil {
				t.Errorf("QUERY_RES during the sends: %v", err)
				return
			}
			n++
		}
	}()
	var release []func()
	for _, c := range r.srv.Clients() {
		release = append(release, daemon.HoldMRLock(r.srv, c.ID))
	}
	sendRecv(t, a, b, "during a registration")
	sendRecv(t, b, a, "back during a registration")
	for _, f := range release {
		f()
	}
	sendRecv(t, a, b, "after")
	close(stop)
	if n := <-listed; n == 0 {
		t.Error("no QP listing answered during the sends")
	}
}
