package daemon

// Errors of requests, classified once (classify) where the connection
// answers them:
//
//   - misbehaviour: the client broke the protocol (errClient, made by
//     misbehaved): the connection ends, the reason logged at warning;
//   - refusal: the request is one the verbs call refuses (EINVAL, EBUSY,
//     ENOENT, ...): the client gets the errno, logged at debug;
//   - shortage: the daemon or a budget is short (ENOMEM, EAGAIN, ENOSPC,
//     EMFILE, ...): the client gets the errno and stays, logged at debug
//     at most, never called a misbehaver;
//   - internal: the daemon failed at something that should not fail
//     (errInternal, made by internalf): the client gets the errno the
//     failure carries, EIO when none, and the daemon logs it at error
//     with the request and the client.
//
// Errors wrap with %w all the way, so that an errno made deep down (a
// mmap's ENOMEM) reaches classify.

import (
	"errors"
	"fmt"

	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/qp"
	"github.com/sroce/sroce/roce"
	"golang.org/x/sys/unix"
)

// errClient is an error that ends the connection: the client broke the
// protocol. Its text goes to the log.
type errClient struct{ err error }

func (e *errClient) Error() string { return e.err.Error() }
func (e *errClient) Unwrap() error { return e.err }

// misbehaved makes the error of a client that broke the protocol; format
// may wrap a cause with %w.
func misbehaved(format string, args ...any) error {
	return &errClient{fmt.Errorf(format, args...)}
}

// errInternal is a failure of the daemon's own: logged with context, the
// client gets its errno (EIO when it has none).
type errInternal struct{ err error }

func (e *errInternal) Error() string { return e.err.Error() }
func (e *errInternal) Unwrap() error { return e.err }

// internalf makes an internal error; format may wrap a cause with %w.
func internalf(format string, args ...any) error {
	return &errInternal{fmt.Errorf(format, args...)}
}

// errClass is the class of a request's error.
type errClass uint8

const (
	classRefusal errClass = iota
	classMisbehaviour
	classShortage
	classInternal
)

// classify sorts a handler's error and gives the errno of the reply.
func classify(err error) (errClass, unix.Errno) {
	var ce *errClient
	if errors.As(err, &ce) {
		return classMisbehaviour, unix.EPROTO
	}
	var ie *errInternal
	if errors.As(err, &ie) {
		var en unix.Errno
		if errors.As(err, &en) {
			if shortage(en) {
				return classShortage, en
			}
			return classInternal, en
		}
		return classInternal, unix.EIO
	}
	en := errnoOf(err)
	if shortage(en) {
		return classShortage, en
	}
	return classRefusal, en
}

// shortage says whether errno en says the daemon (or a budget) is short
// of something, rather than that the request is wrong.
func shortage(en unix.Errno) bool {
	switch en {
	case unix.ENOMEM, unix.EAGAIN, unix.ENOSPC, unix.EMFILE, unix.ENFILE, unix.ENOBUFS, unix.EDQUOT:
		return true
	}
	return false
}

// errnoOf maps an engine error to the errno the verbs call returns.
func errnoOf(err error) unix.Errno {
	var en unix.Errno
	switch {
	case errors.As(err, &en):
		return en
	case errors.Is(err, roce.ErrNoResources), errors.Is(err, mr.ErrNoResources), errors.Is(err, qp.ErrQueueFull):
		return unix.ENOMEM
	case errors.Is(err, roce.ErrBusy), errors.Is(err, mr.ErrBusy), errors.Is(err, mr.ErrWindowsBound):
		return unix.EBUSY
	case errors.Is(err, roce.ErrNotSupported):
		return unix.EOPNOTSUPP
	case errors.Is(err, roce.ErrClosed):
		return unix.ENODEV
	case errors.Is(err, roce.ErrBadGIDIndex):
		return unix.ENODATA
	}
	return unix.EINVAL
}
