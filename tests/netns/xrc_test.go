package netns

// XRC with Debian's real programs: rdma-core's ibv_xsrq_pingpong between
// two daemons over AF_XDP and with server and client on one daemon
// (loopback), testdata/xrc_data.py under pyverbs, which checks the bytes
// that XRC SENDs, WRITEs and READs move, and testdata/xrc_open_qp.c, which
// checks that ibv_open_qp keeps a target QP alive as the kernel does.

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestXRCPingpong runs ibv_xsrq_pingpong (server in namespace A; client in
// B, then in A with completion events), xrc_data.py and xrc_open_qp on
// daemon A. Each
// run must end within a minute, both sides printing "success", and the
// daemons must have received the messages (4096 bytes, four packets at
// path MTU 1024, each way per iteration).
func TestXRCPingpong(t *testing.T) {
	needRealTools(t)
	if _, err := exec.LookPath("ibv_xsrq_pingpong"); err != nil {
		t.Skip("skipping: ibv_xsrq_pingpong is not installed (tests/run installs ibverbs-utils)")
	}
	d := startDaemonsIn(t, "xr", "xdp", false)
	const iters = 50
	for _, c := range []struct {
		name      string
		clientInA bool
		extra     []string
		port      int
	}{
		{"two daemons", false, nil, 19410},
		{"loopback with events", true, []string{"-e"}, 19411},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := [2]uint64{d.received(t, 0), d.received(t, 1)}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			args := append([]string{"-d", d.devs[0], "-g", d.gidIdx(t, 0), "-p", strconv.Itoa(c.port),
				"-n", strconv.Itoa(iters)}, c.extra...)
			s := d.runIn(t, ctx, true, false, nil, "ibv_xsrq_pingpong", args...)
			if err := listening(ctx, d.pair.A, s, c.port); err != nil {
				t.Fatal(err)
			}
			cargs := args
			if !c.clientInA {
				cargs = append([]string{"-d", d.devs[1], "-g", d.gidIdx(t, 1), "-p", strconv.Itoa(c.port),
					"-n", strconv.Itoa(iters)}, c.extra...)
			}
			cli := d.runIn(t, ctx, c.clientInA, false, nil, "ibv_xsrq_pingpong",
				append(cargs, d.pair.Veth.AddrA[0].Addr().String())...).wait(ctx)
			wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
			srv := s.wait(wctx)
			wcancel()
			for _, o := range []struct {
				who string
				o   toolOutcome
			}{{"server", srv}, {"client", cli}} {
				if !o.o.OK() || !strings.Contains(o.o.Stdout, "success") {
					t.Fatalf("ibv_xsrq_pingpong %s did not succeed within a minute: %v", o.who, o.o)
				}
			}
			// Each side's messages: iters of 4 packets, plus ACKs.
			got := [2]uint64{d.received(t, 0) - before[0], d.received(t, 1) - before[1]}
			want := uint64(4 * iters)
			if c.clientInA {
				if got[0] < 2*want {
					t.Errorf("daemon A received %d packets in loopback, want at least %d", got[0], 2*want)
				}
			} else if got[0] < want || got[1] < want {
				t.Errorf("the daemons received %v packets, want at least %d each", got, want)
			}
			t.Logf("server:\n%s\nclient:\n%s\npackets received: %v", srv.Stdout, cli.Stdout, got)
		})
	}
	t.Run("pyverbs data", func(t *testing.T) {
		const python = "/usr/bin/python3"
		if _, err := os.Stat("/usr/lib/python3/dist-packages/pyverbs"); err != nil {
			t.Skip("skipping: pyverbs is not installed (tests/run installs python3-pyverbs)")
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		o := d.runIn(t, ctx, true, false, nil, python, "testdata/xrc_data.py", d.devs[0]).wait(ctx)
		if !o.OK() || strings.Count(o.Stdout, "ok ") != 5 {
			t.Fatalf("xrc_data.py did not pass within a minute: %v", o)
		}
		t.Logf("%s", o.Stdout)
	})
	t.Run("ibv_open_qp", func(t *testing.T) {
		if _, err := os.Stat("/usr/include/infiniband/verbs.h"); err != nil {
			t.Skip("skipping: /usr/include/infiniband/verbs.h is missing (tests/run installs libibverbs-dev)")
		}
		dir := t.TempDir()
		bin := filepath.Join(dir, "xrc_open_qp")
		if out, err := exec.Command("cc", "-Wall", "-o", bin, "testdata/xrc_open_qp.c", "-libverbs").CombinedOutput(); err != nil {
			t.Fatalf("compiling testdata/xrc_open_qp.c: %v\n%s", err, out)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		o := d.runIn(t, ctx, true, false, nil, bin, d.devs[0], filepath.Join(dir, "domain")).wait(ctx)
		if !o.OK() || !strings.Contains(o.Stdout, "ok all") {
			t.Fatalf("xrc_open_qp did not pass within a minute: %v", o)
		}
		t.Logf("%s", o.Stdout)
	})
}
