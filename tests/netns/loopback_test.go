package netns

// Loopback on one daemon with Debian's real programs: the server and the
// client of a pingpong tool on the same device, connected through the
// device's own GIDs (the IPv4 one and the link-local IPv6 one, index 0, as
// UCX picks it), and pyverbs creating address handles to every GID of the
// device itself and sending through one, as UCX's probe and rdma-core's
// test suite do.

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestLoopbackRealPrograms runs ibv_rc_pingpong and ibv_ud_pingpong with
// server and client on one daemon's device, from its IPv4 GID and from its
// link-local GID 0, and testdata/own_gid_ah.py under pyverbs.
func TestLoopbackRealPrograms(t *testing.T) {
	needRealTools(t)
	d := startDaemons(t, "xdp", false)
	for i, tool := range []realTool{
		{"ibv_rc_pingpong", "-n 100 -s 4096 -c", "-g"},
		{"ibv_ud_pingpong", "-n 100 -s 1024 -c", "-g"},
	} {
		for k, gid := range []string{d.gidIdx(t, 0), "0"} {
			port := 18600 + 2*i + k
			t.Run(tool.prog+" -g "+gid, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				args := append([]string{"-d", d.devs[0], "-g", gid, "-p", strconv.Itoa(port)}, strings.Fields(tool.args)...)
				s := d.runIn(t, ctx, true, false, nil, tool.prog, args...)
				if err := listening(ctx, d.pair.A, s, port); err != nil {
					t.Fatal(err)
				}
				c := d.runIn(t, ctx, true, false, nil, tool.prog, append(args, d.pair.Veth.AddrA[0].Addr().String())...)
				cli := c.wait(ctx)
				wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
				srv := s.wait(wctx)
				wcancel()
				checkReal(t, tool, srv, cli)
			})
		}
	}
	t.Run("pyverbs", func(t *testing.T) {
		const python = "/usr/bin/python3"
		if _, err := os.Stat("/usr/lib/python3/dist-packages/pyverbs"); err != nil {
			t.Skip("skipping: pyverbs is not installed (tests/run installs python3-pyverbs)")
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		o := d.runIn(t, ctx, true, false, nil, python, "testdata/own_gid_ah.py", d.devs[0]).wait(ctx)
		if !o.OK() || strings.Count(o.Stdout, "ok ") != 2 {
			t.Fatalf("own_gid_ah.py: %v", o)
		}
		t.Logf("%s", o.Stdout)
	})
}
