package main

import (
	"os"
	"runtime"
	"testing"

	"github.com/sroce/sroce/roce"
)

// The daemon runs on one processor per engine only where its engines never
// spin and the environment leaves GOMAXPROCS alone.
func TestDaemonProcs(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("skipping: one CPU, where there is nothing to lower")
	}
	was, set := os.LookupEnv("GOMAXPROCS")
	os.Unsetenv("GOMAXPROCS")
	defer func(n int) {
		runtime.GOMAXPROCS(n)
		if set {
			os.Setenv("GOMAXPROCS", was)
		}
	}(runtime.GOMAXPROCS(0))
	all := runtime.GOMAXPROCS(0)
	for _, c := range []struct {
		name    string
		mode    roce.EngineMode
		engines int
		env     string
		want    int // 0: left alone
	}{
		{"inline, one engine", roce.EngineInline, 1, "", 1},
		{"sleep, no engine yet", roce.EngineSleep, 0, "", 1},
		{"spin", roce.EngineSpin, 1, "", 0},
		{"adaptive", roce.EngineAdaptive, 1, "", 0},
		{"as many engines as CPUs", roce.EngineInline, all, "", 0},
		{"GOMAXPROCS set", roce.EngineInline, 1, "2", 0},
	} {
		runtime.GOMAXPROCS(all)
		if c.env != "" {
			os.Setenv("GOMAXPROCS", c.env)
		}
		n, ok := daemonProcs(c.mode, c.engines)
		os.Unsetenv("GOMAXPROCS")
		got := runtime.GOMAXPROCS(0)
		switch {
		case c.want == 0 && (ok || got != all):
			t.Errorf("%s: set %d (reported %v), want GOMAXPROCS left at %d", c.name, got, ok, all)
		case c.want != 0 && (!ok || n != c.want || got != c.want):
			t.Errorf("%s: GOMAXPROCS %d (reported %d, %v), want %d", c.name, got, n, ok, c.want)
		}
	}
}
