package netns

// "sroce interop" as a person runs it: the built binary, as root, against
// its own rxe guest, with a short set of pairs (one of each kind: a
// pingpong, a READ bandwidth run, a latency run whose server prints no
// figure). The matrix must name the peer, hold one row per pair with a
// PASS and a figure in each direction, and end with every run passed.

import (
	"context"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sroce/sroce/internal/rxeguest"
	"github.com/sroce/sroce/internal/testpair"
)

func TestSroceInterop(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping sroce interop (it boots an rxe guest) in -short mode")
	}
	rxeguest.Skip(t)
	bin := buildSroce(t)
	keep := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "interop", "--only", "rc-pingpong,read-bw,read-lat", "--keep", keep, "--timeout", "9m")
	var stdout, stderr testpair.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	out := stdout.String()
	t.Logf("sroce interop (%v, %v):\n%s--- stderr:\n%s", time.Since(start).Round(time.Second), err, out, stderr.String())
	if err != nil {
		kept, _ := os.ReadDir(keep)
		t.Fatalf("sroce interop failed (%v); kept: %v", err, kept)
	}
	if !strings.HasPrefix(out, "sroce's tools against rdma_rxe in a qemu guest at 192.0.2.1 (Linux 6.1") {
		t.Errorf("the matrix does not start by naming the rxe peer")
	}
	if !regexp.MustCompile(`(?m)^pair +real server, sroce client +sroce server, real client$`).MatchString(out) {
		t.Errorf("the matrix has no column headings")
	}
	num := `[\d.]+`
	for name, fig := range map[string]string{
		"rc-pingpong": num + ` Mbit/s, ` + num + ` us/iter`,
		"read-bw":     num + ` MB/s, ` + num + ` Mpps`,
		"read-lat":    num + ` us typical, ` + num + ` us avg`,
	} {
		row := regexp.MustCompile(`(?m)^` + name + ` +PASS  ` + fig + ` +PASS  ` + fig + `$`)
		if !row.MatchString(out) {
			t.Errorf("the matrix has no row %q with a PASS and a figure in both directions", name)
		}
	}
	if !strings.Contains(out, "\nmatrix: 6 of 6 runs passed\n") {
		t.Errorf("the matrix does not end with its 6 runs passed")
	}
	if kept, _ := os.ReadDir(keep); len(kept) != 0 {
		t.Errorf("files kept although nothing failed: %v", kept)
	}
}
