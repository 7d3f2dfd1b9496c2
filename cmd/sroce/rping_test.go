package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestRpingCommand: "sroce rping" is wired in and a bad flag gets rping's
// usage and EINVAL (22).
func TestRpingCommand(t *testing.T) {
	var out, errw bytes.Buffer
	code := run([]string{"rping", "-x"}, &env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errw})
	if code != 22 || !strings.Contains(out.String(), "rping -c [-vVd] [-S size] [-C count] [-I addr] -a addr [-p port]") {
		t.Fatalf("sroce rping -x: exit %d\n%s%s", code, out.String(), errw.String())
	}
}
