package main

// rc-pingpong and ud-pingpong, server and client in this process over the
// UDP link on loopback, and their command lines.

import (
	"regexp"
	"strings"
	"testing"

	"github.com/sroce/sroce/internal/testpair"
)

// Lines of a pingpong run.
var (
	ppLocal  = regexp.MustCompile(`(?m)^  local address:  LID 0x0000, QPN (0x[0-9a-f]{6}), PSN (0x[0-9a-f]{6})[,:] GID (\S+)$`)
	ppRemote = regexp.MustCompile(`(?m)^  remote address: LID 0x0000, QPN (0x[0-9a-f]{6}), PSN (0x[0-9a-f]{6}), GID (\S+)$`)
	ppResult = regexp.MustCompile(`(?m)^(\d+) bytes in [\d.]+ seconds = [\d.]+ Mbit/sec\n(\d+) iters in [\d.]+ seconds = [\d.]+ usec/iter\n`)
)

// TestPingpongPairs runs both pingpong tools against themselves.
func TestPingpongPairs(t *testing.T) {
	for _, c := range []struct {
		name, cmd      string
		server, client []string
		bytes, iters   string
	}{
		{"rc", "rc-pingpong", []string{"-n", "100"}, nil, "819200", "100"},
		{"rc/check-multipacket", "rc-pingpong", []string{"-n", "50", "-s", "10000", "-m", "1024", "-c"}, nil, "1000000", "50"},
		{"rc/events-mtu4096", "rc-pingpong", []string{"-n", "50", "-s", "20000", "-m", "4096", "-e", "-c"}, nil, "2000000", "50"},
		{"rc/small-rxdepth", "rc-pingpong", []string{"-n", "40", "-s", "1", "-r", "4", "-c"}, nil, "80", "40"},
		{"ud", "ud-pingpong", []string{"-n", "100"}, nil, "204800", "100"},
		{"ud/check-events", "ud-pingpong", []string{"-n", "50", "-s", "2048", "-c", "-e"}, []string{"-n", "50", "-s", "2048", "-c"}, "204800", "50"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cargs := c.client
			if cargs == nil {
				cargs = c.server
			}
			srv, cli := pairs.RunPair(t, c.cmd, "local address", c.server, cargs)
			if srv.Code != 0 || cli.Code != 0 {
				t.Fatalf("server: %v\nclient: %v", srv, cli)
			}
			for _, r := range []testpair.Result{srv, cli} {
				m := ppResult.FindStringSubmatch(r.Stdout)
				if m == nil || m[1] != c.bytes || m[2] != c.iters {
					t.Errorf("result lines %q, want %s bytes and %s iters in:\n%s", m, c.bytes, c.iters, r.Stdout)
				}
				if r.Stderr != "" {
					t.Errorf("stderr: %q", r.Stderr)
				}
			}
			// What each side announced is what the other printed.
			sl, cl := ppLocal.FindStringSubmatch(srv.Stdout), ppLocal.FindStringSubmatch(cli.Stdout)
			sr, cr := ppRemote.FindStringSubmatch(srv.Stdout), ppRemote.FindStringSubmatch(cli.Stdout)
			if sl == nil || cl == nil || sr == nil || cr == nil {
				t.Fatalf("address lines missing:\n%s\n%s", srv.Stdout, cli.Stdout)
			}
			if strings.Join(sl[1:], " ") != strings.Join(cr[1:], " ") || strings.Join(cl[1:], " ") != strings.Join(sr[1:], " ") {
				t.Errorf("addresses do not match: server %q/%q, client %q/%q", sl, sr, cl, cr)
			}
			if sl[3] != "::ffff:"+pairs.Server.String() || cl[3] != "::ffff:"+pairs.Client.String() {
				t.Errorf("GIDs %s and %s", sl[3], cl[3])
			}
			ud := c.cmd == "ud-pingpong"
			if strings.Contains(srv.Stdout, ": GID") != ud {
				t.Errorf("local line format of %s: %q", c.cmd, sl[0])
			}
		})
	}
}

// TestPingpongCommandLine checks -h, bad options and unsupported ones.
func TestPingpongCommandLine(t *testing.T) {
	for _, cmd := range []string{"rc-pingpong", "ud-pingpong"} {
		code, out, errOut := runSroce(t, nil, cmd, "-h")
		if code != exitOK || errOut != "" || !strings.HasPrefix(out, "usage: sroce "+cmd) || !strings.Contains(out, "--gid-idx") {
			t.Errorf("%s -h: exit %d, stdout %q, stderr %q", cmd, code, out, errOut)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"rc-pingpong", "-x"}, "unknown flag -x"},
		{[]string{"rc-pingpong", "-m", "1000"}, "-m 1000: the MTU is not 256"},
		{[]string{"rc-pingpong", "a", "b"}, "more than one server name"},
		{[]string{"ud-pingpong", "-m", "1024"}, "unknown flag -m"},
		{[]string{"rc-pingpong", "-o"}, "option -o is not supported by sroce"},
		{[]string{"rc-pingpong", "-r", "1"}, "receive depth"},
		{[]string{"rc-pingpong", "-i", "2"}, "one port"},
	} {
		code, out, errOut := runSroce(t, nil, c.args...)
		if code != exitUsage || out != "" || !strings.Contains(errOut, c.want) || !strings.Contains(errOut, "usage: sroce "+c.args[0]) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2, %q and the usage", c.args, code, out, errOut, c.want)
		}
	}
}
