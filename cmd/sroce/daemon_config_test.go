package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestDaemonConfig parses the configuration file and its mistakes, finds
// --config and the flags the command line gives, and lists what changed.
func TestDaemonConfig(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sroce.conf")
	os.WriteFile(path, []byte("# comment\n\ninterface = eth0\ninterface = eth1, lo@127.0.0.2\nlink=xdp\nmax-qps = 64\n"), 0o644)
	c, err := readDaemonConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.ifs, []string{"eth0", "eth1", "lo@127.0.0.2"}) || c.str("link", "") != "xdp" || c.str("metrics", "none") != "none" {
		t.Errorf("parsed %+v", c)
	}
	var bad error
	if n := c.num("max-qps", 1, &bad); n != 64 || bad != nil {
		t.Errorf("max-qps: %d, %v", n, bad)
	}
	for _, tc := range []struct{ text, want string }{
		{"bogus = 1\n", `:1: unknown key "bogus"`},
		{"link\n", ":1: want KEY = VALUE"},
		{"\nlink =\n", ":2: link has no value"},
	} {
		os.WriteFile(path, []byte(tc.text), 0o644)
		if _, err := readDaemonConfig(path); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an error with %q", tc.text, err, tc.want)
		}
	}
	if _, err := readDaemonConfig(filepath.Join(dir, "missing")); err == nil || !strings.Contains(err.Error(), "--config") {
		t.Errorf("a missing file: %v", err)
	}
	os.WriteFile(path, []byte("max-qps = many\n"), 0o644)
	c, _ = readDaemonConfig(path)
	bad = nil
	c.num("max-qps", 1, &bad)
	if bad == nil || !strings.Contains(bad.Error(), "max-qps") {
		t.Errorf("max-qps = many: %v", bad)
	}

	args := []string{"-d", "eth0", "--config=/etc/x.conf", "--log-level", "debug", "-v", "--", "--link"}
	if got := configFlag(args); got != "/etc/x.conf" {
		t.Errorf("configFlag: %q", got)
	}
	if got := configFlag([]string{"--config", "a.conf"}); got != "a.conf" {
		t.Errorf("configFlag: %q", got)
	}
	set := map[string]bool{"device": true, "verbose": true}
	given := givenKeys(func(name string) bool { return set[name] })
	if !given["interface"] || !given["log-level"] || given["link"] || given["max-qps"] {
		t.Errorf("givenKeys: %v", given)
	}

	a := &daemonConfig{vals: map[string]string{"link": "xdp", "max-qps": "1"}, ifs: []string{"eth0"}}
	b := &daemonConfig{vals: map[string]string{"link": "xdp", "max-qps": "2", "metrics": ":9"}, ifs: []string{"eth0", "eth1"}}
	if got := changedKeys(a, b); !slices.Equal(got, []string{"interface", "max-qps", "metrics"}) {
		t.Errorf("changedKeys: %v", got)
	}
}

// TestDaemonConfigFlagInFull refuses an abbreviated --config (whose file
// would not have become the flags' defaults) before anything opens.
func TestDaemonConfigFlagInFull(t *testing.T) {
	code, _, stderr := runSroce(t, nil, "daemon", "--conf", "/nonexistent/sroce.conf", "-d", "no-such-interface-cf", "--link", "udp")
	if code != exitUsage || !strings.Contains(stderr, "--config") || strings.Contains(stderr, "no-such-interface-cf") {
		t.Errorf("--conf FILE: exit %d, stderr %q; want %d naming --config, before the interface", code, stderr, exitUsage)
	}
}
