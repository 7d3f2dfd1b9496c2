package netns

// The side-by-side table of the data-path issue: two guests of the rxe
// image on one bridge, rxe's perftest between them first, then sroce's
// tools with the same flags inside the same guests over AF_XDP on eth0,
// then the path unmodified programs take: the same perftest through
// "sroce run" on a sroce daemon in each guest (AF_XDP on eth0; the
// daemons run only for these runs, as their XDP programs take every
// RoCEv2 frame from rxe).
// It is a benchmark, not a test: the guests are emulated (TCG, one vCPU)
// and shared machines are noisy, so it prints numbers and asserts none.
//
//	go test -run '^$' -bench GuestTable -benchtime 1x ./tests/netns/
//
// SROCE_BENCH_ENGINES (comma separated, default "auto") runs sroce once per
// engine mode and prints a column for each. SROCE_BENCH_PROFILE=DIR keeps a
// CPU profile of every sroce process in DIR, named by figure, engine and
// guest. SROCE_BENCH_FIGURES (e.g. "write_lat,send_lat") runs only the
// figures it names. SROCE_BENCH_ROUNDS (default 3) is how many times each
// figure runs, rxe and sroce alternating; the table shows the medians and
// each round's ratio. SROCE_BENCH_SHIM=0 leaves out the column of perftest
// through the daemons. A short run (a few minutes):
//
//	SROCE_BENCH_ROUNDS=1 go test -run '^$' -bench GuestTable -benchtime 1x ./tests/netns/

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/sroce/sroce/internal/rxeguest"
)

// guestFigure is one row of the table: a tool, its flags, and which
// column of its result row is the figure.
type guestFigure struct {
	name  string // row label
	tool  string // perftest tool name; sroce's is the suffix after "ib_"
	args  string
	unit  string
	value func(row []string) (float64, bool)
	// lower says a smaller figure is better (latency).
	lower bool
}

// bwAvg reads the average bandwidth (MB/s) of a BW result row.
func bwAvg(f []string) (float64, bool) { return parseField(f, 3, 1) }

// bwRate reads the message rate (Mpps, printed as msg/s) of a BW row.
func bwRate(f []string) (float64, bool) { return parseField(f, 4, 1e6) }

// latTypical reads t_typical (µs) of a latency result row.
func latTypical(f []string) (float64, bool) { return parseField(f, 4, 1) }

func parseField(f []string, i int, scale float64) (float64, bool) {
	if i >= len(f) {
		return 0, false
	}
	v, err := strconv.ParseFloat(f[i], 64)
	return v * scale, err == nil
}

// guestFigures are the five figures the data-path issue names.
var guestFigures = []guestFigure{
	{"write_bw 64 KiB x3000", "ib_write_bw", "-x 1 -s 65536 -n 3000 -F", "MB/s", bwAvg, false},
	{"write_bw 8 B x20000", "ib_write_bw", "-x 1 -s 8 -n 20000 -F", "msg/s", bwRate, false},
	{"write_lat 8 B typical", "ib_write_lat", "-x 1 -s 8 -n 1000 -F", "us", latTypical, true},
	{"send_lat 8 B typical", "ib_send_lat", "-x 1 -s 8 -n 1000 -F", "us", latTypical, true},
	{"read_bw 64 KiB x1000", "ib_read_bw", "-x 1 -s 65536 -n 1000 -F", "MB/s", bwAvg, false},
}

// BenchmarkGuestTable prints rxe against sroce for the five figures.
func BenchmarkGuestTable(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("skipping: the guest table needs root (namespaces, qemu)")
	}
	rxeguest.Skip(b)
	engines := strings.Split(os.Getenv("SROCE_BENCH_ENGINES"), ",")
	if engines[0] == "" {
		engines = []string{"auto"}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	_, a, c, share := bootSroceGuests(b)
	profDir := os.Getenv("SROCE_BENCH_PROFILE")
	rounds := 3
	if v := os.Getenv("SROCE_BENCH_ROUNDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("SROCE_BENCH_ROUNDS=%q: want a positive number", v)
		}
		rounds = n
	}
	shim := os.Getenv("SROCE_BENCH_SHIM") != "0"
	for i := 0; i < b.N; i++ {
		var out strings.Builder
		tw := tabwriter.NewWriter(&out, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "figure\tunit\trxe")
		for _, e := range engines {
			fmt.Fprintf(tw, "\tsroce %s\tsroce/rxe\tper round", e)
		}
		if shim {
			fmt.Fprintf(tw, "\tperftest on sroce daemons\tdaemons/rxe\tper round")
		}
		fmt.Fprintln(tw)
		for _, fig := range guestFigures {
			if only := os.Getenv("SROCE_BENCH_FIGURES"); only != "" && !strings.Contains(only, strings.Fields(fig.name)[0]) {
				continue
			}
			tool := strings.ReplaceAll(strings.TrimPrefix(fig.tool, "ib_"), "_", "-")
			// Rounds alternate rxe and sroce, so that both meet the same
			// moments of a shared machine; the table shows medians.
			var rxe, daemons []float64
			ours := make([][]float64, len(engines))
			for r := 0; r < rounds; r++ {
				rxe = append(rxe, guestFigureRun(b, ctx, a, c, fig, fig.tool+" -d rxe0 "+fig.args))
				for k, e := range engines {
					prof, env := "", ""
					if profDir != "" {
						prof = fmt.Sprintf("%s-%s-%s-%d", tool, strings.Fields(fig.args)[3], e, r)
						env = "SROCE_CPUPROFILE=/tmp/" + prof + ".pprof "
					}
					cmd := env + "SROCE_LINK=xdp SROCE_STALL_TIMEOUT=60s SROCE_ENGINE=" + e + " " + rxeguest.SharePath +
						"/sroce " + tool + " -d eth0 " + fig.args
					ours[k] = append(ours[k], guestFigureRun(b, ctx, a, c, fig, cmd))
					if prof != "" {
						fetchProfiles(b, ctx, profDir, prof, a, c)
					}
				}
				if shim {
					stopA := startGuestDaemon(b, ctx, a)
					stopC := startGuestDaemon(b, ctx, c)
					cmd := "SROCE_SOCKET=" + appSocket + " " + rxeguest.SharePath + "/sroce run -- " + fig.tool + " -d sroce_eth0 " + fig.args
					daemons = append(daemons, guestFigureRun(b, ctx, a, c, fig, cmd))
					stopA()
					stopC()
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t%s", fig.name, fig.unit, fmtFigure(median(rxe)))
			for k := range engines {
				var per []string
				for r := range rxe {
					per = append(per, figureRatio(fig, rxe[r], ours[k][r]))
				}
				fmt.Fprintf(tw, "\t%s\t%s\t%s", fmtFigure(median(ours[k])), figureRatio(fig, median(rxe), median(ours[k])),
					strings.Join(per, " "))
			}
			if shim {
				var per []string
				for r := range rxe {
					per = append(per, figureRatio(fig, rxe[r], daemons[r]))
				}
				fmt.Fprintf(tw, "\t%s\t%s\t%s", fmtFigure(median(daemons)), figureRatio(fig, median(rxe), median(daemons)),
					strings.Join(per, " "))
			}
			fmt.Fprintln(tw)
		}
		tw.Flush()
		if profDir != "" {
			keepBinary(b, share, profDir)
		}
		// The table goes to standard output: the benchmark log keeps only
		// its first lines.
		fmt.Printf("\nTwo TCG guests (one vCPU each) on one bridge, %s, %d alternating rounds, medians; sroce/rxe above 1 means sroce is better.\n\n%s\n",
			time.Now().UTC().Format("2006-01-02"), rounds, out.String())
	}
}

// median returns the median of vs, a failed run (0) counting as the
// lowest figure.
func median(vs []float64) float64 {
	s := append([]float64(nil), vs...)
	sort.Float64s(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	if s[len(s)/2-1] == 0 {
		return 0
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// figureRatio is sroce's figure over rxe's ("-" when either failed), the
// other way round for a latency, so that above 1 means sroce is better.
func figureRatio(fig guestFigure, rxe, ours float64) string {
	if rxe <= 0 || ours <= 0 {
		return "-"
	}
	r := ours / rxe
	if fig.lower {
		r = rxe / ours
	}
	return fmt.Sprintf("%.2f", r)
}

// guestFigureRun runs one tool pair (server on a, client on c) and returns
// the client's figure, or 0 after logging why there is none.
func guestFigureRun(b *testing.B, ctx context.Context, a, c *rxeguest.Guest, fig guestFigure, cmd string) float64 {
	start := time.Now()
	srv, cli, err := runToolPair(ctx, a, c, 18515, cmd, cmd)
	if err != nil {
		fmt.Printf("%s: %v (after %v)\nserver: %s%s\nclient: %s%s", cmd, err, time.Since(start).Round(time.Millisecond),
			srv.Stdout, srv.Stderr, cli.Stdout, cli.Stderr)
		return 0
	}
	row := bwRow
	if fig.lower {
		row = latRow
	}
	line := row.FindString(string(cli.Stdout))
	if line == "" {
		fmt.Printf("%s printed no result row:\n%s", cmd, cli.Stdout)
		return 0
	}
	v, ok := fig.value(strings.Fields(line))
	if !ok {
		b.Logf("%s: unreadable result row %q", cmd, line)
		return 0
	}
	b.Logf("%s: %v, %.1f %s", cmd, time.Since(start).Round(time.Millisecond), v, fig.unit)
	return v
}

func fmtFigure(v float64) string {
	switch {
	case v == 0:
		return "failed"
	case v >= 1000:
		return fmt.Sprintf("%.1f k", v/1000)
	}
	return fmt.Sprintf("%.1f", v)
}

// fetchProfiles copies the CPU profile /tmp/name.pprof of each guest into
// dir as name-GUEST.pprof.
func fetchProfiles(b *testing.B, ctx context.Context, dir, name string, guests ...*rxeguest.Guest) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	for _, g := range guests {
		r, err := g.Run(ctx, "base64 -w0 /tmp/"+name+".pprof")
		if err == nil {
			err = r.Err()
		}
		var data []byte
		if err == nil {
			data, err = base64.StdEncoding.DecodeString(strings.TrimSpace(string(r.Stdout)))
		}
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, name+"-"+g.Name()+".pprof"), data, 0o644)
		}
		if err != nil {
			fmt.Printf("no CPU profile %s from %s: %v\n", name, g.Name(), err)
		}
	}
}

// keepBinary copies the sroce binary the profiles describe into dir.
func keepBinary(b *testing.B, share, dir string) {
	data, err := os.ReadFile(filepath.Join(share, "sroce"))
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "sroce"), data, 0o755)
	}
	if err != nil {
		b.Fatal(err)
	}
	fmt.Printf("CPU profiles of the sroce runs: %s\n", dir)
}
