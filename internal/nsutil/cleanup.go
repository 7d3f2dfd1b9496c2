package nsutil

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// live is every namespace this process created and has not closed yet.
var live struct {
	mu sync.Mutex
	m  map[*Namespace]struct{}
}

func register(ns *Namespace) {
	live.mu.Lock()
	defer live.mu.Unlock()
	if live.m == nil {
		live.m = make(map[*Namespace]struct{})
	}
	live.m[ns] = struct{}{}
}

func unregister(ns *Namespace) {
	live.mu.Lock()
	defer live.mu.Unlock()
	delete(live.m, ns)
}

// Live returns the names of the namespaces this process created and has
// not closed.
func Live() []string {
	live.mu.Lock()
	defer live.mu.Unlock()
	names := make([]string, 0, len(live.m))
	for ns := range live.m {
		names = append(names, ns.name)
	}
	return names
}

// CloseAll closes every namespace this process created and has not closed.
func CloseAll() error {
	live.mu.Lock()
	all := make([]*Namespace, 0, len(live.m))
	for ns := range live.m {
		all = append(all, ns)
	}
	live.mu.Unlock()
	var errs []error
	for _, ns := range all {
		errs = append(errs, ns.Close())
	}
	return errors.Join(errs...)
}

// Sweep removes namespaces in RunDir named "<prefix>-<pid>-<n>" whose
// creating process is no longer running (left behind by a crashed or killed
// run), and returns their names. Namespaces of running processes, of this
// process, and names that do not follow the pattern are left alone; so are
// other prefixes that merely start with prefix (e.g. "sroce-rxe-..." when
// sweeping "sroce"). A pid that has been reused keeps its leftovers until
// that process ends too.
func Sweep(prefix string) ([]string, error) {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	ents, err := os.ReadDir(RunDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("nsutil: sweep: %w", err)
	}
	var removed []string
	var errs []error
	for _, e := range ents {
		pid, ok := parsePid(e.Name(), prefix)
		if !ok || pid == os.Getpid() || processAlive(pid) {
			continue
		}
		if err := removeNetns(filepath.Join(RunDir, e.Name())); err != nil {
			errs = append(errs, fmt.Errorf("nsutil: sweep %s: %w", e.Name(), err))
			continue
		}
		removed = append(removed, e.Name())
	}
	return removed, errors.Join(errs...)
}

// processAlive reports whether a process with this pid exists.
func processAlive(pid int) bool {
	err := unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}

// HandleSignals installs a handler for SIGINT and SIGTERM for long-running
// users such as `sroce demo`: on the first signal it runs cleanups in
// order (close engines, sockets and XDP programs there, so that the
// namespaces can go), then closes every namespace this process still has
// (CloseAll), and exits with status 128+signal (130 for Ctrl-C). stop
// removes the handler; call it when the work is done and cleaned up
// normally.
func HandleSignals(cleanups ...func()) (stop func()) {
	ch := make(chan os.Signal, 1)
	quit := make(chan struct{})
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	var once sync.Once
	go func() {
		select {
		case sig := <-ch:
			for _, c := range cleanups {
				c()
			}
			if err := CloseAll(); err != nil {
				fmt.Fprintln(os.Stderr, "cleanup:", err)
			}
			code := 1
			if s, ok := sig.(syscall.Signal); ok {
				code = 128 + int(s)
			}
			os.Exit(code)
		case <-quit:
		}
	}()
	return func() {
		once.Do(func() {
			signal.Stop(ch)
			close(quit)
		})
	}
}
