// Package testdirs makes the directories a test created reachable by
// another user: the privileged tests run programs as nobody beside
// binaries and sockets the test (root) made in its temporary directories.
package testdirs

import (
	"os"
	"path/filepath"
)

// Searchable makes each of paths, and each directory above it up to but
// not including the system's temporary directory, searchable by every
// user (g+x and o+x added) where others cannot search it yet; the other
// mode bits stay. The temporary directory and those above it are never
// changed: /tmp keeps its mode and its sticky bit.
func Searchable(paths ...string) {
	tmp := filepath.Clean(os.TempDir())
	for _, p := range paths {
		for p = filepath.Clean(p); p != tmp && p != "/" && p != "."; p = filepath.Dir(p) {
			st, err := os.Stat(p)
			if err != nil || !st.IsDir() || st.Mode().Perm()&0o001 != 0 {
				continue
			}
			os.Chmod(p, st.Mode()&(os.ModePerm|os.ModeSticky|os.ModeSetgid)|0o011)
		}
	}
}
