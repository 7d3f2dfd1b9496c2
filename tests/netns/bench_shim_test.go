package netns

// BenchmarkShimTable: the real perftest tools through `sroce run` and two
// sroce daemons, beside sroce's own perftest tools on the same path (the
// same two daemons: the Go client over the same shared rings), and sroce's
// own tools with the engine in the tool's process on another veth pair
// built the same way, over AF_XDP, in the same run, with the daemons' CPU
// time per message of the real tools.
//
//	go test -run '^$' -bench ShimTable -benchtime 5x ./tests/netns

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"
	"time"
)

// shimFigures are the figures the daemon issue names.
var shimFigures = []guestFigure{
	{"write_bw 64 KiB x5000", "ib_write_bw", "-s 65536 -n 5000", "MB/s", bwAvg, false},
	{"write_bw 8 B x100000", "ib_write_bw", "-s 8 -n 100000", "msg/s", bwRate, false},
	{"send_lat 8 B typical", "ib_send_lat", "-s 8 -n 5000", "us", latTypical, true},
}

// daemonCPU returns the CPU time (user + system) daemon i has used.
func (d *daemonPair) daemonCPU(i int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", d.procs[i].cmd.Process.Pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / 100 // clock ticks (USER_HZ 100)
}

func BenchmarkShimTable(b *testing.B) {
	needRealTools(b)
	// Two veth pairs built the same way: one with a daemon on each end
	// for the real tools, one for sroce's own tools (which open the
	// AF_XDP queue themselves). The figures alternate between the two.
	d := startDaemons(b, "xdp", false)
	v := newVethPair(b, nil)
	// Each round runs every figure once, each way in turn; the table shows
	// the median of the rounds (-benchtime Nx: N rounds) and the range of
	// the per-round ratios, which shows how much this shared machine moved.
	type row struct {
		fig                guestFigure
		real, ownD, own    []float64
		cpuDaemons         []time.Duration // per message, of the real tool's run
		ratioD, ratioLocal []float64
	}
	rows := make([]row, len(shimFigures))
	for iter := 0; iter < b.N; iter++ {
		for i, fig := range shimFigures {
			r := &rows[i]
			r.fig = fig
			n, _ := strconv.Atoi(strings.Fields(fig.args)[3])
			cpu0 := d.daemonCPU(0) + d.daemonCPU(1)
			real := d.benchReal(b, fig, 19515+i)
			r.cpuDaemons = append(r.cpuDaemons, (d.daemonCPU(0)+d.daemonCPU(1)-cpu0)/time.Duration(n))
			ownD := d.benchOwn(b, fig)
			own := v.benchOwn(b, fig)
			r.real, r.ownD, r.own = append(r.real, real), append(r.ownD, ownD), append(r.own, own)
			r.ratioD = append(r.ratioD, shimRatio(real, ownD, fig.lower))
			r.ratioLocal = append(r.ratioLocal, shimRatio(real, own, fig.lower))
		}
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "figure\tunit\treal tool via daemons\tsroce's tool via daemons\treal / sroce's (rounds)\tsroce's tool in process\treal / in process (rounds)\tdaemons' CPU per message\t\n")
	for _, r := range rows {
		real, ownD, own := median(r.real), median(r.ownD), median(r.own)
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%.2f (%s)\t%s\t%.2f (%s)\t%v\t\n", r.fig.name, r.fig.unit, fmtFigure(real), fmtFigure(ownD),
			shimRatio(real, ownD, r.fig.lower), spread(r.ratioD), fmtFigure(own), shimRatio(real, own, r.fig.lower), spread(r.ratioLocal),
			medianDuration(r.cpuDaemons))
	}
	w.Flush()
	fmt.Printf("(%d rounds, medians; ratio > 1: the real tool through the daemons does better; latency ratios are sroce's/real)\n", b.N)
}

// shimRatio is real over own, or own over real for a latency (lower).
func shimRatio(real, own float64, lower bool) float64 {
	switch {
	case own <= 0 || real <= 0:
		return 0
	case lower:
		return own / real
	}
	return real / own
}

// medianDuration is median for durations.
func medianDuration(ds []time.Duration) time.Duration {
	vs := make([]float64, len(ds))
	for i, d := range ds {
		vs[i] = float64(d)
	}
	return time.Duration(median(vs)).Round(100 * time.Nanosecond)
}

// spread prints the range of ratios as "0.85-1.18".
func spread(vs []float64) string {
	if len(vs) == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f-%.2f", slices.Min(vs), slices.Max(vs))
}

// benchReal runs a real tool pair through the daemons and returns its figure.
func (d *daemonPair) benchReal(b *testing.B, fig guestFigure, port int) float64 {
	srv, cli := d.realPair(b, realTool{fig.tool, fig.args, "-x"}, port, false, nil)
	if !srv.OK() || !cli.OK() {
		b.Logf("%s via daemons failed:\nserver: %v\nclient: %v", fig.tool, srv, cli)
		return 0
	}
	return figureOf(b, fig, cli.Stdout)
}

// benchOwn runs sroce's own tool pair through the daemons and returns its
// figure.
func (d *daemonPair) benchOwn(b *testing.B, fig guestFigure) float64 {
	return ownFigure(b, fig, "via daemons", func(cmd string, args ...string) (toolOutcome, toolOutcome) {
		return d.ownPair(b, cmd, args...)
	})
}

// benchOwn runs sroce's own tool pair and returns its figure.
func (v *vethPair) benchOwn(b *testing.B, fig guestFigure) float64 {
	return ownFigure(b, fig, "in process", func(cmd string, args ...string) (toolOutcome, toolOutcome) {
		return v.runPair(b, cmd, args...)
	})
}

// ownFigure runs sroce's tool for fig's perftest tool with run, and
// returns the figure the client printed (0 when a side failed).
func ownFigure(b *testing.B, fig guestFigure, where string, run func(cmd string, args ...string) (srv, cli toolOutcome)) float64 {
	cmd := strings.ReplaceAll(strings.TrimPrefix(fig.tool, "ib_"), "_", "-")
	srv, cli := run(cmd, append([]string{"-x", "1"}, strings.Fields(fig.args)...)...)
	if !srv.OK() || !cli.OK() {
		b.Logf("sroce %s %s failed:\nserver: %v\nclient: %v", cmd, where, srv, cli)
		return 0
	}
	return figureOf(b, fig, cli.Stdout)
}

func figureOf(b *testing.B, fig guestFigure, out string) float64 {
	row := bwRow
	if fig.lower {
		row = latRow
	}
	line := row.FindString(out)
	if line == "" {
		b.Logf("%s printed no result row:\n%s", fig.tool, out)
		return 0
	}
	val, ok := fig.value(strings.Fields(line))
	if !ok {
		return 0
	}
	return val
}
