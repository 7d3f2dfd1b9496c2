package main

import (
	"bytes"
	"strings"
	"testing"
)

// runSroce runs the command line args in-process with stdin as standard
// input and returns the exit status and what was printed.
func runSroce(t *testing.T, stdin []byte, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(args, &env{Stdin: bytes.NewReader(stdin), Stdout: &out, Stderr: &errOut})
	return code, out.String(), errOut.String()
}

// TestUsage checks the top-level command line: usage on request (stdout,
// status 0) and on error (stderr, status 2).
func TestUsage(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"--help"}, {"help"}} {
		code, out, errOut := runSroce(t, nil, args...)
		if code != exitOK || errOut != "" || !strings.Contains(out, "usage: sroce <command>") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, code, out, errOut)
		}
		for _, c := range commands {
			if !strings.Contains(out, "\n  "+c.name+" ") || !strings.Contains(out, c.summary) {
				t.Errorf("%q: usage does not list %s: %q", args, c.name, out)
			}
		}
	}
	for _, args := range [][]string{nil, {"bogus"}, {"--verbose"}, {"help", "bogus"}, {"help", "dissect", "x"}} {
		code, out, errOut := runSroce(t, nil, args...)
		if code != exitUsage || out != "" || !strings.Contains(errOut, "usage: sroce <command>") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, code, out, errOut)
		}
		if !strings.HasPrefix(errOut, "sroce") || strings.Index(errOut, "\n") < 10 {
			t.Errorf("%q: stderr does not start with a sentence: %q", args, errOut)
		}
	}
	code, out, _ := runSroce(t, nil, "help", "dissect")
	if code != exitOK || !strings.HasPrefix(out, "usage: sroce dissect") {
		t.Errorf("help dissect: exit %d, stdout %q", code, out)
	}
}

// TestCommandTable checks that every command has a unique name, a summary
// and a run function, and answers -h with its usage on stdout.
func TestCommandTable(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range commands {
		if c.name == "" || c.summary == "" || c.run == nil || seen[c.name] || c.name == "help" {
			t.Errorf("bad command table entry %+v", c)
		}
		seen[c.name] = true
		code, out, errOut := runSroce(t, nil, c.name, "-h")
		if code != exitOK || errOut != "" || !strings.HasPrefix(out, "usage: sroce "+c.name) {
			t.Errorf("%s -h: exit %d, stdout %q, stderr %q", c.name, code, out, errOut)
		}
	}
}

// TestParseFlags checks flag parsing shared by the commands: flags after
// positional arguments, "-" as an argument, "--" ending the flags.
func TestParseFlags(t *testing.T) {
	cases := []struct {
		args []string
		json bool
		pos  []string
	}{
		{[]string{"f"}, false, []string{"f"}},
		{[]string{"--json", "f"}, true, []string{"f"}},
		{[]string{"f", "--json"}, true, []string{"f"}},
		{[]string{"-j", "-"}, true, []string{"-"}},
		{[]string{"-", "--js"}, true, []string{"-"}},
		{[]string{"-jv", "f"}, true, []string{"f"}},
		{[]string{"a", "--", "--json", "b"}, false, []string{"a", "--json", "b"}},
		{[]string{"--json=false", "a", "b"}, false, []string{"a", "b"}},
	}
	for _, c := range cases {
		e := &env{Stdout: &strings.Builder{}, Stderr: &strings.Builder{}}
		f := newFlags(e, "x", "sroce x", "")
		j := f.Bool("json", false, "")
		f.Short('j', "json")
		f.Bool("v", false, "")
		pos, _, ok := f.parse(c.args)
		if !ok || *j != c.json || strings.Join(pos, "|") != strings.Join(c.pos, "|") {
			t.Errorf("%q: ok %v, json %v, positional %q; want json %v, %q", c.args, ok, *j, pos, c.json, c.pos)
		}
	}
}
