package perftest

// The perftest tools, server and client in this process over the UDP link
// on loopback: every tool and the options that change its data path, with
// both sides' output checked line by line against what perftest prints
// and the data checks of both sides looked at through perftestHook.

import (
	"github.com/sroce/sroce/internal/buildinfo"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/sroce/sroce/internal/testpair"
	"github.com/sroce/sroce/tools/oob"
)

// Lines of a perftest run.
var (
	ptBWRow   = regexp.MustCompile(`(?m)^ (\d+) +(\d+) +([\d.]+) +([\d.]+) *\t\t   ([\d.]+)$`)
	ptLatRow  = regexp.MustCompile(`(?m)^ (\d+) +(\d+)(\s+[\d.]+){7}\s*$`)
	ptDurRow  = regexp.MustCompile(`(?m)^ (\d+) +(\d+) +[\d.]+ +[\d.]+ *$`)
	ptAddress = regexp.MustCompile(`(?m)^ (local|remote) address: LID 0000 QPN (0x[0-9a-f]+) PSN (0x[0-9a-f]+).*\n GID: [0-9:]+$`)
)

// ptRuns collects the runs perftestHook sees.
type ptRuns struct {
	mu   sync.Mutex
	runs []*perftest
}

// watchRuns installs perftestHook for the test and returns what it sees.
func watchRuns(t *testing.T) *ptRuns {
	r := &ptRuns{}
	perftestHook = func(pt *perftest) {
		r.mu.Lock()
		r.runs = append(r.runs, pt)
		r.mu.Unlock()
	}
	t.Cleanup(func() { perftestHook = nil })
	return r
}

// side returns the run of the client or the server.
func (r *ptRuns) side(client bool) *perftest {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, pt := range r.runs {
		if pt.client() == client {
			return pt
		}
	}
	return nil
}

// addresses returns the QPN and PSN pairs of the address lines of out.
func addresses(out, side string) []string {
	var s []string
	for _, m := range ptAddress.FindAllStringSubmatch(out, -1) {
		if m[1] == side {
			s = append(s, m[2]+"/"+m[3])
		}
	}
	return s
}

// ptCase is one pair run.
type ptCase struct {
	name   string
	cmd    string
	server []string
	client []string // nil: the server's
	// What the data checks must have covered on the side that receives
	// or fetches data: the client for READ and atomics, the server for
	// WRITE and SEND (both with -b).
	checkBytes, checkAtomics, checkSlots bool
	rows                                 int // result rows each measuring side prints (default 1)
}

// ptCases are the perftest pairs of TestPerftestPairs.
var ptCases = []ptCase{
	{name: "send-bw", cmd: "send-bw", server: []string{"-n", "50", "-s", "10000", "-m", "1024"}, checkBytes: true},
	{name: "send-bw/events", cmd: "send-bw", server: []string{"-n", "50", "-s", "3000", "-e"}, checkBytes: true},
	{name: "send-bw/bidirectional", cmd: "send-bw", server: []string{"-n", "40", "-s", "4096", "-b"}, checkBytes: true},
	{name: "send-bw/UD", cmd: "send-bw", server: []string{"-n", "40", "-s", "1024", "-c", "UD"}, checkBytes: true},
	{name: "send-bw/UC", cmd: "send-bw", server: []string{"-n", "40", "-s", "4096", "-c", "UC", "-m", "1024"}, checkBytes: true},
	{name: "send-bw/qps", cmd: "send-bw", server: []string{"-n", "30", "-s", "2048", "-q", "3"}, checkBytes: true},
	{name: "send-bw/all", cmd: "send-bw", server: []string{"-n", "5", "-a", "-c", "UD", "-m", "1024"}, checkBytes: true, rows: 10},
	{name: "write-bw", cmd: "write-bw", server: []string{"-n", "100", "-s", "4096", "-m", "1024"}, checkBytes: true},
	{name: "write-bw/small", cmd: "write-bw", server: []string{"-n", "200", "-s", "64", "-Q", "7"}, checkBytes: true},
	{name: "write-bw/bidirectional", cmd: "write-bw", server: []string{"-n", "50", "-s", "8192", "-b", "-m", "1024"}, checkBytes: true},
	{name: "write-bw/qps-postlist", cmd: "write-bw", server: []string{"-n", "40", "-s", "512", "-q", "2", "-l", "4"}, checkBytes: true},
	{name: "write-bw/UC", cmd: "write-bw", server: []string{"-n", "40", "-s", "4096", "-c", "UC"}, checkBytes: true},
	{name: "write-bw/all", cmd: "write-bw", server: []string{"-n", "5", "-a"}, checkBytes: true, rows: 23},
	{name: "read-bw", cmd: "read-bw", server: []string{"-n", "100", "-s", "5000", "-m", "1024"}, checkBytes: true},
	{name: "read-bw/outs-events", cmd: "read-bw", server: []string{"-n", "50", "-s", "1024", "-o", "4", "-e"}, checkBytes: true},
	{name: "read-bw/bidirectional-qps", cmd: "read-bw", server: []string{"-n", "30", "-s", "2048", "-b", "-q", "2"}, checkBytes: true},
	{name: "atomic-bw/fetch-add", cmd: "atomic-bw", server: []string{"-n", "300"}, checkAtomics: true, checkSlots: true},
	{name: "atomic-bw/cmp-swap", cmd: "atomic-bw", server: []string{"-n", "100", "-A", "CMP_AND_SWAP"}, checkAtomics: true, checkSlots: true},
	{name: "atomic-bw/bidirectional-qps", cmd: "atomic-bw", server: []string{"-n", "100", "-b", "-q", "2"}, checkAtomics: true, checkSlots: true},
	{name: "send-lat", cmd: "send-lat", server: []string{"-n", "30", "-s", "3000", "-m", "1024"}, checkBytes: true},
	{name: "send-lat/UD-events", cmd: "send-lat", server: []string{"-n", "30", "-s", "512", "-c", "UD", "-e"}, checkBytes: true},
	{name: "send-lat/all", cmd: "send-lat", server: []string{"-n", "5", "-a", "-c", "UD", "-m", "512"}, checkBytes: true, rows: 9},
	{name: "write-lat", cmd: "write-lat", server: []string{"-n", "30", "-s", "4096", "-m", "1024"}, checkBytes: true},
	{name: "read-lat", cmd: "read-lat", server: []string{"-n", "30", "-s", "3000"}, checkBytes: true},
	{name: "atomic-lat", cmd: "atomic-lat", server: []string{"-n", "30", "-A", "FETCH_AND_ADD"}, checkAtomics: true},
}

// TestPerftestPairs runs each perftest tool against itself.
func TestPerftestPairs(t *testing.T) {
	for _, c := range ptCases {
		t.Run(c.name, func(t *testing.T) { runPtCase(t, c) })
	}
}

// runPtCase runs one pair and checks both sides.
func runPtCase(t *testing.T, c ptCase) {
	runs := watchRuns(t)
	cargs := c.client
	if cargs == nil {
		cargs = c.server
	}
	srv, cli := pairs.RunPair(t, c.cmd, "Waiting for client to connect", c.server, cargs)
	if srv.Code != 0 || cli.Code != 0 {
		t.Fatalf("server: %v\nclient: %v", srv, cli)
	}
	test := ptTest(t, c.cmd)
	p, _ := oob.ParsePerftest(test, c.server)
	duplex := p.Duplex
	rows := c.rows
	if rows == 0 {
		rows = 1
	}
	for _, s := range []struct {
		name   string
		r      testpair.Result
		client bool
	}{{"server", srv, false}, {"client", cli, true}} {
		out := s.r.Stdout
		if !strings.Contains(out, oob.ResultLine) {
			t.Errorf("%s: no result rule:\n%s", s.name, out)
		}
		if title := ptTitle(test, p); !strings.Contains(out, title) {
			t.Errorf("%s: no banner title %q:\n%s", s.name, title, out)
		}
		if got := strings.Contains(out, "Waiting for client to connect"); got == s.client {
			t.Errorf("%s: waiting banner shown: %v", s.name, got)
		}
		measures := test.IsBW() || test == oob.SendLat || test == oob.WriteLat || s.client
		var got int
		switch {
		case test.IsBW():
			got = len(ptBWRow.FindAllString(out, -1))
		default:
			got = len(ptLatRow.FindAllString(out, -1))
		}
		want := 0
		if measures {
			want = rows
		}
		if test.IsBW() && !duplex && !s.client && test != oob.SendBW {
			want = 1 // a unidirectional server prints the client's last row
		}
		if got != want {
			t.Errorf("%s: %d result rows, want %d:\n%s", s.name, got, want, out)
		}
		if want > 0 && test.IsBW() {
			for _, m := range ptBWRow.FindAllStringSubmatch(out, -1) {
				if m[2] == "0" || m[4] == "0.00" && m[5] == "0.000000" {
					t.Errorf("%s: empty row %q", s.name, m[0])
				}
			}
		}
	}
	// Each side announces its QPs; the other prints them as remote.
	if l, r := addresses(cli.Stdout, "local"), addresses(srv.Stdout, "remote"); strings.Join(l, ",") != strings.Join(r, ",") || len(l) != p.NumQPs {
		t.Errorf("client's local addresses %v, server's remote %v", l, r)
	}
	if l, r := addresses(srv.Stdout, "local"), addresses(cli.Stdout, "remote"); strings.Join(l, ",") != strings.Join(r, ",") || len(l) != p.NumQPs {
		t.Errorf("server's local addresses %v, client's remote %v", l, r)
	}
	// The data checks ran where the data arrives, and found no fault.
	for _, client := range []bool{false, true} {
		pt := runs.side(client)
		if pt == nil {
			t.Fatalf("no run seen for client=%v", client)
		}
		if pt.check.err != nil {
			t.Errorf("client=%v: %v", client, pt.check.err)
		}
		receives := ptReceivesData(test, client, duplex)
		if c.checkBytes && receives && pt.check.bytes == 0 {
			t.Errorf("client=%v checked no data bytes", client)
		}
		if c.checkAtomics && (client || duplex) && pt.check.atomics == 0 {
			t.Errorf("client=%v checked no fetched values", client)
		}
		if c.checkSlots && (!client || duplex) && pt.check.slots == 0 {
			t.Errorf("client=%v checked no atomic targets", client)
		}
		for i, k := range pt.check.seen {
			if receives && k != peerSroce && (c.checkBytes || c.checkAtomics) {
				t.Errorf("client=%v QP %d: peer seen as %d, want sroce", client, i, k)
			}
		}
	}
}

// ptReceivesData reports whether the client (or server) of test is a side
// that gets data to check: what it is written or sent, or what it reads
// or fetches.
func ptReceivesData(test oob.Test, client, duplex bool) bool {
	switch test.Verb() {
	case oob.VerbRead, oob.VerbAtomic:
		return client || duplex
	case oob.VerbWrite:
		return !client || duplex || !test.IsBW()
	}
	return !client || duplex || !test.IsBW()
}

// ptTest returns the test of a subcommand.
func ptTest(t *testing.T, cmd string) oob.Test {
	for _, test := range oob.Tests {
		if test.String() == cmd {
			return test
		}
	}
	t.Fatalf("no perftest tool %q", cmd)
	return 0
}

// ptTitle returns the banner's title line for p.
func ptTitle(test oob.Test, p oob.Params) string {
	banner := oob.TestInfo(p, oob.DeviceInfo{})
	lines := strings.Split(banner, "\n")
	return lines[1]
}

// TestPerftestDuration runs -D on a BW and a latency tool: rows of the
// duration format with a nonzero count.
func TestPerftestDuration(t *testing.T) {
	if testing.Short() {
		t.Skip("the -D runs take seconds")
	}
	for _, c := range []struct {
		cmd  string
		row  *regexp.Regexp
		args []string
	}{{"write-bw", ptBWRow, nil}, {"send-lat", ptDurRow, nil}, {"send-bw", ptBWRow, []string{"-b", "-c", "UD"}}} {
		t.Run(c.cmd, func(t *testing.T) {
			args := append([]string{"-D", "2", "-f", "0", "-s", "1024"}, c.args...)
			srv, cli := pairs.RunPair(t, c.cmd, "Waiting for client", args, args)
			if srv.Code != 0 || cli.Code != 0 {
				t.Fatalf("server: %v\nclient: %v", srv, cli)
			}
			m := c.row.FindStringSubmatch(cli.Stdout)
			if m == nil || m[2] == "0" {
				t.Errorf("client row: %q in\n%s", m, cli.Stdout)
			}
		})
	}
}

// TestPerftestOutputOptions checks --output, -U, -H and --report_gbits.
func TestPerftestOutputOptions(t *testing.T) {
	srv, cli := pairs.RunPair(t, "write-bw", "", []string{"-n", "20", "--output=bandwidth"},
		[]string{"-n", "20", "--output=bandwidth"})
	for _, r := range []testpair.Result{srv, cli} {
		if r.Code != 0 || !regexp.MustCompile(`^[\d.]+\n$`).MatchString(r.Stdout) {
			t.Errorf("--output=bandwidth: %v", r)
		}
	}
	srv, cli = pairs.RunPair(t, "read-lat", "Waiting", []string{"-n", "8", "-U"}, []string{"-n", "8", "-U", "-H"})
	if srv.Code != 0 || cli.Code != 0 {
		t.Fatalf("server: %v\nclient: %v", srv, cli)
	}
	if n := strings.Count(cli.Stdout, "#, usec\n"); n != 2 || !strings.Contains(cli.Stdout, "\n7, ") {
		t.Errorf("-U -H client output:\n%s", cli.Stdout)
	}
	srv, cli = pairs.RunPair(t, "send-bw", "Waiting", []string{"-n", "20", "--report_gbits"}, []string{"-n", "20", "--report_gbits"})
	if cli.Code != 0 || !strings.Contains(cli.Stdout, "BW average[Gb/sec]") {
		t.Errorf("--report_gbits: %v", cli)
	}
}

// TestPerftestCommandLine checks -h, -V, bad options and options sroce
// does not implement.
func TestPerftestCommandLine(t *testing.T) {
	for _, test := range oob.Tests {
		cmd := test.String()
		code, out, errOut := runSroce(t, nil, cmd, "-h")
		if code != exitOK || errOut != "" || !strings.HasPrefix(out, "usage: sroce "+cmd) || !strings.Contains(out, test.ToolName()) {
			t.Errorf("%s -h: exit %d, stdout %q, stderr %q", cmd, code, out, errOut)
		}
		for _, v := range []string{"--version", "-V"} {
			code, out, _ = runSroce(t, nil, cmd, v)
			if code != exitOK || out != buildinfo.Get().String()+"\n" {
				t.Errorf("%s %s: exit %d, %q", cmd, v, code, out)
			}
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"write-bw", "--bogus"}, "unknown flag --bogus"},
		{[]string{"write-bw", "-n", "2"}, "Iteration num should be between 5 and 100000000"},
		{[]string{"write-bw", "-e"}, "Events feature not available on WRITE verb"},
		{[]string{"read-bw", "-c", "UD"}, "UD connection only possible in SEND verb"},
		{[]string{"atomic-bw", "-s", "16"}, "Message size cannot be changed for Atomic tests"},
		{[]string{"send-lat", "-b"}, "Bidirectional is only available in BW test"},
		{[]string{"write-bw", "a", "b"}, "Invalid Command line"},
		{[]string{"send-bw", "-R", "-c", "UD"}, "not supported by sroce: -R with a UD or UC connection"},
		{[]string{"send-bw", "--use-srq"}, "not supported by sroce: --use-srq"},
		{[]string{"write-bw", "-O"}, "not supported by sroce: -O"},
		{[]string{"write-bw", "-i", "2"}, "one port"},
	} {
		code, out, errOut := runSroce(t, nil, c.args...)
		if code != exitUsage || out != "" || !strings.Contains(errOut, c.want) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2 and %q", c.args, code, out, errOut, c.want)
		}
		if first, _, _ := strings.Cut(errOut, "\n"); !strings.HasPrefix(first, "sroce "+c.args[0]+": ") {
			t.Errorf("%q: first line %q is not one sentence about the command", c.args, first)
		}
	}
}
