// Package shim builds sroce's drop-in libibverbs.so.1 and librdmacm.so.1: C
// libraries with the binary interfaces and symbol versions of rdma-core 44's
// libibverbs and librdmacm, which serve the verbs and the connection manager
// of unmodified programs from the sroce daemon (the control protocol of
// daemon/ctl/sroce_ctl.h, the shared rings of ring/sroce_ring.h).
// librdmacm is linked against the libibverbs built beside it: an ID's verbs
// context, its QPs and CQs are that library's.
//
// The C sources are embedded in the sroce binary and compiled with the
// system C compiler on first use into a cache directory keyed by a hash of
// the sources and flags, never over the system library: a program is pointed
// at it with LD_LIBRARY_PATH (sroce run).
package shim

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/sroce/sroce/daemon/ctl"
	"github.com/sroce/sroce/ring"
)

//go:embed libibverbs/*.c libibverbs/*.h libibverbs/libibverbs.map
//go:embed librdmacm/*.c librdmacm/*.h librdmacm/librdmacm.map
//go:embed preload/*.c
var sources embed.FS

// LibName is the file name (and soname) of the verbs library Compile
// produces.
const LibName = "libibverbs.so.1"

// CMLibName is the file name (and soname) of the connection manager's
// library Compile produces beside LibName.
const CMLibName = "librdmacm.so.1"

// PreloadName is the library "sroce run" preloads beside LibName: it
// answers opens of the few sysfs files of a sroce device that programs read
// besides verbs (shim/preload/sysfs.c says which).
const PreloadName = "libsroce_preload.so"

// library is one shared object of the build: its sources are the C files
// of its directory in the embedded tree and the shared ones it names.
type library struct {
	name   string   // soname and file name
	dir    string   // its directory in the embedded tree
	shared []string // C files of another library compiled into this one too
	flags  []string // its own flags beside cflags
	libs   []string // what it links against, after its sources
}

// Libraries returns the file names of every library Compile builds (and
// a package installs), in build order.
func Libraries() []string {
	names := make([]string, len(libraries))
	for i, l := range libraries {
		names[i] = l.name
	}
	return names
}

// libraries are built in this order (librdmacm links the libibverbs before it).
var libraries = []library{
	{name: LibName, dir: "libibverbs",
		flags: []string{"-Wl,--version-script=libibverbs.map", "-Wl,-soname," + LibName}},
	{name: CMLibName, dir: "librdmacm", shared: []string{"ctl.c"},
		flags: []string{"-Wl,--version-script=librdmacm.map", "-Wl,-soname," + CMLibName,
			`-DSROCE_LIB_NAME="librdmacm"`},
		libs: []string{"-L.", "-l:" + LibName}},
	{name: PreloadName, dir: "preload", flags: []string{"-Wl,-soname," + PreloadName}},
}

// BuildTimeout bounds one run of the C compiler.
const BuildTimeout = 2 * time.Minute

// cflags are the compiler flags of every build; they are part of the cache key.
var cflags = []string{
	"-O2", "-fPIC", "-shared", "-Wall", "-Wextra", "-fvisibility=hidden", "-Wl,-z,defs",
}

// ErrNoCompiler is returned (wrapped) when no C compiler can be found.
var ErrNoCompiler = errors.New("no C compiler found")

// Compiler returns the C compiler to use: $CC if set, else cc, else gcc.
func Compiler() (string, error) {
	var tried []string
	if cc := os.Getenv("CC"); cc != "" {
		if p, err := exec.LookPath(cc); err == nil {
			return p, nil
		}
		tried = append(tried, "$CC="+cc)
	}
	for _, name := range []string{"cc", "gcc"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
		tried = append(tried, name)
	}
	return "", fmt.Errorf("%w (looked for %s): sroce's libibverbs is compiled on first use; install one (on Debian: apt-get install gcc)",
		ErrNoCompiler, strings.Join(tried, ", "))
}

// source is one file of the build: a C source or header, and the library
// whose directory holds it ("" for the protocol headers).
type source struct {
	name string
	data []byte
	lib  string
}

// sourceFiles returns the libraries' files, sorted by name: the embedded C
// sources and headers of every library (one directory of the build: their
// names never repeat), and the protocol and ring headers of packages
// daemon/ctl and ring (one copy of each, where its Go side lives).
func sourceFiles() ([]source, error) {
	files := []source{{"sroce_ctl.h", ctl.CHeader, ""}, {"sroce_ring.h", ring.CHeader, ""}}
	seen := map[string]bool{"sroce_ctl.h": true, "sroce_ring.h": true}
	for _, l := range libraries {
		entries, err := fs.ReadDir(sources, l.dir)
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			if seen[e.Name()] {
				return nil, fmt.Errorf("two files named %s in the libraries' sources", e.Name())
			}
			seen[e.Name()] = true
			b, err := sources.ReadFile(l.dir + "/" + e.Name())
			if err != nil {
				return nil, err
			}
			files = append(files, source{e.Name(), b, l.dir})
		}
	}
	sort.Slice(files, func(i, j int) bool { return files[i].name < files[j].name })
	return files, nil
}

// Hash returns the cache key of the library: a hash of every source file
// (name and contents) and of the compiler flags.
func Hash() (string, error) {
	files, err := sourceFiles()
	if err != nil {
		return "", err
	}
	h := sha256.New()
	for _, f := range files {
		fmt.Fprintf(h, "%s\x00%d\x00", f.name, len(f.data))
		h.Write(f.data)
	}
	fmt.Fprintf(h, "flags\x00%s", strings.Join(cflags, "\x00"))
	for _, l := range libraries {
		fmt.Fprintf(h, "\x00%s\x00%s\x00%s\x00%s", l.name, strings.Join(l.shared, "\x00"),
			strings.Join(l.flags, "\x00"), strings.Join(l.libs, "\x00"))
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// CacheDir returns the directory that holds built libraries:
// /var/cache/sroce as root, else $XDG_CACHE_HOME/sroce or ~/.cache/sroce.
func CacheDir() (string, error) {
	if os.Geteuid() == 0 {
		return "/var/cache/sroce", nil
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "sroce"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("no cache directory for sroce's libibverbs: neither XDG_CACHE_HOME nor a home directory is set: %w", err)
	}
	return filepath.Join(home, ".cache", "sroce"), nil
}

// WriteSources writes the library's sources and headers into dir.
func WriteSources(dir string) error {
	files, err := sourceFiles()
	if err != nil {
		return err
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(dir, f.name), f.data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Compile writes the sources into dir and compiles LibName and CMLibName
// there. It returns what the compiler printed (empty for a warning-free
// build) and an error that quotes it when the build failed.
func Compile(ctx context.Context, dir string) (string, error) {
	cc, err := Compiler()
	if err != nil {
		return "", err
	}
	if err := WriteSources(dir); err != nil {
		return "", fmt.Errorf("writing the libraries' sources to %s: %w", dir, err)
	}
	files, err := sourceFiles()
	if err != nil {
		return "", err
	}
	var printed strings.Builder
	for _, l := range libraries {
		out, err := compileOne(ctx, cc, dir, l, files)
		printed.Write(out)
		if err != nil {
			return printed.String(), err
		}
	}
	return printed.String(), nil
}

// compileOne runs the compiler once, for library l, bounded by
// BuildTimeout, and returns what it printed.
func compileOne(ctx context.Context, cc, dir string, l library, files []source) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, BuildTimeout)
	defer cancel()
	args := append(append([]string{}, cflags...), l.flags...)
	args = append(args, "-o", l.name)
	for _, f := range files {
		if f.lib == l.dir && strings.HasSuffix(f.name, ".c") {
			args = append(args, f.name)
		}
	}
	args = append(append(append(args, l.shared...), l.libs...), "-lpthread")
	cmd := exec.CommandContext(ctx, cc, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if ctx.Err() == context.DeadlineExceeded {
		return out, fmt.Errorf("compiling sroce's %s with %s took longer than %v", l.name, cc, BuildTimeout)
	}
	if err != nil {
		return out, fmt.Errorf("compiling sroce's %s with %s failed (%w):\n%s", l.name, cc, err, out)
	}
	return out, nil
}

// Lib returns the directory holding a built LibName for the embedded
// sources, compiling it first if the cache does not have it. The build goes
// to a temporary directory beside the final one, which is then renamed into
// place, so concurrent first uses never see a half-written library.
func Lib(ctx context.Context) (string, error) {
	cache, err := CacheDir()
	if err != nil {
		return "", err
	}
	return LibIn(ctx, cache)
}

// LibIn is Lib with the cache directory given.
func LibIn(ctx context.Context, cache string) (string, error) {
	key, err := Hash()
	if err != nil {
		return "", err
	}
	final := filepath.Join(cache, "libibverbs-"+key)
	if _, err := os.Stat(filepath.Join(final, libraries[len(libraries)-1].name)); err == nil {
		return final, nil
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", fmt.Errorf("creating the cache directory for sroce's libibverbs: %w", err)
	}
	tmp, err := os.MkdirTemp(cache, ".build-libibverbs-")
	if err != nil {
		return "", fmt.Errorf("creating a build directory for sroce's libibverbs: %w", err)
	}
	defer os.RemoveAll(tmp) // a no-op once renamed
	if _, err := Compile(ctx, tmp); err != nil {
		return "", err
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, final); err != nil {
		// Someone else finished the same build first: theirs is as good.
		if _, serr := os.Stat(filepath.Join(final, LibName)); serr == nil {
			return final, nil
		}
		return "", fmt.Errorf("moving the built libibverbs into %s: %w", final, err)
	}
	return final, nil
}
