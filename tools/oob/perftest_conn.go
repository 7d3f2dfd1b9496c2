package oob

import (
	"context"
	"errors"
	"github.com/sroce/sroce/verbs"
	"net"
	"time"
)

// Role says which side of a perftest exchange a Conn is. The client is
// the side given a server name on the command line; it writes first in
// every exchange.
type Role int

// The two roles.
const (
	Server Role = iota // waits for the client
	Client             // connects to the server
)

// String returns "server" or "client".
func (r Role) String() string {
	if r == Client {
		return "client"
	}
	return "server"
}

// Conn is one perftest TCP connection. Its methods are the steps of
// perftest 4.5's exchange; each writes one message and reads the peer's
// (in the order Role dictates) within the step limit of Timeouts, and
// returns an ExchangeError on failure. Flow drives whole tests with them.
type Conn struct {
	nc   net.Conn
	role Role
	s    stepper

	// Timeouts bounds each step; zero fields take the defaults.
	Timeouts Timeouts
	// Version is the version string this side sends (PerftestVersion if
	// empty).
	Version string
	// AcceptVersion decides whether the peer's version is compatible
	// (CheckPeerVersion if nil).
	AcceptVersion func(peer string) error
	// NoGID selects the 59-byte key message without a GID, which perftest
	// uses only on InfiniBand without -x. On RoCE both sides always carry
	// the GID; both sides must agree.
	NoGID bool
	// RDMACM makes the exchange perftest's over RDMA CM (-R, -z): the
	// connection carries each message as one SEND, the key messages are
	// the binary struct pingpong_dest (MarshalCM), and Finish ends
	// after its key exchange without "done".
	RDMACM bool

	peerVersion string
}

// NewConn wraps an established TCP connection.
func NewConn(nc net.Conn, role Role) *Conn {
	return &Conn{nc: nc, role: role, s: stepper{nc: nc}}
}

// DialPerftest connects to a perftest server at addr ("host:port"; the
// tools use port 18515) as the client.
func DialPerftest(ctx context.Context, addr string, t Timeouts) (*Conn, error) {
	nc, err := Dial(ctx, addr, t.connect())
	if err != nil {
		return nil, err
	}
	c := NewConn(nc, Client)
	c.Timeouts = t
	return c, nil
}

// AcceptPerftest waits on ln for one client (until ctx is done, or up to
// t.Accept), closes ln and returns the server side of the connection.
func AcceptPerftest(ctx context.Context, ln net.Listener, t Timeouts) (*Conn, error) {
	actx, cancel := t.acceptContext(ctx)
	nc, err := AcceptOne(actx, ln)
	cancel()
	if err != nil {
		return nil, err
	}
	c := NewConn(nc, Server)
	c.Timeouts = t
	return c, nil
}

// Role returns the side this Conn is.
func (c *Conn) Role() Role { return c.role }

// PeerVersion returns the version string the peer sent (after
// ExchangeVersions).
func (c *Conn) PeerVersion() string { return c.peerVersion }

// NetConn returns the underlying connection.
func (c *Conn) NetConn() net.Conn { return c.nc }

// swap exchanges out for len(in) bytes in the role's order.
func (c *Conn) swap(ctx context.Context, step string, limit time.Duration, out, in []byte) error {
	return c.fail(c.s.swap(ctx, step, limit, c.role == Client, out, in))
}

// fail closes the connection if err is not nil: after a failed step the
// stream is out of step with the peer, and closing tells the peer at once.
func (c *Conn) fail(err error) error {
	if err != nil {
		c.nc.Close()
	}
	return err
}

// ExchangeVersions swaps the 16-byte version strings (perftest's
// exchange_versions) and checks the peer's with AcceptVersion.
func (c *Conn) ExchangeVersions(ctx context.Context) (string, error) {
	v := c.Version
	if v == "" {
		v = PerftestVersion
	}
	out, err := MarshalVersion(v)
	if err != nil {
		return "", err
	}
	in := make([]byte, VersionMsgSize)
	if err := c.swap(ctx, "version message", c.Timeouts.step(), out, in); err != nil {
		return "", err
	}
	peer, err := ParseVersion(in)
	if err != nil {
		return "", c.fail(err)
	}
	c.peerVersion = peer
	accept := c.AcceptVersion
	if accept == nil {
		accept = CheckPeerVersion
	}
	return peer, c.fail(accept(peer))
}

// ExchangeSysData swaps the cycle buffer and cache line sizes (perftest's
// check_sys_data: two 4-byte exchanges) and returns the peer's values;
// both sides continue with local.Max(remote). Values above
// MaxPeerCycleBuffer or MaxPeerCacheLine fail the step (ErrLimit).
func (c *Conn) ExchangeSysData(ctx context.Context, local SysData) (SysData, error) {
	var remote SysData
	in := make([]byte, 4)
	if err := c.swap(ctx, "cycle buffer size", c.Timeouts.step(), marshalInt32(local.CycleBuffer), in); err != nil {
		return remote, err
	}
	remote.CycleBuffer = int32(uint32(in[0])<<24 | uint32(in[1])<<16 | uint32(in[2])<<8 | uint32(in[3]))
	if err := c.swap(ctx, "cache line size", c.Timeouts.step(), marshalInt32(local.CacheLineSize), in); err != nil {
		return remote, err
	}
	remote.CacheLineSize = int32(uint32(in[0])<<24 | uint32(in[1])<<16 | uint32(in[2])<<8 | uint32(in[3]))
	return remote, c.fail(remote.CheckPeer())
}

// ExchangeMTU swaps the MTU enums (perftest's check_mtu) and returns the
// peer's; both sides continue with the smaller valid one (Prologue does).
func (c *Conn) ExchangeMTU(ctx context.Context, local verbs.MTU) (verbs.MTU, error) {
	out, err := MarshalMTU(local)
	if err != nil {
		return 0, err
	}
	in := make([]byte, MTUMsgSize)
	if err := c.swap(ctx, "MTU message", c.Timeouts.step(), out, in); err != nil {
		return 0, err
	}
	m, err := ParseMTU(in)
	return m, c.fail(err)
}

// keySize returns the size of this connection's key messages.
func (c *Conn) keySize() int {
	if c.RDMACM {
		return CMKeyMsgSize
	}
	if c.NoGID {
		return KeyMsgSize
	}
	return KeyMsgSizeGID
}

// ExchangeKeys is one ctx_hand_shake: it swaps one key message. perftest
// uses it to pass each QP's keys and, with QP 0's message, as a barrier
// ("sync") between phases of a test.
func (c *Conn) ExchangeKeys(ctx context.Context, local KeyMsg) (KeyMsg, error) {
	return c.exchangeKeys(ctx, "key message", c.Timeouts.step(), local)
}

// SyncAfterRun is ExchangeKeys for a barrier that the peer reaches only
// after running its test; it waits up to Timeouts.PeerRun.
func (c *Conn) SyncAfterRun(ctx context.Context, local KeyMsg) (KeyMsg, error) {
	return c.exchangeKeys(ctx, "key message after its run", c.Timeouts.peerRun(), local)
}

// exchangeKeys swaps one key message within limit; step names it in
// errors.
func (c *Conn) exchangeKeys(ctx context.Context, step string, limit time.Duration, local KeyMsg) (KeyMsg, error) {
	var out []byte
	var err error
	if c.RDMACM {
		out = local.MarshalCM()
	} else if out, err = local.Marshal(!c.NoGID); err != nil {
		return KeyMsg{}, err
	}
	in := make([]byte, c.keySize())
	if err := c.swap(ctx, step, limit, out, in); err != nil {
		return KeyMsg{}, err
	}
	var k KeyMsg
	if c.RDMACM {
		k, err = ParseCMKeyMsg(in)
	} else {
		k, err = ParseKeyMsg(in, !c.NoGID)
	}
	return k, c.fail(err)
}

// ExchangeReports swaps BW results (perftest's xchg_bw_reports: one 8-byte
// exchange per field; four more fields with perPort) and returns the
// peer's. A perftest server that did not run (unidirectional write, read
// and atomic tests) sends whatever its stack held; only the client's
// report means anything there, and only a client's report is checked
// against MaxMessageSize and MaxReportIters (ErrLimit).
func (c *Conn) ExchangeReports(ctx context.Context, local BWReport, perPort bool) (BWReport, error) {
	items := local.reportItems(perPort)
	in := make([][]byte, len(items))
	for i, out := range items {
		in[i] = make([]byte, ReportItemSize)
		if err := c.swap(ctx, "result report", c.Timeouts.step(), out, in[i]); err != nil {
			return BWReport{}, err
		}
	}
	r := reportFromItems(in)
	if c.role == Server {
		return r, c.fail(r.CheckPeer())
	}
	return r, nil
}

// Finish is perftest's ctx_close_connection: one last key exchange (which
// waits up to Timeouts.PeerRun, as the peer may still be running), then
// both sides write "done" and close. Nobody reads "done"; Finish reads the
// peer's with a short limit only so that closing does not reset the
// connection while it is still in flight, and ignores what happens to it.
func (c *Conn) Finish(ctx context.Context, local KeyMsg) error {
	if _, err := c.exchangeKeys(ctx, "key message of the closing handshake", c.Timeouts.peerRun(), local); err != nil {
		c.nc.Close()
		return err
	}
	if c.RDMACM {
		return c.nc.Close()
	}
	err := c.s.do(ctx, "done message", c.Timeouts.step(), func() error { return c.s.write(doneMsg) })
	if err != nil {
		c.nc.Close()
		if errors.Is(err, ErrPeerClosed) {
			// The peer wrote its "done" and closed already: the test is
			// complete on both sides.
			return nil
		}
		return err
	}
	c.drainDone()
	return c.nc.Close()
}

// drainDone reads the peer's "done" (or its close) for up to 2 seconds.
func (c *Conn) drainDone() {
	c.nc.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, len(doneMsg))
	c.s.read(buf)
}

// Close closes the connection without the final exchange (what
// ib_write_lat does: it ends without ctx_close_connection).
func (c *Conn) Close() error { return c.nc.Close() }
