package perftest

// Tool pairs in this process (package internal/testpair), on 127.78.0.1
// and 127.78.0.2, through this package's entry points as the sroce
// command calls them.

import (
	"bytes"
	"context"
	"io"
	"net/netip"
	"testing"

	"github.com/sroce/sroce/internal/testpair"
	"github.com/sroce/sroce/tools/oob"
)

// runTool runs the tool named by args[0] ("write-bw", "rc-pingpong") with
// the rest of args, as the sroce command does.
func runTool(args []string, stdout, stderr io.Writer) int {
	switch args[0] {
	case "rc-pingpong":
		return Pingpong(context.Background(), false, args[1:], stdout, stderr)
	case "ud-pingpong":
		return Pingpong(context.Background(), true, args[1:], stdout, stderr)
	}
	for _, test := range oob.Tests {
		if test.String() == args[0] {
			return Run(context.Background(), test, args[1:], stdout, stderr)
		}
	}
	panic("no tool " + args[0])
}

// runSroce runs "sroce args..." in-process and returns the exit status
// and what was printed.
func runSroce(t *testing.T, _ []byte, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = runTool(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// pairs runs the tools in-process for the pair tests, on TCP ports that
// cmd/sroce's tests do not use.
var pairs = &testpair.Pairs{
	Run:       runTool,
	Server:    netip.MustParseAddr("127.78.0.1"),
	Client:    netip.MustParseAddr("127.78.0.2"),
	FirstPort: 20000,
}
