package netns

import (
	"bufio"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sroce/sroce/interop"
)

// mpiRxeDir is where the MPI programs lie on both sides: Open MPI's
// orted starts a rank by the path mpirun names.
const mpiRxeDir = "/tmp/sroce-mpi-rxe"

// TestOpenMPIShimRxe runs two MPI ranks with --mca pml ucx, one on
// rdma_rxe in the guest and one on sroce through the drop-in libraries:
// mpirun in the guest starts the other rank's orted on this side through
// an rsh agent (bash's /dev/tcp to a small remote shell in the shim's
// namespace that runs it through "sroce run"). The ping-pong checks every
// byte of each message both ways, the allreduce every element.
func TestOpenMPIShimRxe(t *testing.T) {
	rigTestParallel(t, 25*time.Second)
	needMPI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	rig := newShimRxeRig(ctx, t)
	if r, err := rig.RunPeer(ctx, "command -v mpirun orted bash"); err != nil || r.ExitCode != 0 {
		t.Fatalf("the guest lacks Open MPI or bash (internal/rxeguest's image installs openmpi-bin): %v %s%s", err, r.Stdout, r.Stderr)
	}
	if err := os.MkdirAll(mpiRxeDir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(mpiRxeDir) })
	progs := []string{"mpi_pingpong", "mpi_allreduce"}
	for _, p := range progs {
		bin := filepath.Join(mpiRxeDir, p)
		if out, err := exec.Command("mpicc", "-O2", "-o", bin, filepath.Join("testdata", p+".c")).CombinedOutput(); err != nil {
			t.Fatalf("mpicc %s: %v\n%s", p, err, out)
		}
		data, err := os.ReadFile(bin)
		if err != nil {
			t.Fatal(err)
		}
		// The guest has the same Debian (and Open MPI) as this host.
		if r, err := rig.RunPeer(ctx, fmt.Sprintf("mkdir -p %s && printf '%%s' '%s' | base64 -d > %s && chmod 755 %s",
			mpiRxeDir, base64.StdEncoding.EncodeToString(data), bin, bin)); err != nil || r.ExitCode != 0 {
			t.Fatalf("copying %s into the guest: %v %s", p, err, r.Stderr)
		}
	}
	shim := interop.ShimAddr.Addr().String()
	const rshPort = 19181
	agent := fmt.Sprintf("#!/bin/bash\nshift\nexec 3<>/dev/tcp/%s/%d || exit 1\nprintf '%%s\\n' \"$*\" >&3\nexec cat <&3\n", shim, rshPort)
	if r, err := rig.RunPeer(ctx, fmt.Sprintf("printf '%%s' '%s' | base64 -d > %s/agent && chmod 755 %s/agent",
		base64.StdEncoding.EncodeToString([]byte(agent)), mpiRxeDir, mpiRxeDir)); err != nil || r.ExitCode != 0 {
		t.Fatalf("writing the rsh agent in the guest: %v %s", err, r.Stderr)
	}
	// mpirun passes its plm_rsh_agent on to orted, which checks the
	// path exists on its own host too (and crashes if not).
	if err := os.WriteFile(filepath.Join(mpiRxeDir, "agent"), []byte(agent), 0o755); err != nil {
		t.Fatal(err)
	}
	// The remote shell runs orted through "sroce run": its rank does RDMA
	// on sroce's device only, and UCX uses that device (the rank's
	// environment is orted's: mpirun passes no UCX variable).
	cmd, err := rig.ShimCommand(ctx, "python3", filepath.Join(mustAbs(t, "testdata"), "rsh_server.py"), shim, fmt.Sprint(rshPort), "--")
	if err != nil {
		t.Fatal(err)
	}
	cmd.Env = append(cmd.Environ(), "UCX_TLS=self,rc_verbs,ud_verbs:aux", "UCX_NET_DEVICES=sroce_"+rig.ShimHost.Ifname+":1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var rshErr strings.Builder
	cmd.Stderr = &rshErr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := bufio.NewScanner(out)
	if !lines.Scan() || lines.Text() != "listening" {
		t.Fatalf("the remote shell did not start: %q %s", lines.Text(), rshErr.String())
	}
	var rshLog strings.Builder
	go func() {
		for lines.Scan() {
			rshLog.WriteString(lines.Text() + "\n")
		}
		io.Copy(io.Discard, out)
	}()
	for _, p := range []struct{ prog, want string }{
		{"mpi_pingpong", "pingpong ok"},
		{"mpi_allreduce", "allreduce ok 2 100000"},
	} {
		t.Run(p.prog, func(t *testing.T) {
			script := fmt.Sprintf("UCX_TLS=self,rc_verbs,ud_verbs:aux UCX_NET_DEVICES=rxe0:1 UCX_UD_VERBS_ETH_DGID_CHECK=n "+
				"timeout 120 mpirun --allow-run-as-root -np 2 --host %s:1,%s:1 --mca plm_rsh_agent %s/agent "+
				"--mca pml ucx --mca btl self --mca osc ^ucx --mca oob_tcp_if_include 192.0.2.0/24 %s/%s",
				rig.PeerAddr(), shim, mpiRxeDir, mpiRxeDir, p.prog)
			start := time.Now()
			r, err := rig.RunPeer(ctx, script)
			t.Logf("mpirun in the guest (%v): exit %d, %v\n%s%s", time.Since(start).Round(time.Millisecond), r.ExitCode, err, r.Stdout, r.Stderr)
			if err != nil || r.ExitCode != 0 || !strings.Contains(string(r.Stdout), p.want) {
				t.Fatalf("want %q from both ranks' run; the remote shell's log:\n%s%s", p.want, rshLog.String(), rshErr.String())
			}
		})
	}
}

func mustAbs(t *testing.T, p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
