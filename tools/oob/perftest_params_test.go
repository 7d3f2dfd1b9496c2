package oob

import (
	"errors"
	"github.com/sroce/sroce/internal/cli"
	"github.com/sroce/sroce/verbs"
	"strings"
	"testing"
)

func TestPerftestDefaults(t *testing.T) {
	for _, c := range []struct {
		test                    Test
		size, iters             uint64
		tx, rx, cqMod           int
		conn                    ConnType
		noPeakServer, noPeakCli bool
	}{
		// After perftest's adjustments: tx_depth is clamped to iters, CQ
		// moderation disabled above 8 KiB, a send server computes no peak.
		{SendBW, 65536, 1000, 128, 512, 1, RC, true, false},
		{WriteBW, 65536, 5000, 128, 1, 1, RC, false, false},
		{ReadBW, 65536, 1000, 128, 1, 1, RC, false, false},
		{AtomicBW, 8, 1000, 128, 1, 100, RC, false, false},
		{SendLat, 2, 1000, 1, 512, 1, RC, false, false},
		{WriteLat, 2, 1000, 1, 1, 1, RC, false, false},
		{ReadLat, 2, 1000, 1, 1, 1, RC, false, false},
		{AtomicLat, 8, 1000, 1, 1, 1, RC, false, false},
	} {
		srv, err := ParsePerftest(c.test, nil)
		if err != nil {
			t.Fatal(err)
		}
		cli, err := ParsePerftest(c.test, []string{"host"})
		if err != nil {
			t.Fatal(err)
		}
		if srv.Role != Server || cli.Role != Client || cli.ServerName != "host" {
			t.Errorf("%s: roles %v %v", c.test, srv.Role, cli.Role)
		}
		p := cli
		if p.Size != c.size || p.Iters != c.iters || p.TxDepth != c.tx || p.RxDepth != c.rx || p.CQMod != c.cqMod || p.Conn != c.conn ||
			p.Port != 18515 || p.IBPort != 1 || p.GIDIndex != -1 || p.QPTimeout != 14 || p.SL != 0 || p.NumQPs != 1 ||
			p.Output != FullVerbosity || p.Duration != 5 {
			t.Errorf("%s defaults: %+v", c.test, p)
		}
		if srv.NoPeak != c.noPeakServer || cli.NoPeak != c.noPeakCli {
			t.Errorf("%s: noPeak server %v client %v", c.test, srv.NoPeak, cli.NoPeak)
		}
		if c.test.Verb() == VerbAtomic && p.Atomic != FetchAndAdd {
			t.Errorf("%s: atomic type %v", c.test, p.Atomic)
		}
		if got := p.Flow(1024); len(got.Sizes) != 1 || got.Sizes[0] != c.size || got.Test != c.test {
			t.Errorf("%s: flow %+v", c.test, got)
		}
	}
}

func TestParsePerftest(t *testing.T) {
	// GNU getopt_long: operands anywhere, clustered and attached values,
	// long options with = or a separate value, unambiguous prefixes.
	p, err := ParsePerftest(WriteBW, []string{"192.0.2.1", "-d", "eth0", "-x1", "-aF", "--size=4K", "--iters", "100",
		"--report_g", "-q", "4", "-t", "64", "-p", "0x4853", "-m", "4096", "-u", "20", "-S", "3", "--tclass=32",
		"-Q", "8", "-N", "--perform_warm_up", "--mr_per_qp", "--disable_pcie_relaxed"})
	if err != nil {
		t.Fatal(err)
	}
	if p.Role != Client || p.ServerName != "192.0.2.1" || p.IBDev != "eth0" || p.GIDIndex != 1 || !p.GIDGiven || !p.RunAll ||
		!p.CPUFreq || p.Size != MaxSize || !p.SizeGiven || p.Iters != 100 || !p.ReportGbits || p.NumQPs != 4 || p.TxDepth != 64 ||
		p.Port != 0x4853 || p.MTU != 4096 || p.QPTimeout != 20 || p.SL != 3 || p.TClass != 32 || p.CQMod != 8 || !p.NoPeak ||
		!p.WarmUp || !p.MRPerQP || !p.NoRelaxedOrdering {
		t.Errorf("parsed %+v", p)
	}
	if f := p.Flow(1024); len(f.Sizes) != 23 || !f.RunAll {
		t.Errorf("flow %+v", f)
	}
	if p, err := ParsePerftest(WriteBW, []string{"--queues", "4", "-q", "8"}); err != nil || p.Queues != 4 || p.NumQPs != 8 {
		t.Errorf("--queues 4: queues %d, QPs %d, %v", p.Queues, p.NumQPs, err)
	}
	p, err = ParsePerftest(AtomicBW, []string{"-A", "CMP_AND_SWAP", "-o", "4", "-b", "-e", "--", "server"})
	if err != nil || p.Atomic != CmpAndSwap || p.OutReads != 4 || !p.Duplex || !p.Events || p.ServerName != "server" || p.Inline != 0 {
		t.Errorf("atomic: %+v, %v", p, err)
	}
	p, err = ParsePerftest(SendLat, []string{"-c", "UD", "-s", "1M", "-C", "-H", "-U", "-r", "33", "-I", "900", "--output=latency", "--latency_gap=5"})
	if err != nil || p.Conn != UD || p.Size != 1<<20 || !p.Cycles || !p.Histogram || !p.Unsorted || p.RxDepth != 34 ||
		p.Inline != maxInlineUD || p.Output != OutputLat || p.LatencyGap != 5 {
		t.Errorf("send lat: %+v, %v", p, err)
	}
	if notes, err := p.AdjustForMTU(verbs.MTU1024); err == nil {
		t.Errorf("-s above the UD MTU accepted: %v", notes)
	}
	p, _ = ParsePerftest(SendBW, []string{"-c", "UD"})
	if notes, err := p.AdjustForMTU(verbs.MTU1024); err != nil || p.Size != 1024 || len(notes) != 2 || notes[0] != " Max msg size in UD is MTU 1024" {
		t.Errorf("UD size: %d %v %v", p.Size, notes, err)
	}
	// Duration mode.
	p, err = ParsePerftest(ReadBW, []string{"-D", "10", "h"})
	if err != nil || !p.DurationMode || p.Duration != 10 || p.Margin != 2 || p.Iters != 0 || !p.NoPeak {
		t.Errorf("duration: %+v, %v", p, err)
	}
	// --reversed swaps the roles.
	if p, _ := ParsePerftest(WriteBW, []string{"--reversed", "h"}); p.Role != Server {
		t.Errorf("reversed client has role %v", p.Role)
	}
	// Post list makes CQ moderation follow it.
	if p, _ := ParsePerftest(SendBW, []string{"-l", "10", "-n", "100", "-s", "64"}); p.CQMod != 10 || len(p.Notes) != 1 {
		t.Errorf("post list: %+v", p)
	}
	// Large iteration counts turn the peak off.
	if p, _ := ParsePerftest(WriteBW, []string{"-n", "20001"}); !p.NoPeak {
		t.Error("peak with 20001 iterations")
	}
	// -h and -V stop parsing.
	if p, err := ParsePerftest(WriteBW, []string{"-V", "--bogus"}); err != nil || !p.Version {
		t.Errorf("-V: %v", err)
	}
	if p, err := ParsePerftest(WriteBW, []string{"--he"}); err != nil || !p.Help {
		t.Errorf("--he: %v", err)
	}
	// Options perftest knows but sroce does not implement.
	p, err = ParsePerftest(SendBW, []string{"-g", "--odp", "-O", "--rate_limit=5", "-c", "XRC"})
	if err != nil || strings.Join(p.Unsupported, " ") != "-g --odp -O --rate_limit -c XRC" {
		t.Errorf("unsupported %v, %v", p.Unsupported, err)
	}
	if err := p.CheckSupported(); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "-g") {
		t.Errorf("CheckSupported = %v", err)
	}
	if p, _ := ParsePerftest(SendBW, nil); p.CheckSupported() != nil {
		t.Error("defaults unsupported")
	}
}

func TestParsePerftestErrors(t *testing.T) {
	for _, c := range []struct {
		test Test
		args []string
		msg  string
	}{
		{WriteBW, []string{"-n", "4"}, "Iteration num should be between 5 and 100000000"},
		{WriteBW, []string{"-n", "10x"}, "Iteration num argument 10x should be int"},
		{WriteBW, []string{"-t", "0"}, "Tx depth should be between 1 and 15000"},
		{WriteBW, []string{"-x", "65"}, "Gid index should be between 0 and 64"},
		{WriteBW, []string{"-S", "16"}, "Only 15 Service levels"},
		{WriteBW, []string{"-s", "0"}, "Message Size should be between 1 and 2147483647"},
		{WriteBW, []string{"-s", "-5"}, "Message Size should be between"},
		{WriteBW, []string{"-p", "70000"}, "Port should be between 1 and 65535"},
		{WriteBW, []string{"-i", "0"}, "IB Port can't be less than 1"},
		{WriteBW, []string{"-q", "0"}, "num of Qps should be between 1 and 16384"},
		{WriteBW, []string{"--queues", "0"}, "The number of queues must be at least 1"},
		{WriteBW, []string{"--queues=x"}, "queues argument x should be int"},
		{WriteLat, []string{"-q", "2"}, "Multiple QPs only available on bw tests"},
		{WriteBW, []string{"-e"}, "Events feature not available on WRITE verb"},
		{WriteBW, []string{"-o", "2"}, "Setting Outstanding reads only available on READ verb"},
		{ReadBW, []string{"-I", "64"}, "Inline feature not available on READ/Atomic verbs"},
		{WriteBW, []string{"-r", "2"}, "On RDMA verbs rx depth can be only 1"},
		{SendLat, []string{"-b"}, "Bidirectional is only available in BW test"},
		{SendLat, []string{"-N"}, "NoPeak only valid for BW tests"},
		{SendBW, []string{"-C"}, "Available only on Latency tests"},
		{SendBW, []string{"-A", "FETCH_AND_ADD"}, "You are not running the atomic_lat/bw test"},
		{AtomicBW, []string{"-A", "SWAP"}, "Invalid Atomic type"},
		{AtomicBW, []string{"-s", "16"}, "Message size cannot be changed for Atomic tests"},
		{AtomicBW, []string{"-a"}, "Message size cannot be changed for Atomic tests"},
		{ReadBW, []string{"-c", "UC"}, "UC connection not possible in READ/ATOMIC verbs"},
		{WriteBW, []string{"-c", "UD"}, "UD connection only possible in SEND verb"},
		{SendBW, []string{"-c", "XYZ"}, "Invalid Connection type"},
		{WriteBW, []string{"-D", "0"}, "Duration period must be positive"},
		{WriteBW, []string{"-D", "4", "-f", "2"}, "please check that DURATION > 2*MARGIN"},
		{WriteBW, []string{"-D", "4", "-a"}, "Duration mode currently doesn't support running on all sizes."},
		{SendBW, []string{"-D", "4", "-e"}, "Duration mode doesn't work with events."},
		{WriteBW, []string{"--output=latency"}, "Output verbosity level for BW can be: bandwidth, message_rate"},
		{SendLat, []string{"--output=bandwidth"}, "Output verbosity level for LAT can be: latency"},
		{WriteBW, []string{"--output=lots"}, "Invalid verbosity level output flag"},
		{WriteBW, []string{"--latency_gap=3"}, "Latency gap feature is only for latency tests"},
		{WriteBW, []string{"-l", "3", "-n", "100"}, "Number of iterations must be a multiple of post list size"},
		{WriteLat, []string{"-l", "2"}, "Post list is supported in BW tests only"},
		{WriteBW, []string{"--use-srq"}, "Using SRQ only avavilible in SEND tests."},
		{WriteBW, []string{"-R", "-c", "UC"}, "UC is not supported in librdmacm"},
		{WriteBW, []string{"a", "b"}, "Invalid Command line. Please check command rerun"},
		{WriteBW, []string{"-Y"}, "flag -Y needs a value"},
		{WriteBW, []string{"-7"}, "unknown flag -7"},
		{WriteBW, []string{"--bogus"}, "unknown flag --bogus"},
		{WriteBW, []string{"--re"}, "flag --re is ambiguous: --report-cycles, --report-histogrm,"},
		{WriteBW, []string{"--all=3"}, "flag --all takes no value"},
		{WriteBW, []string{"--size"}, "flag --size needs a value"},
		{WriteBW, []string{"--iter", "2"}, "--iter 2: Iteration num should be between 5 and 100000000"},
		{WriteBW, []string{"-n2"}, "-n 2: Iteration num should be between 5 and 100000000"},
	} {
		_, err := ParsePerftest(c.test, c.args)
		var ue *UsageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s %v: got %v, want %q", c.test, c.args, err, c.msg)
		}
	}
}

func TestCStrtol(t *testing.T) {
	for _, c := range []struct {
		in   string
		v    int64
		rest string
	}{
		{"10", 10, ""}, {"0x10", 16, ""}, {"010", 8, ""}, {" -5", -5, ""}, {"+7z", 7, "z"}, {"", 0, ""},
		{"abc", 0, "abc"}, {"0x", 0, "x"}, {"08", 0, "8"}, {"99999999999999999999", 1<<63 - 1, ""},
	} {
		v, rest := cStrtol(c.in)
		if v != c.v || rest != c.rest {
			t.Errorf("cStrtol(%q) = %d, %q; want %d, %q", c.in, v, rest, c.v, c.rest)
		}
	}
}

// flagsText lays out a flags section as the usage prints it.
func flagsText(hs []cli.Help) string {
	var b strings.Builder
	cli.WriteFlags(&b, hs)
	return b.String()
}

func TestUsageTexts(t *testing.T) {
	for _, test := range Tests {
		u := flagsText(PerftestFlags(test))
		if !strings.Contains(u, "  -x, --gid-index INDEX ") || !strings.Contains(u, "  -d, --device IF ") || !strings.HasSuffix(u, "\n") {
			t.Errorf("%s usage:\n%s", test, u)
		}
		if strings.Contains(u, "--atomic_type") != (test.Verb() == VerbAtomic) {
			t.Errorf("%s usage and -A:\n%s", test, u)
		}
		// Every flag listed is one the parser takes.
		for _, h := range PerftestFlags(test) {
			args := []string{"--" + h.Long}
			if h.Arg != "" {
				args = append(args, "1")
			}
			if _, err := ParsePerftest(test, args); err != nil && strings.Contains(err.Error(), "unknown flag") {
				t.Errorf("%s lists %q, which the parser does not know: %v", test, args, err)
			}
		}
	}
	if u := flagsText(PingpongFlags(true)); !strings.Contains(u, "default 1024") || strings.Contains(u, "--mtu") {
		t.Errorf("ud usage:\n%s", u)
	}
	if u := flagsText(PingpongFlags(false)); !strings.Contains(u, "default 4096") || !strings.Contains(u, "--mtu") {
		t.Errorf("rc usage:\n%s", u)
	}
}
