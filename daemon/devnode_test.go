package daemon_test

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/sroce/sroce/daemon"
)

// TestDevNodes checks the daemon's entries in its device-node directory:
// made (with the directory) for each device, removed and made again as a
// device goes and comes back, an entry it did not make left alone, and at
// Close its own entries gone, and the directory only if it is empty.
func TestDevNodes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "infiniband")
	a, b := newMemDev(t, "nodea", 1), newMemDev(t, "nodeb", 2)
	entry := func(d *memDev) string {
		return filepath.Join(dir, daemon.DevNodeName("sroce_"+d.name, d.NodeGUID()))
	}
	if got := filepath.Base(entry(a)); got != "sroce_nodea.020000fffe000001" {
		t.Fatalf("DevNodeName: %s", got)
	}
	isOurs := func(path string) bool {
		target, err := os.Readlink(path)
		return err == nil && target == "/dev/null"
	}
	srv, err := daemon.New([]daemon.Device{a, b}, daemon.Options{Logger: slog.New(slog.DiscardHandler), DevNodeDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []*memDev{a, b} {
		if !isOurs(entry(d)) {
			t.Fatalf("no link to /dev/null at %s", entry(d))
		}
		if st, err := os.Stat(entry(d)); err != nil || st.Mode()&os.ModeCharDevice == 0 {
			t.Fatalf("%s is not a character device as stat sees it: %v", entry(d), err)
		}
	}
	srv.Remove(a.name)
	if _, err := os.Lstat(entry(a)); !os.IsNotExist(err) {
		t.Fatalf("device removed, its entry stays: %v", err)
	}
	if err := srv.Add(a); err != nil {
		t.Fatal(err)
	}
	if !isOurs(entry(a)) {
		t.Fatalf("device back, no entry at %s", entry(a))
	}
	// Something else's entry in the directory stays, and so does the
	// directory.
	foreign := filepath.Join(dir, "uverbs0")
	if err := os.WriteFile(foreign, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	for _, d := range []*memDev{a, b} {
		if _, err := os.Lstat(entry(d)); !os.IsNotExist(err) {
			t.Errorf("closed, %s stays: %v", entry(d), err)
		}
	}
	if _, err := os.Stat(foreign); err != nil {
		t.Errorf("closed, and an entry the daemon did not make went: %v", err)
	}
	// Without the foreign entry: the daemon made the directory, so it
	// removes it; an entry that existed before the daemon is not its own.
	os.Remove(foreign)
	os.Remove(dir)
	srv, err = daemon.New([]daemon.Device{a}, daemon.Options{Logger: slog.New(slog.DiscardHandler), DevNodeDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/null", entry(b)); err != nil {
		t.Fatal(err)
	}
	if err := srv.Add(b); err != nil {
		t.Fatal(err)
	}
	srv.Remove(b.name)
	if !isOurs(entry(b)) {
		t.Errorf("an entry that was there before the device is gone with it")
	}
	os.Remove(entry(b))
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(dir); !os.IsNotExist(err) {
		t.Errorf("closed, the directory the daemon made stays: %v", err)
	}
}

// TestDevNodesCannot checks that a daemon that cannot make the entries
// says so in one line and serves its devices.
func TestDevNodesCannot(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	var mu sync.Mutex
	a, b := newMemDev(t, "nodea", 1), newMemDev(t, "nodeb", 2)
	srv, err := daemon.New([]daemon.Device{a, b}, daemon.Options{
		Logger:     slog.New(slog.NewTextHandler(lockedWriter{&mu, &log}, nil)),
		DevNodeDir: filepath.Join(file, "infiniband"), // under a file: ENOTDIR
	})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	mu.Lock()
	out := log.String()
	mu.Unlock()
	if n := strings.Count(out, "cannot make the devices' entries"); n != 1 {
		t.Fatalf("%d lines about the entries, want 1:\n%s", n, out)
	}
}
