package cmirror

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// compiler returns the C compiler: $CC if set, else gcc, else cc.
func compiler() (string, error) {
	names := []string{"gcc", "cc"}
	if cc := os.Getenv("CC"); cc != "" {
		names = append([]string{cc}, names...)
	}
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p, nil
		}
	}
	return "", ErrNoCompiler
}

// evalC compiles a program that includes header (from dir) and prints
// the value of each expression, and returns the values.
func evalC(dir, header string, exprs []string) ([]int64, error) {
	cc, err := compiler()
	if err != nil {
		return nil, err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "#include <stdio.h>\n#include <stddef.h>\n#include %q\nint main(void) {\n", header)
	for _, e := range exprs {
		fmt.Fprintf(&b, "\tprintf(\"%%lld\\n\", (long long)(%s));\n", e)
	}
	b.WriteString("\treturn 0;\n}\n")
	tmp, err := os.MkdirTemp("", "cmirror")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	prog := filepath.Join(tmp, "probe.c")
	if err := os.WriteFile(prog, []byte(b.String()), 0o644); err != nil {
		return nil, err
	}
	inc, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	exe := filepath.Join(tmp, "probe")
	if out, err := exec.Command(cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-I", inc, "-o", exe, prog).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("compiling a probe against %s: %w\n%s", header, err, out)
	}
	out, err := exec.Command(exe).Output()
	if err != nil {
		return nil, fmt.Errorf("running the probe of %s: %w", header, err)
	}
	fields := strings.Fields(string(out))
	if len(fields) != len(exprs) {
		return nil, fmt.Errorf("the probe of %s printed %d values for %d expressions", header, len(fields), len(exprs))
	}
	vals := make([]int64, len(fields))
	for i, f := range fields {
		if vals[i], err = strconv.ParseInt(f, 10, 64); err != nil {
			return nil, fmt.Errorf("the probe of %s printed %q", header, f)
		}
	}
	return vals, nil
}

// CheckGenerated regenerates m from its header in dir and fails t when a
// checked-in file differs: the header changed without regenerating, or
// a generated file was edited. It skips when there is no C compiler.
func CheckGenerated(t testing.TB, m Mirror, dir string) {
	t.Helper()
	if _, err := compiler(); err != nil {
		t.Skipf("gcc not found (%v): cannot regenerate the Go mirror of %s to compare", err, m.Header)
	}
	files, err := Generate(m, dir)
	if err != nil {
		t.Fatalf("generating the Go mirror of %s: %v", m.Header, err)
	}
	for name, want := range files {
		have, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Errorf("%v: run `go generate ./%s` and commit the result", err, m.Dir)
			continue
		}
		if bytes.Equal(have, want) {
			continue
		}
		hl, wl := strings.Split(string(have), "\n"), strings.Split(string(want), "\n")
		line := 0
		for line < len(hl) && line < len(wl) && hl[line] == wl[line] {
			line++
		}
		get := func(l []string) string {
			if line < len(l) {
				return l[line]
			}
			return "(end of file)"
		}
		t.Errorf("%s is not what %s generates (line %d: checked in %q, generated %q): edit %s, never the generated file, then run `go generate ./%s` and commit both",
			name, m.Header, line+1, get(hl), get(wl), m.Header, m.Dir)
	}
}

// CheckLayout compiles a program against header (in dir) that prints the
// C side of every check, and fails t where Go's value differs. It skips
// when there is no C compiler.
func CheckLayout(t testing.TB, dir, header string, checks []Check) {
	t.Helper()
	if _, err := compiler(); err != nil {
		t.Skipf("gcc not found (%v): cannot check %s against the Go layout", err, header)
	}
	exprs := make([]string, len(checks))
	for i, c := range checks {
		exprs[i] = c.C
	}
	vals, err := evalC(dir, header, exprs)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range checks {
		if vals[i] != c.Go {
			t.Errorf("%s: C says %d, Go says %d", c.C, vals[i], c.Go)
		}
	}
}
