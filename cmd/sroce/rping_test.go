package main

import (
	"strings"
	"testing"
)

// TestRpingCommand: "sroce rping" is wired in, and a bad flag is named
// with the usage on stderr, status 2.
func TestRpingCommand(t *testing.T) {
	code, out, errOut := runSroce(t, nil, "rping", "-x")
	if code != exitUsage || out != "" || !strings.HasPrefix(errOut, "sroce rping: unknown flag -x\n") ||
		!strings.Contains(errOut, "usage: sroce rping -s|-c [-a ADDR] [flags]") {
		t.Fatalf("sroce rping -x: exit %d\n%s%s", code, out, errOut)
	}
}
