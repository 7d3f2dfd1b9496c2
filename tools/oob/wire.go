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
	// handshake after a run). Besides this limit, TCP keepalive notices a
	// peer host that vanished within about 20 seconds.
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

// keepAlive makes a dead peer host show up as an error within about 20s
// instead of a read that blocks until the step limit.
var keepAlive = net.KeepAliveConfig{Enable: true, Idle: 5 * time.Second, Interval: 5 * time.Second, Count: 3}

// Dial connects to addr ("host:port") over TCP like the reference tools'
// clients do (any address family getaddrinfo returns), bounded by limit
// and ctx. It makes a single attempt, as the tools do.
func Dial(ctx context.Context, addr string, limit time.Duration) (net.Conn, error) {
	if limit <= 0 {
		limit = DefaultConnectTimeout
	}
	d := net.Dialer{Timeout: limit, KeepAliveConfig: keepAlive}
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
	lc := net.ListenConfig{KeepAliveConfig: keepAlive}
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
		tc.SetKeepAliveConfig(keepAlive)
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
	deadline := time.Now().Add(limit)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
		limit = roundLimit(time.Until(d))
	}
	if err := s.nc.SetDeadline(deadline); err != nil {
		return ioError(ctx, step, limit, err)
	}
	stop := context.AfterFunc(ctx, func() { s.nc.SetDeadline(time.Unix(1, 0)) })
	err := fn()
	stop()
	return ioError(ctx, step, limit, err)
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
