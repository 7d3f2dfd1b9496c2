package netns

// First contact with the real thing: each sroce tool against its
// counterpart (rdma-core's ibv_*_pingpong, perftest's ib_*) in an rdma_rxe
// guest, with the real tool once as the server and once as the client.
// sroce runs in a host namespace whose veth is a port of the guest's
// bridge, on that veth over AF_XDP. Both sides must exit 0 and print their
// result lines. One guest boot serves every subtest (TCG is slow: the runs
// are short, the limits generous). The rig, the case table and one run of
// a pair are package interop's, shared with "sroce interop". When a pair
// fails, the RoCEv2 traffic captured on the guest's tap is decoded with
// "sroce dissect" into the log, with the guest's interface, qdisc and rxe
// counters and its kernel log.

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sroce/sroce/internal/rxeguest"
	"github.com/sroce/sroce/interop"
)

// newInteropLAN returns the package's interop rig (sharedInteropRig: the
// shared guest rxe-a, reset for t, and the host namespaces on its bridge).
func newInteropLAN(t *testing.T, ctx context.Context) *interop.Rig {
	t.Helper()
	rxeguest.Skip(t)
	return sharedInteropRig(t)
}

// TestInteropRxe runs every tool pair against rdma_rxe, both ways (those
// of interop.Matrix in TestSroceInterop when this run runs it too and sroce
// run can build its libibverbs).
func TestInteropRxe(t *testing.T) {
	rigTestParallel(t, 80*time.Second)
	if testing.Short() {
		t.Skip("skipping the rdma_rxe interop tests in -short mode")
	}
	if os.Geteuid() != 0 {
		t.Skip("skipping: the rdma_rxe interop tests need root (namespaces, AF_XDP, qemu)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Minute)
	defer cancel()
	rig := newInteropLAN(t, ctx)
	cases := interop.Cases
	if _, err := exec.LookPath("gcc"); err == nil && runSelects("TestSroceInterop") {
		// TestSroceInterop's "sroce interop --shim" runs the pairs of
		// interop.Matrix both ways, through the same Rig.RunPair and
		// with the same verdicts, and fails on any of them.
		cases = cases[len(interop.Matrix):]
		t.Logf("the %d pairs of interop.Matrix are TestSroceInterop's", len(interop.Matrix))
	}
	for _, c := range cases {
		t.Run(c.Name+"/real-server", func(t *testing.T) { runPair(t, ctx, rig, c, true, nil) })
		t.Run(c.Name+"/real-client", func(t *testing.T) { runPair(t, ctx, rig, c, false, nil) })
	}
}

// runPair runs one pair through the rig (the real tool as the server when
// realServer) and judges both sides; opts, if not nil, impairs the runs.
func runPair(t *testing.T, ctx context.Context, rig *interop.Rig, c interop.Case, realServer bool, opts *interop.PairOpts) {
	res, err := rig.RunPair(ctx, c, realServer, opts, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	// The verdicts come after the decoded capture, so that the end of a
	// long log says what failed.
	verdicts := res.Verdicts()
	if res.Failed() {
		logDissect(t, rig, res.Pcap)
		t.Logf("the guest after the run:\n%s", rig.GuestState(ctx))
	}
	for _, v := range verdicts {
		t.Logf("%s (%s): %v", v.Who, v.Role, v.O)
	}
	for _, v := range verdicts {
		if v.Problem != "" {
			t.Errorf("%s as %s %s", v.Who, v.Role, v.Problem)
		}
	}
}

// logDissect logs the decoded capture of a failed pair, and keeps the
// capture in $SROCE_CAPTURE_DIR when that is set.
func logDissect(t *testing.T, rig *interop.Rig, pcap string) {
	out, err := rig.Dissect(pcap)
	t.Logf("RoCEv2 traffic on the guest's tap (sroce dissect, %v):\n%s", err, out)
	if dir := os.Getenv("SROCE_CAPTURE_DIR"); dir != "" {
		data, err := os.ReadFile(pcap)
		if err == nil {
			name := strings.ReplaceAll(t.Name(), "/", "_") + ".pcap"
			os.WriteFile(filepath.Join(dir, name), data, 0o644)
		}
	}
}
