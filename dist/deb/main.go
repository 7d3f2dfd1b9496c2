// Command deb builds sroce's Debian package:
//
//	go run ./dist/deb -o DIR
//
// writes DIR/sroce_VERSION_ARCH.deb with /usr/bin/sroce (built without
// cgo), the drop-in libibverbs.so.1 and librdmacm.so.1 already compiled
// (with the build host's C compiler) in /usr/lib/<multiarch>/sroce with
// the key "sroce run" checks them by, the systemd units, the conffile
// /etc/default/sroce, a man page per command made from the help text of
// the binary just built (internal/manpage), and the documentation in
// /usr/share/doc/sroce. It runs on the architecture it packages for.
package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"debug/buildinfo"
	"debug/elf"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/goreleaser/nfpm/v2"
	_ "github.com/goreleaser/nfpm/v2/deb" // registers the deb packager
	"github.com/goreleaser/nfpm/v2/files"

	"github.com/sroce/sroce/internal/manpage"
	"github.com/sroce/sroce/shim"
)

func main() {
	out := flag.String("o", ".", "directory to write the package to")
	version := flag.String("version", "", "the package's version (default: from the module version of the built binary)")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "deb: unexpected arguments %q\nusage: go run ./dist/deb [-o DIR] [-version V]\n", flag.Args())
		os.Exit(2)
	}
	path, err := build(context.Background(), options{Out: *out, Version: *version})
	if err != nil {
		fmt.Fprintf(os.Stderr, "deb: %v\n", err)
		os.Exit(1)
	}
	fmt.Println(path)
}

// options are what build is told.
type options struct {
	Out     string // directory of the package
	Version string // "" for the binary's module version
	Root    string // the repository ("" finds it with go list)
}

// Where things go in the package.
const (
	binPath  = "/usr/bin/sroce"
	unitDir  = "/usr/lib/systemd/system"
	docDir   = "/usr/share/doc/sroce"
	manDir   = "/usr/share/man/man1"
	confPath = "/etc/default/sroce"
)

// build makes the package and returns its path.
func build(ctx context.Context, o options) (string, error) {
	root := o.Root
	if root == "" {
		b, err := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}").Output()
		if err != nil {
			return "", fmt.Errorf("finding the repository (go list -m): %w", err)
		}
		root = strings.TrimSpace(string(b))
	}
	stage, err := os.MkdirTemp("", "sroce-deb-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(stage)

	// The binary, static: it runs on any Linux of the architecture.
	bin := filepath.Join(stage, "sroce")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", bin, "./cmd/sroce")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/sroce: %w\n%s", err, b)
	}
	bi, err := buildinfo.ReadFile(bin)
	if err != nil {
		return "", fmt.Errorf("reading the build information of %s: %w", bin, err)
	}
	addGitStamp(ctx, root, bi)
	version := o.Version
	if version == "" {
		version = debVersion(bi)
	}
	date := buildDate(bi)

	// The libraries, compiled here, checked by "sroce run" against the
	// binary's sources with their key.
	libStage := filepath.Join(stage, "lib")
	if err := os.Mkdir(libStage, 0o755); err != nil {
		return "", err
	}
	if err := shim.Install(ctx, libStage); err != nil {
		return "", fmt.Errorf("compiling the drop-in libraries: %w", err)
	}
	libc, err := libcNeeded(filepath.Join(libStage, shim.LibName), filepath.Join(libStage, shim.CMLibName))
	if err != nil {
		return "", err
	}

	// Man pages from the binary's own help text.
	manStage := filepath.Join(stage, "man")
	if err := os.Mkdir(manStage, 0o755); err != nil {
		return "", err
	}
	pages, err := manpage.Pages("sroce", func(args ...string) (string, error) {
		return helpText(ctx, bin, args...)
	}, manpage.Meta{Section: "1", Date: date.Format("2006-01-02"), Source: "sroce " + version, Manual: "sroce manual",
		SeeAlso: []string{"ibv_devinfo(1)", "ib_write_bw(1)", "systemctl(1)"},
		Files: []manpage.Entry{
			{Term: "/run/sroce/sroce.sock", Desc: "the system daemon's socket, where programs look when neither SROCE_SOCKET nor a user's own daemon says otherwise"},
			{Term: confPath, Desc: "the settings of sroce.service and sroce@IFACE.service: the interfaces and the daemon's flags"},
			{Term: shim.InstalledDir(binPath), Desc: "the drop-in libibverbs.so.1 and librdmacm.so.1, and libsroce_preload.so, that sroce run uses (SROCE_LIBDIR overrides)"},
			{Term: docDir + "/docs/operator-guide.md", Desc: "installing, upgrading, the units, containers, logs, troubleshooting"},
		}})
	if err != nil {
		return "", fmt.Errorf("making the man pages: %w", err)
	}

	var contents files.Contents
	add := func(src, dst, typ string, mode os.FileMode) {
		contents = append(contents, &files.Content{Source: src, Destination: dst, Type: typ,
			FileInfo: &files.ContentFileInfo{Mode: mode, MTime: date}})
	}
	add(bin, binPath, "", 0o755)
	libDir := shim.InstalledDir(binPath)
	for _, name := range append(shim.Libraries(), shim.KeyFile) {
		add(filepath.Join(libStage, name), filepath.Join(libDir, name), "", 0o644)
	}
	var names []string
	for name := range pages {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		gz := filepath.Join(manStage, name+".gz")
		if err := writeGzip(gz, pages[name], date); err != nil {
			return "", err
		}
		add(gz, filepath.Join(manDir, name+".gz"), "", 0o644)
	}
	for _, unit := range []string{"sroce.service", "sroce@.service"} {
		add(filepath.Join(root, "daemon", "systemd", unit), filepath.Join(unitDir, unit), "", 0o644)
	}
	add(filepath.Join(root, "daemon", "systemd", "sroce.default"), confPath, files.TypeConfig, 0o644)
	add(filepath.Join(root, "README.md"), filepath.Join(docDir, "README.md"), "", 0o644)
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*"))
	if err != nil {
		return "", err
	}
	for _, d := range docs {
		if st, err := os.Stat(d); err == nil && st.Mode().IsRegular() {
			add(d, filepath.Join(docDir, "docs", filepath.Base(d)), "", 0o644)
		}
	}
	copyright := filepath.Join(stage, "copyright")
	if err := writeCopyright(copyright, filepath.Join(root, "LICENSE")); err != nil {
		return "", err
	}
	add(copyright, filepath.Join(docDir, "copyright"), "", 0o644)

	scripts := map[string]string{"postinst": postinst, "prerm": prerm, "postrm": postrm}
	for name, text := range scripts {
		if err := os.WriteFile(filepath.Join(stage, name), []byte(text), 0o755); err != nil {
			return "", err
		}
	}

	info := nfpm.WithDefaults(&nfpm.Info{
		Name:          "sroce",
		Arch:          runtime.GOARCH,
		Platform:      "linux",
		Version:       version,
		VersionSchema: "none",
		Release:       "1",
		Section:       "net",
		Priority:      "optional",
		Maintainer:    "The sroce authors <sroce@users.noreply.github.com>",
		Homepage:      "https://github.com/sroce/sroce",
		License:       "MIT",
		Description: "user-space RoCEv2 device for unmodified verbs programs\n" +
			"sroce is a software RDMA NIC: a daemon speaks RoCEv2 over AF_XDP (or UDP)\n" +
			"on an ordinary Ethernet interface, and drop-in libibverbs.so.1 and\n" +
			"librdmacm.so.1 let unmodified programs (perftest, rping, UCX, MPI) use it\n" +
			"with \"sroce run\". Interoperates with rdma_rxe and RoCE NICs.",
		MTime: date,
		Overridables: nfpm.Overridables{
			Depends:    []string{libc},
			Recommends: []string{"systemd"},
			Suggests:   []string{"perftest", "ibverbs-utils", "rdmacm-utils"},
			Contents:   contents,
			Scripts: nfpm.Scripts{
				PostInstall: filepath.Join(stage, "postinst"),
				PreRemove:   filepath.Join(stage, "prerm"),
				PostRemove:  filepath.Join(stage, "postrm"),
			},
			Deb: nfpm.Deb{Compression: "xz"},
		},
	})
	if err := nfpm.PrepareForPackager(info, "deb"); err != nil {
		return "", fmt.Errorf("the package's description: %w", err)
	}
	pkger, err := nfpm.Get("deb")
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(o.Out, pkger.ConventionalFileName(info))
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	if err := pkger.Package(info, f); err != nil {
		f.Close()
		os.Remove(path)
		return "", fmt.Errorf("writing %s: %w", path, err)
	}
	return path, f.Close()
}

// helpText is what "sroce help ARGS" prints: its standard output, or its
// error stream when it printed nothing else.
func helpText(ctx context.Context, bin string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, bin, append([]string{"help"}, args...)...)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	text := o.String()
	if strings.TrimSpace(text) == "" {
		text = e.String()
	}
	if strings.TrimSpace(text) == "" {
		return "", fmt.Errorf("printed nothing (%w)", err)
	}
	return text, nil
}

// debVersion turns the binary's Go module version into a Debian one:
// v1.2.3 is 1.2.3; a pseudo-version v0.0.0-20261129015200-6bcf8cb01234
// sorts before 0.0.0 as 0.0.0~20261129015200~6bcf8cb01234 (Debian's
// '~'); a work tree build, (devel), is 0.0.0~git followed by the commit's
// time and revision (and +dirty for uncommitted changes), or 0.0.0~dev
// without them.
func debVersion(bi *buildinfo.BuildInfo) string {
	v := bi.Main.Version
	if v != "" && v != "(devel)" {
		return strings.ReplaceAll(strings.TrimPrefix(v, "v"), "-", "~")
	}
	var rev, when string
	dirty := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			if t, err := time.Parse(time.RFC3339, s.Value); err == nil {
				when = t.UTC().Format("20060102150405")
			}
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" || when == "" {
		return "0.0.0~dev"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	v = "0.0.0~git" + when + "." + rev
	if dirty {
		v += "+dirty"
	}
	return v
}

// addGitStamp adds to bi the revision, time and state of the work tree
// from git when the build recorded none (-buildvcs=false in GOFLAGS, as
// some machines set it), so the version and dates still say which commit
// was packaged.
func addGitStamp(ctx context.Context, root string, bi *buildinfo.BuildInfo) {
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" {
			return
		}
	}
	b, err := exec.CommandContext(ctx, "git", "-C", root, "log", "-1", "--format=%H %cI").Output()
	f := strings.Fields(string(b))
	if err != nil || len(f) != 2 {
		return
	}
	bi.Settings = append(bi.Settings, debug.BuildSetting{Key: "vcs.revision", Value: f[0]},
		debug.BuildSetting{Key: "vcs.time", Value: f[1]})
	if st, err := exec.CommandContext(ctx, "git", "-C", root, "status", "--porcelain").Output(); err == nil && len(bytes.TrimSpace(st)) > 0 {
		bi.Settings = append(bi.Settings, debug.BuildSetting{Key: "vcs.modified", Value: "true"})
	}
}

// buildDate is the date of the pages and files: SOURCE_DATE_EPOCH, else
// the commit's time, else now.
func buildDate(bi *buildinfo.BuildInfo) time.Time {
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			return time.Unix(n, 0).UTC()
		}
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.time" {
			if t, err := time.Parse(time.RFC3339, s.Value); err == nil {
				return t.UTC()
			}
		}
	}
	return time.Now().UTC()
}

// libcNeeded returns the dependency on libc6 the libraries need: the
// newest GLIBC_ symbol version they import.
func libcNeeded(paths ...string) (string, error) {
	best := []int{2, 2, 5}
	for _, p := range paths {
		f, err := elf.Open(p)
		if err != nil {
			return "", err
		}
		syms, err := f.ImportedSymbols()
		f.Close()
		if err != nil {
			return "", fmt.Errorf("%s: %w", p, err)
		}
		for _, s := range syms {
			v, ok := strings.CutPrefix(s.Version, "GLIBC_")
			if !ok {
				continue
			}
			var n []int
			for _, part := range strings.Split(v, ".") {
				x, err := strconv.Atoi(part)
				if err != nil {
					n = nil
					break
				}
				n = append(n, x)
			}
			if n != nil && versionLess(best, n) {
				best = n
			}
		}
	}
	var parts []string
	for _, x := range best {
		parts = append(parts, strconv.Itoa(x))
	}
	return "libc6 (>= " + strings.Join(parts, ".") + ")", nil
}

func versionLess(a, b []int) bool {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return len(a) < len(b)
}

func writeGzip(path string, data []byte, mtime time.Time) error {
	var b bytes.Buffer
	zw, err := gzip.NewWriterLevel(&b, gzip.BestCompression)
	if err != nil {
		return err
	}
	zw.ModTime = mtime
	zw.Write(data)
	if err := zw.Close(); err != nil {
		return err
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

// writeCopyright writes the package's copyright file (Debian's machine-
// readable format) around the repository's LICENSE.
func writeCopyright(path, license string) error {
	text, err := os.ReadFile(license)
	if err != nil {
		return fmt.Errorf("the license: %w", err)
	}
	var b strings.Builder
	b.WriteString("Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n")
	b.WriteString("Upstream-Name: sroce\nSource: https://github.com/sroce/sroce\n\n")
	b.WriteString("Files: *\nCopyright: 2026 The sroce authors\nLicense: MIT\n")
	for _, l := range strings.Split(strings.TrimRight(string(text), "\n"), "\n") {
		if strings.TrimSpace(l) == "" {
			b.WriteString(" .\n")
		} else {
			b.WriteString(" " + l + "\n")
		}
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// The maintainer scripts. The units run as a DynamicUser, so no user is
// made; they are not enabled on install: the interfaces are the
// operator's to name first (/etc/default/sroce, or sroce@IFACE).
const postinst = `#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null 2>&1 || true
	if [ "$1" = configure ] && [ -n "$2" ]; then
		# An upgrade: running daemons restart on the new binary.
		systemctl try-restart sroce.service 'sroce@*.service' >/dev/null 2>&1 || true
	fi
fi
exit 0
`

const prerm = `#!/bin/sh
set -e
if [ -d /run/systemd/system ] && [ "$1" = remove ]; then
	systemctl stop sroce.service 'sroce@*.service' >/dev/null 2>&1 || true
fi
exit 0
`

const postrm = `#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null 2>&1 || true
fi
exit 0
`
