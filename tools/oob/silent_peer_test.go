package oob

// The closing handshake of a perftest run whose peer host stood silent
// during the run, as an emulated rdma_rxe guest does when its processor
// is starved or its NIC hangs and is reset: the failure seen once against
// ib_send_lat in a paused guest ("ethernet_read_keys: Couldn't read
// remote address" on rxe's side, "exchange timed out after 10m0s" after
// 28 s on sroce's). This side sits in a namespace whose veth drops every
// frame the peer sends (an XDP program) for longer than the TCP keepalive
// sroce's connections had (5 s idle, 3 probes 5 s apart: 20 s), so no
// probe is answered; the peer's namespace still receives what this side
// sends. With keepalive, the kernel gave up on the connection at 20 s and
// reset it: the peer's read of the closing key message failed, and this
// side reported the ETIMEDOUT as its step's limit expiring. Without it,
// as with the reference tools, the peer is waited for up to the step's
// limit and both sides end the handshake.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"

	"github.com/sroce/sroce/internal/nsutil"
)

// silentPeerPort is the perftest port of the test (in the CI's range).
const silentPeerPort = 47411

// silence is how long the peer's host stays silent: longer than the old
// keepalive's 20 s.
const silence = 25 * time.Second

func TestClosingHandshakeAfterSilentPeerHost(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping: the peer stays silent for 25 s")
	}
	nsutil.Skip(t)
	// The silence is real time (it must outlast the kernel's keepalive):
	// it runs beside TestRealTools, each in a network of its own.
	t.Parallel()
	pair, err := nsutil.NewPair(nsutil.PairConfig{Prefix: "c26ka"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pair.Close() })
	addrB := nsutil.DefaultAddrB.Addr()

	// The neighbour entry of the peer must outlive the silence, or this
	// side could not even send its reset.
	var macB string
	if err := pair.B.Do(func() error {
		ifc, err := net.InterfaceByName(pair.Veth.NameB)
		if err == nil {
			macB = ifc.HardwareAddr.String()
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if out, err := pair.A.Exec(ctx, "ip", "neigh", "replace", addrB.String(), "lladdr", macB, "dev", pair.Veth.NameA, "nud", "permanent"); err != nil {
		t.Fatalf("a permanent neighbour entry for the peer: %v\n%s", err, out)
	}

	// The peer's socket has no keepalive, as perftest's has none.
	var ln net.Listener
	if err := pair.B.Do(func() (err error) {
		lc := net.ListenConfig{KeepAlive: -1}
		ln, err = lc.Listen(ctx, "tcp", netip.AddrPortFrom(addrB, silentPeerPort).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()

	keys := testKeys(1, 0x61)[0]
	peerMsg, err := testKeys(1, 0x50)[0].Marshal(true)
	if err != nil {
		t.Fatal(err)
	}
	peerErr := make(chan error, 1)
	go func() { peerErr <- perftestServerClose(ln, peerMsg) }()

	var c *Conn
	if err := pair.A.Do(func() (err error) {
		c, err = DialPerftest(ctx, netip.AddrPortFrom(addrB, silentPeerPort).String(), Timeouts{Step: 10 * time.Second, PeerRun: time.Minute})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.ExchangeKeys(ctx, keys); err != nil {
		t.Fatalf("the barrier before the run: %v", err)
	}

	// The run: the peer's host is silent, seen from here.
	detach, err := dropIngress(pair.A, pair.Veth.NameA)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(silence) // the run; nothing to poll for
	if err := detach(); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	if err := c.Finish(ctx, keys); err != nil {
		t.Errorf("this side's closing handshake after %v: %v", time.Since(start).Round(time.Millisecond), err)
	}
	select {
	case err := <-peerErr:
		if err != nil {
			t.Errorf("the peer: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the peer did not end its closing handshake within a minute")
	}
}

// perftestServerClose plays perftest 4.5's server side on one client
// of ln: one key exchange (the barrier before the run), then
// ctx_close_connection: a key exchange read with a single read() that
// must return the whole message (ethernet_read_keys), "done", close.
func perftestServerClose(ln net.Listener, msg []byte) error {
	nc, err := ln.Accept()
	if err != nil {
		return err
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(90 * time.Second))
	in := make([]byte, KeyMsgSizeGID)
	if _, err := io.ReadFull(nc, in); err != nil {
		return fmt.Errorf("the barrier before the run: %v", err)
	}
	if _, err := nc.Write(msg); err != nil {
		return fmt.Errorf("the barrier before the run: %v", err)
	}
	n, err := nc.Read(in)
	if n != len(in) {
		return fmt.Errorf("ethernet_read_keys: Couldn't read remote address (read returned %d bytes, %v)", n, err)
	}
	if _, err := nc.Write(msg); err != nil {
		return fmt.Errorf("writing the closing key message: %v", err)
	}
	if _, err := nc.Write([]byte("done\x00")); err != nil {
		return fmt.Errorf("writing done: %v", err)
	}
	return nil
}

// dropIngress attaches an XDP program that drops every frame arriving on
// ifname in ns, and returns the function that detaches it.
func dropIngress(ns *nsutil.Namespace, ifname string) (func() error, error) {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:    ebpf.XDP,
		License: "GPL",
		Instructions: asm.Instructions{
			asm.Mov.Imm(asm.R0, 1), // XDP_DROP
			asm.Return(),
		},
	})
	if err != nil {
		return nil, fmt.Errorf("loading the dropping XDP program: %w", err)
	}
	var l link.Link
	err = ns.Do(func() error {
		ifc, err := net.InterfaceByName(ifname)
		if err != nil {
			return err
		}
		l, err = link.AttachXDP(link.XDPOptions{Program: prog, Interface: ifc.Index})
		return err
	})
	if err != nil {
		prog.Close()
		return nil, fmt.Errorf("attaching the dropping XDP program to %s: %w", ifname, err)
	}
	return func() error { return errors.Join(l.Close(), prog.Close()) }, nil
}

// timedOutConn is a connection whose reads fail, after a while, the way
// the kernel fails them once TCP gave up on the peer (ETIMEDOUT).
type timedOutConn struct {
	net.Conn
	after time.Duration
}

func (c timedOutConn) Read([]byte) (int, error) {
	time.Sleep(c.after) // stands for TCP's retransmissions
	return 0, &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ETIMEDOUT)}
}

func (c timedOutConn) Write(b []byte) (int, error) { return len(b), nil }

// TestTimedOutConnectionMessage: when the kernel gives up on the
// connection before the step's limit, the message says how long the step
// really waited, for which message, why it ended, and what the limit was
// (it once said "exchange timed out after 10m0s" after 28 s).
func TestTimedOutConnectionMessage(t *testing.T) {
	a, b := net.Pipe()
	defer b.Close()
	c := NewConn(timedOutConn{Conn: a, after: 200 * time.Millisecond}, Client)
	c.Timeouts = Timeouts{PeerRun: 10 * time.Minute}
	err := c.Finish(context.Background(), testKeys(1, 0x61)[0])
	wantKind(t, err, ErrTimeout)
	want := regexp.MustCompile(`^exchange timed out after (2\d\d|3\d\d)ms waiting for the peer's key message of the closing handshake: ` +
		`the connection timed out: the peer's host acknowledged nothing TCP sent it, before the step's limit of 10m0s$`)
	if !want.MatchString(err.Error()) {
		t.Errorf("message %q, want it to match %s", err, want)
	}
	if !errors.Is(err, syscall.ETIMEDOUT) {
		t.Errorf("%v does not wrap ETIMEDOUT", err)
	}
}
