package netns

// What the tests of this package share, because making it again for each
// test is what made the package slow: the guest image, one pair of rdma_rxe
// guests (booting a guest under TCG takes 30 to 60 s on a loaded 2-CPU
// host), the interop rig on the first of them (host namespaces for
// sroce's tools and a sroce daemon on the same bridge), and the sroce
// binaries. Everything is made on first use and removed by TestMain.
//
// A test that uses rxe-a or rxe-b has them to itself: the small ones run
// one after the other, the heavy ones afterwards in lanes, two at a time,
// each holding what it needs (laneParallel: a rig, the pair of guests, or
// this host's namespaces). Before each test takes
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
	"slices"
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
		startSpare()
	}
	if shared.rig != nil {
		shared.a = shared.rig.Guest
	}
	for _, g := range []**rxeguest.Guest{&shared.a, &shared.b} {
		why := shared.tainted[(*g).Name()]
		delete(shared.tainted, (*g).Name())
		ng, note, err := renewGuest(ctx, shared.lan, *g, why)
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
func renewGuest(ctx context.Context, lan *rxeguest.LAN, g *rxeguest.Guest, why string) (*rxeguest.Guest, string, error) {
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
	ng, err := lan.Boot(ctx, shared.img, cfg)
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
				ng, note, err := renewGuest(ctx, shared.lan, j.g, j.why)
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

// sharedInteropRig returns an interop rig for t: the rdma_rxe peer at
// 192.0.2.1, with the host namespace of sroce's tools (192.0.2.10) and a
// sroce daemon for programs through the shim (192.0.2.11). A test that
// called rigTestParallel gets either rig of the pool (see rigPool) and
// keeps it until it ends; any other test gets the rig on rxe-a. When t
// fails, the daemon's log is shown.
func sharedInteropRig(t *testing.T) *interop.Rig {
	t.Helper()
	var rig *interop.Rig
	if w := laneOf(t); w != nil && w.need == needRig {
		rig = takePooledRig(t, w)
	} else {
		lan, a, _ := sharedGuests(t)
		var err error
		if rig, err = rigOnA(lan, a, buildSroce(t)); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the sroce daemon's log (since the rig was made):\n%s", rig.ShimDaemonLog())
		}
	})
	return rig
}

// rigOnA returns the rig on the shared guest rxe-a, made on first use.
func rigOnA(lan *rxeguest.LAN, a *rxeguest.Guest, bin string) (*interop.Rig, error) {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.rig == nil {
		ctx, cancel := context.WithTimeout(context.Background(), sharedSetupLimit)
		defer cancel()
		rig, err := interop.NewRig(ctx, interop.RigConfig{Bin: bin, Env: sroceEnv("xdp"), Shim: true,
			LAN: lan, Img: shared.img, Guest: a})
		if err != nil {
			return nil, err
		}
		shared.rig = rig
	}
	return shared.rig, nil
}

// The lane tests. A guest under TCG keeps about one CPU busy, so on two
// CPUs the tests run one at a time left the second mostly idle. The
// heavy tests run two at a time instead, once the serial ones are done,
// each in a lane (laneParallel) and with what it needs to itself:
//
//   - needRig: an interop rig, the one on rxe-a or a spare with the same
//     addresses on a LAN of its own, whose guest rxe-c boots in the
//     background while the serial tests run (rigTestParallel);
//   - needPair: the shared guests rxe-a and rxe-b, and so rxe-a's rig;
//   - needHost: namespaces, daemons and tools on this host only, which
//     such a test may share with another: one at a time, beside a guest
//     test;
//   - needNone: guests of its own (TestSroceInterop).
//
// The longest test whose needs are free takes each free lane, so that
// the two lanes end together.
type laneNeed uint8

const (
	needNone laneNeed = iota
	needRig
	needPair
	needHost
)

// rigPool is the spare rig.
var rigPool struct {
	mu     sync.Mutex
	wanted bool      // a rig test exists
	spare  *spareRig // the spare, once its boot started
}

// spareRig is the pool's second rig and what it stands on.
type spareRig struct {
	lan  *rxeguest.LAN
	rig  *interop.Rig
	err  error
	note string        // how the boot went, for the next test's log
	done chan struct{} // closed when the boot is over
}

// spareGuest is the configuration of the spare rig's guest: rxe-a's
// address and MAC (the rig's peer address) on the spare's own LAN.
func spareGuest() rxeguest.Config {
	c, _ := rxeguest.PairConfigs()
	c.Name = "rxe-c"
	return c
}

// rigTestParallel makes t, a test that needs only an interop rig, a lane
// test (about says how long it takes), and starts the spare rig's boot
// if the shared image exists. It must be t's first call.
func rigTestParallel(t *testing.T, about time.Duration) {
	t.Helper()
	if !testing.Short() && os.Geteuid() == 0 && rxeguest.Available() == nil {
		buildSroce(t) // the spare's boot needs it
		rigPool.mu.Lock()
		rigPool.wanted = true
		rigPool.mu.Unlock()
		shared.mu.Lock()
		startSpare()
		shared.mu.Unlock()
	}
	laneParallel(t, about, needRig)
}

// parallelLanes is how many lane tests run at once.
const parallelLanes = 2

// laneLimit bounds a lane test's wait for its lane: every other lane
// test in a row, at their slowest.
const laneLimit = 45 * time.Minute

// lanes gives out the lanes and what the tests in them hold (go test's
// own -parallel starts parallel tests in no set order: TestMain raises it
// so that all of them wait here). Lanes are given once every test that
// called laneParallel has asked for one, or a few seconds after the
// first did.
var lanes struct {
	mu       sync.Mutex
	free     int
	called   int  // tests that called laneParallel
	rigA     bool // held: rxe-a's rig (a rig test's, or a pair test's)
	spare    bool // held by a rig test
	spareUp  bool // the spare rig is ready
	host     bool // held by a host test
	waiting  []*laneWait
	tests    map[*testing.T]*laneWait // every lane test, until it ends
	open     bool                     // lanes are given out
	gate     chan struct{}            // closed when open is set
	gateOnce sync.Once
}

// laneWait is a lane test: what it needs, and what it was given.
type laneWait struct {
	t     *testing.T
	about time.Duration
	need  laneNeed
	ready chan struct{} // closed when it has its lane
	spare bool          // a rig test given the spare rig
}

func init() {
	lanes.free = parallelLanes
	lanes.gate = make(chan struct{})
	lanes.tests = map[*testing.T]*laneWait{}
}

// holds returns the flag of lanes that says whether what w holds is taken
// (nil: w holds nothing but its lane). Called with lanes.mu held, once
// giveLanes has decided w.spare.
func (w *laneWait) holds() *bool {
	switch w.need {
	case needRig:
		if w.spare {
			return &lanes.spare
		}
		return &lanes.rigA
	case needPair:
		return &lanes.rigA
	case needHost:
		return &lanes.host
	}
	return nil
}

// laneOf returns t's lane, or nil if t is no lane test.
func laneOf(t *testing.T) *laneWait {
	lanes.mu.Lock()
	defer lanes.mu.Unlock()
	return lanes.tests[t]
}

// laneParallel calls t.Parallel and then waits for a lane and what t
// needs, which t holds until it ends; about is how long t takes,
// roughly (the longest go first).
func laneParallel(t *testing.T, about time.Duration, need laneNeed) {
	t.Helper()
	lanes.mu.Lock()
	lanes.called++
	lanes.mu.Unlock()
	t.Parallel()
	w := &laneWait{t: t, about: about, need: need, ready: make(chan struct{})}
	lanes.mu.Lock()
	lanes.waiting = append(lanes.waiting, w)
	lanes.tests[t] = w
	all := len(lanes.waiting) >= lanes.called
	lanes.mu.Unlock()
	open := func() {
		lanes.mu.Lock()
		lanes.open = true
		lanes.mu.Unlock()
		close(lanes.gate)
	}
	if all {
		lanes.gateOnce.Do(open)
	} else {
		go func() {
			time.Sleep(3 * time.Second)
			lanes.gateOnce.Do(open)
		}()
	}
	start := time.Now()
	<-lanes.gate
	giveLanes()
	select {
	case <-w.ready:
	case <-time.After(laneLimit):
		lanes.mu.Lock()
		lanes.waiting = slices.DeleteFunc(lanes.waiting, func(x *laneWait) bool { return x == w })
		delete(lanes.tests, t)
		lanes.mu.Unlock()
		t.Fatalf("no lane for a lane test came free within %v", laneLimit)
	}
	// go test's figure for t includes this wait: tests/run lists both.
	waited, got := time.Since(start), time.Now()
	t.Cleanup(func() {
		t.Logf("lane: %s waited %.1fs and ran %.1fs", t.Name(), waited.Seconds(), time.Since(got).Seconds())
		lanes.mu.Lock()
		lanes.free++
		delete(lanes.tests, t)
		if h := w.holds(); h != nil {
			*h = false
		}
		lanes.mu.Unlock()
		giveLanes()
	})
}

// giveLanes hands the free lanes to the longest waiting tests whose needs
// are free. A rig test gets the spare when it is up and free, so that
// rxe-a stays free for a pair test.
func giveLanes() {
	lanes.mu.Lock()
	defer lanes.mu.Unlock()
	for lanes.open && lanes.free > 0 {
		best := -1
		for i, w := range lanes.waiting {
			ok := false
			switch w.need {
			case needNone:
				ok = true
			case needRig:
				ok = !lanes.rigA || lanes.spareUp && !lanes.spare
			case needPair:
				ok = !lanes.rigA
			case needHost:
				ok = !lanes.host
			}
			if ok && (best < 0 || w.about > lanes.waiting[best].about) {
				best = i
			}
		}
		if best < 0 {
			return
		}
		w := lanes.waiting[best]
		lanes.waiting = slices.Delete(lanes.waiting, best, best+1)
		lanes.free--
		w.spare = w.need == needRig && lanes.spareUp && !lanes.spare
		if h := w.holds(); h != nil {
			*h = true
		}
		close(w.ready)
	}
}

// startSpare starts the spare rig's boot in the background, once, when a
// rig test exists and the image is there. Called with shared.mu held.
func startSpare() {
	rigPool.mu.Lock()
	defer rigPool.mu.Unlock()
	if !rigPool.wanted || rigPool.spare != nil || shared.img == nil || shared.bin == "" {
		return
	}
	sp := &spareRig{done: make(chan struct{})}
	rigPool.spare = sp
	img, share, bin := shared.img, shared.share, shared.bin
	go func() {
		defer close(sp.done)
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), sharedSetupLimit)
		defer cancel()
		lan, err := rxeguest.NewLAN(ctx)
		if err != nil {
			sp.err = fmt.Errorf("the spare rig's LAN: %w", err)
			return
		}
		sp.lan = lan
		cfg := spareGuest()
		cfg.Share = share
		g, err := lan.Boot(ctx, img, cfg)
		if err != nil {
			sp.err = fmt.Errorf("the spare rig's guest: %w", err)
			return
		}
		rig, err := interop.NewRig(ctx, interop.RigConfig{Bin: bin, Env: sroceEnv("xdp"), Shim: true,
			LAN: lan, Img: img, Guest: g})
		if err != nil {
			sp.err = fmt.Errorf("the spare rig: %w", err)
			return
		}
		sp.rig = rig
		sp.note = fmt.Sprintf("the spare rig (guest %s on a LAN of its own) ready in %v", cfg.Name, time.Since(start).Round(time.Second))
		lanes.mu.Lock()
		lanes.spareUp = true
		lanes.mu.Unlock()
		giveLanes()
	}()
}

// sharedReady makes the image, the share and the shared guests on first
// use, as sharedGuests does, without resetting them (another lane test
// may hold rxe-a), and starts the spare rig's boot when it is wanted.
func sharedReady(t testing.TB) {
	t.Helper()
	rxeguest.Skip(t)
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.err != nil {
		t.Fatalf("the shared guests could not be set up: %v", shared.err)
	}
	if shared.lan == nil {
		ctx, cancel := context.WithTimeout(context.Background(), sharedSetupLimit)
		defer cancel()
		if err := bootShared(t, ctx); err != nil {
			shared.err = err
			t.Fatal(err)
		}
	}
	startSpare()
}

// takePooledRig returns the rig t's lane w gave it, its guest reset.
func takePooledRig(t *testing.T, w *laneWait) *interop.Rig {
	t.Helper()
	bin := buildSroce(t)
	sharedReady(t)
	rigPool.mu.Lock()
	sp := rigPool.spare
	var note string
	var spareErr error
	if sp != nil {
		select {
		case <-sp.done:
			note, spareErr = sp.note, sp.err
			sp.note, sp.err = "", nil
		default:
		}
	}
	rigPool.mu.Unlock()
	if note != "" {
		t.Log(note)
	}
	if spareErr != nil {
		t.Errorf("the spare rig could not be made (the rig tests take turns on rxe-a): %v", spareErr)
	}
	lanes.mu.Lock()
	onSpare := w.spare
	lanes.mu.Unlock()
	if onSpare {
		// The lane gave it once the boot was over.
		rig := sp.rig
		ctx, cancel := context.WithTimeout(context.Background(), sharedSetupLimit)
		defer cancel()
		g, note, err := renewGuest(ctx, sp.lan, rig.Guest, "")
		if note != "" {
			t.Log(note)
		}
		rig.Guest = g
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("rig: the spare, guest %s", rig.Guest.Name())
		return rig
	}
	// rxe-a's rig, reset as sharedGuests resets the guests (rxe-b is no
	// other lane test's while this one holds rxe-a).
	lan, a, _ := sharedGuests(t)
	rig, err := rigOnA(lan, a, bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("rig: guest %s", rig.Guest.Name())
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
	rigPool.mu.Lock()
	sp := rigPool.spare
	rigPool.mu.Unlock()
	if sp != nil {
		<-sp.done
		if sp.rig != nil {
			errs = append(errs, sp.rig.Close())
		}
		if sp.lan != nil {
			errs = append(errs, sp.lan.Close())
		}
	}
	if shared.lan != nil {
		errs = append(errs, shared.lan.Close())
	}
	if shared.dir != "" {
		errs = append(errs, os.RemoveAll(shared.dir))
	}
	return errors.Join(errs...)
}
