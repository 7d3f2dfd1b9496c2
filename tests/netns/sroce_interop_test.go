package netns

// "sroce interop" as a person runs it: the built binary, as root, against
// its own rdma_rxe peer (a guest here: the host kernel has no rdma_rxe):
// every pair, each also with the real tool through sroce's shim on a
// sroce daemon, then one pair with loss. The matrix must name the peer,
// hold one row per pair with a PASS and a figure in each direction, say
// what the loss dropped, and end with every run passed.

import (
	"context"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sroce/sroce/internal/rxeguest"
	"github.com/sroce/sroce/internal/testpair"
)

// Figures as the matrix prints them.
const (
	figNum      = `[\d.]+`
	figPingpong = figNum + ` Mbit/s, ` + figNum + ` us/iter`
	figBW       = figNum + ` MB/s, ` + figNum + ` Mpps`
	figLat      = figNum + ` us typical, ` + figNum + ` us avg`
)

func TestSroceInterop(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping sroce interop (it boots an rxe guest) in -short mode")
	}
	rxeguest.Skip(t)
	bin := buildSroce(t)
	// It boots guests of its own: it runs beside the rig tests
	// (rigTestParallel), once the serial tests are done.
	laneParallel(t, 150*time.Second, needNone)
	t.Run("matrix", func(t *testing.T) {
		kinds := map[string]string{"rc-pingpong": figPingpong, "read-bw": figBW, "read-lat": figLat}
		if _, err := exec.LookPath("gcc"); err != nil {
			// sroce run builds its libibverbs with gcc: without it, the
			// pairs of each kind, without the (shim) rows.
			t.Log("gcc is not installed: no (shim) rows")
			out := runInteropCmd(t, bin, "--only", "rc-pingpong,read-bw,read-lat")
			checkMatrix(t, out, kinds, 6)
			return
		}
		// Every pair, both ways: Debian's real tools on rdma_rxe against
		// sroce's own tools, and the same real tools through sroce run on
		// a sroce daemon (the (shim) rows). One run of the command (one
		// guest boot) shows a figure of each kind: a pingpong's, a
		// bandwidth run's and a latency run's whose server prints none.
		out := runInteropCmd(t, bin, "--shim")
		rows := regexp.MustCompile(`(?m)^(\S+) \(shim\)\s+PASS .*\sPASS `).FindAllStringSubmatch(out, -1)
		if len(rows) != 12 {
			t.Errorf("%d (shim) rows passed both ways, want 12", len(rows))
		}
		kinds["write-bw"], kinds[`write-bw \(shim\)`] = figBW, figBW
		checkMatrix(t, out, kinds, 48)
		if !strings.Contains(out, "; (shim) rows: the real tool through sroce run on a sroce daemon on eth0 at 192.0.2.11\n") {
			t.Errorf("the matrix does not say where the shim's daemon runs")
		}
	})
	t.Run("loss", func(t *testing.T) {
		out := runInteropCmd(t, bin, "--loss", "2", "--only", "read-bw")
		checkMatrix(t, out, map[string]string{"read-bw": figBW}, 2)
		if !strings.Contains(out, "; the peer drops 2% of the RoCEv2 frames each way\n") {
			t.Errorf("the matrix does not say that the peer drops 2%% of the frames")
		}
		m := regexp.MustCompile(`(?m)^loss over all runs: lost rxe->sroce (\d+) of (\d+) RoCEv2 frames, sroce->rxe (\d+) of (\d+)$`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("the matrix does not say what the loss dropped")
		}
		// Two runs of 300 READs of 4 response packets: about 24 of the
		// guest's 2400 responses are lost, and none only by a chance of
		// e^-24.
		if lost, _ := strconv.Atoi(m[1]); lost == 0 {
			t.Errorf("the guest dropped none of the frames it sent")
		}
	})
}

// runInteropCmd runs "sroce interop" with args and a directory to keep
// failures in, and returns its standard output; it fails t when the
// command fails or keeps anything.
func runInteropCmd(t *testing.T, bin string, args ...string) string {
	t.Helper()
	keep := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"interop", "--keep", keep, "--timeout", "9m"}, args...)...)
	var stdout, stderr testpair.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	out := stdout.String()
	t.Logf("sroce interop %s (%v, %v):\n%s--- stderr:\n%s", strings.Join(args, " "), time.Since(start).Round(time.Second), err, out, stderr.String())
	kept, _ := os.ReadDir(keep)
	if err != nil {
		t.Fatalf("sroce interop failed (%v); kept: %v", err, kept)
	}
	if len(kept) != 0 {
		t.Errorf("files kept although nothing failed: %v", kept)
	}
	return out
}

// checkMatrix checks the matrix's header, one row per pair with a PASS
// and the figure's pattern in both directions, and its last line.
func checkMatrix(t *testing.T, out string, rows map[string]string, runs int) {
	t.Helper()
	if !strings.HasPrefix(out, "sroce's tools against rdma_rxe in a qemu guest at 192.0.2.1 (Linux 6.1") {
		t.Errorf("the matrix does not start by naming the rdma_rxe peer")
	}
	if !regexp.MustCompile(`(?m)^pair +real server, sroce client +sroce server, real client$`).MatchString(out) {
		t.Errorf("the matrix has no column headings")
	}
	for name, fig := range rows {
		row := regexp.MustCompile(`(?m)^` + name + ` +PASS  ` + fig + ` +PASS  ` + fig + `$`)
		if !row.MatchString(out) {
			t.Errorf("the matrix has no row %q with a PASS and a figure in both directions", name)
		}
	}
	if want := "\nmatrix: " + strconv.Itoa(runs) + " of " + strconv.Itoa(runs) + " runs passed\n"; !strings.HasSuffix(out, want) {
		t.Errorf("the matrix does not end with %q", strings.TrimSpace(want))
	}
}
