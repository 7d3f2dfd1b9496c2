package tracesock

import (
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestSocketModes checks that the trace socket is its owner's only and the
// directory Serve makes is 0755, under a umask of 0 and of 077: the modes
// are set, not left to the umask.
func TestSocketModes(t *testing.T) {
	for _, mask := range []int{0, 0o077} {
		dir := filepath.Join(t.TempDir(), "run", "sroce")
		t.Setenv(EnvDir, dir)
		old := syscall.Umask(mask)
		d := openDev(t)
		srv, err := Serve(d)
		syscall.Umask(old)
		if err != nil {
			t.Fatal(err)
		}
		fi, err := os.Lstat(srv.Path())
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != SocketMode {
			t.Errorf("umask %03o: the trace socket is %v, want a socket of mode %v", mask, fi.Mode(), fs.FileMode(SocketMode))
		}
		for _, p := range []string{dir, filepath.Dir(dir)} {
			fi, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm() != DirMode {
				t.Errorf("umask %03o: %s is %v, want %v", mask, p, fi.Mode().Perm(), fs.FileMode(DirMode))
			}
		}
		entries, _ := os.ReadDir(dir)
		if len(entries) != 1 {
			t.Errorf("umask %03o: the directory holds %d entries, want the socket only (no private directory left)", mask, len(entries))
		}
		d.Close()
		if _, err := os.Lstat(srv.Path()); !os.IsNotExist(err) {
			t.Errorf("the socket is still there after the device closed: %v", err)
		}
	}
}
