package netns

// What the tests of this package share, because making it again for each
// test is what made the package slow: the guest image, one pair of rdma_rxe
// guests (booting a guest under TCG takes 30 to 60 s on a loaded 2-CPU
// host), the interop rig on the first of them (host namespaces for
// sroce's tools and a sroce daemon on the same bridge), and the sroce
// binaries. Everything is made on first use and removed by TestMain.
//
// The tests run one after the other (none calls t.Parallel while it holds
// a guest), so a test has the guests to itself. Before each test takes
// them, resetGuest undoes what a test may leave behind: background
// commands still running, qdiscs and filters on eth0 (loss, drops), an
// XDP program on eth0, a missing rxe0. A test that changes a guest beyond
// that (TestDebInGuest removes its compiler and rxe) calls taintGuest, and
// the next test to take the guests gets that one booted again.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/sroce/sroce/internal/rxeguest"
	"github.com/sroce/sroce/interop"
)

var shared struct {
	mu      sync.Mutex
	dir     string // binaries and the guests' share, removed by closeShared
	bin     string // sroce built for this host
	static  bool   // the static sroce is in share
	share   string // the guests' 9p share (rxeguest.SharePath in the guests)
	img     *rxeguest.Image
	lan     *rxeguest.LAN
	b       *rxeguest.Guest // rxe-b; rxe-a is rig.Guest (a rig reboot replaces it)
	a       *rxeguest.Guest // rxe-a before the rig exists
	rig     *interop.Rig
	tainted map[string]string // guest name -> what the test did to it
	// rebooting is closed when the reboot of the tainted guests, started
	// when their test ended, is over (nil: none started).
	rebooting chan struct{}
	notes     []string // what the background reboot did, for the next test's log
	err       error    // the first boot's failure, reported to every later test
}

// sharedSetupLimit bounds making the image, the guests and the rig.
const sharedSetupLimit = 15 * time.Minute

// sharedDir returns the package's directory, made on first use.
func sharedDir(t testing.TB) string {
	t.Helper()
	if shared.dir == "" {
		d, err := os.MkdirTemp("", "sroce-netns-")
		if err != nil {
			t.Fatal(err)
		}
		// Readable by nobody: the unprivileged tests run the binary.
		os.Chmod(d, 0o755)
		shared.dir = d
	}
	return shared.dir
}

// buildSroce builds cmd/sroce once for the package and returns the
// binary's path. Tests must not change the file (copy it to change it).
func buildSroce(t testing.TB) string {
	t.Helper()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.bin != "" {
		return shared.bin
	}
	if x := os.Getenv("SROCE_TEST_BIN"); x != "" {
		// A binary built elsewhere: to compare two builds in one run
		// (BenchmarkShimTable with each in turn).
		shared.bin = x
		return x
	}
	bin := filepath.Join(sharedDir(t), "sroce")
	start := time.Now()
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/sroce")
	cmd.Dir = repoRoot(t)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building sroce: %v\n%s", err, out)
	}
	t.Logf("built sroce in %v", time.Since(start).Round(100*time.Millisecond))
	shared.bin = bin
	return bin
}

// repoRoot returns the repository's root directory.
func repoRoot(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cannot find the source directory")
	}
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// sharedGuests returns the LAN and the two guests (rxe-a at 192.0.2.1,
// rxe-b at 192.0.2.2, both mounting the share), booting them on first
// use and resetting them for t. It skips t where guests cannot run.
func sharedGuests(t testing.TB) (lan *rxeguest.LAN, a, b *rxeguest.Guest) {
	t.Helper()
	rxeguest.Skip(t)
	shared.mu.Lock()
	pending := shared.rebooting
	shared.mu.Unlock()
	if pending != nil {
		// A reboot that the tests since the tainting one (which needed
		// no guest) let run beside them.
		<-pending
	}
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.rebooting == pending {
		shared.rebooting = nil
	}
	for _, n := range shared.notes {
		t.Log(n)
	}
	shared.notes = nil
	if shared.err != nil {
		t.Fatalf("the shared guests could not be set up: %v", shared.err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), sharedSetupLimit)
	defer cancel()
	if shared.lan == nil {
		if err := bootShared(t, ctx); err != nil {
			shared.err = err
			t.Fatal(err)
		}
	}
	if shared.rig != nil {
		shared.a = shared.rig.Guest
	}
	for _, g := range []**rxeguest.Guest{&shared.a, &shared.b} {
		why := shared.tainted[(*g).Name()]
		delete(shared.tainted, (*g).Name())
		ng, note, err := renewGuest(ctx, *g, why)
		if note != "" {
			t.Log(note)
		}
		if err != nil {
			shared.err = err
			t.Fatal(err)
		}
		*g = ng
	}
	if shared.rig != nil {
		shared.rig.Guest = shared.a
	}
	return shared.lan, shared.a, shared.b
}

// bootShared makes the image, the share, the LAN and the guests.
func bootShared(t testing.TB, ctx context.Context) error {
	start := time.Now()
	img, err := rxeguest.ImageOptions{Logf: t.Logf}.Ensure(ctx)
	if err != nil {
		return err
	}
	shared.img = img
	shared.share = filepath.Join(sharedDir(t), "share")
	if err := os.Mkdir(shared.share, 0o755); err != nil {
		return err
	}
	lan, err := rxeguest.NewLAN(ctx)
	if err != nil {
		return err
	}
	a, b := rxeguest.PairConfigs()
	a.Share, b.Share = shared.share, shared.share
	gs, err := lan.BootAll(ctx, img, a, b)
	if err != nil {
		lan.Close()
		return err
	}
	shared.lan, shared.a, shared.b = lan, gs[0], gs[1]
	t.Logf("image %s and the shared guests rxe-a and rxe-b ready in %v", img.Key, time.Since(start).Round(time.Second))
	return nil
}

// renewGuest resets g, or boots it again (in its place on the shared
// LAN, same configuration) if a test tainted it (why) or the reset fails.
// It returns the guest to use and, after a boot, a note saying why.
// shared.lan and shared.img are set once, before any guest exists.
func renewGuest(ctx context.Context, g *rxeguest.Guest, why string) (*rxeguest.Guest, string, error) {
	if why == "" {
		err := resetGuest(ctx, g)
		if err == nil {
			return g, "", nil
		}
		why = err.Error()
	}
	note := fmt.Sprintf("booting %s again (%s)", g.Name(), why)
	cfg := g.Config()
	g.Close()
	cfg.Netns, cfg.Bridge, cfg.Tap = "", "", ""
	ng, err := shared.lan.Boot(ctx, shared.img, cfg)
	if err != nil {
		return g, note, fmt.Errorf("booting %s again: %w", cfg.Name, err)
	}
	// The MAC is the same: the host namespaces' neighbour entries stay
	// right.
	return ng, note, nil
}

// resetScript undoes in a guest what a test may have left behind.
const resetScript = `for d in /run/sroce/bg/*; do
	[ -d "$d" ] || continue
	if [ ! -f "$d/rc" ] && [ -s "$d/pid" ]; then kill -9 -"$(cat "$d/pid")" 2>/dev/null; fi
	rm -rf "$d"
done
for q in root ingress clsact; do tc qdisc del dev eth0 $q 2>/dev/null; done
ip link set dev eth0 xdp off 2>/dev/null
ip link set dev eth0 xdpgeneric off 2>/dev/null
if [ ! -e /sys/class/infiniband/rxe0 ]; then rdma link add rxe0 type rxe netdev eth0 || exit 3; fi
for i in $(seq 100); do
	case "$(cat /sys/class/infiniband/rxe0/ports/1/state)" in *ACTIVE*) exit 0;; esac
	sleep 0.1
done
echo "rxe0 is not ACTIVE: $(cat /sys/class/infiniband/rxe0/ports/1/state)" >&2
exit 4
`

// resetLimit bounds a guest's reset; a guest that takes longer is booted
// again.
const resetLimit = time.Minute

// resetGuest runs resetScript in g.
func resetGuest(ctx context.Context, g *rxeguest.Guest) error {
	ctx, cancel := context.WithTimeout(ctx, resetLimit)
	defer cancel()
	res, err := g.Run(ctx, resetScript)
	if err == nil {
		err = res.Err()
	}
	if err != nil {
		return fmt.Errorf("resetting %s: %w", g.Name(), err)
	}
	return nil
}

// taintGuest has g booted again once t ends (why says what t did to
// it): the boot runs beside the tests that follow, and the next test that
// takes the shared guests waits for it.
func taintGuest(t testing.TB, g *rxeguest.Guest, why string) {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.tainted == nil {
		shared.tainted = map[string]string{}
	}
	shared.tainted[g.Name()] = t.Name() + " " + why
	t.Cleanup(func() {
		shared.mu.Lock()
		defer shared.mu.Unlock()
		if shared.rebooting != nil || len(shared.tainted) == 0 {
			return // another taint of the same test started it
		}
		guests := []**rxeguest.Guest{&shared.a, &shared.b}
		if shared.rig != nil {
			shared.a = shared.rig.Guest
		}
		// This goroutine owns the tainted guests until done is closed:
		// sharedGuests waits for it before it touches any guest.
		type job struct {
			slot **rxeguest.Guest
			g    *rxeguest.Guest
			why  string
		}
		var jobs []job
		for _, slot := range guests {
			if why := shared.tainted[(*slot).Name()]; why != "" {
				jobs = append(jobs, job{slot, *slot, why})
				delete(shared.tainted, (*slot).Name())
			}
		}
		done := make(chan struct{})
		shared.rebooting = done
		go func() {
			defer close(done)
			ctx, cancel := context.WithTimeout(context.Background(), sharedSetupLimit)
			defer cancel()
			for _, j := range jobs {
				ng, note, err := renewGuest(ctx, j.g, j.why)
				shared.mu.Lock()
				shared.notes = append(shared.notes, note)
				*j.slot = ng
				if shared.rig != nil && j.slot == &shared.a {
					shared.rig.Guest = ng
				}
				if err != nil && shared.err == nil {
					shared.err = err
				}
				shared.mu.Unlock()
			}
		}()
	})
}

// sharedPair returns the shared guests as a Pair (see sharedGuests).
func sharedPair(t *testing.T) *rxeguest.Pair {
	t.Helper()
	lan, a, b := sharedGuests(t)
	return &rxeguest.Pair{LAN: lan, A: a, B: b}
}

// sharedShare returns the host directory the shared guests mount, with a
// static sroce (built without cgo: the guests' libraries are not the
// host's) in it.
func sharedShare(t testing.TB) string {
	t.Helper()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if !shared.static {
		start := time.Now()
		cmd := exec.Command("go", "build", "-o", filepath.Join(shared.share, "sroce"), "./cmd/sroce")
		cmd.Dir = repoRoot(t)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("building a static sroce: %v\n%s", err, out)
		}
		t.Logf("built a static sroce in %v", time.Since(start).Round(100*time.Millisecond))
		shared.static = true
	}
	return shared.share
}

// sharedInteropRig returns the interop rig on the shared guest rxe-a (the
// rdma_rxe peer at 192.0.2.1), with the host namespace of sroce's tools
// (192.0.2.10) and a sroce daemon for programs through the shim
// (192.0.2.11), made on first use. When t fails, the daemon's log is
// shown.
func sharedInteropRig(t *testing.T) *interop.Rig {
	t.Helper()
	lan, a, _ := sharedGuests(t)
	bin := buildSroce(t)
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.rig == nil {
		ctx, cancel := context.WithTimeout(context.Background(), sharedSetupLimit)
		defer cancel()
		rig, err := interop.NewRig(ctx, interop.RigConfig{Bin: bin, Env: sroceEnv("xdp"), Shim: true,
			LAN: lan, Img: shared.img, Guest: a})
		if err != nil {
			t.Fatal(err)
		}
		shared.rig = rig
	}
	rig := shared.rig
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the sroce daemon's log (since the rig was made):\n%s", rig.ShimDaemonLog())
		}
	})
	return rig
}

// closeShared removes everything the package shared.
func closeShared() error {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	var errs []error
	if shared.rig != nil {
		errs = append(errs, shared.rig.Close())
	}
	if shared.lan != nil {
		errs = append(errs, shared.lan.Close())
	}
	if shared.dir != "" {
		errs = append(errs, os.RemoveAll(shared.dir))
	}
	return errors.Join(errs...)
}
