package daemon_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sroce/sroce/client"
	"github.com/sroce/sroce/daemon"
	"github.com/sroce/sroce/daemon/ctl"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/verbs"
)

// budget returns a budget with the given entries ("qps=2,mrs=3").
func budget(t *testing.T, s string) daemon.Budget {
	t.Helper()
	b, err := daemon.ParseBudget(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// writeOK writes through a's QP into b's memory and checks the bytes
// arrived: what a client holds still works.
func writeOK(t *testing.T, a, b *endpoint, what string) {
	t.Helper()
	msg := fmt.Sprintf("still working after %s", what)
	copy(a.buf.Buf[2000:], msg)
	clear(b.buf.Buf[3000 : 3000+len(msg)])
	if err := a.qp.PostSend(&verbs.SendWR{WRID: 9, Opcode: verbs.WROpRDMAWrite, Flags: verbs.Signaled,
		SGL:        []mr.SGE{{Addr: a.buf.Addr(2000), Length: uint32(len(msg)), LKey: a.mr.LKey()}},
		RemoteAddr: b.buf.Addr(3000), RKey: b.mr.RKey()}); err != nil {
		t.Fatalf("%s: posting a write: %v", what, err)
	}
	if wc := wait(t, a, what); wc.Status != verbs.WCSuccess {
		t.Fatalf("%s: write completed with %v", what, wc.Status)
	}
	if got := string(b.buf.Buf[3000 : 3000+len(msg)]); got != msg {
		t.Fatalf("%s: the peer holds %q", what, got)
	}
}

// zeroAfter closes xs and waits until the daemon's budgets say nobody
// holds anything.
func zeroAfter(t *testing.T, r *rig, xs ...*client.Context) {
	t.Helper()
	for _, x := range xs {
		x.Close()
	}
	waitFor(t, "every charge released", func() bool {
		st := r.srv.Budgets()
		return st.Used == (daemon.Budget{}) && st.Users == 0
	})
	if st := r.srv.Budgets(); st.CleanupRemains != 0 {
		t.Errorf("%d departing connections left charges unreleased", st.CleanupRemains)
	}
}

// TestBudgetRefusals takes each per-uid budget to its end: the request
// over it fails with the kernel's errno, the client stays connected and
// what it holds keeps working, the refusals are counted and logged once,
// and when the clients leave every charge is released.
func TestBudgetRefusals(t *testing.T) {
	// Each endpoint of a pair holds: its connection and socket, OPEN's
	// context page (a memfd and a mapping), doorbell and async socket,
	// one MR of 64 KiB (a mapping), one CQ and one QP (a memfd and a
	// mapping each).
	for _, tc := range []struct {
		name, user string
		refused    daemon.Resource
		try        func(r *rig, a *endpoint) error
		want       unix.Errno
	}{
		{"qps", "qps=2", daemon.ResQPs, func(_ *rig, a *endpoint) error {
			_, err := a.pd.CreateQP(&client.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: a.cq, RecvCQ: a.cq, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
			return err
		}, unix.ENOMEM},
		{"mrs", "mrs=2", daemon.ResMRs, func(_ *rig, a *endpoint) error {
			_, err := a.pd.RegMR(a.buf, 0, 4096, mr.AccessLocalWrite)
			return err
		}, unix.ENOMEM},
		{"reg", "reg=128K", daemon.ResRegBytes, func(_ *rig, a *endpoint) error {
			_, err := a.pd.RegMR(a.buf, 0, 4096, mr.AccessLocalWrite)
			return err
		}, unix.ENOMEM},
		{"maps", "maps=8", daemon.ResMaps, func(_ *rig, a *endpoint) error {
			_, err := a.x.CreateCQ(16, false)
			return err
		}, unix.ENOMEM},
		{"fds", "fds=12", daemon.ResFDs, func(_ *rig, a *endpoint) error {
			_, err := a.x.CreateCQ(16, true) // a completion channel and a CQ
			return err
		}, unix.EMFILE},
		{"queue", "queue=4M", daemon.ResQueueBytes, func(_ *rig, a *endpoint) error {
			for i := 0; i < 3; i++ {
				if _, err := a.x.CreateCQ(roce.MaxCQE, false); err != nil {
					return err
				}
			}
			return errors.New("three CQs of 2 MiB fit in 4 MiB")
		}, unix.ENOMEM},
		{"conns", "conns=2", daemon.ResConns, func(r *rig, _ *endpoint) error {
			x, err := client.Open(r.socket, "sroce_mem0")
			if err == nil {
				x.Close()
			}
			return err
		}, unix.EAGAIN},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, daemon.Options{User: budget(t, tc.user)})
			a, b := pair(t, r, false)
			writeOK(t, a, b, "the pair's set-up")
			for i := 0; i < 50; i++ {
				wantErrno(t, fmt.Sprintf("%s over budget, try %d", tc.name, i), tc.try(r, a), tc.want)
			}
			writeOK(t, a, b, tc.name+" refused")
			writeOK(t, b, a, tc.name+" refused")
			st := r.srv.Budgets()
			if st.Refused[tc.refused] < 50 {
				t.Errorf("%d refusals of %s counted, want 50 at least", st.Refused[tc.refused], tc.name)
			}
			if tc.refused == daemon.ResConns && st.ConnsRefused != 50 {
				t.Errorf("%d connections refused, want 50", st.ConnsRefused)
			}
			if n := strings.Count(r.logText(), "budget reached"); n != 1 {
				t.Errorf("%d lines say a budget was reached, want 1 (one per uid per 10 s)", n)
			}
			zeroAfter(t, r, a.x, b.x)
		})
	}
}

// TestBudgetPerUserAndTotal: one uid is held to its own budget while the
// daemon has room, and the daemon's total binds two uids that each have
// room. The second uid is nobody, in a subprocess.
func TestBudgetPerUserAndTotal(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a client as nobody")
	}
	r := newRig(t, daemon.Options{User: budget(t, "qps=2"), Total: budget(t, "qps=3")})
	// nobody must reach the socket and run the test binary: the test's
	// temporary directory and the one in it holding both.
	os.Chmod(filepath.Dir(r.socket), 0o755)
	os.Chmod(filepath.Dir(filepath.Dir(r.socket)), 0o755)
	bin := filepath.Join(filepath.Dir(r.socket), "daemon.test")
	exe, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, exe, 0o755); err != nil {
		t.Fatal(err)
	}

	x, err := client.Open(r.socket, "sroce_mem0")
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	pd, _ := x.AllocPD()
	cq, err := x.CreateCQ(16, false)
	if err != nil {
		t.Fatal(err)
	}
	attr := &client.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}
	var qps []*client.QP
	for i := 0; i < 2; i++ {
		q, err := pd.CreateQP(attr)
		if err != nil {
			t.Fatalf("root's QP %d: %v", i, err)
		}
		qps = append(qps, q)
	}
	_, err = pd.CreateQP(attr)
	wantErrno(t, "root's third QP (its own budget: 2)", err, unix.ENOMEM)

	// nobody has its own budget: one QP, then the daemon's total (3) is
	// reached.
	cmd := exec.Command(bin, "-test.run=^TestBudgetHelperClient$", "-test.v")
	cmd.Env = append(os.Environ(), "SROCE_BUDGET_HELPER="+r.socket)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer in.Close()
	sc := bufio.NewScanner(out)
	got := readResult(t, sc)
	if got != "qp0=ok qp1=cannot allocate memory" {
		t.Errorf("nobody's QPs: %q, want the first created and the second refused with ENOMEM (the daemon's total)", got)
	}
	// root frees one: nobody has room in both budgets again.
	if err := qps[0].Destroy(); err != nil {
		t.Fatal(err)
	}
	io.WriteString(in, "again\n")
	if got := readResult(t, sc); got != "qp0=ok" {
		t.Errorf("nobody's QP after root freed one: %q, want created", got)
	}
	st := r.srv.Budgets()
	if st.Users != 2 || st.Used[daemon.ResQPs] != 3 {
		t.Errorf("%d uids hold %d QPs, want 2 uids holding 3", st.Users, st.Used[daemon.ResQPs])
	}
	in.Close()
	if err := cmd.Wait(); err != nil {
		t.Errorf("the client as nobody: %v", err)
	}
	zeroAfter(t, r, x)
}

// readResult reads the helper's next "result: ..." line (bounded by the
// helper's own exit).
func readResult(t *testing.T, sc *bufio.Scanner) string {
	t.Helper()
	for sc.Scan() {
		if s, ok := strings.CutPrefix(sc.Text(), "result: "); ok {
			return s
		}
	}
	t.Fatal("the helper ended without a result")
	return ""
}

// TestBudgetHelperClient is TestBudgetPerUserAndTotal's client as another
// uid: it creates two QPs and prints what each got, then, for each line
// on its standard input, one more.
func TestBudgetHelperClient(t *testing.T) {
	sock := os.Getenv("SROCE_BUDGET_HELPER")
	if sock == "" {
		t.Skip("run by TestBudgetPerUserAndTotal")
	}
	x, err := client.Open(sock, "sroce_mem0")
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	pd, _ := x.AllocPD()
	cq, err := x.CreateCQ(16, false)
	if err != nil {
		t.Fatal(err)
	}
	attr := &client.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}
	try := func(n int) string {
		var res []string
		for i := 0; i < n; i++ {
			_, err := pd.CreateQP(attr)
			s := "ok"
			var ce *client.Error
			if errors.As(err, &ce) {
				s = ce.Errno.Error()
			} else if err != nil {
				s = err.Error()
			}
			res = append(res, fmt.Sprintf("qp%d=%s", i, s))
		}
		return strings.Join(res, " ")
	}
	fmt.Printf("result: %s\n", try(2))
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		fmt.Printf("result: %s\n", try(1))
	}
}

// TestBudgetQPMemory repeats the attack: QPs of 16,384 WRs, 32
// SGEs and 400 bytes of inline data per queue, as many as the daemon
// takes. The uid's queue budget refuses them with ENOMEM after what its
// bytes hold, the client keeps its QPs, and the charge is each QP's real
// footprint (its shared rings and the engine's queues).
func TestBudgetQPMemory(t *testing.T) {
	const perUser = 256 << 20
	r := newRig(t, daemon.Options{User: budget(t, "queue=256M")})
	x, err := client.Open(r.socket, "sroce_mem0")
	if err != nil {
		t.Fatal(err)
	}
	pd, _ := x.AllocPD()
	cq, err := x.CreateCQ(16, false)
	if err != nil {
		t.Fatal(err)
	}
	attr := &client.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 16384, MaxRecvWR: 16384, MaxSendSGE: 32, MaxRecvSGE: 32, MaxInlineData: 400}}
	var made []*client.QP
	const tries = 64
	for i := 0; i < tries; i++ {
		q, err := pd.CreateQP(attr)
		if err != nil {
			wantErrno(t, fmt.Sprintf("QP %d", i), err, unix.ENOMEM)
			break
		}
		made = append(made, q)
	}
	st := r.srv.Budgets()
	t.Logf("%d QPs of 16,384 WRs taken, %d MiB of queues charged", len(made), st.Used[daemon.ResQueueBytes]>>20)
	if len(made) == tries {
		t.Fatalf("%d QPs of 16,384 WRs, 32 SGEs and 400 bytes inline were all taken under a 256 MiB queue budget", tries)
	}
	if len(made) == 0 {
		t.Fatal("not one QP fits the budget")
	}
	if used := st.Used[daemon.ResQueueBytes]; used > perUser || used < uint64(len(made))*16384*32*16*2 {
		t.Errorf("%d bytes charged for %d QPs: not their rings' footprint within the budget", used, len(made))
	}
	// The client carries on: it frees one and makes one again.
	if err := made[0].Destroy(); err != nil {
		t.Fatal(err)
	}
	if _, err := pd.CreateQP(attr); err != nil {
		t.Errorf("a QP in the room the freed one left: %v", err)
	}
	zeroAfter(t, r, x)
}

// TestBudgetDefaults derives the defaults of a 24 GiB host with the
// kernel's usual limits: no uid may take more than a quarter of anything,
// and the daemon keeps room for its own mappings and descriptors.
func TestBudgetDefaults(t *testing.T) {
	h := daemon.Host{MaxMapCount: 65530, NoFile: 1 << 20, MemTotal: 24 << 30}
	total := daemon.DefaultTotal(h)
	user := daemon.DefaultUser(total)
	want := budget(t, "conns=16384,fds=983040,maps=57338,qps=65536,mrs=57338,queue=6G,reg=12G")
	if total != want {
		t.Errorf("totals %v, want %v", total, want)
	}
	for i := range total {
		if user[i]*4 > total[i] {
			t.Errorf("a uid may take %d of %s's %d", user[i], daemon.ResourceKeys()[i], total[i])
		}
	}
	if s := total.String(); s != "conns=16384,fds=983040,maps=57338,qps=65536,mrs=57338,reg=12G,queue=6G" {
		t.Errorf("String: %s", s)
	}
	for _, bad := range []string{"qps=-1", "foo=1", "qps=0", "reg=1X", "qps", "", "reg=99999999999G"} {
		if _, err := daemon.ParseBudget(bad); err == nil {
			t.Errorf("ParseBudget(%q) succeeded", bad)
		}
	}
}

// TestBudgetIdleConnections opens connections from one uid past its
// connection budget: those over it are answered EAGAIN and closed, the
// ones within it keep working, and nothing is left charged after.
func TestBudgetIdleConnections(t *testing.T) {
	const budgetConns, tries = 1000, 10000
	r := newRig(t, daemon.Options{User: budget(t, fmt.Sprintf("conns=%d", budgetConns))})
	var kept []*net.UnixConn
	defer func() {
		for _, uc := range kept {
			uc.Close()
		}
	}()
	refused := 0
	for i := 0; i < tries; i++ {
		uc, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: r.socket, Net: "unixpacket"})
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		c := &cmClient{t: t, uc: uc}
		hello := ctl.Hello{ABI: ctl.Version}
		_, _, err = c.call(ctl.OpHello, ctl.Bytes(&hello))
		switch {
		case err == nil:
			kept = append(kept, uc)
		case errors.Is(err, unix.EAGAIN):
			refused++
			uc.Close()
		default:
			t.Fatalf("connection %d: %v, want served or EAGAIN", i, err)
		}
	}
	if len(kept) != budgetConns || refused != tries-budgetConns {
		t.Errorf("%d connections served and %d refused, want %d and %d", len(kept), refused, budgetConns, tries-budgetConns)
	}
	if st := r.srv.Budgets(); st.ConnsRefused != uint64(refused) {
		t.Errorf("%d refusals counted, want %d", st.ConnsRefused, refused)
	}
	// The connections within the budget still work.
	c := &cmClient{t: t, uc: kept[0]}
	var in ctl.Open
	ctl.SetName(in.Name[:], "sroce_mem0")
	_, fds, err := c.call(ctl.OpOpen, ctl.Bytes(&in))
	closeFDs(fds)
	if err != nil {
		t.Errorf("OPEN on a connection within the budget: %v", err)
	}
	for _, uc := range kept {
		uc.Close()
	}
	kept = nil
	zeroAfter(t, r)
}

// TestBudgetDaemonShortage: a registration the daemon cannot map (here a
// memfd the client passes read-only, so the shared writable mapping is
// refused by mmap) gets mmap's errno, and the client stays connected.
func TestBudgetDaemonShortage(t *testing.T) {
	r := newRig(t, daemon.Options{})
	c := dialOpen(t, r)
	pd := handleOf(c, ctl.OpAllocPD, nil)
	mfd := sealedMemfd(t, 4096)
	ro, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", mfd), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(ro)
	reg := ctl.RegMR{PD: pd, Length: 4096, Access: uint32(mr.AccessLocalWrite)}
	if _, _, err := c.callFDs(ctl.OpRegMR, ctl.Bytes(&reg), []int{ro}); !errors.Is(err, unix.EACCES) {
		t.Errorf("REG_MR of a read-only memfd: %v, want EACCES with the connection kept", err)
	}
	if _, _, err := c.callFDs(ctl.OpRegMR, ctl.Bytes(&reg), []int{mfd}); err != nil {
		t.Errorf("REG_MR afterwards: %v", err)
	}
	if strings.Contains(r.logText(), "client disconnected") {
		t.Errorf("the client was disconnected:\n%s", r.logText())
	}
	c.uc.Close()
	zeroAfter(t, r)
}

// TestAcceptSurvivesEMFILE fills the process's descriptor table so that
// the daemon's accept fails with EMFILE: Serve backs off and retries
// (counted) instead of returning, and serves the waiting client once
// descriptors are free again.
func TestAcceptSurvivesEMFILE(t *testing.T) {
	r := newRig(t, daemon.Options{})
	fill, restore := fillDescriptors(t)
	defer restore()
	// One slot for the client's socket: the daemon's accept then has
	// none.
	unix.Close((*fill)[len(*fill)-1])
	*fill = (*fill)[:len(*fill)-1]
	sfd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("the client's socket: %v", err)
	}
	if err := unix.Connect(sfd, &unix.SockaddrUnix{Name: r.socket}); err != nil {
		unix.Close(sfd)
		t.Fatalf("connecting: %v", err)
	}
	waitFor(t, "accept failing and retried", func() bool { return r.srv.Budgets().AcceptRetries >= 2 })
	restore()
	f := os.NewFile(uintptr(sfd), "client")
	nc, err := net.FileConn(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	c := &cmClient{t: t, uc: nc.(*net.UnixConn)}
	defer c.uc.Close()
	hello := ctl.Hello{ABI: ctl.Version}
	if _, _, err := c.call(ctl.OpHello, ctl.Bytes(&hello)); err != nil {
		t.Fatalf("the client that waited through EMFILE: %v", err)
	}
	// And a new client is served as ever.
	x, err := client.Open(r.socket, "sroce_mem1")
	if err != nil {
		t.Fatalf("a new client: %v", err)
	}
	x.Close()
	if !strings.Contains(r.logText(), "too many open files") {
		t.Errorf("the failing accept was not logged:\n%s", r.logText())
	}
	if n := strings.Count(r.logText(), "accepting a client failed"); n != 1 {
		t.Errorf("%d lines say accept failed, want 1 (one per 10 s)", n)
	}
}

// TestBudgetEveryObjectReleased makes one of every object that holds a
// budget (completion and CM channels, CQs, a resized CQ, an SRQ and its
// resize, QPs with and without it, MRs, a re-registered MR, a window, a
// PD, an AH, a CM ID),
// checks they are charged, and frees them: destroyed one by one, the
// charges return to what the open connection holds; left to the
// connection's end, to nothing.
func TestBudgetEveryObjectReleased(t *testing.T) {
	r := newRig(t, daemon.Options{})
	c := dialOpen(t, r)
	pd := handleOf(c, ctl.OpAllocPD, nil)
	base := r.srv.Budgets().Used
	if base[daemon.ResConns] != 1 || base[daemon.ResFDs] != 4 || base[daemon.ResMaps] != 1 {
		t.Errorf("an open connection holds %v, want a connection, 4 descriptors and a mapping", base)
	}
	var made []func() error
	destroy := func(op ctl.Op, h uint32) func() error {
		return func() error {
			in := ctl.Handle{Handle: h}
			_, _, err := c.call(op, ctl.Bytes(&in))
			return err
		}
	}
	ch := handleOf(c, ctl.OpCreateCompChannel, nil)
	cmch := handleOf(c, ctl.OpCMCreateChannel, nil)
	cqIn := ctl.CreateCQ{CQE: 64, Channel: ch}
	cq := handleOf(c, ctl.OpCreateCQ, ctl.Bytes(&cqIn))
	rs := ctl.ResizeCQ{Handle: cq, CQE: 1000}
	_, fds, err := c.call(ctl.OpResizeCQ, ctl.Bytes(&rs))
	closeFDs(fds)
	if err != nil {
		t.Fatalf("RESIZE_CQ: %v", err)
	}
	srqIn := ctl.SRQ{PDOrHandle: pd, MaxWR: 16, MaxSGE: 2}
	srq := handleOf(c, ctl.OpCreateSRQ, ctl.Bytes(&srqIn))
	grow := ctl.SRQ{PDOrHandle: srq, AttrMask: 1, MaxWR: 256}
	_, fds, err = c.call(ctl.OpModifySRQ, ctl.Bytes(&grow))
	closeFDs(fds)
	if err != nil {
		t.Fatalf("MODIFY_SRQ max_wr: %v", err)
	}
	qpIn := ctl.CreateQP{PD: pd, SendCQ: cq, RecvCQ: cq, SRQ: srq, QPType: uint8(verbs.QPTypeRC), Cap: ctl.QPCap{MaxSendWR: 64, MaxSendSGE: 2}}
	qp1 := handleOf(c, ctl.OpCreateQP, ctl.Bytes(&qpIn))
	qpIn.SRQ, qpIn.Cap.MaxRecvWR, qpIn.Cap.MaxRecvSGE = 0, 64, 2
	qp2 := handleOf(c, ctl.OpCreateQP, ctl.Bytes(&qpIn))
	mfd := sealedMemfd(t, 1<<20)
	reg := ctl.RegMR{PD: pd, Length: 8192, Access: uint32(mr.AccessLocalWrite)}
	b, _, err := c.callFDs(ctl.OpRegMR, ctl.Bytes(&reg), []int{mfd})
	if err != nil {
		t.Fatalf("REG_MR: %v", err)
	}
	m, _ := ctl.Get[ctl.MR](b)
	rr := ctl.ReregMR{Handle: m.Handle, Flags: uint32(mr.ReregChangeTranslation), Reg: ctl.RegMR{Length: 65536, FDOffset: 4096}}
	if _, _, err := c.callFDs(ctl.OpReregMR, ctl.Bytes(&rr), []int{mfd}); err != nil {
		t.Fatalf("REREG_MR: %v", err)
	}
	mwIn := ctl.MW{PDOrHandle: pd, TypeOrRKey: 1}
	b, _, err = c.call(ctl.OpAllocMW, ctl.Bytes(&mwIn))
	if err != nil {
		t.Fatalf("ALLOC_MW: %v", err)
	}
	mw, _ := ctl.Get[ctl.MW](b)
	cmid, err := c.createID(cmch)
	if err != nil {
		t.Fatalf("CM_CREATE_ID: %v", err)
	}
	ahIn := ctl.AH{PDOrHandle: pd, Attr: ctl.AHAttr{DGID: r.gids[1], HopLimit: 64, IsGlobal: 1, PortNum: 1}}
	ah := handleOf(c, ctl.OpCreateAH, ctl.Bytes(&ahIn))
	pd2 := handleOf(c, ctl.OpAllocPD, nil)
	idArg := ctl.CMIDArg{ID: cmid}
	made = append(made, func() error {
		_, _, err := c.call(ctl.OpCMDestroyID, ctl.Bytes(&idArg))
		return err
	}, destroy(ctl.OpDestroyAH, ah), destroy(ctl.OpDeallocPD, pd2))
	made = append(made, destroy(ctl.OpDestroyQP, qp1), destroy(ctl.OpDestroyQP, qp2), destroy(ctl.OpDestroySRQ, srq),
		destroy(ctl.OpDestroyCQ, cq), destroy(ctl.OpDestroyCompChannel, ch), destroy(ctl.OpCMDestroyChannel, cmch),
		destroy(ctl.OpDeregMR, m.Handle), destroy(ctl.OpDeallocMW, mw.PDOrHandle))

	st := r.srv.Budgets()
	for _, want := range []struct {
		r daemon.Resource
		n uint64
	}{
		// 2 channels, a CQ, an SRQ, 2 QPs
		{daemon.ResFDs, base[daemon.ResFDs] + 6},
		// a CQ, an SRQ, 2 QPs, an MR
		{daemon.ResMaps, base[daemon.ResMaps] + 5},
		{daemon.ResQPs, 2},
		{daemon.ResMRs, 2},
		{daemon.ResRegBytes, 65536},
	} {
		if got := st.Used[want.r]; got != want.n {
			t.Errorf("%s: %d charged, want %d", want.r, got, want.n)
		}
	}
	if q := st.Used[daemon.ResQueueBytes]; q < base[daemon.ResQueueBytes]+1000*64+256*16 {
		t.Errorf("%d bytes of queues charged: less than the CQ's and SRQ's rings", q)
	}
	for i, f := range made {
		if err := f(); err != nil {
			t.Fatalf("destroying object %d: %v", i, err)
		}
	}
	if got := r.srv.Budgets().Used; got != base {
		t.Errorf("after every object was destroyed the connection holds %v, want %v", got, base)
	}

	// The same objects through the Go client, left to the connection's
	// end.
	x, err := client.Open(r.socket, "sroce_mem1")
	if err != nil {
		t.Fatal(err)
	}
	xpd, _ := x.AllocPD()
	xcq, err := x.CreateCQ(64, true)
	if err != nil {
		t.Fatal(err)
	}
	if err := xcq.Resize(500); err != nil {
		t.Fatal(err)
	}
	buf, _ := x.Alloc(1 << 16)
	xmr, err := xpd.RegMR(buf, 0, 4096, mr.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	if err := xmr.Rereg(mr.ReregChangeTranslation, nil, buf, 4096, 8192, mr.AccessLocalWrite); err != nil {
		t.Fatal(err)
	}
	if _, err := xpd.CreateQP(&client.QPInitAttr{Type: verbs.QPTypeUD, SendCQ: xcq, RecvCQ: xcq, Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		t.Fatal(err)
	}
	c.uc.Close()
	zeroAfter(t, r, x)
}

// TestLostDescriptorsIsEMFILE: a request whose descriptors the kernel could
// not install because the daemon's descriptor table is full (MSG_CTRUNC)
// fails with EMFILE, and the client stays connected: the shortage is the
// daemon's, not the client's.
func TestLostDescriptorsIsEMFILE(t *testing.T) {
	r := newRig(t, daemon.Options{})
	x, err := client.Open(r.socket, "sroce_mem1")
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	pd, err := x.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	buf, err := x.Alloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Free()
	_, restore := fillDescriptors(t)
	defer restore()
	_, err = pd.RegMR(buf, 0, 4096, mr.AccessLocalWrite)
	restore()
	if !errors.Is(err, unix.EMFILE) {
		t.Fatalf("REG_MR with the daemon's descriptor table full: %v, want EMFILE", err)
	}
	m, err := pd.RegMR(buf, 0, 4096, mr.AccessLocalWrite)
	if err != nil {
		t.Fatalf("REG_MR once descriptors are free again, on the same connection: %v", err)
	}
	if err := m.Dereg(); err != nil {
		t.Fatal(err)
	}
}

// fillDescriptors lowers the process's descriptor limit to 64 above what
// it has open and fills the table with eventfds up to it; it returns the
// descriptors (the caller may close some to leave room) and a function
// that closes them all and restores the limit (safe to call twice).
func fillDescriptors(t *testing.T) (fill *[]int, restore func()) {
	t.Helper()
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	low := old
	low.Cur = uint64(len(ents) + 64)
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	fds := new([]int)
	restore = func() {
		closeFDs(*fds)
		*fds = nil
		unix.Setrlimit(unix.RLIMIT_NOFILE, &old)
	}
	for {
		fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
		if err != nil {
			if !errors.Is(err, unix.EMFILE) {
				restore()
				t.Fatalf("filling the descriptor table: %v", err)
			}
			break
		}
		*fds = append(*fds, fd)
	}
	return fds, restore
}
