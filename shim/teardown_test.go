package shim_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sroce/sroce/shim"
)

// TestTeardownAsTheKernel runs testdata/teardown_test.c against a daemon:
// the orders in which programs destroy CQs, QPs, SRQs, PDs, MRs and
// completion channels, each answered at once with the kernel's errno
// (EBUSY for an object still in use), a CQ destroyed after more events were
// acknowledged than given (fio). The
// library must say nothing on standard error.
func TestTeardownAsTheKernel(t *testing.T) {
	if _, err := os.Stat("/usr/include/infiniband/verbs.h"); err != nil {
		t.Skip("skipping: /usr/include/infiniband/verbs.h is missing (apt-get install libibverbs-dev)")
	}
	d := startDaemon(t)
	cc, _ := shim.Compiler()
	bin := filepath.Join(t.TempDir(), "teardown_test")
	if out, err := exec.Command(cc, "-Wall", "-o", bin, "testdata/teardown_test.c",
		filepath.Join(d.lib, shim.LibName)).CombinedOutput(); err != nil {
		t.Fatalf("compiling testdata/teardown_test.c: %v\n%s", err, out)
	}
	out, errOut, err := d.run(t, 60*time.Second, bin, "sroce_lo")
	t.Logf("teardown_test:\n%s%s", out, errOut)
	if err != nil {
		t.Fatalf("teardown_test failed: %v", err)
	}
	if !strings.Contains(out, "ok all") {
		t.Fatal("teardown_test did not finish")
	}
	if strings.TrimSpace(errOut) != "" {
		t.Fatalf("the library wrote to standard error:\n%s", errOut)
	}
}
