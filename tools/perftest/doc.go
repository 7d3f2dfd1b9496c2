// Package perftest runs perftest 4.5's ib_{send,write,read,atomic}_{bw,lat}
// tools (Run) and rdma-core's ibv_rc_pingpong and ibv_ud_pingpong
// (Pingpong) on a sroce device: the tools' command lines, defaults, TCP
// exchanges (package oob) and output, byte for byte, so that either side
// of a run can be the real tool. The sroce command's send-bw, write-bw,
// ..., rc-pingpong and ud-pingpong are thin wrappers around these.
//
// With -z the exchange runs over an RDMA CM connection instead of TCP, and
// with -R the test's QP is connected by RDMA CM too (package rdmacm), in
// the order perftest 4.5 does it (see cm.go), so that the real
// `ib_write_bw -R` can be either side.
//
// A run opens the device named by -d (package device): the device of the
// sroce daemon that serves that interface, if one does, else one in the
// tool's process (hca.go); it prints what the tool prints to the writers
// it is given and returns the tool's exit status. Every wait of a run is bounded, by the environment variables
// SROCE_STALL_TIMEOUT, SROCE_EXCHANGE_TIMEOUT and SROCE_ACCEPT_TIMEOUT or
// their defaults, and SIGINT and SIGTERM end it with one sentence on what
// it was waiting for.
package perftest

import (
	"errors"
	"io"
	"io/fs"

	"github.com/sroce/sroce/internal/cli"
)

// Exit statuses of a run: those of every sroce command.
const (
	exitOK      = cli.ExitOK      // everything went well
	exitProblem = cli.ExitProblem // the run failed or was interrupted
	exitUsage   = cli.ExitUsage   // bad command line
)

// env is where a run prints.
type env struct {
	Stdout io.Writer
	Stderr io.Writer
}

// errText returns err's message without the "op path:" prefix of an
// fs.PathError, whose path the caller's sentence already names.
func errText(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}
