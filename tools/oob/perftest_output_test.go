package oob

import (
	"bufio"
	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/verbs"
	"math"
	"os"
	"strings"
	"testing"
)

// Rows printed by glibc with perftest's REPORT_FMT, REPORT_FMT_EXT,
// REPORT_FMT_LAT and REPORT_FMT_LAT_DUR for the values in the tests.
func TestBWRowGolden(t *testing.T) {
	for _, c := range []struct {
		r        BWReport
		mb, gbit string
	}{
		{BWReport{Size: 65536, Iters: 10, BWPeak: 16.052871, BWAvg: 6.471928, MsgRate: 0.000103},
			" 65536      10               16.05              6.47   \t\t   0.000103",
			" 65536      10               16.05              6.47   \t\t   0.000103"},
		{BWReport{Size: 8, Iters: 10, BWPeak: 0.0123, BWAvg: 0.0059, MsgRate: 0.000737},
			" 8          10               0.01               0.01   \t\t   0.000737",
			" 8          10           0.012300            0.005900            0.000737"},
		{BWReport{Size: 2, Iters: 5000, BWPeak: 0, BWAvg: 1234.5678, MsgRate: 12.3456789},
			" 2          5000             0.00               1234.57\t\t   12.345679",
			" 2          5000             0.00               1234.57\t\t   12.345679"},
		{BWReport{Size: 8388608, Iters: 5, BWPeak: 8.75, BWAvg: 8.75, MsgRate: 0.000001},
			" 8388608    5                8.75               8.75   \t\t   0.000001",
			" 8388608    5                8.75               8.75   \t\t   0.000001"},
		{BWReport{Size: 1048576, Iters: 123456789012, BWPeak: 12345.678, BWAvg: 98765.4321, MsgRate: 0.5},
			" 1048576    123456789012       12345.68            98765.43\t\t   0.500000",
			" 1048576    123456789012       12345.68            98765.43\t\t   0.500000"},
	} {
		p := DefaultParams(WriteBW)
		if got := BWRow(p, c.r); got != c.mb+"\n" {
			t.Errorf("BWRow(MB/s) = %q\nwant %q", got, c.mb)
		}
		p.ReportGbits = true
		if got := BWRow(p, c.r); got != c.gbit+"\n" {
			t.Errorf("BWRow(Gb/s) = %q\nwant %q", got, c.gbit)
		}
	}
	p := DefaultParams(WriteBW)
	p.Output = OutputBW
	if got := BWRow(p, BWReport{BWAvg: 6.5, MsgRate: 0.25}); got != "6.500000\n" {
		t.Errorf("--output=bandwidth: %q", got)
	}
	p.Output = OutputMsgRate
	if got := BWRow(p, BWReport{BWAvg: 6.5, MsgRate: 0.25}); got != "0.250000\n" {
		t.Errorf("--output=message_rate: %q", got)
	}
}

func TestLatRowGolden(t *testing.T) {
	inf := math.Inf(1)
	for _, c := range []struct {
		r    LatReport
		want string
	}{
		{LatReport{2, 10, 574.98, 5165.78, 805.32, 1306.31, 798.23, 5165.78, 5165.78},
			" 2       10          574.98         5165.78      805.32   \t       1306.31     \t798.23 \t\t5165.78 \t\t5165.78"},
		{LatReport{8388608, 5, 733440.39, 875301.38, 761478.34, 761478.34, 28037, 875301.38, 875301.38},
			" 8388608 5          733440.39        875301.38      761478.34  \t       761478.34     \t28037.00\t\t875301.38 \t\t875301.38"},
		{LatReport{2, 1000, 1.234, 2.5, 1.5, 1.6, 0.1, 2.4, 2.5},
			" 2       1000          1.23           2.50         1.50     \t       1.60        \t0.10   \t\t2.40    \t\t2.50   "},
		{LatReport{256, 5, inf, inf, inf, inf, math.Copysign(math.NaN(), -1), inf, inf},
			" 256     5          inf            inf          inf      \t       inf         \t-nan   \t\tinf     \t\tinf    "},
	} {
		if got := LatRow(DefaultParams(SendLat), c.r); got != c.want+"\n" {
			t.Errorf("LatRow = %q\nwant     %q", got, c.want)
		}
	}
	p := DefaultParams(SendLat)
	if got, want := LatDurationRow(p, 2, 1108, 905.03, 552.47), " 2             1108            905.03         552.47 \n"; got != want {
		t.Errorf("LatDurationRow = %q, want %q", got, want)
	}
	if got, want := LatDurationRow(p, 65536, 123456789, 1.5, 666666.666), " 65536         123456789            1.50           666666.67\n"; got != want {
		t.Errorf("LatDurationRow = %q, want %q", got, want)
	}
	p.Output = OutputLat
	if got := LatRow(p, LatReport{Avg: 1.5}); got != "1.500000\n" {
		t.Errorf("--output=latency: %q", got)
	}
	if got := LatSamples("usec", []float64{1.5, 1234567}); got != "#, usec\n1, 1.5\n2, 1.23457e+06\n" {
		t.Errorf("LatSamples = %q", got)
	}
}

func TestAddressLineGolden(t *testing.T) {
	k := KeyMsg{LID: 0, OutReads: 0x80, QPN: 0x13, PSN: 0x1a7e86, RKey: 0x496, VAddr: 0x7f30e35a0000,
		GID: bth.GID{10: 255, 11: 255, 12: 192, 13: 0, 14: 2, 15: 1}}
	if got, want := AddressLine("local", ReadBW, k, false), " local address: LID 0000 QPN 0x0013 PSN 0x1a7e86 OUT 0x80 RKey 0x000496 VAddr 0x007f30e35a0000\n"; got != want {
		t.Errorf("read: %q\nwant %q", got, want)
	}
	if got, want := AddressLine("local", WriteLat, k, true), " local address: LID 0000 QPN 0x0013 PSN 0x1a7e86 RKey 0x000496 VAddr 0x007f30e35a0000\n GID: 00:00:00:00:00:00:00:00:00:00:255:255:192:00:02:01\n"; got != want {
		t.Errorf("write: %q\nwant %q", got, want)
	}
	k = KeyMsg{LID: 0xffff, QPN: 0xffffff, PSN: 0x7a0e1, GID: bth.GID{0xfe, 0x80, 8: 0x50, 9: 0x54, 10: 0, 11: 0xff, 12: 0xfe, 13: 0x5e, 14: 0, 15: 1}}
	for _, test := range []Test{SendBW, AtomicLat} {
		if got, want := AddressLine("remote", test, k, true), " remote address: LID 0xffff QPN 0xffffff PSN 0x7a0e1\n GID: 254:128:00:00:00:00:00:00:80:84:00:255:254:94:00:01\n"; got != want {
			t.Errorf("%s: %q\nwant %q", test, got, want)
		}
	}
}

// TestRealOutputs rebuilds the complete output of each real tool run in
// testdata from this package's pieces: the parsed command line, the keys
// and reports of the transcript. Rows whose numbers never crossed the
// wire (latencies, a send_bw server's own result, the sizes before the
// last of an -a run) are taken from the file; everything else must match
// byte for byte.
func TestRealOutputs(t *testing.T) {
	tests := map[string]Test{"send_bw": SendBW, "write_bw": WriteBW, "read_bw": ReadBW, "atomic_bw": AtomicBW,
		"send_lat": SendLat, "write_lat": WriteLat, "read_lat": ReadLat, "atomic_lat": AtomicLat}
	dev := DeviceInfo{Device: "rxe0", Transport: "IB", LinkLayer: "Ethernet", MTU: verbs.MTU1024, GIDIndex: 1, OutReads: 128}
	for _, name := range []string{"write_bw", "read_bw", "send_bw", "atomic_bw", "write_bw_b", "send_bw_b", "send_bw_ud",
		"write_bw_a", "send_bw_a", "write_lat", "write_lat_D", "read_lat", "send_lat", "send_lat_a", "atomic_lat"} {
		segs := loadTranscript(t, name)
		args := transcriptCommand(t, name)
		test := tests[strings.TrimPrefix(args[0], "ib_")]
		for _, role := range []Role{Server, Client} {
			t.Run(name+"/"+role.String(), func(t *testing.T) {
				argv := args[1:]
				if role == Client {
					argv = append(argv, "192.0.2.1")
				}
				p, err := ParsePerftest(test, argv)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := p.AdjustForMTU(dev.MTU); err != nil {
					t.Fatal(err)
				}
				local := transcriptKeys(t, segs, role == Client)
				remote := transcriptKeys(t, segs, role != Client)
				cliRep, _ := transcriptReport(segs, true)
				srvRep, _ := transcriptReport(segs, false)
				const unknown = "\x00row\n"
				var b strings.Builder
				verb := test.Verb()
				if verb == VerbRead || verb == VerbAtomic {
					b.WriteString(ResultLine) // with UnknownDeviceInlineNote on stderr
				}
				if role == Server {
					b.WriteString(WaitingBanner)
				}
				b.WriteString(TestInfo(p, dev))
				b.WriteString(AddressLine("local", test, local, true))
				b.WriteString(AddressLine("remote", test, remote, true))
				rows := 1
				if p.RunAll && (test.Verb() == VerbSend || role == Client) {
					rows = 23
				}
				switch {
				case !test.IsBW():
					if role == Server && (test == ReadLat || test == AtomicLat) {
						break
					}
					b.WriteString(LatHeader(p.DurationMode, false))
					for range rows {
						b.WriteString(unknown)
					}
				default:
					b.WriteString(BWHeader(p.ReportGbits, false))
					for i := range rows {
						var row string
						switch {
						case i < rows-1:
							row = unknown
						case p.Duplex:
							mine, theirs := cliRep, srvRep
							if role == Server {
								mine, theirs = srvRep, cliRep
							}
							row = BWRow(p, mine.Add(theirs))
						case test == SendBW:
							row = unknown // not exchanged
						default:
							row = BWRow(p, cliRep)
						}
						b.WriteString(row)
					}
				}
				b.WriteString(ResultLine)
				want := readLines(t, "testdata/real-"+name+"."+role.String()+".out")
				got := strings.SplitAfter(b.String(), "\n")
				got = got[:len(got)-1]
				if len(got) != len(want) {
					t.Fatalf("%d lines, want %d:\n%s\nwant:\n%s", len(got), len(want), b.String(), strings.Join(want, ""))
				}
				for i := range got {
					if got[i] != unknown && got[i] != want[i] {
						t.Errorf("line %d: got  %q\n              want %q", i+1, got[i], want[i])
					}
				}
			})
		}
	}
}

// transcriptCommand returns the server's command line from a transcript's
// header.
func transcriptCommand(t *testing.T, name string) []string {
	t.Helper()
	for _, l := range readLines(t, "testdata/real-"+name+".txt") {
		if _, cmd, ok := strings.Cut(l, "# server (192.0.2.1): "); ok {
			return strings.Fields(cmd)
		}
	}
	t.Fatal("no command in transcript")
	return nil
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []string
	r := bufio.NewReader(f)
	for {
		l, err := r.ReadString('\n')
		if l != "" {
			lines = append(lines, l)
		}
		if err != nil {
			return lines
		}
	}
}

func TestNewLatReport(t *testing.T) {
	// 10 iterations, stamps in ns: samples 1000, 2000, ..., 9000 ns round
	// trips (send: halved).
	var stamps []uint64
	var now uint64
	for i := 0; i < 10; i++ {
		stamps = append(stamps, now)
		now += uint64(i+1) * 1000
	}
	r, samples := NewLatReport(LatInput{Size: 2, Iters: 10, Stamps: stamps, RTTFactor: 2, TicksPerUsec: 1000})
	// 9 samples, the 2 largest dropped: 1..7 us halved.
	want := LatReport{Size: 2, Iters: 10, Min: 0.5, Max: 4, Typical: 2, Avg: 2, P99: 4, P999: 4}
	// stdev over truncated integers: avg 2 - {0.5..3.5}: ints 1,1,0,0,0,-1,-1 -> sqrt(4/7)
	want.StdDev = math.Sqrt(4.0 / 7)
	if r != want {
		t.Errorf("NewLatReport = %+v\nwant %+v", r, want)
	}
	if len(samples) != 9 || samples[0] != 0.5 || samples[8] != 4.5 {
		t.Errorf("samples %v", samples)
	}
	// Read latency: no halving, even number of remaining samples.
	r, _ = NewLatReport(LatInput{Size: 2, Iters: 5, Stamps: []uint64{0, 10, 30, 60, 100}, RTTFactor: RTTFactor(ReadLat), TicksPerUsec: 1})
	if r.Min != 10 || r.Typical != 15 || r.Avg != 15 || r.Max != 30 || r.StdDev != 5 {
		t.Errorf("read latency %+v", r)
	}
	avg, tps := LatDuration(2e9, 1000, 2, 1000)
	if avg != 1000 || tps != 500 {
		t.Errorf("LatDuration = %v, %v", avg, tps)
	}
}

func TestNewBWReport(t *testing.T) {
	// 4 messages of 1 MiB, one every ms, completions 1 ms later, in ns.
	in := BWInput{Size: 1 << 20, Iters: 4, QPs: 1, CQMod: 1, PostList: 1, TicksPerSec: 1e9}
	for i := uint64(0); i < 4; i++ {
		in.Posted = append(in.Posted, i*1e6)
		in.Completed = append(in.Completed, (i+1)*1e6)
	}
	r := NewBWReport(in)
	// 4 MiB in 4 ms: 1000 MiB/s; peak: best (completed[j]-posted[i])/(j-i+1) = 1 ms per MiB.
	if r.Size != 1<<20 || r.Iters != 4 || r.BWAvg != 1000 || r.BWPeak != 1000 || r.MsgRate != 0.001 {
		t.Errorf("report %+v", r)
	}
	in.NoPeak = true
	in.Completed[0] = 8e6 // start and end of the run
	r = NewBWReport(in)
	if r.BWPeak != 0 || r.BWAvg != 500 {
		t.Errorf("no peak: %+v", r)
	}
	in.Gbits = true
	if r := NewBWReport(in); math.Abs(r.BWAvg-4.194304) > 1e-9 {
		t.Errorf("Gb/s: %+v", r)
	}
}
