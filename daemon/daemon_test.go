package daemon_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/client"
	"github.com/sroce/sroce/daemon"
	"github.com/sroce/sroce/daemon/ctl"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/roce/memlink"
	"github.com/sroce/sroce/verbs"
	"golang.org/x/sys/unix"
)

// memDev is a device on memlink's in-memory Ethernet, standing in for an
// interface.
type memDev struct {
	dev   *roce.Device
	name  string
	index int
	mac   net.HardwareAddr
	peers map[bth.GID]net.HardwareAddr
}

func (m *memDev) Device() *roce.Device   { return m.dev }
func (m *memDev) Ifname() string         { return m.name }
func (m *memDev) Ifindex() int           { return m.index }
func (m *memDev) NodeGUID() [8]byte      { return [8]byte{2, 0, 0, 0xff, 0xfe, 0, 0, byte(m.index)} }
func (m *memDev) State() verbs.PortState { return verbs.PortActive }
func (m *memDev) ActiveMTU() verbs.MTU   { return verbs.MTU1024 }
func (m *memDev) MTU() int               { return 1500 }

// SourceGIDIndex makes memDev an rdmacm.Port: the daemon runs its CM on it.
func (m *memDev) SourceGIDIndex(bth.GID) (int, error) { return 0, nil }
func (m *memDev) AHAttr(_ context.Context, dgid bth.GID, sgid int) (verbs.AHAttr, error) {
	mac, ok := m.peers[dgid] // its own GID included
	if !ok {
		return verbs.AHAttr{}, errors.New("no neighbour")
	}
	a := verbs.AHAttr{DGID: dgid, SGIDIndex: uint8(sgid), PortNum: 1}
	copy(a.DMAC[:], mac)
	return a, nil
}

// rig is a daemon serving two memlink devices, and its socket.
type rig struct {
	srv    *daemon.Server
	router *memlink.Router // the devices' link
	socket string
	gids   [2]bth.GID
	devs   [2]*roce.Device
	log    *bytes.Buffer
	logMu  *sync.Mutex
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func newRig(t *testing.T, opts daemon.Options) *rig {
	t.Helper()
	return newRigEngine(t, opts, roce.EngineAuto)
}

// newRigEngine is newRig with the devices' engine mode given.
func newRigEngine(t *testing.T, opts daemon.Options, mode roce.EngineMode) *rig {
	t.Helper()
	router := memlink.NewRouter(roce.SystemClock(), 1, memlink.Impairments{})
	peers := map[bth.GID]net.HardwareAddr{}
	var devs []daemon.Device
	r := &rig{log: &bytes.Buffer{}, logMu: &sync.Mutex{}, router: router}
	for i := 0; i < 2; i++ {
		mac := net.HardwareAddr{2, 0, 0, 0, 0, byte(i + 1)}
		gid := bth.GIDFromAddr(netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)}))
		r.gids[i] = gid
		peers[gid] = mac
		defer func() { r.devs[i] = devs[i].Device() }()
		d, err := roce.Open(router.NewPort(mac, 1500), &roce.Options{Name: fmt.Sprintf("m%d", i), GIDs: []bth.GID{gid}, Engine: mode})
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		devs = append(devs, &memDev{dev: d, name: fmt.Sprintf("mem%d", i), index: i + 1, mac: mac, peers: peers})
	}
	opts.Logger = slog.New(slog.NewTextHandler(lockedWriter{r.logMu, r.log}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	srv, err := daemon.New(devs, opts)
	if err != nil {
		t.Fatal(err)
	}
	r.srv = srv
	r.socket = filepath.Join(t.TempDir(), "sroce.sock")
	ln, err := daemon.Listen(r.socket)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Error(err)
		}
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return r
}

func (r *rig) logText() string {
	r.logMu.Lock()
	defer r.logMu.Unlock()
	return r.log.String()
}

// endpoint is one side of an RC connection through the daemon.
type endpoint struct {
	x   *client.Context
	pd  *client.PD
	buf *client.Buffer
	mr  *client.MR
	cq  *client.CQ
	qp  *client.QP
}

func newEndpoint(t *testing.T, r *rig, dev string, events bool) *endpoint {
	t.Helper()
	x, err := client.Open(r.socket, dev)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { x.Close() })
	e := &endpoint{x: x}
	if e.pd, err = x.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if e.buf, err = x.Alloc(1 << 16); err != nil {
		t.Fatal(err)
	}
	access := mr.AccessLocalWrite | mr.AccessRemoteWrite | mr.AccessRemoteRead | mr.AccessRemoteAtomic
	if e.mr, err = e.pd.RegMR(e.buf, 0, 1<<16, access); err != nil {
		t.Fatal(err)
	}
	if e.cq, err = x.CreateCQ(64, events); err != nil {
		t.Fatal(err)
	}
	if e.qp, err = e.pd.CreateQP(&client.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: e.cq, RecvCQ: e.cq, Cap: verbs.QPCap{MaxSendWR: 32, MaxRecvWR: 32, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInlineData: 64}, SigAll: false}); err != nil {
		t.Fatal(err)
	}
	return e
}

func connect(t *testing.T, a *endpoint, peerQPN bth.QPN, peerGID bth.GID) {
	t.Helper()
	if err := a.qp.Connect(&roce.ConnectAttr{Access: mr.AccessRemoteWrite | mr.AccessRemoteRead | mr.AccessRemoteAtomic,
		AH: verbs.AHAttr{DGID: peerGID, HopLimit: 64}, PathMTU: verbs.MTU1024, DestQPN: peerQPN, RQPSN: 100,
		MaxDestRdAtomic: 4, MinRNRTimer: 12, SQPSN: 100, Timeout: 14, RetryCnt: 3, RNRRetry: 7, MaxRdAtomic: 4}); err != nil {
		t.Fatal(err)
	}
}

func pair(t *testing.T, r *rig, events bool) (*endpoint, *endpoint) {
	a := newEndpoint(t, r, "sroce_mem0", events)
	b := newEndpoint(t, r, "sroce_mem1", events)
	connect(t, a, b.qp.QPN(), r.gids[1])
	connect(t, b, a.qp.QPN(), r.gids[0])
	return a, b
}

func wait(t *testing.T, e *endpoint, what string) verbs.WC {
	t.Helper()
	wcs := make([]verbs.WC, 1)
	n, err := e.cq.Wait(wcs, 10*time.Second)
	if err != nil || n != 1 {
		t.Fatalf("%s: %v", what, err)
	}
	return wcs[0]
}

// TestDevicesAndQueries lists and queries the devices through the daemon.
func TestDevicesAndQueries(t *testing.T) {
	r := newRig(t, daemon.Options{})
	devs, err := client.Devices(r.socket)
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) != 2 || devs[0].Name != "sroce_mem0" || devs[1].Ifname != "mem1" {
		t.Fatalf("devices: %+v", devs)
	}
	x, err := client.Open(r.socket, "sroce_mem1")
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	da, err := x.QueryDevice()
	if err != nil || da.MaxQP != roce.MaxQP || da.VendorID != 0xffffff || ctl.Name(da.FWVer[:]) != "0.0.0" || da.PhysPortCnt != 1 {
		t.Errorf("device attributes %+v, %v", da, err)
	}
	pa, err := x.QueryPort()
	if err != nil || pa.State != uint32(verbs.PortActive) || pa.LinkLayer != 2 || pa.ActiveMTU != uint32(verbs.MTU1024) {
		t.Errorf("port attributes %+v, %v", pa, err)
	}
	if g, err := x.QueryGID(0); err != nil || g != r.gids[1] {
		t.Errorf("GID 0 = %v, %v", g, err)
	}
	var ce *client.Error
	if _, err := x.QueryGID(5); !errors.As(err, &ce) || ce.Errno != unix.ENODATA {
		t.Errorf("empty GID: %v, want ENODATA", err)
	}
	if _, err := client.Open(r.socket, "sroce_nothere"); !errors.As(err, &ce) || ce.Errno != unix.ENODEV {
		t.Errorf("unknown device: %v, want ENODEV", err)
	}
	st, err := client.Stats(r.socket, "sroce_mem1")
	if err != nil || st.Device != "sroce_mem1" || st.Clients != 1 || st.PortState != "PORT_ACTIVE" || len(st.Engine) < 10 {
		t.Errorf("stats: %+v, %v", st, err)
	}
	if _, err := client.Stats(r.socket, "sroce_nothere"); !errors.As(err, &ce) || ce.Errno != unix.ENODEV {
		t.Errorf("stats of an unknown device: %v, want ENODEV", err)
	}
}

// TestSendWriteReadAtomic moves data between two clients of one daemon,
// each on its own device, through the shared rings.
func TestSendWriteReadAtomic(t *testing.T) {
	for _, events := range []bool{false, true} {
		t.Run(fmt.Sprintf("events=%v", events), func(t *testing.T) {
			r := newRig(t, daemon.Options{})
			a, b := pair(t, r, events)

			// SEND with a receive posted.
			copy(b.buf.Buf[0:], make([]byte, 100))
			if err := b.qp.PostRecv(&verbs.RecvWR{WRID: 7, SGL: []mr.SGE{{Addr: b.buf.Addr(0), Length: 100, LKey: b.mr.LKey()}}}); err != nil {
				t.Fatal(err)
			}
			copy(a.buf.Buf[1000:], "hello through the daemon")
			if err := a.qp.PostSend(&verbs.SendWR{WRID: 1, Opcode: verbs.WROpSend, Flags: verbs.Signaled,
				SGL: []mr.SGE{{Addr: a.buf.Addr(1000), Length: 24, LKey: a.mr.LKey()}}}); err != nil {
				t.Fatal(err)
			}
			if wc := wait(t, a, "send completion"); wc.Status != verbs.WCSuccess || wc.WRID != 1 {
				t.Errorf("send: %+v", wc)
			}
			if wc := wait(t, b, "receive completion"); wc.Status != verbs.WCSuccess || wc.WRID != 7 || wc.ByteLen != 24 {
				t.Errorf("receive: %+v", wc)
			}
			if got := string(b.buf.Buf[:24]); got != "hello through the daemon" {
				t.Errorf("received %q", got)
			}

			// Inline WRITE into b's memory.
			if err := a.qp.PostSend(&verbs.SendWR{WRID: 2, Opcode: verbs.WROpRDMAWrite, Flags: verbs.Signaled | verbs.Inline,
				InlineData: []byte("inline write"), RemoteAddr: b.buf.Addr(4096), RKey: b.mr.RKey()}); err != nil {
				t.Fatal(err)
			}
			if wc := wait(t, a, "write completion"); wc.Status != verbs.WCSuccess {
				t.Errorf("write: %+v", wc)
			}
			if got := string(b.buf.Buf[4096 : 4096+12]); got != "inline write" {
				t.Errorf("written %q", got)
			}

			// READ 20000 bytes back (several packets).
			for i := 0; i < 20000; i++ {
				b.buf.Buf[8192+i] = byte(i * 7)
			}
			if err := a.qp.PostSend(&verbs.SendWR{WRID: 3, Opcode: verbs.WROpRDMARead, Flags: verbs.Signaled,
				SGL:        []mr.SGE{{Addr: a.buf.Addr(30000), Length: 20000, LKey: a.mr.LKey()}},
				RemoteAddr: b.buf.Addr(8192), RKey: b.mr.RKey()}); err != nil {
				t.Fatal(err)
			}
			if wc := wait(t, a, "read completion"); wc.Status != verbs.WCSuccess {
				t.Errorf("read: %+v", wc)
			}
			if !bytes.Equal(a.buf.Buf[30000:50000], b.buf.Buf[8192:28192]) {
				t.Error("READ brought back other bytes")
			}

			// FETCH_AND_ADD on b's memory.
			b.buf.Buf[100] = 5
			if err := a.qp.PostSend(&verbs.SendWR{WRID: 4, Opcode: verbs.WROpAtomicFetchAdd, Flags: verbs.Signaled,
				SGL:        []mr.SGE{{Addr: a.buf.Addr(200), Length: 8, LKey: a.mr.LKey()}},
				RemoteAddr: b.buf.Addr(96 + 8), RKey: b.mr.RKey(), CompareAdd: 3}); err != nil {
				t.Fatal(err)
			}
			if wc := wait(t, a, "atomic completion"); wc.Status != verbs.WCSuccess {
				t.Errorf("atomic: %+v", wc)
			}

			// A bad rkey: remote access error at a, and a's QP in error.
			if err := a.qp.PostSend(&verbs.SendWR{WRID: 5, Opcode: verbs.WROpRDMAWrite, Flags: verbs.Signaled,
				SGL:        []mr.SGE{{Addr: a.buf.Addr(0), Length: 8, LKey: a.mr.LKey()}},
				RemoteAddr: b.buf.Addr(0), RKey: b.mr.RKey() ^ 0x55}); err != nil {
				t.Fatal(err)
			}
			if wc := wait(t, a, "bad rkey completion"); wc.Status != verbs.WCRemAccessErr || wc.WRID != 5 {
				t.Errorf("bad rkey: %+v, want remote access error", wc)
			}
			deadline := time.Now().Add(5 * time.Second)
			for a.qp.State() != verbs.QPStateErr && time.Now().Before(deadline) {
				// wall clock: waits for the engine's loop, not for a timer
				time.Sleep(time.Millisecond)
			}
			if s := a.qp.State(); s != verbs.QPStateErr {
				t.Errorf("QP state after the NAK: %v", s)
			}
		})
	}
}

// TestClientGoneFreesEverything closes a client with everything still
// held: the daemon frees it all and the other client carries on.
func TestClientGoneFreesEverything(t *testing.T) {
	r := newRig(t, daemon.Options{})
	a, b := pair(t, r, false)
	if n := len(r.srv.Clients()); n != 2 {
		t.Fatalf("%d clients", n)
	}
	// a dies with receives posted and memory registered.
	for i := 0; i < 8; i++ {
		a.qp.PostRecv(&verbs.RecvWR{WRID: uint64(i), SGL: []mr.SGE{{Addr: a.buf.Addr(0), Length: 64, LKey: a.mr.LKey()}}})
	}
	a.x.Close()
	deadline := time.Now().Add(5 * time.Second)
	for len(r.srv.Clients()) != 1 && time.Now().Before(deadline) {
		// wall clock: waits for the daemon's goroutine to drop the closed client
		time.Sleep(time.Millisecond)
	}
	cs := r.srv.Clients()
	if len(cs) != 1 || cs[0].QPs != 1 || cs[0].MRs != 1 {
		t.Fatalf("clients after one left: %+v", cs)
	}
	if !strings.Contains(r.logText(), "client gone, its objects freed") {
		t.Errorf("log does not say the client's objects were freed:\n%s", r.logText())
	}
	// b's SEND to the vanished QP fails within its retry budget.
	if err := b.qp.PostSend(&verbs.SendWR{WRID: 9, Opcode: verbs.WROpSend, Flags: verbs.Signaled,
		SGL: []mr.SGE{{Addr: b.buf.Addr(0), Length: 8, LKey: b.mr.LKey()}}}); err != nil {
		t.Fatal(err)
	}
	wcs := make([]verbs.WC, 1)
	n, err := b.cq.Wait(wcs, 20*time.Second)
	if err != nil || n != 1 || wcs[0].Status == verbs.WCSuccess {
		t.Errorf("send to a departed client's QP: %d %+v %v, want an error completion", n, wcs[0], err)
	}
}

// TestMisbehavingClients sends garbage, lies and corrupt rings; each
// client is disconnected with a logged reason and the daemon carries on.
func TestMisbehavingClients(t *testing.T) {
	r := newRig(t, daemon.Options{})
	raw := func() *net.UnixConn {
		uc, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: r.socket, Net: "unixpacket"})
		if err != nil {
			t.Fatal(err)
		}
		return uc
	}
	expectClosed := func(uc *net.UnixConn, what string) {
		t.Helper()
		uc.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 64)
		if n, err := uc.Read(buf); err == nil && n > 0 {
			t.Errorf("%s: the daemon answered instead of disconnecting", what)
		}
		uc.Close()
	}
	uc := raw()
	uc.Write([]byte("GET / HTTP/1.1\r\n\r\n"))
	expectClosed(uc, "garbage")

	uc = raw()
	h := ctl.Append(nil, ctl.Hdr{Op: ctl.OpHello, Seq: 1})
	h[8] = 200 // the length lies
	uc.Write(h)
	expectClosed(uc, "lying length")

	uc = raw()
	uc.Write(ctl.Append(nil, ctl.Hdr{Op: ctl.OpAllocPD, Seq: 1}))
	expectClosed(uc, "ALLOC_PD before OPEN")

	// Descriptors with a request that takes none.
	uc = raw()
	hello := ctl.Hello{ABI: ctl.Version}
	pr, pw, _ := os.Pipe()
	uc.WriteMsgUnix(ctl.Append(nil, ctl.Hdr{Op: ctl.OpHello, Seq: 1, NFDs: 1}, ctl.Bytes(&hello)), unix.UnixRights(int(pr.Fd())), nil)
	pr.Close()
	pw.Close()
	expectClosed(uc, "a descriptor with HELLO")

	// A REG_MR whose descriptor is not a sealed memfd.
	x, err := client.Open(r.socket, "sroce_mem0")
	if err != nil {
		t.Fatal(err)
	}
	pd, err := x.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	buf, _ := x.Alloc(4096)
	// a range past the memfd's end
	if _, err := pd.RegMR(&client.Buffer{Buf: buf.Buf}, 0, 4096, mr.AccessLocalWrite); err == nil {
		t.Error("REG_MR with a bad descriptor succeeded")
	}
	x.Close()

	// Corrupt rings: a send ring whose producer index jumps far ahead.
	e := newEndpoint(t, r, "sroce_mem0", false)
	sq := e.qp.SendRing()
	sq.Header().Prod.Store(sq.Prod() + 1000)
	e.qp.Ring()
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(r.logText(), "its rings are corrupt") && time.Now().Before(deadline) {
		// wall clock: waits for the daemon's bridge goroutine to log
		time.Sleep(time.Millisecond)
	}
	if !strings.Contains(r.logText(), "its rings are corrupt") {
		t.Error("a corrupt send ring was not reported")
	}
	for _, want := range []string{"protocol error", "before OPEN", "REG_MR", "passed descriptors with a request that takes none"} {
		if !strings.Contains(r.logText(), want) {
			t.Errorf("log lacks %q:\n%s", want, r.logText())
		}
	}
	// The daemon still serves.
	a, b := pair(t, r, true)
	b.qp.PostRecv(&verbs.RecvWR{WRID: 1, SGL: []mr.SGE{{Addr: b.buf.Addr(0), Length: 64, LKey: b.mr.LKey()}}})
	a.qp.PostSend(&verbs.SendWR{WRID: 1, Opcode: verbs.WROpSend, Flags: verbs.Signaled | verbs.Inline, InlineData: []byte("still here")})
	if wc := wait(t, b, "receive after the misbehaving clients"); wc.Status != verbs.WCSuccess {
		t.Errorf("receive: %+v", wc)
	}
}

// TestLoopback connects two QPs of one device, in two clients: their
// packets never need the wire.
func TestLoopback(t *testing.T) {
	r := newRig(t, daemon.Options{})
	a := newEndpoint(t, r, "sroce_mem0", true)
	b := newEndpoint(t, r, "sroce_mem0", true)
	connect(t, a, b.qp.QPN(), r.gids[0])
	connect(t, b, a.qp.QPN(), r.gids[0])
	b.qp.PostRecv(&verbs.RecvWR{WRID: 1, SGL: []mr.SGE{{Addr: b.buf.Addr(0), Length: 64, LKey: b.mr.LKey()}}})
	a.qp.PostSend(&verbs.SendWR{WRID: 1, Opcode: verbs.WROpSend, Flags: verbs.Signaled | verbs.Inline, InlineData: []byte("to myself")})
	if wc := wait(t, b, "loopback receive"); wc.Status != verbs.WCSuccess || string(b.buf.Buf[:9]) != "to myself" {
		t.Errorf("loopback receive: %+v %q", wc, b.buf.Buf[:9])
	}
	if wc := wait(t, a, "loopback send"); wc.Status != verbs.WCSuccess {
		t.Errorf("loopback send: %+v", wc)
	}
}

// TestSystemdUnit checks the unit files with systemd-analyze verify, with
// the test binary standing in for /usr/bin/sroce (the man pages of
// Documentation= are the package's, not installed here).
func TestSystemdUnit(t *testing.T) {
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not found: cannot check daemon/systemd/*.service")
	}
	self, _ := os.Executable()
	dir := t.TempDir()
	for _, name := range []string{"sroce.service", "sroce@.service"} {
		unit, err := os.ReadFile(filepath.Join("systemd", name))
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, name)
		os.WriteFile(path, bytes.ReplaceAll(unit, []byte("/usr/bin/sroce"), []byte(self)), 0o644)
		if name == "sroce@.service" {
			// A template is verified through an instance of it.
			path = filepath.Join(dir, "sroce@eth0.service")
			os.WriteFile(path, bytes.ReplaceAll(unit, []byte("/usr/bin/sroce"), []byte(self)), 0o644)
		}
		out, err := exec.Command(sa, "verify", "--man=no", path).CombinedOutput()
		if err != nil || len(bytes.TrimSpace(out)) != 0 {
			t.Errorf("systemd-analyze verify %s: %v\n%s", name, err, out)
		}
	}
}

// TestClientLimits checks the per-client limits: the call past a limit
// fails with ENOMEM, the client keeps what it has, and another client is
// not affected.
func TestClientLimits(t *testing.T) {
	r := newRig(t, daemon.Options{Limits: daemon.Limits{QPs: 2, MRs: 2, RegBytes: 3 * 4096}})
	x, err := client.Open(r.socket, "sroce_mem0")
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	pd, _ := x.AllocPD()
	buf, _ := x.Alloc(8 * 4096)
	var ce *client.Error
	if _, err := pd.RegMR(buf, 0, 4*4096, mr.AccessLocalWrite); !errors.As(err, &ce) || ce.Errno != unix.ENOMEM {
		t.Errorf("registering past the byte limit: %v, want ENOMEM", err)
	}
	for i := 0; i < 2; i++ {
		if _, err := pd.RegMR(buf, i*4096, 4096, mr.AccessLocalWrite); err != nil {
			t.Fatalf("MR %d: %v", i, err)
		}
	}
	if _, err := pd.RegMR(buf, 2*4096, 4096, mr.AccessLocalWrite); !errors.As(err, &ce) || ce.Errno != unix.ENOMEM {
		t.Errorf("third MR: %v, want ENOMEM", err)
	}
	cq, _ := x.CreateCQ(16, false)
	cap := verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}
	for i := 0; i < 2; i++ {
		if _, err := pd.CreateQP(&client.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: cap, SigAll: false}); err != nil {
			t.Fatalf("QP %d: %v", i, err)
		}
	}
	if _, err := pd.CreateQP(&client.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: cap, SigAll: false}); !errors.As(err, &ce) || ce.Errno != unix.ENOMEM {
		t.Errorf("third QP: %v, want ENOMEM", err)
	}
	if !strings.Contains(r.logText(), "client limit reached") {
		t.Error("the limits were not logged")
	}
	// Another client has its own budget.
	y, err := client.Open(r.socket, "sroce_mem0")
	if err != nil {
		t.Fatal(err)
	}
	defer y.Close()
	pd2, _ := y.AllocPD()
	buf2, _ := y.Alloc(4096)
	if _, err := pd2.RegMR(buf2, 0, 4096, mr.AccessLocalWrite); err != nil {
		t.Errorf("another client's MR: %v", err)
	}
}

// TestRemoveDevice removes a device whose interface went away: its
// clients are disconnected and it is no longer listed; the other device's
// clients carry on.
func TestRemoveDevice(t *testing.T) {
	r := newRig(t, daemon.Options{})
	gone, err := client.Open(r.socket, "sroce_mem0")
	if err != nil {
		t.Fatal(err)
	}
	defer gone.Close()
	stays, err := client.Open(r.socket, "sroce_mem1")
	if err != nil {
		t.Fatal(err)
	}
	defer stays.Close()
	if n := r.srv.Remove("mem0"); n != 1 {
		t.Fatalf("%d devices left, want 1", n)
	}
	if _, err := gone.QueryPort(); err == nil {
		t.Error("the removed device's client still gets answers")
	}
	if _, err := stays.QueryPort(); err != nil {
		t.Errorf("the other device's client: %v", err)
	}
	devs, err := client.Devices(r.socket)
	if err != nil || len(devs) != 1 || devs[0].Name != "sroce_mem1" {
		t.Errorf("devices after the removal: %+v, %v", devs, err)
	}
	var ce *client.Error
	if _, err := client.Open(r.socket, "sroce_mem0"); !errors.As(err, &ce) || ce.Errno != unix.ENODEV {
		t.Errorf("opening the removed device: %v, want ENODEV", err)
	}
	if !strings.Contains(r.logText(), "device removed") {
		t.Error("the removal was not logged")
	}
}

// TestCQOverflow fills a client's CQ: the client gets EventCQErr for it on
// its asynchronous events and sees the CQ marked in shared memory.
func TestCQOverflow(t *testing.T) {
	r := newRig(t, daemon.Options{})
	a, b := pair(t, r, false)
	small, err := a.x.CreateCQ(2, false)
	if err != nil {
		t.Fatal(err)
	}
	q, err := a.pd.CreateQP(&client.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: small, RecvCQ: small,
		Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 16}})
	if err != nil {
		t.Fatal(err)
	}
	// A second QP of b for q to talk to.
	bq, err := b.pd.CreateQP(&client.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: b.cq, RecvCQ: b.cq,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	ca := &endpoint{qp: q}
	cb := &endpoint{qp: bq}
	connect(t, ca, bq.QPN(), r.gids[1])
	connect(t, cb, q.QPN(), r.gids[0])
	for i := 0; i < 5; i++ {
		if err := q.PostSend(&verbs.SendWR{WRID: uint64(i), Opcode: verbs.WROpRDMAWrite, Flags: verbs.Signaled | verbs.Inline,
			InlineData: []byte("x"), RemoteAddr: b.buf.Addr(0), RKey: b.mr.RKey()}); err != nil {
			t.Fatal(err)
		}
	}
	ev, err := a.x.AsyncEvent(10 * time.Second)
	if err != nil || verbs.EventType(ev.EventType) != verbs.EventCQErr {
		t.Fatalf("asynchronous event %+v, %v; want a CQ error", ev, err)
	}
	if !small.Overflowed() {
		t.Error("the CQ's control block does not say it overflowed")
	}
}

// TestDestroySendsPosted: unsignaled WRITEs posted just before the QP is
// destroyed reach the peer, whatever the engine mode (the daemon sends
// what the client's ring holds before it destroys the QP).
func TestDestroySendsPosted(t *testing.T) {
	for _, mode := range []roce.EngineMode{roce.EngineInline, roce.EngineAdaptive, roce.EngineSleep} {
		t.Run(mode.String(), func(t *testing.T) {
			r := newRigEngine(t, daemon.Options{}, mode)
			a, b := pair(t, r, false)
			const n, size = 16, 1024
			for i := range n * size {
				a.buf.Buf[i] = byte(i*7 + 1)
			}
			for i := range n {
				if err := a.qp.PostSend(&verbs.SendWR{WRID: uint64(i), Opcode: verbs.WROpRDMAWrite,
					SGL: []mr.SGE{a.mr.SGE(i*size, size)}, RemoteAddr: b.buf.Addr(i * size), RKey: b.mr.RKey()}); err != nil {
					t.Fatal(err)
				}
			}
			if err := a.qp.Destroy(); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(10 * time.Second)
			for !bytes.Equal(b.buf.Buf[:n*size], a.buf.Buf[:n*size]) {
				if time.Now().After(deadline) {
					t.Fatalf("%s: the WRITEs posted before DESTROY_QP had not arrived after 10s", mode)
				}
				// wall clock: waits for the daemon's goroutines and the engines' loops
				time.Sleep(time.Millisecond)
			}
		})
	}
}
