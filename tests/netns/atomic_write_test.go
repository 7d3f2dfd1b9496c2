package netns

// ATOMIC_WRITE through the drop-in library, as rdma-core's
// test_qp_ex_rc_atomic_write posts it (ibv_wr_atomic_write), which CI
// cannot run itself.

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// TestAtomicWriteShim runs testdata/atomic_write.py under pyverbs on one
// daemon over AF_XDP: the device's ATOMIC_WRITE capability bit, the 8
// bytes stored and the completion, and a misaligned address refused; it
// must finish within a minute.
func TestAtomicWriteShim(t *testing.T) {
	needRealTools(t)
	const python = "/usr/bin/python3"
	if _, err := os.Stat("/usr/lib/python3/dist-packages/pyverbs"); err != nil {
		t.Skip("skipping: pyverbs is not installed (tests/run installs python3-pyverbs)")
	}
	d := startDaemonsIn(t, "xr", "xdp", false)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	o := d.runIn(t, ctx, true, false, nil, python, "testdata/atomic_write.py", d.devs[0]).wait(ctx)
	if !o.OK() || strings.Count(o.Stdout, "ok ") != 3 {
		t.Fatalf("atomic_write.py did not pass within a minute: %v", o)
	}
	t.Logf("%s", o.Stdout)
}
