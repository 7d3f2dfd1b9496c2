package oob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"time"
)

// Sentinel errors. Every error an exchange returns matches one of them
// with errors.Is, so a caller can tell a peer that left from one that
// speaks another protocol; the message itself is one sentence meant for
// the user.
var (
	// ErrPeerClosed: the peer closed or reset the TCP connection before
	// the exchange was complete.
	ErrPeerClosed = errors.New("peer closed the connection during the exchange")
	// ErrTimeout: a step of the exchange did not complete in time.
	ErrTimeout = errors.New("exchange timed out")
	// ErrMalformed: the peer sent bytes that are not the expected message.
	ErrMalformed = errors.New("peer sent a malformed message")
	// ErrVersion: the peer speaks a perftest exchange other than 4.5's.
	ErrVersion = errors.New("peer speaks a different perftest exchange")
	// ErrConnect: the TCP connection could not be set up.
	ErrConnect = errors.New("could not connect to the peer")
	// ErrLimit: the peer sent a size or count larger than this side
	// accepts (it would size an allocation or a loop).
	ErrLimit = errors.New("peer sent a value beyond this side's limit")
)

// ExchangeError is the error type of every failed step. Error() is one
// sentence, e.g. "exchange timed out after 10s waiting for the peer's
// address message" or "peer sent a malformed address message: ...".
type ExchangeError struct {
	Kind    error         // one of the sentinel errors above
	Step    string        // what was being exchanged, e.g. "address message"
	Timeout time.Duration // for ErrTimeout: the step's limit
	// Waited is, for ErrTimeout, how long the step had waited when it
	// failed: its limit when the limit expired, less when the kernel gave
	// up on the connection first (ETIMEDOUT: the peer's host stopped
	// acknowledging what was sent). Zero: the limit.
	Waited time.Duration
	Detail string // extra explanation (malformed content, version)
	Err    error  // underlying I/O error, if any
}

// Error returns the one-sentence description.
func (e *ExchangeError) Error() string {
	switch e.Kind {
	case ErrTimeout:
		waited := e.Timeout
		early := errors.Is(e.Err, syscall.ETIMEDOUT) || (e.Waited > 0 && e.Waited < e.Timeout)
		if early {
			waited = e.Waited
		}
		s := fmt.Sprintf("exchange timed out after %v", waited)
		if e.Step == "connection" {
			s += " waiting for a client to connect"
		} else if e.Step != "" {
			s += " waiting for the peer's " + e.Step
		}
		if early {
			// Not the step's limit: say who gave up, and what the limit was.
			d := e.Detail
			if d == "" {
				d = "the connection failed"
			}
			s += fmt.Sprintf(": %s, before the step's limit of %v", d, e.Timeout)
		}
		return s
	case ErrPeerClosed:
		if e.Step != "" {
			return fmt.Sprintf("peer closed the connection during the exchange (while exchanging the %s)", e.Step)
		}
		return ErrPeerClosed.Error()
	case ErrMalformed:
		return fmt.Sprintf("peer sent a malformed %s: %s", e.Step, e.Detail)
	case ErrVersion:
		return fmt.Sprintf("peer speaks a different perftest exchange: %s", e.Detail)
	case ErrConnect:
		return fmt.Sprintf("could not connect to %s: %s", e.Step, e.Detail)
	case ErrLimit:
		return fmt.Sprintf("peer sent a %s beyond this side's limit: %s", e.Step, e.Detail)
	}
	if e.Err != nil {
		return fmt.Sprintf("exchanging the %s failed: %v", e.Step, e.Err)
	}
	return "exchange failed: " + e.Step
}

// Is makes errors.Is(err, ErrTimeout) and friends work.
func (e *ExchangeError) Is(target error) bool { return target == e.Kind }

// Unwrap returns the underlying I/O error.
func (e *ExchangeError) Unwrap() error { return e.Err }

// overLimit returns an ErrLimit error about step: field says what the
// value is, unit follows the numbers, limit is the most this side takes
// and why says where the limit comes from.
func overLimit(step, field string, got, limit uint64, unit, why string) error {
	return &ExchangeError{Kind: ErrLimit, Step: step, Detail: fmt.Sprintf(
		"%s %d%s, above the limit of %d%s (%s)", field, got, unit, limit, unit, why)}
}

// malformed returns an ErrMalformed error about step.
func malformed(step, format string, args ...any) error {
	return &ExchangeError{Kind: ErrMalformed, Step: step, Detail: fmt.Sprintf(format, args...)}
}

// ioError classifies an error from reading or writing step, which had
// waited for waited of its limit: a deadline becomes ErrTimeout (reporting
// limit), the kernel's ETIMEDOUT an ErrTimeout that says the connection
// timed out after waited, a closed or reset connection ErrPeerClosed, a
// cancelled context the context's error.
func ioError(ctx context.Context, step string, limit, waited time.Duration, err error) error {
	if err == nil {
		return nil
	}
	if ctx != nil && ctx.Err() != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("exchanging the %s: %w", step, context.Cause(ctx))
	}
	if errors.Is(err, syscall.ETIMEDOUT) {
		// TCP gave up on the peer before the step's deadline: its
		// retransmissions (or keepalive probes) went unacknowledged.
		return &ExchangeError{Kind: ErrTimeout, Step: step, Timeout: limit, Waited: roundLimit(waited),
			Detail: "the connection timed out: the peer's host acknowledged nothing TCP sent it", Err: err}
	}
	var ne net.Error
	if errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		if ctx != nil && ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return fmt.Errorf("exchanging the %s: %w", step, context.Cause(ctx))
		}
		return &ExchangeError{Kind: ErrTimeout, Step: step, Timeout: limit, Err: err}
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, net.ErrClosed) {
		return &ExchangeError{Kind: ErrPeerClosed, Step: step, Err: err}
	}
	return &ExchangeError{Step: step, Err: err}
}
