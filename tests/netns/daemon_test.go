package netns

// Two sroce daemons in two namespaces joined by a veth pair, each serving
// its veth, and Go programs using them through package client: data moved
// both ways over AF_XDP, and over the UDP link with the daemons running
// as an unprivileged user; a client killed with SIGKILL mid-transfer is
// cleaned up by its daemon and its peer's QP fails within its retry
// budget.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/client"
	"github.com/sroce/sroce/daemon/ctl"
	"github.com/sroce/sroce/internal/nsutil"
	"github.com/sroce/sroce/internal/testdirs"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/verbs"
)

// daemonPair is a daemon in each namespace of a veth pair.
type daemonPair struct {
	pair    *nsutil.Pair
	bin     string
	sockets [2]string
	devs    [2]string
	procs   [2]*toolProc
}

// startDaemons starts `sroce daemon` on each veth with link, as the
// unprivileged user nobody when unprivileged is set.
func startDaemons(t testing.TB, link string, unprivileged bool) *daemonPair {
	t.Helper()
	return startDaemonsIn(t, "sroce-daemon", link, unprivileged)
}

// startDaemonsIn is startDaemons with the namespaces' name prefix given.
func startDaemonsIn(t testing.TB, prefix, link string, unprivileged bool) *daemonPair {
	t.Helper()
	nsutil.Skip(t)
	pair, err := nsutil.NewPair(nsutil.PairConfig{Prefix: prefix, Seed: 11})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pair.Close() })
	d := &daemonPair{pair: pair, bin: buildSroce(t)}
	dir := t.TempDir()
	os.Chmod(dir, 0o777)
	if unprivileged {
		// nobody must be able to run the binary: put a copy where it can.
		bin, err := os.ReadFile(d.bin)
		if err != nil {
			t.Fatal(err)
		}
		d.bin = filepath.Join(dir, "sroce")
		if err := os.WriteFile(d.bin, bin, 0o755); err != nil {
			t.Fatal(err)
		}
		testdirs.Searchable(dir)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i, side := range []struct {
		ns     *nsutil.Namespace
		ifname string
	}{{pair.A, pair.Veth.NameA}, {pair.B, pair.Veth.NameB}} {
		d.sockets[i] = filepath.Join(dir, fmt.Sprintf("d%d.sock", i))
		d.devs[i] = "sroce_" + side.ifname
		args := []string{"daemon", "-d", side.ifname, "--link", link, "--socket", d.sockets[i], "-v"}
		if s := os.Getenv("SROCE_TEST_DAEMON_SPIN"); s != "" {
			args = append(args, "--spin", s)
		}
		cmd := side.ns.Command(context.Background(), d.bin, args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if unprivileged {
			cmd.SysProcAttr.Credential = &syscall.Credential{Uid: 65534, Gid: 65534}
		}
		d.procs[i] = startTool(t, cmd, side.ns.Start)
		sock := d.sockets[i]
		p := d.procs[i]
		// Ended with SIGTERM, as a service manager ends it, so that it
		// removes what it made (its /dev/infiniband entries); startTool's
		// cleanup, which runs after this one, kills it if it is still up.
		t.Cleanup(func() {
			p.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-p.done:
			case <-time.After(10 * time.Second):
			}
		})
		if err := waitFor(ctx, "the daemon's socket "+sock, func() (bool, error) {
			if p.exited() {
				return false, fmt.Errorf("the daemon ended:\n%v", p.wait(ctx))
			}
			_, err := client.Devices(sock)
			return err == nil, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		if t.Failed() || testing.Verbose() {
			for i, p := range d.procs {
				t.Logf("daemon %d log:\n%s", i, p.stderr.String())
			}
		}
	})
	return d
}

// dEnd is one side of an RC connection made through a daemon.
type dEnd struct {
	x   *client.Context
	pd  *client.PD
	buf *client.Buffer
	mr  *client.MR
	cq  *client.CQ
	qp  *client.QP
	gid bth.GID
	sgi uint8 // the index of gid
}

func openEnd(t *testing.T, socket, dev string, size int) *dEnd {
	t.Helper()
	x, err := client.Open(socket, dev)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { x.Close() })
	e := &dEnd{x: x}
	for i := 0; i < 16; i++ {
		g, err := x.QueryGID(i)
		if err == nil && g.Addr().Unmap().Is4() {
			e.gid, e.sgi = g, uint8(i)
			break
		}
	}
	if e.gid == (bth.GID{}) {
		t.Fatalf("%s has no IPv4 GID", dev)
	}
	if e.pd, err = x.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if e.buf, err = x.Alloc(size); err != nil {
		t.Fatal(err)
	}
	if e.mr, err = e.pd.RegMR(e.buf, 0, size, mr.AccessLocalWrite|mr.AccessRemoteWrite|mr.AccessRemoteRead); err != nil {
		t.Fatal(err)
	}
	if e.cq, err = x.CreateCQ(256, true); err != nil {
		t.Fatal(err)
	}
	if e.qp, err = e.pd.CreateQP(&client.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: e.cq, RecvCQ: e.cq, Cap: verbs.QPCap{MaxSendWR: 128, MaxRecvWR: 128, MaxSendSGE: 1, MaxRecvSGE: 1}, SigAll: false}); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *dEnd) connect(t *testing.T, peer *dEnd, retry uint8) {
	t.Helper()
	if err := e.qp.Connect(connectAttr(peer.qp.QPN(), peer.gid, e.sgi, retry, mr.AccessRemoteWrite|mr.AccessRemoteRead)); err != nil {
		t.Fatal(err)
	}
}

// connectAttr is the RC connection the daemon tests make.
func connectAttr(peer bth.QPN, gid bth.GID, sgi, retry uint8, access mr.Access) *roce.ConnectAttr {
	return &roce.ConnectAttr{Access: access, AH: verbs.AHAttr{DGID: gid, SGIDIndex: sgi, HopLimit: 64},
		PathMTU: verbs.MTU1024, DestQPN: peer, RQPSN: 1, MaxDestRdAtomic: 4, MinRNRTimer: 12,
		SQPSN: 1, Timeout: 14, RetryCnt: retry, RNRRetry: 7, MaxRdAtomic: 4}
}

func (e *dEnd) complete(t *testing.T, what string) verbs.WC {
	t.Helper()
	wcs := make([]verbs.WC, 1)
	if _, err := e.cq.Wait(wcs, 20*time.Second); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if wcs[0].Status != verbs.WCSuccess {
		t.Fatalf("%s: %v", what, wcs[0].Status)
	}
	return wcs[0]
}

// moveData does SENDs, a 1 MiB WRITE and a 1 MiB READ between a and b.
func moveData(t *testing.T, a, b *dEnd) {
	const mib = 1 << 20
	for i := range a.buf.Buf[:mib] {
		a.buf.Buf[i] = byte(i*31 + 7)
	}
	for i := 0; i < 16; i++ {
		if err := b.qp.PostRecv(&verbs.RecvWR{WRID: uint64(i), SGL: []mr.SGE{{Addr: b.buf.Addr(2 * mib), Length: 4096, LKey: b.mr.LKey()}}}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 16; i++ {
		if err := a.qp.PostSend(&verbs.SendWR{WRID: uint64(i), Opcode: verbs.WROpSend, Flags: verbs.Signaled,
			SGL: []mr.SGE{{Addr: a.buf.Addr(i * 4096), Length: 4096, LKey: a.mr.LKey()}}}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 16; i++ {
		a.complete(t, "SEND")
		if wc := b.complete(t, "receive"); wc.ByteLen != 4096 {
			t.Fatalf("receive of %d bytes", wc.ByteLen)
		}
	}
	if !bytes.Equal(b.buf.Buf[2*mib:2*mib+4096], a.buf.Buf[15*4096:16*4096]) {
		t.Error("the last SEND arrived damaged")
	}
	if err := a.qp.PostSend(&verbs.SendWR{WRID: 100, Opcode: verbs.WROpRDMAWrite, Flags: verbs.Signaled,
		SGL:        []mr.SGE{{Addr: a.buf.Addr(0), Length: mib, LKey: a.mr.LKey()}},
		RemoteAddr: b.buf.Addr(0), RKey: b.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	a.complete(t, "WRITE")
	if !bytes.Equal(b.buf.Buf[:mib], a.buf.Buf[:mib]) {
		t.Error("the WRITE left other bytes")
	}
	if err := a.qp.PostSend(&verbs.SendWR{WRID: 101, Opcode: verbs.WROpRDMARead, Flags: verbs.Signaled,
		SGL:        []mr.SGE{{Addr: a.buf.Addr(mib), Length: mib, LKey: a.mr.LKey()}},
		RemoteAddr: b.buf.Addr(0), RKey: b.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	a.complete(t, "READ")
	if !bytes.Equal(a.buf.Buf[mib:2*mib], b.buf.Buf[:mib]) {
		t.Error("the READ brought other bytes")
	}
}

// TestDaemonsXDP moves data between Go clients of two daemons over AF_XDP.
func TestDaemonsXDP(t *testing.T) {
	d := startDaemons(t, "xdp", false)
	a := openEnd(t, d.sockets[0], d.devs[0], 3<<20)
	b := openEnd(t, d.sockets[1], d.devs[1], 3<<20)
	a.connect(t, b, 7)
	b.connect(t, a, 7)
	moveData(t, a, b)
	st, err := client.Stats(d.sockets[0], d.devs[0])
	if err != nil || !strings.HasPrefix(st.LinkMode, "XDP") || st.Clients != 1 {
		t.Errorf("daemon A's stats: %+v, %v", st, err)
	}
	// sroce devinfo and sroce stat describe the daemon's device.
	ifname := strings.TrimPrefix(d.devs[0], "sroce_")
	out, err := exec.Command(d.bin, "devinfo", "-d", ifname, "--socket", d.sockets[0]).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "hca_id:\t"+d.devs[0]) || !strings.Contains(string(out), "(1 clients)") ||
		!strings.Contains(string(out), a.gid.Addr().String()+", RoCE v2") {
		t.Errorf("sroce devinfo on the daemon: %v\n%s", err, out)
	}
	out, err = exec.Command(d.bin, "stat", "-d", ifname, "--socket", d.sockets[0], "--nonzero").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "the device of the sroce daemon at "+d.sockets[0]) || !strings.Contains(string(out), "rcvd_pkts") {
		t.Errorf("sroce stat on the daemon: %v\n%s", err, out)
	}
}

// TestDaemonsUDPUnprivileged does the same over the UDP link with the
// daemons running as nobody.
func TestDaemonsUDPUnprivileged(t *testing.T) {
	d := startDaemons(t, "udp", true)
	a := openEnd(t, d.sockets[0], d.devs[0], 3<<20)
	b := openEnd(t, d.sockets[1], d.devs[1], 3<<20)
	a.connect(t, b, 7)
	b.connect(t, a, 7)
	moveData(t, a, b)
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", d.procs[1].cmd.Process.Pid))
	if err != nil || !strings.Contains(string(status), "\nUid:\t65534\t65534") {
		t.Errorf("daemon B does not run as nobody: %v\n%s", err, status)
	}
	st, err := client.Stats(d.sockets[1], d.devs[1])
	if err != nil || st.LinkMode != "UDP" {
		t.Errorf("daemon B's stats: %+v, %v", st, err)
	}
}

// killedClientEnv makes the test binary (TestMain) a client that connects to the
// peer QP named in the variable, streams WRITEs and waits to be killed.
const killedClientEnv = "SROCE_TEST_KILLED_CLIENT"

// killedClient is the process that gets SIGKILL: v is
// "socket,device,peerQPN,peerGID,peerAddr,peerRKey".
func killedClient(v string) int {
	f := strings.Split(v, ",")
	if len(f) != 6 {
		fmt.Fprintln(os.Stderr, "bad", killedClientEnv)
		return 2
	}
	x, err := client.Open(f[0], f[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	pd, _ := x.AllocPD()
	buf, _ := x.Alloc(1 << 20)
	m, err := pd.RegMR(buf, 0, 1<<20, mr.AccessLocalWrite)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cq, _ := x.CreateCQ(256, false)
	q, err := pd.CreateQP(&client.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 128, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}, SigAll: false})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	qpn, _ := strconv.ParseUint(f[2], 0, 32)
	gid, _ := bth.ParseGID(f[3])
	var sgi uint8
	for i := 0; i < 16; i++ {
		if g, err := x.QueryGID(i); err == nil && g.Addr().Unmap().Is4() {
			sgi = uint8(i)
			break
		}
	}
	raddr, _ := strconv.ParseUint(f[4], 0, 64)
	rkey, _ := strconv.ParseUint(f[5], 0, 32)
	if err := q.Connect(connectAttr(bth.QPN(qpn), gid, sgi, 7, 0)); err != nil {
		fmt.Fprintln(os.Stderr, "connect:", err)
		return 1
	}
	fmt.Printf("qpn %d\n", q.QPN())
	os.Stdout.Sync()
	wcs := make([]verbs.WC, 64)
	for i := 0; ; i++ {
		for q.PostSend(&verbs.SendWR{WRID: uint64(i), Opcode: verbs.WROpRDMAWrite, Flags: verbs.Signaled,
			SGL: []mr.SGE{{Addr: buf.Addr(0), Length: 65536, LKey: m.LKey()}}, RemoteAddr: raddr, RKey: uint32(rkey)}) == nil {
		}
		cq.Poll(wcs)
		time.Sleep(100 * time.Microsecond)
	}
}

// TestDaemonKilledClient kills a client mid-transfer: its daemon frees its
// objects and carries on serving the other client, and the peer's QP
// (retry count 3) moves to the error state with a retry-exceeded
// completion.
func TestDaemonKilledClient(t *testing.T) {
	d := startDaemons(t, "xdp", false)
	b := openEnd(t, d.sockets[1], d.devs[1], 3<<20)
	other := openEnd(t, d.sockets[0], d.devs[0], 1<<20) // a bystander on daemon A

	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, self, "-test.run=^$")
	cmd.Env = append(os.Environ(), killedClientEnv+"="+strings.Join([]string{d.sockets[0], d.devs[0],
		strconv.Itoa(int(b.qp.QPN())), b.gid.String(), strconv.FormatUint(b.buf.Addr(0), 10), strconv.FormatUint(uint64(b.mr.RKey()), 10)}, ","))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var peerQPN uint64
	if err := waitFor(ctx, "the client to print its QPN", func() (bool, error) {
		s := out.String()
		if i := strings.Index(s, "qpn "); i >= 0 && strings.Contains(s[i:], "\n") {
			peerQPN, _ = strconv.ParseUint(strings.TrimSpace(s[i+4:strings.Index(s[i:], "\n")+i]), 10, 32)
			return true, nil
		}
		return false, nil
	}); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if err := b.qp.Connect(connectAttr(bth.QPN(peerQPN), other.gid, b.sgi, 3, mr.AccessRemoteWrite|mr.AccessRemoteRead)); err != nil {
		t.Fatal(err)
	}
	// Let the WRITEs flow, then kill the client mid-transfer.
	time.Sleep(300 * time.Millisecond)
	before, err := client.Stats(d.sockets[1], d.devs[1])
	if err != nil {
		t.Fatal(err)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	if err := waitFor(ctx, "daemon A to free the killed client", func() (bool, error) {
		st, err := client.Stats(d.sockets[0], d.devs[0])
		return err == nil && st.Clients == 1, nil
	}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(d.procs[0].stderr.String(), "client gone, its objects freed") {
		t.Errorf("daemon A's log does not say it freed the client:\n%s", d.procs[0].stderr.String())
	}
	received := counter(before.Engine, "rcvd_pkts")
	if received == 0 {
		t.Errorf("B received nothing from the killed client before it died")
	}
	// B's QP now sends to a QP that is gone: a SEND fails within its
	// retry budget (3 retries of 67 ms).
	if err := b.qp.PostSend(&verbs.SendWR{WRID: 9, Opcode: verbs.WROpSend, Flags: verbs.Signaled,
		SGL: []mr.SGE{{Addr: b.buf.Addr(0), Length: 8, LKey: b.mr.LKey()}}}); err != nil {
		t.Fatal(err)
	}
	wcs := make([]verbs.WC, 1)
	if _, err := b.cq.Wait(wcs, 20*time.Second); err != nil || wcs[0].Status != verbs.WCRetryExcErr {
		t.Errorf("B's SEND to the killed client's QP: %v %v, want %v", wcs[0].Status, err, verbs.WCRetryExcErr)
	}
	// The bystander on daemon A still works.
	if _, err := other.x.QueryPort(); err != nil {
		t.Errorf("the other client of daemon A: %v", err)
	}
}

func counter(cs []ctl.Counter, name string) uint64 {
	for _, c := range cs {
		if c.Name == name {
			return c.Value
		}
	}
	return 0
}
