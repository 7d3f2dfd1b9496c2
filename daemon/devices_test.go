package daemon_test

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/client"
	"github.com/sroce/sroce/daemon"
	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/roce/memlink"
	"github.com/sroce/sroce/verbs"
)

// newMemDev opens a running device named sroce_<name> on an in-memory link
// of its own.
func newMemDev(t *testing.T, name string, index int) *memDev {
	t.Helper()
	router := memlink.NewRouter(roce.SystemClock(), 1, memlink.Impairments{})
	mac := net.HardwareAddr{2, 0, 0, 0, 1, byte(index)}
	gid := bth.GIDFromAddr(netip.AddrFrom4([4]byte{10, 1, 0, byte(index)}))
	d, err := roce.Open(router.NewPort(mac, 1500), &roce.Options{Name: "sroce_" + name, GIDs: []bth.GID{gid}})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return &memDev{dev: d, name: name, index: index, mac: mac, peers: map[bth.GID]net.HardwareAddr{gid: mac}}
}

// serveDevs serves devs on a socket of its own and returns the server and
// the socket.
func serveDevs(t *testing.T, devs ...daemon.Device) (*daemon.Server, string) {
	t.Helper()
	srv, err := daemon.New(devs, daemon.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(t.TempDir(), "sroce.sock")
	ln, err := daemon.Listen(socket)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Error(err)
		}
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return srv, socket
}

// wantEvent reads x's next asynchronous event and checks its type and
// handle.
func wantEvent(t *testing.T, x *client.Context, typ verbs.EventType, handle uint32) {
	t.Helper()
	ev, err := x.AsyncEvent(5 * time.Second)
	if err != nil || verbs.EventType(ev.EventType) != typ || ev.Handle != handle {
		t.Fatalf("asynchronous event %v (handle %d), %v; want %v (handle %d)",
			verbs.EventType(ev.EventType), ev.Handle, err, typ, handle)
	}
}

// TestPortEventsReachContexts: the port's events (PORT_ERR, PORT_ACTIVE,
// GID_CHANGE) reach every context open on the device, with the port number
// as the handle, and no context of another device.
func TestPortEventsReachContexts(t *testing.T) {
	d0, d1 := newMemDev(t, "ev0", 1), newMemDev(t, "ev1", 2)
	_, socket := serveDevs(t, d0, d1)
	var xs []*client.Context
	for _, name := range []string{"sroce_ev0", "sroce_ev0", "sroce_ev1"} {
		x, err := client.Open(socket, name)
		if err != nil {
			t.Fatal(err)
		}
		defer x.Close()
		xs = append(xs, x)
	}
	d0.dev.PortDown()
	d0.dev.PortUp()
	d0.dev.GIDChanged()
	for _, x := range xs[:2] {
		wantEvent(t, x, verbs.EventPortErr, 1)
		wantEvent(t, x, verbs.EventPortActive, 1)
		wantEvent(t, x, verbs.EventGIDChange, 1)
	}
	if ev, err := xs[2].AsyncEvent(100 * time.Millisecond); err == nil {
		t.Errorf("a context of the other device got %v", verbs.EventType(ev.EventType))
	}
}

// TestRemoveAndAdd: a removed device's clients get DEVICE_FATAL, then lose
// their connection; the server goes on with no device left, and serves a
// device added under the same name to new clients.
func TestRemoveAndAdd(t *testing.T) {
	srv, socket := serveDevs(t, newMemDev(t, "flap0", 1))
	x, err := client.Open(socket, "sroce_flap0")
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	if n := srv.Remove("flap0"); n != 0 {
		t.Fatalf("%d devices left, want 0", n)
	}
	wantEvent(t, x, verbs.EventDeviceFatal, 0)
	if _, err := x.AsyncEvent(5 * time.Second); !errors.Is(err, io.EOF) {
		t.Errorf("after DEVICE_FATAL: %v, want the end of the event channel", err)
	}
	if devs, err := client.Devices(socket); err != nil || len(devs) != 0 {
		t.Fatalf("devices with none left: %+v, %v", devs, err)
	}
	again := newMemDev(t, "flap0", 1)
	if err := srv.Add(again); err != nil {
		t.Fatal(err)
	}
	if err := srv.Add(again); err == nil {
		t.Error("a device of a name served already was added")
	}
	devs, err := client.Devices(socket)
	if err != nil || len(devs) != 1 || devs[0].Name != "sroce_flap0" {
		t.Fatalf("devices after Add: %+v, %v", devs, err)
	}
	y, err := client.Open(socket, "sroce_flap0")
	if err != nil {
		t.Fatal(err)
	}
	defer y.Close()
	if _, err := y.QueryPort(); err != nil {
		t.Fatal(err)
	}
	again.dev.PortDown()
	wantEvent(t, y, verbs.EventPortErr, 1)
}
