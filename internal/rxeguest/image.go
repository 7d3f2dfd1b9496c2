package rxeguest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

// Recipe of the guest image. Everything that changes the image's content
// goes into the cache key (see recipeKey), so editing any of it rebuilds.
const (
	recipeVersion = "4"
	suite         = "bookworm"
	imageSize     = "2G"
)

// packages installed by debootstrap on top of the minbase variant.
var packages = []string{
	"linux-image-amd64", "rdma-core", "ibverbs-utils", "ibverbs-providers",
	"perftest", "rdmacm-utils", "iproute2", "udev", "kmod", "procps",
	"iputils-ping", "gcc", "libc6-dev", "libibverbs-dev", "fio", "libfabric-bin", "ucx-utils", "openmpi-bin",
}

// Files copied into the guest root.
//
//go:embed guest/init.sh guest/agent.sh guest/sroce-imm.c guest/linger.c guest/sroce-mw.c guest/hosts
var guestFiles embed.FS

// guestInstall maps embedded files to their place in the guest.
var guestInstall = []struct {
	src, dst string
	mode     os.FileMode
}{
	{"guest/init.sh", "sbin/sroce-init", 0o755},
	{"guest/agent.sh", "sbin/sroce-agent", 0o755},
	{"guest/sroce-imm.c", "usr/local/src/sroce-imm.c", 0o644},
	{"guest/linger.c", "usr/local/src/sroce-linger.c", 0o644},
	{"guest/sroce-mw.c", "usr/local/src/sroce-mw.c", 0o644},
	{"guest/hosts", "etc/hosts", 0o644},
}

// Tools in the guest that the image provides beyond the Debian packages.
const (
	// ImmTool is the path in the guest of sroce-imm, a small libibverbs
	// program (source in guest/sroce-imm.c) that sends RC SEND with
	// immediate and RDMA WRITE with immediate messages.
	ImmTool = "/usr/local/bin/sroce-imm"
	// LingerLib is the path in the guest of sroce-linger.so, an
	// LD_PRELOAD library (source in guest/linger.c) that holds each RC
	// QP for SROCE_LINGER_MS milliseconds (default 1000) before
	// ibv_destroy_qp destroys it, so that the peer's retransmissions of
	// its last message are still answered.
	LingerLib = "/usr/local/lib/sroce-linger.so"
)

// DefaultCacheDir is where images are cached when SROCE_CACHE is unset.
const DefaultCacheDir = "/var/cache/sroce/rxe-guest"

// Image is a built guest image in the cache. Several guests may boot the
// same Image at once: each writes to its own copy-on-write overlay.
type Image struct {
	Dir    string `json:"-"`   // cache directory of this image
	Key    string `json:"key"` // hash of the recipe the image was built from
	Kernel string `json:"-"`   // path of vmlinuz
	Initrd string `json:"-"`   // path of the initramfs
	Rootfs string `json:"-"`   // path of the raw ext4 root file system

	// KernelRelease is the guest kernel's release (uname -r).
	KernelRelease string `json:"kernel_release"`
	// Packages maps some guest package names (rdma-core, perftest,
	// linux-image-*) to their Debian versions.
	Packages map[string]string `json:"packages"`
	// Built is when the image was built.
	Built time.Time `json:"built"`
}

// ImageOptions tune EnsureImage. The zero value uses the environment
// (SROCE_CACHE, SROCE_DEBIAN_MIRROR) and the defaults.
type ImageOptions struct {
	CacheDir string               // default $SROCE_CACHE or DefaultCacheDir
	Mirror   string               // default $SROCE_DEBIAN_MIRROR, else apt's own (FindMirror)
	Logf     func(string, ...any) // progress messages; nil for none
	Log      io.Writer            // debootstrap output; nil for none
}

// EnsureImage returns the cached guest image, building it first if the
// cache has no image for the current recipe (about two minutes, needs
// network access to a Debian mirror and root).
func EnsureImage(ctx context.Context) (*Image, error) {
	return ImageOptions{}.Ensure(ctx)
}

// CacheDir returns the cache directory EnsureImage uses.
func CacheDir() string {
	if d := os.Getenv("SROCE_CACHE"); d != "" {
		return d
	}
	return DefaultCacheDir
}

// RecipeKey returns the cache key of the current recipe.
func RecipeKey() string { return recipeKey() }

func recipeKey() string {
	h := sha256.New()
	fmt.Fprintf(h, "version %s\nsuite %s\nsize %s\npackages %s\n",
		recipeVersion, suite, imageSize, strings.Join(packages, ","))
	for _, f := range guestInstall {
		b, err := guestFiles.ReadFile(f.src)
		if err != nil {
			panic(err)
		}
		fmt.Fprintf(h, "file %s %o %d\n", f.dst, f.mode, len(b))
		h.Write(b)
	}
	return suite + "-" + hex.EncodeToString(h.Sum(nil))[:16]
}

// Ensure is EnsureImage with options.
func (o ImageOptions) Ensure(ctx context.Context) (*Image, error) {
	fixPath()
	if o.CacheDir == "" {
		o.CacheDir = CacheDir()
	}
	if o.Mirror == "" {
		o.Mirror = os.Getenv("SROCE_DEBIAN_MIRROR")
	}
	logf := o.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	key := recipeKey()
	dir := filepath.Join(o.CacheDir, key)
	if img, err := loadImage(dir); err == nil {
		timing("image %s found in the cache", key)
		return img, nil
	}
	if o.Mirror == "" {
		m, err := FindMirror(suite)
		if err != nil {
			return nil, fmt.Errorf("rxeguest: building image %s: %w", key, err)
		}
		o.Mirror = m
	}
	if err := os.MkdirAll(o.CacheDir, 0o755); err != nil {
		return nil, err
	}
	// One builder at a time per key; others wait, then find the image.
	unlock, err := lockFile(ctx, filepath.Join(o.CacheDir, key+".lock"))
	if err != nil {
		return nil, err
	}
	defer unlock()
	if img, err := loadImage(dir); err == nil {
		return img, nil
	}
	// Holding the lock, any build directory of this key is a leftover of a
	// builder that was killed.
	if old, _ := filepath.Glob(filepath.Join(o.CacheDir, ".build-"+key+"-*")); len(old) > 0 {
		for _, d := range old {
			os.RemoveAll(d)
		}
	}
	logf("rxeguest: building guest image %s in %s from %s", key, o.CacheDir, o.Mirror)
	start := time.Now()
	if err := build(ctx, o, key, dir); err != nil {
		return nil, fmt.Errorf("rxeguest: building image %s: %w", key, err)
	}
	logf("rxeguest: built image %s in %v", key, time.Since(start).Round(time.Second))
	timing("built image %s in %v", key, since(start))
	return loadImage(dir)
}

const manifestName = "manifest.json"

func loadImage(dir string) (*Image, error) {
	b, err := os.ReadFile(filepath.Join(dir, manifestName))
	if err != nil {
		return nil, err
	}
	img := &Image{}
	if err := json.Unmarshal(b, img); err != nil {
		return nil, err
	}
	img.Dir = dir
	img.Kernel = filepath.Join(dir, "vmlinuz")
	img.Initrd = filepath.Join(dir, "initrd.img")
	img.Rootfs = filepath.Join(dir, "rootfs.ext4")
	for _, p := range []string{img.Kernel, img.Initrd, img.Rootfs} {
		if _, err := os.Stat(p); err != nil {
			return nil, err
		}
	}
	return img, nil
}

// lockFile takes an exclusive flock on path, polling so ctx can cancel.
func lockFile(ctx context.Context, path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, err
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// build makes the image in a temporary directory next to dir and renames
// it into place, so a half-built image is never visible.
func build(ctx context.Context, o ImageOptions, key, dir string) (err error) {
	tmp, err := os.MkdirTemp(o.CacheDir, ".build-"+key+"-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	root := filepath.Join(tmp, "root")
	out := filepath.Join(tmp, "out")
	if err := os.Mkdir(out, 0o755); err != nil {
		return err
	}
	logw := o.Log
	if logw == nil {
		logw = io.Discard
	}

	// debootstrap mounts /proc and /sys inside the target while it works;
	// a private mount namespace makes sure none of that outlives it.
	var tail tailBuffer
	args := []string{"--mount", "--propagation", "private", "debootstrap",
		"--variant=minbase", "--include=" + strings.Join(packages, ","),
		suite, root, o.Mirror}
	if err := runCmd(ctx, io.MultiWriter(logw, &tail), "unshare", args...); err != nil {
		return fmt.Errorf("debootstrap: %w\n%s", err, tail.String())
	}

	for _, f := range guestInstall {
		b, err := guestFiles.ReadFile(f.src)
		if err != nil {
			return err
		}
		p := filepath.Join(root, f.dst)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, b, f.mode); err != nil {
			return err
		}
	}
	tail.Reset()
	if err := runCmd(ctx, io.MultiWriter(logw, &tail), "chroot", root,
		"gcc", "-O2", "-Wall", "-o", ImmTool, "/usr/local/src/sroce-imm.c", "-libverbs"); err != nil {
		return fmt.Errorf("compiling sroce-imm: %w\n%s", err, tail.String())
	}
	tail.Reset()
	if err := runCmd(ctx, io.MultiWriter(logw, &tail), "chroot", root,
		"gcc", "-O2", "-Wall", "-o", "/usr/local/bin/sroce-mw", "/usr/local/src/sroce-mw.c", "-libverbs"); err != nil {
		return fmt.Errorf("compiling sroce-mw: %w\n%s", err, tail.String())
	}
	tail.Reset()
	if err := runCmd(ctx, io.MultiWriter(logw, &tail), "chroot", root,
		"gcc", "-O2", "-Wall", "-shared", "-fPIC", "-o", LingerLib, "/usr/local/src/sroce-linger.c", "-ldl"); err != nil {
		return fmt.Errorf("compiling sroce-linger.so: %w\n%s", err, tail.String())
	}
	// Downloaded packages are not needed in the image.
	debs, _ := filepath.Glob(filepath.Join(root, "var/cache/apt/archives/*.deb"))
	for _, d := range debs {
		os.Remove(d)
	}
	if err := os.WriteFile(filepath.Join(root, "etc/hostname"), []byte("rxe\n"), 0o644); err != nil {
		return err
	}

	img := &Image{Key: key, Built: time.Now().UTC().Truncate(time.Second), Packages: map[string]string{}}
	kernels, _ := filepath.Glob(filepath.Join(root, "boot/vmlinuz-*"))
	if len(kernels) != 1 {
		return fmt.Errorf("want one kernel in /boot, found %q", kernels)
	}
	img.KernelRelease = strings.TrimPrefix(filepath.Base(kernels[0]), "vmlinuz-")
	if err := copyFile(kernels[0], filepath.Join(out, "vmlinuz")); err != nil {
		return err
	}
	if err := copyFile(filepath.Join(root, "boot/initrd.img-"+img.KernelRelease), filepath.Join(out, "initrd.img")); err != nil {
		return err
	}
	if err := readPackageVersions(filepath.Join(root, "var/lib/dpkg/status"), img.Packages); err != nil {
		return err
	}

	tail.Reset()
	if err := runCmd(ctx, io.MultiWriter(logw, &tail), "mkfs.ext4", "-q", "-F", "-L", "sroce-rxe",
		"-d", root, filepath.Join(out, "rootfs.ext4"), imageSize); err != nil {
		return fmt.Errorf("mkfs.ext4: %w\n%s", err, tail.String())
	}
	b, err := json.MarshalIndent(img, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, manifestName), append(b, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.Rename(out, dir); err != nil {
		// Someone else (without our lock, e.g. another cache user) won.
		if _, lerr := loadImage(dir); lerr == nil {
			return nil
		}
		return err
	}
	return nil
}

// readPackageVersions records the versions of the packages that matter for
// interoperability from a dpkg status file.
func readPackageVersions(status string, into map[string]string) error {
	f, err := os.Open(status)
	if err != nil {
		return err
	}
	defer f.Close()
	interesting := func(p string) bool {
		switch p {
		case "rdma-core", "perftest", "ibverbs-utils", "ibverbs-providers", "libibverbs1", "iproute2":
			return true
		}
		return strings.HasPrefix(p, "linux-image-")
	}
	var pkg string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "Package: "):
			pkg = strings.TrimPrefix(line, "Package: ")
		case strings.HasPrefix(line, "Version: ") && interesting(pkg):
			into[pkg] = strings.TrimPrefix(line, "Version: ")
		}
	}
	return sc.Err()
}

// PackageList formats Packages as "name=version ..." sorted by name.
func (img *Image) PackageList() string {
	names := make([]string, 0, len(img.Packages))
	for n := range img.Packages {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for i, n := range names {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%s", n, img.Packages[n])
	}
	return b.String()
}

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o644)
}

// runCmd runs a command in its own process group, killing the whole group
// when ctx is done.
func runCmd(ctx context.Context, w io.Writer, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Stdout = w
	cmd.Stderr = w
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := startCmd(cmd); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		return ctx.Err()
	}
}

// tailBuffer keeps the last few KiB written to it, for error messages.
type tailBuffer struct{ b []byte }

const tailMax = 4096

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > tailMax {
		t.b = append(t.b[:0], t.b[len(t.b)-tailMax:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string { return string(bytes.TrimSpace(t.b)) }

func (t *tailBuffer) Reset() { t.b = t.b[:0] }
