package ring

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/sroce/sroce/internal/cmirror"
)

// compileC builds a C program against sroce_ring.h, skipping the test
// when there is no C compiler.
func compileC(t *testing.T, src string) string {
	t.Helper()
	cc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc not found: cannot check sroce_ring.h against the Go layout")
	}
	inc, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	c := filepath.Join(dir, "prog.c")
	if err := os.WriteFile(c, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "prog")
	out, err := exec.Command(cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-I", inc, "-o", exe, c).CombinedOutput()
	if err != nil {
		t.Fatalf("compiling against sroce_ring.h: %v\n%s", err, out)
	}
	return exe
}

// TestHeaderGenerated regenerates the Go mirror of sroce_ring.h and fails
// when the checked-in files differ: the header was edited without
// running go generate, or a generated file by hand.
func TestHeaderGenerated(t *testing.T) {
	cmirror.CheckGenerated(t, cmirror.Ring, ".")
}

// TestHeaderLayout compiles a C program against sroce_ring.h that prints
// every constant, struct size and member offset (mr.SGE's for struct
// sroce_sge, the atomics of Header too), and compares them with Go's.
func TestHeaderLayout(t *testing.T) {
	checks := cLayout()
	if len(checks) < 65 {
		t.Errorf("only %d checks of sroce_ring.h: the generated table lost members", len(checks))
	}
	cmirror.CheckLayout(t, ".", "sroce_ring.h", checks)
}
