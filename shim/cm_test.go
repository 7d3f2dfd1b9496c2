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

// TestRealRpingLoopback runs rdma-core's own rping, server and client, on
// the built libraries against one daemon: ten verified ping-pongs (-v
// prints each received pattern) through the daemon's CM and the device.
func TestRealRpingLoopback(t *testing.T) {
	if _, err := exec.LookPath("rping"); err != nil {
		t.Skip("skipping: rping is not installed (apt-get install rdmacm-utils)")
	}
	d := startDaemon(t)
	type result struct {
		out, errOut string
		err         error
	}
	sc := make(chan result, 1)
	go func() {
		o, e, err := d.run(t, 60*time.Second, "rping", "-s", "-a", testAddr, "-p", "7471", "-C", "10", "-v")
		sc <- result{o, e, err}
	}()
	var c result
	for try := 0; try < 50; try++ {
		time.Sleep(200 * time.Millisecond)
		c.out, c.errOut, c.err = d.run(t, 60*time.Second, "rping", "-c", "-a", testAddr, "-p", "7471", "-C", "10", "-v")
		if c.err == nil || !strings.Contains(c.out+c.errOut, "REJECTED") {
			break
		}
	}
	s := <-sc
	t.Logf("server:\n%s%s\nclient:\n%s%s", s.out, s.errOut, c.out, c.errOut)
	if s.err != nil || c.err != nil {
		t.Fatalf("rping failed: server %v, client %v", s.err, c.err)
	}
	for name, out := range map[string]string{"server": s.out, "client": c.out} {
		if n := strings.Count(out, "ping data: rdma-ping-"); n != 10 {
			t.Errorf("the %s printed %d verified pings, want 10", name, n)
		}
	}
}
