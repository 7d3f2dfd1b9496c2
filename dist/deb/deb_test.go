package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"debug/buildinfo"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sroce/sroce/shim"
)

// TestPackage builds the package and looks inside it as dpkg would: the
// control fields, the conffile, the files, man pages that groff formats
// without a warning, one per command the binary lists, and the unpacked
// sroce running a program on the packaged libraries with no C compiler
// on PATH.
func TestPackage(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping the package build in -short mode")
	}
	if _, err := shim.Compiler(); err != nil {
		t.Skipf("skipping: the package build compiles the drop-in libraries: %v", err)
	}
	for _, tool := range []string{"dpkg-deb", "groff"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("skipping: %s is not installed (apt-get install dpkg groff-base)", tool)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	out := t.TempDir()
	deb, err := build(ctx, options{Out: out, Root: filepath.Join("..", "..")})
	if err != nil {
		t.Fatal(err)
	}
	dpkgDeb := func(args ...string) string {
		t.Helper()
		b, err := exec.Command("dpkg-deb", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("dpkg-deb %s: %v\n%s", strings.Join(args, " "), err, b)
		}
		return string(b)
	}
	fields := dpkgDeb("-f", deb, "Package", "Architecture", "Depends", "Version")
	for _, want := range []string{"Package: sroce", "Architecture: amd64", "Depends: libc6 (>= 2."} {
		if !strings.Contains(fields, want) {
			t.Errorf("control fields lack %q:\n%s", want, fields)
		}
	}
	control := t.TempDir()
	dpkgDeb("-e", deb, control)
	if b, _ := os.ReadFile(filepath.Join(control, "conffiles")); strings.TrimSpace(string(b)) != "/etc/default/sroce" {
		t.Errorf("conffiles: %q, want /etc/default/sroce", b)
	}
	for _, s := range []string{"postinst", "prerm", "postrm"} {
		b, err := os.ReadFile(filepath.Join(control, s))
		if err != nil || !strings.Contains(string(b), "systemctl") {
			t.Errorf("maintainer script %s: %v %q", s, err, b)
		}
	}

	root := t.TempDir()
	dpkgDeb("-x", deb, root)
	libDir := shim.InstalledDir("/usr/bin/sroce")
	for _, p := range []string{"/usr/bin/sroce", libDir + "/libibverbs.so.1", libDir + "/librdmacm.so.1", libDir + "/libsroce_preload.so", libDir + "/" + shim.KeyFile,
		"/usr/lib/systemd/system/sroce.service", "/usr/lib/systemd/system/sroce@.service", "/etc/default/sroce",
		"/usr/share/doc/sroce/copyright", "/usr/share/doc/sroce/README.md", "/usr/share/doc/sroce/docs/operator-guide.md",
		"/usr/share/doc/sroce/docs/limits.md", "/usr/share/man/man1/sroce.1.gz"} {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Errorf("the package lacks %s", p)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(root, "usr/share/doc/sroce/copyright")); !bytes.Contains(b, []byte("License: MIT")) || !bytes.Contains(b, []byte("Permission is hereby granted")) {
		t.Errorf("the copyright file lacks the license:\n%s", b)
	}

	// One page per command the packaged binary lists, each clean.
	sroce := filepath.Join(root, "usr/bin/sroce")
	help, err := exec.Command(sroce, "help").Output()
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	inCommands := false
	for _, l := range strings.Split(string(help), "\n") {
		switch {
		case strings.HasPrefix(l, "commands:"):
			inCommands = true
		case inCommands && strings.HasPrefix(l, "  "):
			want = append(want, "sroce-"+strings.Fields(l)[0]+".1.gz")
		case inCommands && l == "":
			inCommands = false
		}
	}
	want = append(want, "sroce.1.gz")
	pages, _ := filepath.Glob(filepath.Join(root, "usr/share/man/man1/*.gz"))
	var got []string
	for _, p := range pages {
		got = append(got, filepath.Base(p))
	}
	sort.Strings(want)
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("man pages %v, want %v", got, want)
	}
	for _, p := range pages {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		zr, err := gzip.NewReader(f)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		page, _ := io.ReadAll(zr)
		f.Close()
		cmd := exec.Command("groff", "-man", "-Tutf8", "-ww", "-z")
		cmd.Stdin = bytes.NewReader(page)
		cmd.Env = append(os.Environ(), "LC_ALL=C.UTF-8")
		if b, err := cmd.CombinedOutput(); err != nil || len(b) > 0 {
			t.Errorf("%s: groff -ww: %v\n%s", filepath.Base(p), err, b)
		}
	}

	// The unpacked sroce finds the packaged libraries with no compiler.
	cmd := exec.Command(sroce, "run", "--print-lib")
	cmd.Env = append(os.Environ(), "PATH="+t.TempDir(), "CC=", "SROCE_LIBDIR=")
	b, err := cmd.CombinedOutput()
	if want := filepath.Join(root, libDir); err != nil || strings.TrimSpace(string(b)) != want {
		t.Errorf("the unpacked sroce run --print-lib: %v %q, want %s", err, b, want)
	}
}

// TestDebVersion checks the Debian versions made of Go's.
func TestDebVersion(t *testing.T) {
	for _, c := range []struct {
		main     string
		settings map[string]string
		want     string
	}{
		{"v1.2.3", nil, "1.2.3"},
		{"v0.0.0-20261129015200-6bcf8cb01234", nil, "0.0.0~20261129015200~6bcf8cb01234"},
		{"v1.3.0-rc.1", nil, "1.3.0~rc.1"},
		{"(devel)", map[string]string{"vcs.revision": "6bcf8cb01234567890", "vcs.time": "2026-11-29T01:52:00Z"}, "0.0.0~git20261129015200.6bcf8cb01234"},
		{"(devel)", map[string]string{"vcs.revision": "6bcf8cb01234567890", "vcs.time": "2026-11-29T01:52:00Z", "vcs.modified": "true"}, "0.0.0~git20261129015200.6bcf8cb01234+dirty"},
		{"(devel)", nil, "0.0.0~dev"},
	} {
		bi := &buildinfo.BuildInfo{Main: debug.Module{Version: c.main}}
		for k, v := range c.settings {
			bi.Settings = append(bi.Settings, debug.BuildSetting{Key: k, Value: v})
		}
		if got := debVersion(bi); got != c.want {
			t.Errorf("debVersion(%s, %v) = %q, want %q", c.main, c.settings, got, c.want)
		}
	}
}
