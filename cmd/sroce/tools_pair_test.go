package main

// Tool pairs in this process (package internal/testpair), on 127.77.0.1
// and 127.77.0.2, through the command line as a user types it.

import (
	"io"
	"net/netip"
	"strings"

	"github.com/sroce/sroce/internal/testpair"
)

// pairs runs "sroce args..." in-process for the tool tests.
var pairs = &testpair.Pairs{
	Run: func(args []string, stdout, stderr io.Writer) int {
		return run(args, &env{Stdin: strings.NewReader(""), Stdout: stdout, Stderr: stderr})
	},
	Server:    netip.MustParseAddr("127.77.0.1"),
	Client:    netip.MustParseAddr("127.77.0.2"),
	FirstPort: 19000,
}

// Environment variables of the tools' limits (see package tools/perftest).
const (
	envStall  = "SROCE_STALL_TIMEOUT"
	envStep   = "SROCE_EXCHANGE_TIMEOUT"
	envAccept = "SROCE_ACCEPT_TIMEOUT"
)
