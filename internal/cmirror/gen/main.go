// Command gen writes the Go mirrors of the C headers (package cmirror):
//
//	go run ./internal/cmirror/gen [ctl] [ring]
//
// regenerates the named mirrors (all without arguments) in their
// packages' directories, found from the module root above the current
// directory; `go generate ./daemon/ctl ./ring` runs it for each.
package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/sroce/sroce/internal/cmirror"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "cmirror:", err)
		os.Exit(1)
	}
}

func run(names []string) error {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	if len(names) == 0 {
		for n := range cmirror.Mirrors {
			names = append(names, n)
		}
		sort.Strings(names)
	}
	for _, n := range names {
		m, ok := cmirror.Mirrors[n]
		if !ok {
			return fmt.Errorf("no mirror named %q (known: ctl, ring)", n)
		}
		if err := cmirror.Write(m, filepath.Join(root, m.Dir)); err != nil {
			return err
		}
	}
	return nil
}

// moduleRoot returns the nearest directory at or above the current one
// that holds a go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod at or above the current directory")
		}
		dir = parent
	}
}
