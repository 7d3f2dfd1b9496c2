package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sroce/sroce/interop"
)

// TestInteropUsage checks that bad command lines are refused with a
// sentence and the usage, before anything is set up.
func TestInteropUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--bogus"}, "unknown flag --bogus"},
		{[]string{"--loss", "150"}, `invalid value "150" for --loss: not a percentage`},
		{[]string{"--loss", "-1"}, `invalid value "-1" for --loss: not a percentage`},
		{[]string{"--only", "write-bw,nosuch"}, "no pair or command named nosuch among the pairs rc-pingpong,"},
		{[]string{"--loss", "2", "--only", "ud-pingpong"}, "no pair or command named ud-pingpong"},
		{[]string{"--engine", "warp"}, `invalid value "warp" for --engine`},
		{[]string{"--timeout", "0s"}, `invalid value "0s" for --timeout: must be positive`},
		{[]string{"extra"}, "expected no arguments"},
		{[]string{"--peer", "moon"}, `invalid value "moon" for --peer: want auto, host or guest`},
	} {
		code, out, errOut := runSroce(t, nil, append([]string{"interop"}, tc.args...)...)
		if code != exitUsage || out != "" || !strings.Contains(errOut, tc.want) || !strings.Contains(errOut, "usage: sroce interop") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2 and %q with the usage", tc.args, code, out, errOut, tc.want)
		}
	}
}

// TestInteropKeep checks what is kept of a failed run: the capture byte
// for byte, its ladder, and a log naming the failure and both sides'
// output.
func TestInteropKeep(t *testing.T) {
	pcap := filepath.Join("..", "..", "bth", "testdata", "rxe", "read_bw.pcap")
	want, err := os.ReadFile(pcap)
	if err != nil {
		t.Fatal(err)
	}
	res := interop.PairResult{
		Case:       interop.Case{Name: "read-bw", Cmd: "read-bw", Real: "ib_read_bw", Args: "-x 1 -n 10"},
		RealServer: true,
		Real:       interop.Outcome{Exit: 0, Stdout: " 4096       10             7.40               7.35   0.001882\n"},
		Ours:       interop.Outcome{Exit: 1, Stderr: "sroce read-bw: no completion for 60s\n"},
		Pcap:       pcap,
		Attempt:    2,
	}
	if !res.Failed() {
		t.Fatal("the run is not judged failed")
	}
	if got := failureText(res); got != "sroce: exit 1" {
		t.Errorf("failureText = %q", got)
	}
	k := &failureKeeper{dir: filepath.Join(t.TempDir(), "kept")}
	if err := k.keep(res, "eth0", "run 1: ib_read_bw could not calibrate its cycle counter\n", "rxe0 counters"); err != nil {
		t.Fatal(err)
	}
	base := filepath.Join(k.dir, "read-bw-real-server")
	got, err := os.ReadFile(base + ".pcap")
	if err != nil || !bytes.Equal(got, want) {
		t.Errorf("kept capture: %v, %d bytes, want the %d bytes of %s", err, len(got), len(want), pcap)
	}
	ladder, err := os.ReadFile(base + ".ladder.txt")
	if err != nil || !strings.Contains(string(ladder), "QP pair 1: A 192.0.2.2 QP 0x000016 <-> B 192.0.2.1 QP 0x000016") ||
		!strings.Contains(string(ladder), "READ response 1/8 for the READ request at frame 1") {
		t.Errorf("kept ladder (%v):\n%s", err, ladder)
	}
	log, err := os.ReadFile(base + ".log")
	for _, w := range []string{"pair read-bw (real server, sroce client), run 2", "sroce read-bw as client exited with 1",
		"sroce: sroce read-bw -d eth0 -x 1 -n 10", "run 1: ib_read_bw could not calibrate", "no completion for 60s", "rxe0 counters"} {
		if err != nil || !strings.Contains(string(log), w) {
			t.Errorf("kept log (%v) lacks %q:\n%s", err, w, log)
		}
	}
}

// TestInteropFailureText checks the few words of a FAIL cell.
func TestInteropFailureText(t *testing.T) {
	c := interop.Case{Name: "read-lat", Cmd: "read-lat", Real: "ib_read_lat"}
	for _, tc := range []struct {
		res  interop.PairResult
		want string
	}{
		{interop.PairResult{Case: c, RealServer: true, Real: interop.Outcome{Exit: 1}, Ours: interop.Outcome{Exit: -1}}, "ib_read_lat: exit 1; sroce: exit -1"},
		{interop.PairResult{Case: c, RealServer: true, Real: interop.Outcome{}, Ours: interop.Outcome{Stdout: "nothing"}}, "sroce: no latency table row"},
		{interop.PairResult{Case: c, RealServer: false, Real: interop.Outcome{Stdout: "nothing"}, Ours: interop.Outcome{}}, "ib_read_lat: no latency table row"},
	} {
		if got := failureText(tc.res); got != tc.want {
			t.Errorf("failureText(%+v) = %q, want %q", tc.res, got, tc.want)
		}
	}
}

// TestInteropKeepShim: a failed run of the real tool through the shim is
// kept under a name of its own and its log says how sroce's side ran.
func TestInteropKeepShim(t *testing.T) {
	res := interop.PairResult{
		Case: interop.Case{Name: "read-bw", Cmd: "read-bw", Real: "ib_read_bw", Args: "-x 1 -n 10"},
		Ours: interop.Outcome{Exit: 1}, Real: interop.Outcome{Exit: 1},
		Pcap: filepath.Join("..", "..", "bth", "testdata", "rxe", "read_bw.pcap"),
		Shim: true, Attempt: 1,
	}
	if got := failureText(res); got != "sroce: exit 1; ib_read_bw: exit 1" && got != "ib_read_bw: exit 1; sroce: exit 1" {
		t.Errorf("failureText = %q", got)
	}
	k := &failureKeeper{dir: t.TempDir()}
	if err := k.keep(res, "eth0", "", ""); err != nil {
		t.Fatal(err)
	}
	log, err := os.ReadFile(filepath.Join(k.dir, "read-bw-shim-real-client.log"))
	if err != nil || !strings.Contains(string(log), "sroce: sroce run -- ib_read_bw -d sroce_eth0 -x 1 -n 10 (on a sroce daemon)") ||
		!strings.Contains(string(log), "sroce run ib_read_bw as server exited with 1") {
		t.Errorf("kept log (%v):\n%s", err, log)
	}
}
