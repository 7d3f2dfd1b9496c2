package main

// sroce interop: the interop matrix as a command. Package interop sets up
// the rdma_rxe peer, runs each pair and judges it; this file chooses the
// pairs, prints the matrix as the runs end, and keeps the capture, the
// ladder and both sides' output of every failed run.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sroce/sroce/internal/rxeguest"
	"github.com/sroce/sroce/interop"
	"github.com/sroce/sroce/tools/device"
)

// interopAbout is the description printed by "sroce interop -h".
const interopAbout = `
Interop runs every sroce tool against its real counterpart (rdma-core's
ibv_rc_pingpong and ibv_ud_pingpong, perftest's ib_*_bw and ib_*_lat) on a
real rdma_rxe peer, in both directions: the real tool as the server and
sroce as the client, then the other way round. sroce runs in a network
namespace on a veth port of a bridge, over AF_XDP. The peer is on the
same bridge: this host's own rdma_rxe, on the veth of another namespace
(rdma link add), when the kernel has the module and the real tools are
installed; a qemu guest otherwise (Debian bookworm, Linux 6.1, rdma_rxe on
its eth0), whose image is built on first use (debootstrap from the Debian
mirror apt uses, about two minutes) and cached in /var/cache/sroce/rxe-guest
($SROCE_CACHE moves it). --peer host or guest insists on one. Needs root,
ip and tcpdump, and for the guest qemu-system-x86_64, debootstrap and
mkfs.ext4.

It prints a matrix, one row per pair as it ends: PASS with the run's
figure (the sroce side's, or the real tool's where sroce prints none),
or FAIL with what went wrong. For each failed run it keeps, in the --keep
directory (a new directory under the temporary directory by default),
the RoCEv2 traffic on the peer's interface (NAME-DIRECTION.pcap), its ladder
as "sroce ladder" prints it (NAME-DIRECTION.ladder.txt) and both sides'
output (NAME-DIRECTION.log).

With --loss PCT the peer drops PCT percent of the RoCEv2 frames it sends
(netem) and of those it receives (a tc gact action), and the pairs are
the reliable (RC) tools with longer runs; what each run lost and sent
again is said on standard error, the dropped frames of all runs at the
end. --only picks pairs by name or by sroce command (rc-pingpong,
write-bw, atomic-bw-fadd, ...); --all runs every pair of the interop test
suite instead of one per tool. --shim adds a row under each pair: the
real tool on sroce's side too, run through "sroce run" (sroce's drop-in
libibverbs) on a sroce daemon serving the same interface, against the
real tool on rdma_rxe (needs a C compiler for the library's first build).

A real tool that could not calibrate its cycle counter in the emulated
guest, and a run during which the guest's emulated NIC hung, are run
again (at most three runs); every run is bounded (4 minutes) and so is
the whole command (--timeout).

Exit status: 0 when every run passed, 1 when one failed or no rxe peer
could be set up, 2 for a bad command line.`

// interopTimeoutDefault bounds the whole command unless --timeout says
// otherwise.
const interopTimeoutDefault = time.Hour

// runInterop implements "sroce interop".
func runInterop(e *env, args []string) int {
	f := newFlags(e, "interop", "sroce interop [--loss PCT] [--only LIST] [--all] [--shim] [--keep DIR] [--engine MODE] [--peer KIND] [--timeout DURATION]", interopAbout)
	loss := f.Float64("loss", 0, "the peer drops `PCT` percent of the RoCEv2 frames each way")
	only := f.String("only", "", "run only the pairs of `LIST` (names or sroce commands, comma-separated)")
	all := f.Bool("all", false, "run every pair of the interop test suite")
	keep := f.String("keep", "", "keep the captures and ladders of failed runs in `DIR`")
	engine := f.String("engine", "", "run sroce's tools with engine `MODE`: auto, inline, sleep, spin or adaptive")
	timeout := f.Duration("timeout", interopTimeoutDefault, "give up after `DURATION` in all")
	shim := f.Bool("shim", false, "also run each real tool on sroce's side, through sroce run and a sroce daemon")
	peerKind := f.String("peer", interop.PeerAuto, "the rdma_rxe peer (`KIND`): auto, host (this kernel's rdma_rxe) or guest")
	pos, status, ok := f.parse(args)
	if !ok {
		return status
	}
	if len(pos) != 0 {
		return f.usageError("expected no arguments")
	}
	if *loss < 0 || *loss > 100 || *loss != *loss {
		return f.usageError(badValue("--loss", *loss, "not a percentage between 0 and 100"))
	}
	if *timeout <= 0 {
		return f.usageError(badValue("--timeout", *timeout, "must be positive"))
	}
	switch *peerKind {
	case interop.PeerAuto, interop.PeerHost, interop.PeerGuest:
	default:
		return f.usageError(badValue("--peer", *peerKind, "want auto, host or guest"))
	}
	if *engine != "" {
		if _, msg := parseEngine(*engine); msg != "" {
			return f.usageError(msg)
		}
	}
	cases := interop.Matrix
	switch {
	case *loss > 0:
		cases = interop.LossyCases
	case *all:
		cases = interop.Cases
	}
	if *only != "" {
		sel, unknown := interop.Select(cases, splitList(*only))
		if len(unknown) > 0 {
			return f.usageError(fmt.Sprintf("no pair or command named %s among the pairs %s",
				strings.Join(unknown, ", "), caseNames(cases)))
		}
		cases = sel
	}

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return interopRun(ctx, e, interopConfig{cases: cases, loss: *loss, keep: *keep, engine: *engine, timeout: *timeout, peer: *peerKind, shim: *shim})
}

// splitList splits a comma-separated list, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// caseNames lists the names of cases.
func caseNames(cases []interop.Case) string {
	var names []string
	for _, c := range cases {
		names = append(names, c.Name)
	}
	return strings.Join(names, ", ")
}

// interopConfig is a parsed "sroce interop" command line.
type interopConfig struct {
	cases   []interop.Case
	loss    float64
	keep    string
	engine  string
	timeout time.Duration
	peer    string
	shim    bool
}

// interopRun sets up the rig and runs the matrix.
func interopRun(ctx context.Context, e *env, cfg interopConfig) int {
	bin, err := os.Executable()
	if err != nil {
		fmt.Fprintf(e.Stderr, "sroce interop: cannot find the sroce binary to run the tools with: %v\n", err)
		return exitProblem
	}
	envv := interop.DefaultEnv()
	if cfg.engine != "" {
		envv = append(envv, device.EnvEngine+"="+cfg.engine)
	}
	fmt.Fprintf(e.Stderr, "sroce interop: setting up the rdma_rxe peer (a guest's image is built on first use and cached in %s)\n", rxeguest.CacheDir())
	start := time.Now()
	rig, err := interop.NewRig(ctx, interop.RigConfig{Bin: bin, Env: envv, Peer: cfg.peer, Shim: cfg.shim, Logf: func(format string, args ...any) {
		fmt.Fprintf(e.Stderr, "sroce interop: "+format+"\n", args...)
	}})
	if err != nil {
		fmt.Fprintf(e.Stderr, "sroce interop: %s\n", interopErr(ctx, cfg, "setting up the rdma_rxe peer", err))
		return exitProblem
	}
	defer rig.Close()
	fmt.Fprintf(e.Stderr, "sroce interop: peer ready in %v\n", time.Since(start).Round(100*time.Millisecond))

	var opts *interop.PairOpts
	var lossMu sync.Mutex
	var lost rxeguest.LossCount
	if cfg.loss > 0 {
		if err := rig.SetLoss(ctx, cfg.loss); err != nil {
			fmt.Fprintf(e.Stderr, "sroce interop: %s\n", interopErr(ctx, cfg, "setting the peer's loss", err))
			return exitProblem
		}
		opts = &interop.PairOpts{Impair: func(ctx context.Context, _ string) (func() (string, error), error) {
			before, err := rig.Loss(ctx)
			if err != nil {
				return nil, err
			}
			return func() (string, error) {
				after, err := rig.Loss(ctx)
				if err != nil {
					return "", err
				}
				d := after.Minus(before)
				lossMu.Lock()
				lost = lost.Plus(d)
				lossMu.Unlock()
				return d.Describe("rxe", "sroce"), nil
			}, nil
		}}
	}

	if opts != nil && rig.Guest != nil {
		opts.RealEnv = interop.LingerEnv
	}
	// Each row: sroce's tool, or the real tool through the shim.
	type rowKind struct {
		suffix string
		opts   *interop.PairOpts
	}
	kinds := []rowKind{{"", opts}}
	if cfg.shim {
		var so interop.PairOpts
		if opts != nil {
			so = *opts
		}
		so.Shim = true
		kinds = append(kinds, rowKind{shimSuffix, &so})
	}
	m := newMatrixPrinter(e.Stdout, cfg.cases, cfg.shim)
	m.header(rig, cfg.loss)
	keeper := &failureKeeper{dir: cfg.keep}
	runs, failed := 0, 0
	for _, c := range cfg.cases {
		for _, kind := range kinds {
			name := c.Name + kind.suffix
			opts := kind.opts
			var cells [2]string
			for i, realServer := range []bool{true, false} {
				var notes bytes.Buffer
				logf := func(format string, args ...any) { fmt.Fprintf(&notes, format+"\n", args...) }
				res, err := rig.RunPair(ctx, c, realServer, opts, logf)
				if err != nil {
					cells[i] = "NOT RUN  " + interopStop(ctx)
					if i == 0 {
						cells[1] = "NOT RUN"
					}
					m.row(name, cells)
					fmt.Fprintf(e.Stdout, "\nmatrix: stopped after %d runs, %d of them failed\n", runs, failed)
					fmt.Fprintf(e.Stderr, "sroce interop: %s\n", interopErr(ctx, cfg, fmt.Sprintf("running %s (%s)", name, directionText(realServer)), err))
					return exitProblem
				}
				runs++
				if res.Attempt > 1 {
					fmt.Fprintf(e.Stderr, "sroce interop: note: %s (%s) ran %d times: %s\n", name, directionText(realServer), res.Attempt, firstLine(notes.String()))
				}
				if res.Impaired != "" {
					fmt.Fprintf(e.Stderr, "sroce interop: %s (%s): %s\n", name, directionText(realServer), res.Impaired)
				}
				if !res.Failed() {
					cells[i] = "PASS  " + res.Figure()
					continue
				}
				failed++
				cells[i] = "FAIL  " + failureText(res)
				ifname := rig.Host.Ifname
				if res.Shim {
					ifname = rig.ShimHost.Ifname
				}
				if err := keeper.keep(res, ifname, notes.String(), peerState(ctx, rig)); err != nil {
					fmt.Fprintf(e.Stderr, "sroce interop: keeping the failure of %s (%s): %v\n", name, directionText(realServer), err)
				}
			}
			m.row(name, cells)
		}
	}
	lossMu.Lock()
	defer lossMu.Unlock()
	if cfg.loss > 0 {
		fmt.Fprintf(e.Stdout, "\nloss over all runs: %s\n", lost.Describe("rxe", "sroce"))
	}
	fmt.Fprintf(e.Stdout, "\nmatrix: %d of %d runs passed", runs-failed, runs)
	if failed > 0 {
		fmt.Fprintf(e.Stdout, "; the captures and ladders of the %d failed are in %s", failed, keeper.dir)
	}
	fmt.Fprintln(e.Stdout)
	if failed > 0 {
		return exitProblem
	}
	return exitOK
}

// interopErr says what went wrong while doing what, naming an interrupt
// or the --timeout when that is why.
func interopErr(ctx context.Context, cfg interopConfig, what string, err error) string {
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return fmt.Sprintf("gave up after --timeout %v while %s: %v", cfg.timeout, what, err)
	case ctx.Err() != nil:
		return fmt.Sprintf("interrupted while %s: %v", what, err)
	}
	return fmt.Sprintf("%s: %v", what, err)
}

// interopStop says in a word or two why a run could not be judged.
func interopStop(ctx context.Context) string {
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return "(timeout)"
	case ctx.Err() != nil:
		return "(interrupted)"
	}
	return "(rig failure)"
}

// directionText says which side the real tool was.
func directionText(realServer bool) string {
	if realServer {
		return "real server, sroce client"
	}
	return "sroce server, real client"
}

// firstLine returns s up to its first line break.
func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

// failureText says in a few words what failed in a run: each failed
// side's problem ("ib_write_bw: exit 1; sroce: no BW table row").
func failureText(res interop.PairResult) string {
	var parts []string
	for _, v := range res.Verdicts() {
		if v.Problem == "" {
			continue
		}
		who := v.Who
		if strings.HasPrefix(who, "sroce ") {
			who = "sroce"
		}
		problem := v.Problem
		switch {
		case !v.O.OK():
			problem = "exit " + strconv.Itoa(v.O.Exit)
		case strings.HasPrefix(problem, "did not print "):
			problem = "no " + strings.TrimPrefix(strings.TrimPrefix(problem, "did not print "), "a ")
		}
		parts = append(parts, who+": "+problem)
	}
	return strings.Join(parts, "; ")
}

// matrixPrinter prints the matrix a row at a time.
type matrixPrinter struct {
	w     io.Writer
	width int // of the first column
}

// cellWidth is the width of a direction's column.
const cellWidth = 44

// shimSuffix marks the rows of the real tools through the shim.
const shimSuffix = " (shim)"

// newMatrixPrinter sizes the first column for the pairs' names (with the
// shim's rows when shim is set).
func newMatrixPrinter(w io.Writer, cases []interop.Case, shim bool) *matrixPrinter {
	width := len("pair")
	for _, c := range cases {
		n := len(c.Name)
		if shim {
			n += len(shimSuffix)
		}
		width = max(width, n)
	}
	return &matrixPrinter{w: w, width: width}
}

// header names the peer and the columns.
func (m *matrixPrinter) header(rig *interop.Rig, loss float64) {
	fmt.Fprintf(m.w, "sroce's tools against %s; sroce over AF_XDP on %s at %s", rig.Describe(), rig.Host.Ifname, rig.Host.IP.Addr())
	if rig.ShimHost != nil {
		fmt.Fprintf(m.w, "; (shim) rows: the real tool through sroce run on a sroce daemon on %s at %s", rig.ShimHost.Ifname, rig.ShimHost.IP.Addr())
	}
	if loss > 0 {
		fmt.Fprintf(m.w, "; the peer drops %s%% of the RoCEv2 frames each way", strconv.FormatFloat(loss, 'f', -1, 64))
	}
	fmt.Fprintf(m.w, "\n\n%-*s  %-*s  %s\n", m.width, "pair", cellWidth, directionText(true), directionText(false))
}

// row prints one pair's two cells.
func (m *matrixPrinter) row(name string, cells [2]string) {
	fmt.Fprintf(m.w, "%-*s  %-*s  %s\n", m.width, name, cellWidth, cells[0], cells[1])
}

// failureKeeper keeps what a failed run leaves: its capture, its ladder
// and both sides' output.
type failureKeeper struct {
	dir string // "" until the first failure: a new temporary directory
}

// peerState asks the rig's peer for its state after a failed run,
// within a minute.
func peerState(ctx context.Context, rig *interop.Rig) string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	return rig.GuestState(ctx)
}

// keep writes the files of res, a failed run of sroce on ifname, into the
// keeper's directory: the capture, its ladder, and a log of the run with
// the notes on its runs and the peer's state.
func (k *failureKeeper) keep(res interop.PairResult, ifname, notes, peer string) error {
	if k.dir == "" {
		d, err := os.MkdirTemp("", "sroce-interop-failures-")
		if err != nil {
			return err
		}
		k.dir = d
	}
	if err := os.MkdirAll(k.dir, 0o755); err != nil {
		return err
	}
	name := res.Case.Name
	if res.Shim {
		name += "-shim"
	}
	base := filepath.Join(k.dir, name+"-"+res.Direction())
	data, err := os.ReadFile(res.Pcap)
	if err != nil {
		return fmt.Errorf("reading the capture: %w", err)
	}
	if err := os.WriteFile(base+".pcap", data, 0o644); err != nil {
		return err
	}
	var ladder, ladderErr bytes.Buffer
	runLadder(&env{Stdin: strings.NewReader(""), Stdout: &ladder, Stderr: &ladderErr}, []string{base + ".pcap"})
	ladder.Write(ladderErr.Bytes())
	if err := os.WriteFile(base+".ladder.txt", ladder.Bytes(), 0o644); err != nil {
		return err
	}
	return os.WriteFile(base+".log", []byte(runLog(res, ifname, notes, peer)), 0o644)
}

// runLog is the text of a failed run's log: the pair, the verdicts, the
// notes on its runs (impairment, earlier attempts), both sides' output and
// the peer's state.
func runLog(res interop.PairResult, ifname, notes, peer string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "pair %s (%s), run %d\n", res.Case.Name, directionText(res.RealServer), res.Attempt)
	fmt.Fprintf(&b, "real: %s %s\n", res.Case.Real, res.Case.Args)
	if res.Shim {
		fmt.Fprintf(&b, "sroce: sroce run -- %s -d sroce_%s %s (on a sroce daemon)\n", res.Case.Real, ifname, res.Case.Args)
	} else {
		fmt.Fprintf(&b, "sroce: sroce %s -d %s %s\n", res.Case.Cmd, ifname, res.Case.Args)
	}
	if res.Impaired != "" {
		fmt.Fprintf(&b, "impairment: %s\n", res.Impaired)
	}
	for _, v := range res.Verdicts() {
		if v.Problem != "" {
			fmt.Fprintf(&b, "%s as %s %s\n", v.Who, v.Role, v.Problem)
		}
	}
	if notes != "" {
		fmt.Fprintf(&b, "\nnotes on the runs of the pair:\n%s", notes)
	}
	for _, v := range res.Verdicts() {
		fmt.Fprintf(&b, "\n%s (%s): %v", v.Who, v.Role, v.O)
	}
	fmt.Fprintf(&b, "\nthe rdma_rxe peer after the run:\n%s\n", peer)
	return b.String()
}
