package shim

// Where "sroce run" finds the libraries. A package (dist/deb) installs
// them already compiled beside the binary's lib directory, so a host
// without a C compiler runs programs on sroce; a checkout compiles them
// from the embedded sources on first use (Lib). The order, first match
// wins:
//
//  1. $SROCE_LIBDIR, when set: a directory holding both libraries (an
//     operator's own build; nothing else is tried);
//  2. the installed directory, InstalledDir of the running binary
//     (/usr/bin/sroce: /usr/lib/<multiarch>/sroce), when its KeyFile names
//     the Hash of this binary's sources: libraries built from other
//     sources would speak another version of the control protocol;
//  3. the cache, compiling into it on first use (Lib).

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// LibDirEnv names the environment variable that points "sroce run" at a
// directory of built libraries.
const LibDirEnv = "SROCE_LIBDIR"

// KeyFile is the file beside installed libraries that holds the Hash of
// the sources they were built from.
const KeyFile = "sroce-lib.key"

// multiarch names Debian's multiarch directory of each GOARCH.
var multiarch = map[string]string{
	"amd64":    "x86_64-linux-gnu",
	"arm64":    "aarch64-linux-gnu",
	"386":      "i386-linux-gnu",
	"arm":      "arm-linux-gnueabihf",
	"ppc64le":  "powerpc64le-linux-gnu",
	"s390x":    "s390x-linux-gnu",
	"riscv64":  "riscv64-linux-gnu",
	"loong64":  "loongarch64-linux-gnu",
	"mips64le": "mips64el-linux-gnuabi64",
}

// Multiarch returns the multiarch triplet of this build's architecture
// (x86_64-linux-gnu on amd64).
func Multiarch() string {
	if t, ok := multiarch[runtime.GOARCH]; ok {
		return t
	}
	return runtime.GOARCH + "-linux-gnu"
}

// InstalledDir returns where a package installs the libraries for the
// sroce binary at exe: ../lib/<multiarch>/sroce from exe's directory
// (/usr/bin/sroce: /usr/lib/x86_64-linux-gnu/sroce on amd64).
func InstalledDir(exe string) string {
	return filepath.Join(filepath.Dir(filepath.Dir(exe)), "lib", Multiarch(), "sroce")
}

// Install compiles the libraries into dir (which must exist) and writes
// KeyFile beside them, as a package installs them. The sources and
// objects of the build are left out of dir.
func Install(ctx context.Context, dir string) error {
	tmp, err := os.MkdirTemp("", "sroce-lib-build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if _, err := Compile(ctx, tmp); err != nil {
		return err
	}
	for _, name := range Libraries() {
		b, err := os.ReadFile(filepath.Join(tmp, name))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return err
		}
	}
	key, err := Hash()
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, KeyFile), []byte(key+"\n"), 0o644)
}

// Found is where Find found the libraries.
type Found struct {
	Dir string // the directory holding the Libraries
	How string // "SROCE_LIBDIR", "installed" or "cache"
}

// Find returns the directory of the libraries for this binary, in the
// order the file comment gives; it compiles them only when neither
// SROCE_LIBDIR nor a matching installed copy exists.
func Find(ctx context.Context) (Found, error) {
	if d := os.Getenv(LibDirEnv); d != "" {
		for _, name := range Libraries() {
			if _, err := os.Stat(filepath.Join(d, name)); err != nil {
				return Found{}, fmt.Errorf("%s=%s has no %s: %w", LibDirEnv, d, name, err)
			}
		}
		return Found{Dir: d, How: LibDirEnv}, nil
	}
	exe, err := os.Executable()
	var stale string
	if err == nil {
		if real, err := filepath.EvalSymlinks(exe); err == nil {
			exe = real
		}
		dir := InstalledDir(exe)
		switch ok, err := installedMatches(dir); {
		case ok:
			return Found{Dir: dir, How: "installed"}, nil
		case err != nil:
			stale = err.Error()
		}
	}
	lib, err := Lib(ctx)
	if err != nil {
		if stale != "" && errors.Is(err, ErrNoCompiler) {
			return Found{}, fmt.Errorf("%s; and %w", stale, err)
		}
		return Found{}, err
	}
	return Found{Dir: lib, How: "cache"}, nil
}

// installedMatches reports whether dir holds every library built from
// this binary's sources. It returns an error saying why not when dir has
// libraries that do not match (so a compiler-less host is told), and
// false, nil when there are none.
func installedMatches(dir string) (bool, error) {
	b, err := os.ReadFile(filepath.Join(dir, KeyFile))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("the libraries installed in %s cannot be checked: %w", dir, err)
	}
	key, err := Hash()
	if err != nil {
		return false, err
	}
	if got := strings.TrimSpace(string(b)); got != key {
		return false, fmt.Errorf("the libraries installed in %s were built from other sources (key %s, this sroce's is %s): install the package that matches this binary",
			dir, got, key)
	}
	for _, name := range Libraries() {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			return false, fmt.Errorf("the libraries installed in %s are incomplete: %w", dir, err)
		}
	}
	return true, nil
}
