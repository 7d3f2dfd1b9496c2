package interop

import (
	"slices"
	"strings"
	"testing"

	"github.com/sroce/sroce/tools/oob"
)

// Outputs as the tools print them (perftest 4.5's tables, rdma-core's
// pingpong lines).
const (
	pingpongOut = "  local address:  LID 0x0000, QPN 0x000011, PSN 0x4b3a1c, GID ::ffff:192.0.2.10\n" +
		"40960 bytes in 0.06 seconds = 5.69 Mbit/sec\n10 iters in 0.06 seconds = 11509.10 usec/iter\n"
	bwOut = " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n" +
		" 2          10             0.10               0.09   0.045000\n" +
		" 4096       10             7.40               7.35   0.001882\n"
	latOut = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] \n" +
		" 4096    10          180.10         400.12       198.88         239.31        60.55           400.12               400.12  \n"
)

func TestFigure(t *testing.T) {
	for _, tc := range []struct{ cmd, out, want string }{
		{"rc-pingpong", pingpongOut, "5.69 Mbit/s, 11509.10 us/iter"},
		{"write-bw", bwOut, "7.35 MB/s, 0.001882 Mpps"},
		{"read-lat", latOut, "198.88 us typical, 239.31 us avg"},
		{"read-lat", "", ""},
		{"write-bw", latOut, ""},
	} {
		if got := Figure(tc.cmd, tc.out); got != tc.want {
			t.Errorf("Figure(%s, %q) = %q, want %q", tc.cmd, tc.out, got, tc.want)
		}
	}
}

func TestSideProblem(t *testing.T) {
	for _, tc := range []struct {
		cmd    string
		o      Outcome
		server bool
		want   string
	}{
		{"rc-pingpong", Outcome{Stdout: pingpongOut}, true, ""},
		{"rc-pingpong", Outcome{Exit: 1, Stdout: pingpongOut}, true, "exited with 1"},
		{"write-bw", Outcome{Stdout: "nothing"}, false, "did not print a BW table row"},
		{"read-lat", Outcome{}, true, ""}, // the read-lat server measures nothing
		{"read-lat", Outcome{}, false, "did not print a latency table row"},
		{"send-lat", Outcome{Stdout: latOut}, true, ""},
	} {
		if got := SideProblem(tc.cmd, tc.o, tc.server); got != tc.want {
			t.Errorf("SideProblem(%s, %+v, server %v) = %q, want %q", tc.cmd, tc.o, tc.server, got, tc.want)
		}
	}
}

func TestSelect(t *testing.T) {
	sel, unknown := Select(Matrix, []string{"atomic-bw", "rc-pingpong", "nope"})
	var names []string
	for _, c := range sel {
		names = append(names, c.Name)
	}
	if want := []string{"rc-pingpong", "atomic-bw-fadd", "atomic-bw-cmpswp"}; !slices.Equal(names, want) {
		t.Errorf("selected %v, want %v", names, want)
	}
	if !slices.Equal(unknown, []string{"nope"}) {
		t.Errorf("unknown %v, want [nope]", unknown)
	}
}

// TestTables checks that every table names each pair once, that Matrix
// has every sroce tool, and that LossyCases are reliable.
func TestTables(t *testing.T) {
	for name, table := range map[string][]Case{"Cases": Cases, "LossyCases": LossyCases} {
		seen := map[string]bool{}
		for _, c := range table {
			if seen[c.Name] || c.Cmd == "" || c.Real == "" {
				t.Errorf("%s: bad or repeated entry %+v", name, c)
			}
			seen[c.Name] = true
		}
	}
	tools := map[string]bool{}
	for _, c := range Matrix {
		tools[c.Cmd] = true
	}
	for _, cmd := range []string{"rc-pingpong", "ud-pingpong", "send-bw", "write-bw", "read-bw", "atomic-bw", "send-lat", "write-lat", "read-lat", "atomic-lat"} {
		if !tools[cmd] {
			t.Errorf("Matrix has no %s pair", cmd)
		}
	}
	for _, c := range LossyCases {
		if strings.Contains(c.Args, "UD") || strings.Contains(c.Args, "UC") || strings.HasPrefix(c.Cmd, "ud") {
			t.Errorf("LossyCases holds an unreliable pair: %+v", c)
		}
	}
}

// TestCasesParse parses every pair's sroce command line, as the rig runs
// it (the tool, -d and the arguments; a client adds the server), with the
// tools' own parser: every argument list perftest and rdma-core take is
// one sroce takes.
func TestCasesParse(t *testing.T) {
	for _, c := range slices.Concat(Cases, LossyCases) {
		for _, server := range []string{"", "10.0.0.1"} {
			args := append([]string{"-d", "veth0"}, strings.Fields(c.Args)...)
			if server != "" {
				args = append(args, server)
			}
			var dev, name string
			var err error
			switch c.Cmd {
			case "rc-pingpong", "ud-pingpong":
				var p oob.PingpongParams
				p, err = oob.ParsePingpong(c.Cmd == "ud-pingpong", args)
				dev, name = p.IBDev, p.ServerName
				if err == nil && len(p.Unsupported) > 0 {
					t.Errorf("%s %q: sroce does not implement %v", c.Cmd, args, p.Unsupported)
				}
			default:
				i := slices.IndexFunc(oob.Tests, func(tt oob.Test) bool { return tt.String() == c.Cmd })
				if i < 0 {
					t.Errorf("%s: no such perftest tool", c.Cmd)
					continue
				}
				var p oob.Params
				p, err = oob.ParsePerftest(oob.Tests[i], args)
				dev, name = p.IBDev, p.ServerName
				if err == nil {
					err = p.CheckSupported()
				}
			}
			if err != nil || dev != "veth0" || name != server {
				t.Errorf("%s %q: %v, device %q, server %q", c.Cmd, args, err, dev, name)
			}
		}
	}
}
