package netns

// The applications beside rdma_rxe on the same guests: two guests of the
// rxe image on one bridge; each figure runs first between the guests' rxe
// devices, then through "sroce run" between sroce daemons in the same
// guests (AF_XDP on eth0). It is a benchmark, not a test: the guests are
// emulated (TCG, one vCPU) and shared machines are noisy, so it prints a
// table and asserts nothing.
//
//	go test -run '^$' -bench AppTable -benchtime 1x ./tests/netns/
//
// SROCE_BENCH_ROUNDS (default 3) is how many times each figure runs, rxe
// and sroce alternating; the table shows the medians. SROCE_BENCH_FIGURES
// runs only the figures whose name contains it.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/sroce/sroce/internal/rxeguest"
)

// appFigure is one row of the application table.
type appFigure struct {
	name string
	unit string
	// server and client are shell commands; {run} is where "sroce run"
	// goes for sroce (nothing for rxe), {env} the environment of the
	// side's device, {ip} the server's address.
	server, client string
	// port is the server's TCP port to wait for, 0 for a program that
	// listens only through RDMA CM (then the client starts appCMWait
	// after the server).
	port  int
	value func(cli string) (float64, bool)
	lower bool
	// single says the figure is one command (client) on one guest; the
	// server is unused.
	single bool
}

// appCMWait is how long a client waits for a server that shows no TCP
// listener: the guest is emulated and RDMA CM listeners of a sroce daemon
// are in no table the guest can read.
const appCMWait = 4 * time.Second

var (
	fioBW       = regexp.MustCompile(`(?m)^\s*(?:READ|WRITE): bw=([\d.]+)([KMG]i)B/s`)
	ucxFinal    = regexp.MustCompile(`(?m)^Final:\s+(.*)$`)
	fiPingRow64 = regexp.MustCompile(`(?m)^64\s+\S+\s+=\S+\s+\S+\s+[\d.]+s\s+[\d.]+\s+([\d.]+)\s+[\d.]+$`)
)

// fioMiB reads fio's run status line (MiB/s).
func fioMiB(out string) (float64, bool) {
	m := fioBW.FindStringSubmatch(out)
	if m == nil {
		return 0, false
	}
	v, err := strconv.ParseFloat(m[1], 64)
	switch m[2] {
	case "Ki":
		v /= 1024
	case "Gi":
		v *= 1024
	}
	return v, err == nil
}

// ucxField reads field i of ucx_perftest's Final: line (1: median
// latency, 5: overall bandwidth).
func ucxField(i int) func(string) (float64, bool) {
	return func(out string) (float64, bool) {
		m := ucxFinal.FindStringSubmatch(out)
		if m == nil {
			return 0, false
		}
		f := strings.Fields(m[1])
		if i >= len(f) {
			return 0, false
		}
		v, err := strconv.ParseFloat(f[i], 64)
		return v, err == nil
	}
}

// fiUsec reads fi_pingpong's microseconds per transfer at 64 bytes.
func fiUsec(out string) (float64, bool) {
	m := fiPingRow64.FindStringSubmatch(out)
	if m == nil {
		return 0, false
	}
	v, err := strconv.ParseFloat(m[1], 64)
	return v, err == nil
}

// fio's client always runs --rw=write: --verb says what it does (its
// rdma engine's client issues the WRITEs, READs or SENDs).
const (
	fioServer = "{run} fio --name=server --rw=read --ioengine=rdma --port=%d --bs=64k --size=16m --iodepth=16"
	fioClient = "{run} fio --name=client --rw=write --ioengine=rdma --port=%d --bs=64k --size=16m --iodepth=16 --verb=%s --hostname={ip}"
	ucxServer = "{env} {run} ucx_perftest -p %d"
	ucxClient = "{env} {run} ucx_perftest {ip} -p %d -t %s -s %d -n %d"
	fiServer  = "{run} fi_pingpong -p verbs -e msg -S 64 -I 2000 -B %d"
	fiClient  = "{run} fi_pingpong -p verbs -e msg -S 64 -I 2000 -P %d {ip}"
	// Both ranks on one guest's device: the guests have no remote shell.
	mpiRanks = "{mpienv} {run} timeout 100 mpirun --allow-run-as-root -np 2 --host localhost:2 --mca pml ucx --mca btl self --mca osc ^ucx " +
		"-x UCX_TLS -x UCX_NET_DEVICES -x UCX_UD_VERBS_ETH_DGID_CHECK {share}/mpi_pingpong"
)

// mpiPing8 reads mpi_pingpong's 8-byte line (half a round trip, µs).
func mpiPing8(out string) (float64, bool) {
	m := regexp.MustCompile(`(?m)^pingpong 8 \d+ ([\d.]+)$`).FindStringSubmatch(out)
	if m == nil {
		return 0, false
	}
	v, err := strconv.ParseFloat(m[1], 64)
	return v, err == nil
}

var appFigures = []appFigure{
	{"fio rdma write 64 KiB iodepth 16", "MiB/s", fmt.Sprintf(fioServer, 18710), fmt.Sprintf(fioClient, 18710, "write"), 0, fioMiB, false, false},
	{"fio rdma read 64 KiB iodepth 16", "MiB/s", fmt.Sprintf(fioServer, 18711), fmt.Sprintf(fioClient, 18711, "read"), 0, fioMiB, false, false},
	{"ucx_perftest tag_lat 8 B rc_verbs", "us", fmt.Sprintf(ucxServer, 18712), fmt.Sprintf(ucxClient, 18712, "tag_lat", 8, 2000), 18712, ucxField(1), true, false},
	{"ucx_perftest ucp_put_bw 64 KiB rc_verbs", "MB/s", fmt.Sprintf(ucxServer, 18713), fmt.Sprintf(ucxClient, 18713, "ucp_put_bw", 65536, 500), 18713, ucxField(5), false, false},
	{"fi_pingpong msg 64 B", "us", fmt.Sprintf(fiServer, 18714), fmt.Sprintf(fiClient, 18714), 18714, fiUsec, true, false},
	{"Open MPI pml ucx ping-pong 8 B (two ranks, one guest)", "us", "", mpiRanks, 0, mpiPing8, true, true},
}

// appSocket is the guests' sroce daemon socket.
const appSocket = "/run/sroce-apps.sock"

// BenchmarkAppTable prints rxe against sroce for the applications.
func BenchmarkAppTable(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("skipping: the application table needs root (namespaces, qemu)")
	}
	rxeguest.Skip(b)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	_, a, c, share := bootSroceGuests(b)
	if out, err := exec.Command("mpicc", "-O2", "-o", filepath.Join(share, "mpi_pingpong"), filepath.Join("testdata", "mpi_pingpong.c")).CombinedOutput(); err != nil {
		b.Fatalf("mpicc mpi_pingpong (tests/run installs libopenmpi-dev): %v\n%s", err, out)
	}
	rounds := 3
	if v := os.Getenv("SROCE_BENCH_ROUNDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("SROCE_BENCH_ROUNDS=%q: want a positive number", v)
		}
		rounds = n
	}
	rxeSide := strings.NewReplacer("{run} ", "", "{share}", rxeguest.SharePath,
		"{env}", "UCX_TLS=rc_verbs,ud_verbs:aux UCX_NET_DEVICES=rxe0:1 UCX_UD_VERBS_ETH_DGID_CHECK=n",
		"{mpienv}", "UCX_TLS=self,rc_verbs,ud_verbs:aux UCX_NET_DEVICES=rxe0:1 UCX_UD_VERBS_ETH_DGID_CHECK=n")
	sroceSide := strings.NewReplacer("{run}", "SROCE_SOCKET="+appSocket+" "+rxeguest.SharePath+"/sroce run --", "{share}", rxeguest.SharePath,
		"{env}", "UCX_TLS=rc_verbs,ud_verbs:aux UCX_NET_DEVICES=sroce_eth0:1",
		"{mpienv}", "UCX_TLS=self,rc_verbs,ud_verbs:aux UCX_NET_DEVICES=sroce_eth0:1 UCX_UD_VERBS_ETH_DGID_CHECK=y")
	for i := 0; i < b.N; i++ {
		var out strings.Builder
		tw := tabwriter.NewWriter(&out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "application\tunit\trxe\tsroce\tsroce/rxe\tper round")
		for _, fig := range appFigures {
			if only := os.Getenv("SROCE_BENCH_FIGURES"); only != "" && !strings.Contains(fig.name, only) {
				continue
			}
			var rxe, ours []float64
			for r := 0; r < rounds; r++ {
				rxe = append(rxe, appFigureRun(b, ctx, a, c, fig, rxeSide))
				// The daemons run only for sroce's runs: their XDP
				// programs take every RoCEv2 frame from rxe.
				stopA := startGuestDaemon(b, ctx, a)
				stopC := startGuestDaemon(b, ctx, c)
				ours = append(ours, appFigureRun(b, ctx, a, c, fig, sroceSide))
				stopA()
				stopC()
			}
			g := guestFigure{lower: fig.lower}
			var per []string
			for r := range rxe {
				per = append(per, figureRatio(g, rxe[r], ours[r]))
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", fig.name, fig.unit, fmtFigure(median(rxe)), fmtFigure(median(ours)),
				figureRatio(g, median(rxe), median(ours)), strings.Join(per, " "))
		}
		tw.Flush()
		fmt.Printf("\nTwo TCG guests (one vCPU each) on one bridge, %s, %d alternating rounds, medians; sroce/rxe above 1 means sroce is better.\n\n%s\n",
			time.Now().UTC().Format("2006-01-02"), rounds, out.String())
	}
}

// startGuestDaemon starts a sroce daemon on g's eth0 over AF_XDP, waits
// until a program through "sroce run" sees its device (the first run
// compiles the drop-in libraries in the guest), and returns the function
// that stops it (SIGTERM, then waits up to 10 s for it to end).
func startGuestDaemon(b *testing.B, ctx context.Context, g *rxeguest.Guest) (stop func()) {
	// The guests have 512 MiB: the default budget of registered bytes (an
	// eighth of MemTotal for one uid) is below what two UCX ranks register
	// (rc_verbs' receive pools, 36 MiB a chunk), where rxe, for root, has
	// no limit. Registered bytes cost the daemon address space, not memory.
	// SROCE_BENCH_DAEMON_ENV adds variables to the daemon's environment
	// (SROCE_CPUPROFILE=/tmp/d.pprof profiles it).
	p, err := g.Start(ctx, os.Getenv("SROCE_BENCH_DAEMON_ENV")+" exec "+rxeguest.SharePath+"/sroce daemon -d eth0 --link xdp --limit-total reg=4G --limit-user reg=4G --socket "+appSocket)
	if err != nil {
		b.Fatal(err)
	}
	stop = func() {
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		if r, err := g.Run(sctx, fmt.Sprintf("kill -TERM %d", p.Pid)); err != nil || r.ExitCode != 0 {
			b.Fatalf("stopping the sroce daemon in %s: %v %s", g.Name(), err, r.Stderr)
		}
		wctx, wcancel := context.WithTimeout(sctx, 10*time.Second)
		defer wcancel()
		if _, err := p.Wait(wctx); err != nil {
			b.Fatalf("the sroce daemon in %s did not end within 10 s of SIGTERM: %v", g.Name(), err)
		}
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		r, err := g.Run(ctx, "SROCE_SOCKET="+appSocket+" "+rxeguest.SharePath+"/sroce run -- ibv_devices")
		if err == nil && r.ExitCode == 0 && strings.Contains(string(r.Stdout), "sroce_eth0") {
			return stop
		}
		if done, _ := p.Exited(ctx); done || time.Now().After(deadline) {
			res, _ := p.Wait(ctx)
			b.Fatalf("the sroce daemon in %s did not serve sroce_eth0 within 3 minutes (exited: %v): %v %s%s\ndaemon: %s",
				g.Name(), done, err, r.Stdout, r.Stderr, res.Stderr)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// appFigureRun runs one application pair (server on a, client on c) with
// side's substitutions and returns the client's figure, or 0 after
// printing why there is none.
func appFigureRun(b *testing.B, ctx context.Context, a, c *rxeguest.Guest, fig appFigure, side *strings.Replacer) float64 {
	start := time.Now()
	server := side.Replace(fig.server)
	client := strings.ReplaceAll(side.Replace(fig.client), "{ip}", a.IP().String())
	ready := func(ctx context.Context, p *rxeguest.Proc) error {
		if fig.port != 0 {
			return a.WaitListening(ctx, fig.port, p)
		}
		select {
		case <-time.After(appCMWait):
			return nil
		case <-ctx.Done():
			return fmt.Errorf("waiting %v for the server: %w", appCMWait, ctx.Err())
		}
	}
	var cli rxeguest.Result
	var err error
	if fig.single {
		rctx, cancel := context.WithTimeout(ctx, toolPairTimeout)
		cli, err = a.Run(rctx, client)
		cancel()
		if err == nil && cli.ExitCode != 0 {
			err = fmt.Errorf("exit %d: %s%s", cli.ExitCode, cli.Stdout, cli.Stderr)
		}
	} else {
		_, cli, err = runGuestPair(ctx, a, c, server, client, ready)
	}
	if err != nil {
		fmt.Printf("%s: %v (after %v)\n", client, err, time.Since(start).Round(time.Millisecond))
		return 0
	}
	v, ok := fig.value(string(cli.Stdout))
	if !ok {
		fmt.Printf("%s printed no figure:\n%s\n", client, cli.Stdout)
		return 0
	}
	b.Logf("%s: %v, %.1f %s", client, time.Since(start).Round(time.Millisecond), v, fig.unit)
	return v
}
