package shim

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestPreloadSysfs runs real programs with PreloadName preloaded: the GID
// type and netdev files of a sroce device read as a kernel RoCE v2
// device's do (through open, openat and fopen: cat, Python's open, and
// head), writes to them fail, and every other path, of a sroce device or
// not, behaves as without the library.
func TestPreloadSysfs(t *testing.T) {
	dir := buildOnce(t)
	lib := filepath.Join(dir, PreloadName)
	run := func(name string, args ...string) (string, string, error) {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Env = append(os.Environ(), "LD_PRELOAD="+lib)
		var out, errOut strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		return out.String(), errOut.String(), err
	}
	const base = "/sys/class/infiniband/sroce_veth_x1/ports/1/gid_attrs/"
	for _, c := range []struct{ path, want string }{
		{base + "types/0", "RoCE v2\n"},
		{base + "types/15", "RoCE v2\n"},
		{base + "ndevs/1", "veth_x1\n"},
	} {
		for _, prog := range [][]string{
			{"cat", c.path},
			{"head", "-c", "64", c.path},
			{"python3", "-c", "import sys; sys.stdout.write(open(sys.argv[1]).read())", c.path},
		} {
			out, errOut, err := run(prog[0], prog[1:]...)
			if err != nil || out != c.want {
				t.Errorf("%s: %q, %v (stderr %q); want %q", strings.Join(prog, " "), out, err, errOut, c.want)
			}
		}
	}
	// Writing is refused, as the kernel's read-only file refuses it.
	if _, errOut, err := run("python3", "-c", "import os,sys\ntry:\n os.write(os.open(sys.argv[1], os.O_RDONLY), b'x')\nexcept OSError as e:\n sys.exit(e.errno)", base+"types/0"); err == nil {
		t.Errorf("a write to the GID type file succeeded (stderr %q)", errOut)
	}
	if _, _, err := run("sh", "-c", "echo x > "+base+"types/0"); err == nil {
		t.Error("opening the GID type file for writing succeeded")
	}
	// Not the library's: left to the kernel, which has none of them.
	for _, p := range []string{
		base + "types/x",
		base + "types/1/",
		base + "flags/1",
		"/sys/class/infiniband/sroce_veth_x1/ports/1/gids/1",
		"/sys/class/infiniband/rxe0/ports/1/gid_attrs/types/1",
		"/sys/class/infiniband/sroce_/ports/1/gid_attrs/types/1",
	} {
		out, errOut, err := run("cat", p)
		if err == nil || !strings.Contains(errOut, "No such file or directory") {
			t.Errorf("cat %s: %q, %v, stderr %q; want the kernel's ENOENT", p, out, err, errOut)
		}
	}
	// Other files read as ever.
	other := filepath.Join(t.TempDir(), "other")
	if err := os.WriteFile(other, []byte("other file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, errOut, err := run("cat", other); err != nil || out != "other file\n" {
		t.Errorf("cat %s with the library preloaded: %q, %v, %s", other, out, err, errOut)
	}
}
