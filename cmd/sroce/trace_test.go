package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket/pcapgo"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/internal/testpair"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/roce/memlink"
	"github.com/sroce/sroce/roce/tracesock"
	"github.com/sroce/sroce/verbs"
)

// liveSide is one device of the in-process pair TestTraceLive traces.
type liveSide struct {
	dev  *roce.Device
	pd   *roce.PD
	cq   *roce.CQ
	gid  bth.GID
	mac  net.HardwareAddr
	buf  *roce.MR
	qp   *roce.QP
	name string
}

// openLive opens two running devices on an in-memory link in real time.
func openLive(t *testing.T) [2]*liveSide {
	clock := roce.SystemClock()
	router := memlink.NewRouter(clock, 1, memlink.Impairments{})
	var s [2]*liveSide
	for i, name := range []string{"sroce_live", "sroce_peer"} {
		mac := net.HardwareAddr{2, 0, 0, 0, 9, byte(i)}
		gid := bth.GIDFromAddr(netip.AddrFrom4([4]byte{10, 9, 0, byte(i + 1)}))
		dev, err := roce.Open(router.NewPort(mac, 1500), &roce.Options{Name: name, Clock: clock, GIDs: []bth.GID{gid}})
		if err != nil {
			t.Fatal(err)
		}
		if err := dev.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { dev.Close() })
		pd, _ := dev.AllocPD()
		cq, _ := dev.CreateCQ(64, nil)
		m, err := pd.RegMR(make([]byte, 4096), mr.AccessLocalWrite|mr.AccessRemoteWrite)
		if err != nil {
			t.Fatal(err)
		}
		s[i] = &liveSide{dev: dev, pd: pd, cq: cq, gid: gid, mac: mac, buf: m, name: name}
	}
	return s
}

// connectLive creates and connects a QP pair between the two sides.
func connectLive(t *testing.T, s [2]*liveSide) {
	for _, x := range s {
		q, err := x.pd.CreateQP(&roce.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: x.cq, RecvCQ: x.cq,
			Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		x.qp = q
	}
	for i, x := range s {
		p := s[1-i]
		var dmac [6]byte
		copy(dmac[:], p.mac)
		if err := x.qp.Connect(&roce.ConnectAttr{Access: mr.AccessRemoteWrite,
			AH: verbs.AHAttr{DGID: p.gid, DMAC: dmac, HopLimit: 64}, PathMTU: verbs.MTU1024,
			DestQPN: p.qp.QPN(), RQPSN: bth.PSN(100 * (2 - i)), SQPSN: bth.PSN(100 * (i + 1)),
			MaxDestRdAtomic: 4, MaxRdAtomic: 4, MinRNRTimer: 12, Timeout: 14, RetryCnt: 7, RNRRetry: 7}); err != nil {
			t.Fatal(err)
		}
	}
}

// waitFor waits up to 10 s for out to contain want.
func waitFor(t *testing.T, out *testpair.Buffer, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("the trace did not show %q within 10s; it printed:\n%s", want, out.String())
		}
		// wall clock: waits for a real process's trace output
		time.Sleep(10 * time.Millisecond)
	}
}

// TestTraceLive attaches "sroce trace" to a running device, follows an
// RDMA WRITE through its engine events and packets, and ends cleanly with
// its sentence when the device closes; the pcapng it wrote carries the
// analysis in its packet comments.
func TestTraceLive(t *testing.T) {
	t.Setenv(tracesock.EnvDir, t.TempDir())
	s := openLive(t)
	if _, err := tracesock.Serve(s[0].dev); err != nil {
		t.Fatal(err)
	}
	capFile := filepath.Join(t.TempDir(), "live.pcapng")
	var stdout, stderr testpair.Buffer
	code := make(chan int, 1)
	go func() {
		code <- run([]string{"trace", "-d", "live", "--pcapng", capFile},
			&env{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr})
	}()
	var jout, jerr testpair.Buffer
	jcode := make(chan int, 1)
	go func() {
		jcode <- run([]string{"trace", "-d", "sroce_live", "--json"},
			&env{Stdin: strings.NewReader(""), Stdout: &jout, Stderr: &jerr})
	}()
	waitFor(t, &stderr, "tracing sroce_live")
	waitFor(t, &jerr, "tracing sroce_live")
	// The server subscribes once it accepted the connection: connect
	// QP pairs until the trace shows one reaching RTS.
	deadline := time.Now().Add(10 * time.Second)
	for {
		connectLive(t, s)
		// wall clock: waits for a real process to connect
		time.Sleep(20 * time.Millisecond)
		if strings.Contains(stdout.String(), "RTR -> RTS") && strings.Contains(jout.String(), `"to":"RTS"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no QP state change traced within 10s:\n%s\n%s", stdout.String(), stderr.String())
		}
	}
	a, b := s[0], s[1]
	if err := a.qp.PostSend(&verbs.SendWR{WRID: 7, Opcode: verbs.WROpRDMAWrite, Flags: verbs.Signaled,
		SGL: []mr.SGE{a.buf.SGE(0, 3000)}, RemoteAddr: b.buf.Addr(), RKey: b.buf.RKey()}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, &stdout, "completion wr_id=7 RDMA_WRITE success")
	a.dev.Close()
	select {
	case c := <-code:
		if c != 0 {
			t.Fatalf("sroce trace exited %d:\n%s", c, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("sroce trace did not end within 10s of its device closing:\n%s", stderr.String())
	}
	select {
	case c := <-jcode:
		if c != 0 {
			t.Fatalf("sroce trace --json exited %d:\n%s", c, jerr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("sroce trace --json did not end within 10s of its device closing:\n%s", jerr.String())
	}
	kinds := map[string]int{}
	for _, l := range strings.Split(strings.TrimSpace(jout.String()), "\n") {
		var obj struct {
			Kind   string `json:"kind"`
			Packet *struct {
				Opcode   string   `json:"opcode"`
				Analysis []string `json:"analysis"`
			} `json:"packet"`
		}
		if err := json.Unmarshal([]byte(l), &obj); err != nil {
			t.Fatalf("not a JSON line: %q: %v", l, err)
		}
		kinds[obj.Kind]++
		if (obj.Kind == "tx" || obj.Kind == "rx") && (obj.Packet == nil || obj.Packet.Opcode == "") {
			t.Errorf("a %s line without its packet: %s", obj.Kind, l)
		}
	}
	for _, k := range []string{"qp_state", "post_send", "tx", "rx", "timer_armed", "completion", "timer_stopped"} {
		if kinds[k] == 0 {
			t.Errorf("no %s object in the JSON trace: %v", k, kinds)
		}
	}
	out := stdout.String()
	for _, want := range []string{
		"QP pair 1: A 10.9.0.1 QP",
		fmt.Sprintf("QP %#06x posts RDMA_WRITE wr_id=7 length=3000", uint32(a.qp.QPN())),
		"---- RDMA_WRITE_FIRST psn=0x0000", "RDMA_WRITE_MIDDLE", "RDMA_WRITE_LAST psn=0x000",
		"retransmit timer armed: fires in",
		"<---", "ACKNOWLEDGE", "acks PSN",
		"retransmit timer stopped: everything sent is acknowledged",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the trace lacks %q:\n%s", want, out)
		}
	}
	post := strings.Index(out, "posts RDMA_WRITE wr_id=7")
	first := strings.Index(out, "RDMA_WRITE_FIRST")
	comp := strings.Index(out, "completion wr_id=7")
	if !(post < first && first < comp) {
		t.Errorf("post, first packet and completion out of order:\n%s", out)
	}
	if want := fmt.Sprintf("sroce_live (pid %d) went away: the device closed", os.Getpid()); !strings.Contains(stderr.String(), want) {
		t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
	}
	if c, _ := tracesock.List(); len(c) != 0 {
		t.Errorf("trace sockets left after the device closed: %v", c)
	}

	// The capture: every packet, the analysed ones with their comment.
	data, err := os.ReadFile(capFile)
	if err != nil {
		t.Fatal(err)
	}
	r, err := pcapgo.NewNgReader(bytes.NewReader(data), pcapgo.DefaultNgReaderOptions)
	if err != nil {
		t.Fatal(err)
	}
	var comments []string
	for {
		_, _, opts, err := r.ReadPacketDataWithOptions()
		if err != nil {
			break
		}
		comments = append(comments, opts.Comments...)
	}
	all := strings.Join(comments, "\n")
	for _, want := range []string{"sroce: RDMA_WRITE_FIRST psn=", "sroce: ACKNOWLEDGE psn=", "acks PSN"} {
		if !strings.Contains(all, want) {
			t.Errorf("the capture's comments lack %q:\n%s", want, all)
		}
	}
}

// TestTraceNoDevice: with nothing to attach to, trace says so; with
// several, it lists them.
func TestTraceNoDevice(t *testing.T) {
	t.Setenv(tracesock.EnvDir, t.TempDir())
	var stdout, stderr bytes.Buffer
	e := &env{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr}
	if c := run([]string{"trace"}, e); c != exitProblem || !strings.Contains(stderr.String(), "no sroce device serves its trace") {
		t.Errorf("trace without devices: exit %d, %s", c, stderr.String())
	}
	s := openLive(t)
	for _, x := range s {
		if _, err := tracesock.Serve(x.dev); err != nil {
			t.Fatal(err)
		}
	}
	stderr.Reset()
	if c := run([]string{"trace"}, e); c != exitProblem || !strings.Contains(stderr.String(), "2 devices serve their trace; pick one with -d") ||
		!strings.Contains(stderr.String(), fmt.Sprintf("sroce_peer.%d", os.Getpid())) {
		t.Errorf("trace with two devices: exit %d, %s", c, stderr.String())
	}
	stderr.Reset()
	if c := run([]string{"trace", "-d", "nope"}, e); c != exitProblem || !strings.Contains(stderr.String(), `no device named "nope"`) {
		t.Errorf("trace -d nope: exit %d, %s", c, stderr.String())
	}
	stderr.Reset()
	if c := run([]string{"trace", "-d", "peer", "--for", "50ms", "--json"}, e); c != exitOK || !strings.Contains(stderr.String(), "stopped after 50ms") {
		t.Errorf("trace --for 50ms: exit %d, %s", c, stderr.String())
	}
}

// TestTraceTool attaches "sroce trace" to the device of a real tool (an
// rc-pingpong server on loopback), sees its SENDs, ACKs and completions,
// and ends with its sentence when the tool exits.
func TestTraceTool(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a tool pair")
	}
	t.Setenv(tracesock.EnvDir, t.TempDir())
	port := strconv.Itoa(pairs.Port(t))
	common := []string{"-p", port, "-n", "3", "-s", "3000", "-m", "1024"}
	sout, sdone := pairs.Start(append([]string{"rc-pingpong", "-d", "lo@" + pairs.Server.String()}, common...))
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(sout.String(), "local address") {
		select {
		case r := <-sdone:
			if strings.Contains(r.Stderr, "address already in use") {
				t.Skipf("port 4791 is taken on %s: %s", pairs.Server, r.Stderr)
			}
			t.Fatalf("the server ended before it was ready: %v", r)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server was not ready after 20s:\n%s", sout.String())
		}
	}
	var stdout, stderr testpair.Buffer
	code := make(chan int, 1)
	go func() {
		code <- run([]string{"trace", "-d", "lo"}, &env{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr})
	}()
	// Once trace names the device, the device has subscribed it.
	waitFor(t, &stderr, "tracing sroce_lo")
	_, cdone := pairs.Start(append(append([]string{"rc-pingpong", "-d", "lo@" + pairs.Client.String()}, common...), pairs.Server.String()))
	for _, done := range []<-chan testpair.Result{sdone, cdone} {
		select {
		case r := <-done:
			if r.Code != 0 {
				t.Fatalf("rc-pingpong: %v", r)
			}
		case <-time.After(60 * time.Second):
			t.Fatal("rc-pingpong did not finish within 60s")
		}
	}
	select {
	case c := <-code:
		if c != 0 {
			t.Fatalf("sroce trace exited %d:\n%s", c, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("sroce trace did not end within 10s of the tool's exit:\n%s", stderr.String())
	}
	out := stdout.String()
	if miss := lacks(out, "posts SEND wr_id=", "SEND_FIRST psn=", "SEND_LAST psn=", "ackreq", "acks PSN",
		"completion wr_id=1 RECV success length=3000", "SEND success"); len(miss) > 0 {
		t.Errorf("the trace of rc-pingpong lacks %q:\n%s", miss, out)
	}
	if !strings.Contains(stderr.String(), "went away: the device closed") {
		t.Errorf("the trace did not end with its sentence:\n%s", stderr.String())
	}
}
