package main

// How the tools fail: one sentence on stderr and exit status 1, for a
// missing interface, a peer that is not there, one that does not answer,
// one that speaks another exchange, one whose memory refuses the access,
// and one that stops answering mid-run. The misbehaving peers are written
// here with package oob and a sroce device of their own.

import (
	"context"
	"net"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/internal/testpair"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/roce/iface"
	"github.com/sroce/sroce/tools/oob"
	"github.com/sroce/sroce/verbs"
)

// runClient runs "sroce cmd args... -p port host" on the client address
// and returns the result.
func runClient(t *testing.T, cmd string, port int, args ...string) testpair.Result {
	t.Helper()
	all := append([]string{cmd, "-d", "lo@" + pairs.Client.String(), "-p", strconv.Itoa(port)}, args...)
	all = append(all, pairs.Server.String())
	_, done := pairs.Start(all)
	select {
	case r := <-done:
		return r
	case <-time.After(time.Minute):
		t.Fatalf("%q did not end within a minute", all)
	}
	return testpair.Result{}
}

// wantFailure checks that r failed with status 1 and one line on stderr
// that contains want.
func wantFailure(t *testing.T, what string, r testpair.Result, want string) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(r.Stderr, "\n"), "\n")
	last := lines[len(lines)-1]
	if r.Code != exitProblem || !strings.Contains(last, want) || !strings.HasPrefix(last, "sroce ") {
		t.Errorf("%s: want exit 1 and a last line with %q, got %v", what, want, r)
	}
}

// fakeListener listens on the server address and hands each connection
// to serve.
func fakeListener(t *testing.T, serve func(nc net.Conn)) int {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(pairs.Server.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			go serve(nc)
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestToolFailures checks the failures that need no RDMA peer.
func TestToolFailures(t *testing.T) {
	t.Setenv(envStep, "700ms")
	code, out, errOut := runSroce(t, nil, "write-bw", "-d", "nosuch0")
	if code != exitProblem || out != "" || errOut != "sroce write-bw: there is no network interface named \"nosuch0\"\n" {
		t.Errorf("no such interface: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, _, errOut = runSroce(t, nil, "rc-pingpong", "-d", "lo@192.0.2.77")
	if code != exitProblem || !strings.Contains(errOut, "192.0.2.77 is not an address of interface lo") {
		t.Errorf("foreign address: exit %d, stderr %q", code, errOut)
	}

	// Nobody listens: the connection is refused.
	port := pairs.Port(t)
	for _, cmd := range []string{"write-bw", "rc-pingpong", "ud-pingpong", "read-lat"} {
		r := runClient(t, cmd, port)
		wantFailure(t, cmd+" without a server", r, "could not connect to "+net.JoinHostPort(pairs.Server.String(), strconv.Itoa(port)))
	}

	// A server that accepts and never says anything: the exchange times out.
	silent := fakeListener(t, func(nc net.Conn) {
		// wall clock: a peer on a real TCP socket that stays silent
		time.Sleep(5 * time.Second)
		nc.Close()
	})
	wantFailure(t, "silent perftest peer", runClient(t, "send-bw", silent), "exchange timed out after 700ms waiting for the peer's version message")
	wantFailure(t, "silent pingpong peer", runClient(t, "rc-pingpong", silent), "exchange timed out after 700ms waiting for the peer's address message")

	// A server that speaks something else.
	other := fakeListener(t, func(nc net.Conn) {
		defer nc.Close()
		buf := make([]byte, 64)
		nc.Read(buf)
		nc.Write([]byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\nHTTP/1.1 400 Bad Request\r\n\r\n"))
		// wall clock: keeps a real TCP connection open
		time.Sleep(time.Second)
	})
	wantFailure(t, "HTTP as perftest peer", runClient(t, "write-bw", other), "peer speaks a different perftest exchange")
	wantFailure(t, "HTTP as pingpong peer", runClient(t, "ud-pingpong", other), "peer sent a malformed address message")

	// A perftest peer of another version.
	old := fakeListener(t, func(nc net.Conn) {
		defer nc.Close()
		c := oob.NewConn(nc, oob.Server)
		c.Version = "5.60"
		c.AcceptVersion = func(string) error { return nil }
		c.ExchangeVersions(context.Background())
		// wall clock: keeps a real TCP connection open
		time.Sleep(time.Second)
	})
	wantFailure(t, "old perftest peer", runClient(t, "read-bw", old), `got version "5.60"`)
}

// fakePeer is a sroce device on the server address, for peers that
// misbehave on purpose.
type fakePeer struct {
	port *iface.Port
	pd   *roce.PD
	cq   *roce.CQ
	qp   *roce.QP
	mr   *roce.MR
	gid  bth.GID
}

// newFakePeer opens the device and creates an RC QP in INIT.
func newFakePeer(t *testing.T) *fakePeer {
	t.Helper()
	port, err := iface.Open(context.Background(), "lo", iface.Options{Mode: iface.ModeUDP, Addr: pairs.Server})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { port.Close() })
	f := &fakePeer{port: port, gid: bth.GIDFromAddr(pairs.Server)}
	dev := port.Device()
	f.pd, _ = dev.AllocPD()
	f.cq, _ = dev.CreateCQ(64, nil)
	if f.mr, err = f.pd.RegMR(make([]byte, 1<<16), mr.AccessLocalWrite|mr.AccessRemoteWrite); err != nil {
		t.Fatal(err)
	}
	if f.qp, err = f.pd.CreateQP(&roce.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: f.cq, RecvCQ: f.cq,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		t.Fatal(err)
	}
	err = f.qp.Modify(&verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1, AccessFlags: mr.AccessRemoteWrite},
		verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// toRTR moves the QP to RTR toward remote.
func (f *fakePeer) toRTR(remote oob.KeyMsg) error {
	av, err := f.port.AHAttr(context.Background(), bth.GID(remote.GID), f.port.DefaultGIDIndex())
	if err != nil {
		return err
	}
	return f.qp.Connect(&roce.ConnectAttr{AH: av, PathMTU: verbs.MTU1024, DestQPN: bth.QPN(remote.QPN),
		RQPSN: bth.PSN(remote.PSN), MaxDestRdAtomic: 1, MinRNRTimer: 12, StayRTR: true})
}

// serveWriteBW runs the server side of ib_write_bw's exchange with key k
// on the first connection to ln, moving the QP to RTR only if connect is
// set.
func (f *fakePeer) serveWriteBW(t *testing.T, ln net.Listener, k oob.KeyMsg, connect bool) {
	go func() {
		c, err := oob.AcceptPerftest(context.Background(), ln, oob.Timeouts{Step: 10 * time.Second})
		if err != nil {
			return
		}
		if _, err := c.Prologue(context.Background(), oob.LocalSysData(), verbs.MTU1024); err != nil {
			return
		}
		c.Run(context.Background(), oob.Flow{Test: oob.WriteBW, Sizes: []uint64{4096}}, []oob.KeyMsg{k}, oob.Hooks{
			Connect: func(r []oob.KeyMsg) error {
				if connect {
					return f.toRTR(r[0])
				}
				return nil
			},
			Run: func(uint64) (oob.BWReport, error) { return oob.BWReport{}, nil },
		})
	}()
}

// newFakeWriteBWServer starts a fake ib_write_bw server whose key
// message is changed by edit and which connects its QP only if connect is
// set; it returns the TCP port.
func newFakeWriteBWServer(t *testing.T, edit func(*oob.KeyMsg), connect bool) int {
	t.Helper()
	f := newFakePeer(t)
	key := oob.KeyMsg{OutReads: 1, QPN: uint32(f.qp.QPN()), PSN: 0x123456, RKey: f.mr.RKey(),
		VAddr: f.mr.Addr(), GID: f.gid}
	edit(&key)
	ln, err := oob.Listen(context.Background(), net.JoinHostPort(pairs.Server.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	f.serveWriteBW(t, ln, key, connect)
	return ln.Addr().(*net.TCPAddr).Port
}

// TestToolRemoteAccessError checks a completion error: the peer's memory
// refuses the WRITEs (a wrong rkey), the peer NAKs them, and the client
// reports it as perftest does, in one sentence.
func TestToolRemoteAccessError(t *testing.T) {
	t.Setenv(envStall, "5s")
	port := newFakeWriteBWServer(t, func(k *oob.KeyMsg) { k.RKey ^= 0x5a5a00 }, true)
	r := runClient(t, "write-bw", port, "-n", "20", "-s", "4096")
	wantFailure(t, "bad rkey", r, "Completion with error at client: status 10 (remote access error)")
	if !strings.Contains(r.Stdout, "RDMA_Write BW Test") {
		t.Errorf("no banner before the failure:\n%s", r.Stdout)
	}
}

// TestToolStall checks a peer that goes through the exchange but never
// answers on the wire: the client gives up after the stall limit instead
// of retrying forever (retry_cnt 7).
func TestToolStall(t *testing.T) {
	t.Setenv(envStall, "1500ms")
	port := newFakeWriteBWServer(t, func(*oob.KeyMsg) {}, false)
	start := time.Now()
	r := runClient(t, "write-bw", port, "-n", "20", "-s", "4096")
	wantFailure(t, "silent QP", r, "no completion for 1.5s after 0 of 20 completions: the peer stopped answering (QP 0x")
	// The sentence says what the requester was doing meanwhile: requests
	// unacknowledged and retransmitted after each timeout.
	t.Logf("%s", r.Stderr)
	if m := regexp.MustCompile(`RTS: (\d+) packets unacknowledged.*; (\d+) timeouts, (\d+) packets retransmitted`).FindStringSubmatch(r.Stderr); m == nil || m[1] == "0" || m[2] == "0" || m[3] == "0" {
		t.Errorf("the stall does not show the requester retrying: %q", r.Stderr)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("the client took %v to give up", d)
	}
}

// TestPingpongPeerWithoutGID checks a pingpong peer run without -g (the
// real tools then send a zero GID, with which RoCE cannot work).
func TestPingpongPeerWithoutGID(t *testing.T) {
	ln, err := oob.Listen(context.Background(), net.JoinHostPort(pairs.Server.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	go oob.ServePingpong(context.Background(), ln, oob.Timeouts{Step: 5 * time.Second},
		oob.Dest{QPN: 0x11, PSN: 0x1234}, nil)
	r := runClient(t, "rc-pingpong", port, "-n", "5")
	wantFailure(t, "zero GID", r, "the peer announced no GID: RoCE needs one (run the peer with -g or -x)")
}
