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

// TestCMLoopback runs testdata/cm_test.c, compiled against the system's
// rdma_cma.h and linked with the built librdmacm and libibverbs, against
// a daemon: a listener and a client on the daemon's one device connect
// through the daemon's CM (REQ, REP, RTU over QP1 on the device's own
// address), exchange private data and a message each way, and disconnect.
func TestCMLoopback(t *testing.T) {
	if _, err := os.Stat("/usr/include/rdma/rdma_cma.h"); err != nil {
		t.Skip("skipping: /usr/include/rdma/rdma_cma.h is missing (apt-get install librdmacm-dev)")
	}
	d := startDaemon(t)
	cc, _ := shim.Compiler()
	bin := filepath.Join(t.TempDir(), "cm_test")
	if out, err := exec.Command(cc, "-Wall", "-o", bin, "testdata/cm_test.c",
		filepath.Join(d.lib, shim.CMLibName), filepath.Join(d.lib, shim.LibName)).CombinedOutput(); err != nil {
		t.Fatalf("compiling testdata/cm_test.c: %v\n%s", err, out)
	}
	out, errOut, err := d.run(t, 60*time.Second, bin, testAddr)
	t.Logf("cm_test:\n%s%s", out, errOut)
	if err != nil {
		t.Fatalf("cm_test failed: %v", err)
	}
	if !strings.Contains(out, "ok: all") {
		t.Fatal("cm_test did not finish")
	}
}
