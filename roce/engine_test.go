package roce_test

import (
	"net"
	"net/netip"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/roce/memlink"
	"github.com/sroce/sroce/verbs"
)

// engineDevice opens a started device in mode on a port of a new router.
func engineDevice(t *testing.T, mode roce.EngineMode, spinFor time.Duration) (*roce.Device, *memlink.Port) {
	t.Helper()
	clock := roce.SystemClock()
	router := memlink.NewRouter(clock, 7, memlink.Impairments{})
	port := router.NewPort(net.HardwareAddr{2, 0, 0, 0, 7, 1}, 1500)
	gid := bth.GIDFromAddr(netip.AddrFrom4([4]byte{10, 7, 0, 1}))
	dev, err := roce.Open(port, &roce.Options{Clock: clock, GIDs: []bth.GID{gid}, Engine: mode, SpinFor: spinFor})
	if err != nil {
		t.Fatal(err)
	}
	if err := dev.Start(); err != nil {
		t.Fatal(err)
	}
	return dev, port
}

// TestEngineCloseReturns closes a running device in every mode: Close must
// return promptly, spinning or not, and leave no goroutine of the loop.
func TestEngineCloseReturns(t *testing.T) {
	forEachEngine(t, func(t *testing.T, mode roce.EngineMode) {
		before := runtime.NumGoroutine()
		dev, _ := engineDevice(t, mode, 0)
		if got := dev.Engine(); got != mode {
			t.Fatalf("engine %v, asked for %v", got, mode)
		}
		time.Sleep(20 * time.Millisecond) // let the loop settle into its wait (or spin)
		done := make(chan error, 1)
		go func() { done <- dev.Close() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("Close of a %v device did not return within 5s", mode)
		}
		deadline := time.Now().Add(2 * time.Second)
		for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if n := runtime.NumGoroutine(); n > before {
			t.Errorf("%d goroutines after Close, %d before Start", n, before)
		}
	})
}

// TestEngineLinkGone takes the link away under a running device in every
// mode: the loop must see it, report the port down and stop.
func TestEngineLinkGone(t *testing.T) {
	forEachEngine(t, func(t *testing.T, mode roce.EngineMode) {
		dev, port := engineDevice(t, mode, 0)
		defer dev.Close()
		port.Close()
		deadline := time.Now().Add(5 * time.Second)
		for dev.Counter(verbs.CntLinkDowned) == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("a %v device did not notice its link closing within 5s", mode)
			}
			time.Sleep(time.Millisecond)
		}
		if st := dev.QueryPort().State; st != verbs.PortDown {
			t.Errorf("port state %v after the link went away", st)
		}
	})
}

// TestAdaptiveIdleSleeps checks that an idle adaptive device stops spinning
// after SpinFor: over half a second of idleness the process uses a small
// fraction of a CPU, where a spinning device uses all of one.
func TestAdaptiveIdleSleeps(t *testing.T) {
	cpu := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			t.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	measure := func(mode roce.EngineMode) time.Duration {
		dev, _ := engineDevice(t, mode, 200*time.Microsecond)
		defer dev.Close()
		time.Sleep(50 * time.Millisecond)
		c0 := cpu()
		time.Sleep(500 * time.Millisecond)
		return cpu() - c0
	}
	spin := measure(roce.EngineSpin)
	adaptive := measure(roce.EngineAdaptive)
	t.Logf("CPU used over 500ms idle: spin %v, adaptive %v", spin, adaptive)
	if adaptive > spin/4 {
		t.Errorf("an idle adaptive device used %v of CPU in 500ms, a spinning one %v: it does not go to sleep", adaptive, spin)
	}
}
