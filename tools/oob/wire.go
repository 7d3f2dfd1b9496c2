package oob

// TCP plumbing shared by both exchanges: dialing, accepting one client,
// and running one step with a deadline that also honours a context.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// Default limits. A step is one message each way; the tools exchange
// these within milliseconds of each other, except where the peer first
// runs its test (see Timeouts.PeerRun).
const (
	DefaultStepTimeout    = 10 * time.Second // one message each way
	DefaultConnectTimeout = 10 * time.Second // the TCP connect
	DefaultPeerRunTimeout = 10 * time.Minute // waits across the peer's test run
)

// Timeouts bounds the waits of an exchange. Zero fields take the
// defaults above. A context deadline, if earlier, wins.
type Timeouts struct {
	// Connect bounds dialing the server.
	Connect time.Duration
	// Step bounds each message exchange.
	Step time.Duration
	// PeerRun bounds the waits during which the peer is running its test
	// (a perftest server waiting for the client's results, the final
	// handshake after a run). Nothing else ends these waits sooner: the
	// connection has no TCP keepalive (see noKeepAlive).
	PeerRun time.Duration
	// Accept bounds a server's wait for its client (AcceptPerftest,
	// ServePingpong); zero waits until the context is done, as the
	// reference servers wait for as long as they run.
	Accept time.Duration
}

// acceptContext returns ctx bounded by the Accept limit, if any.
func (t Timeouts) acceptContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if t.Accept > 0 {
		return context.WithTimeout(ctx, t.Accept)
	}
	return ctx, func() {}
}

// connect, step and peerRun return the limits with defaults applied.
func (t Timeouts) connect() time.Duration { return orDefault(t.Connect, DefaultConnectTimeout) }
func (t Timeouts) step() time.Duration    { return orDefault(t.Step, DefaultStepTimeout) }
func (t Timeouts) peerRun() time.Duration { return orDefault(t.PeerRun, DefaultPeerRunTimeout) }

// orDefault returns d, or def if d is not positive.
func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// noKeepAlive turns TCP keepalive off, as the reference tools leave it:
// the step limits alone bound every wait. With keepalive, the kernel
// reset a connection whose peer host stayed silent for a few probes
// (an emulated guest starved of its processor, or whose NIC hung and was
// reset, while the tools ran their test), long before the limit of the
// wait across the peer's run; the peer, alive again, then failed to read
// the closing handshake ("ethernet_read_keys: Couldn't read remote
// address"). A peer host that vanished shows up when the step's limit
// expires.
const noKeepAlive = -1

// Dial connects to addr ("host:port") over TCP like the reference tools'
// clients do (any address family getaddrinfo returns), bounded by limit
// and ctx. It makes a single attempt, as the tools do.
func Dial(ctx context.Context, addr string, limit time.Duration) (net.Conn, error) {
	if limit <= 0 {
		limit = DefaultConnectTimeout
	}
	d := net.Dialer{Timeout: limit, KeepAlive: noKeepAlive}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("connecting to %s: %w", addr, context.Cause(ctx))
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil, &ExchangeError{Kind: ErrConnect, Step: addr, Detail: fmt.Sprintf("no answer within %v", limit), Err: err}
		}
		return nil, &ExchangeError{Kind: ErrConnect, Step: addr, Detail: shortNetError(err), Err: err}
	}
	return nc, nil
}

// shortNetError drops the "dial tcp 1.2.3.4:5:" prefix Go puts on errors.
func shortNetError(err error) string {
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		return oe.Err.Error()
	}
	return err.Error()
}

// Listen opens a TCP listener on addr (":18515" listens on every address
// of both families; the reference servers accept IPv4 and, for the
// pingpong tools, IPv6 clients).
func Listen(ctx context.Context, addr string) (net.Listener, error) {
	lc := net.ListenConfig{KeepAlive: noKeepAlive}
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("could not listen on %s: %s", addr, shortNetError(err))
	}
	return ln, nil
}

// AcceptOne waits for one client on ln, until ctx is done (a server waits
// for its client as long as the user lets it; pass a context with a
// deadline to bound it). It closes ln before returning, like the
// reference servers, which serve exactly one client.
func AcceptOne(ctx context.Context, ln net.Listener) (net.Conn, error) {
	defer ln.Close()
	var limit time.Duration
	if d, ok := ctx.Deadline(); ok {
		limit = roundLimit(time.Until(d))
	}
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	nc, err := ln.Accept()
	if err != nil {
		if ctx.Err() != nil {
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return nil, &ExchangeError{Kind: ErrTimeout, Step: "connection", Timeout: limit, Err: err}
			}
			return nil, fmt.Errorf("waiting for a client: %w", context.Cause(ctx))
		}
		return nil, fmt.Errorf("waiting for a client: %w", err)
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetKeepAlive(false) // ln may not be Listen's
	}
	return nc, nil
}

// stepper runs the steps of one exchange over nc.
type stepper struct {
	nc net.Conn
	t  Timeouts
}

// do runs fn with nc's deadline set to limit from now (or ctx's deadline
// if earlier) and ctx cancellation interrupting the I/O, and turns the
// outcome into an ExchangeError naming step.
func (s *stepper) do(ctx context.Context, step string, limit time.Duration, fn func() error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("exchanging the %s: %w", step, context.Cause(ctx))
	}
	start := time.Now()
	deadline := start.Add(limit)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
		limit = roundLimit(time.Until(d))
	}
	if err := s.nc.SetDeadline(deadline); err != nil {
		return ioError(ctx, step, limit, time.Since(start), err)
	}
	stop := context.AfterFunc(ctx, func() { s.nc.SetDeadline(time.Unix(1, 0)) })
	err := fn()
	stop()
	return ioError(ctx, step, limit, time.Since(start), err)
}

// roundLimit makes a limit derived from a context deadline readable.
func roundLimit(d time.Duration) time.Duration {
	if d >= time.Second {
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Millisecond)
}

// write sends msg with a single write, as the tools do: their readers
// expect each message in one read() call.
func (s *stepper) write(msg []byte) error {
	_, err := s.nc.Write(msg)
	return err
}

// read fills buf completely.
func (s *stepper) read(buf []byte) error {
	_, err := io.ReadFull(s.nc, buf)
	return err
}

// swap exchanges one message each way. The client (first=true) writes
// first and then reads, the server reads first and then writes, which is
// the order of every perftest and pingpong exchange; with that order only
// one message is ever in flight in each direction.
func (s *stepper) swap(ctx context.Context, step string, limit time.Duration, first bool, out, in []byte) error {
	return s.do(ctx, step, limit, func() error {
		if first {
			if err := s.write(out); err != nil {
				return err
			}
			return s.read(in)
		}
		if err := s.read(in); err != nil {
			return err
		}
		return s.write(out)
	})
}
