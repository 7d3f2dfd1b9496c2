// Package sockfile creates listening unix sockets in the file system with
// an explicit mode, so that the process's umask never decides who may
// connect, not even for the moment between bind(2) and a chmod.
//
// bind(2) creates the socket's file with the mode 0777 less the umask, and
// the umask is the whole process's: setting it around the bind would race
// with every other goroutine creating files. So the socket is bound in a
// private directory (0700, made next to the final path so that both are on
// one file system), given its mode there, and only then published at its
// path with rename(2) (replacing a stale socket atomically) or link(2)
// (failing if the name is taken). Whoever finds the path finds the socket
// with its final mode.
package sockfile

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
)

// ErrExist is wrapped by Listen's error when another file has the path and
// replace is false.
var ErrExist = fs.ErrExist

// Listen listens on a new unix socket (network "unix" or "unixpacket") at
// path, whose file has exactly mode from the moment it appears there.
// With replace, a file already at path is replaced; without, Listen fails
// with an error wrapping ErrExist. The listener does not remove the file
// when it closes (its bound name was the private one): the caller removes
// path.
func Listen(network, path string, mode fs.FileMode, replace bool) (*net.UnixListener, error) {
	return ListenOwned(network, path, mode, -1, replace)
}

// ListenOwned is Listen with the socket's group set to gid (-1: the
// process's) before it appears at path.
func ListenOwned(network, path string, mode fs.FileMode, gid int, replace bool) (*net.UnixListener, error) {
	private, err := os.MkdirTemp(filepath.Dir(path), ".sk")
	if err != nil {
		return nil, fmt.Errorf("creating a private directory beside %s: %w", path, err)
	}
	defer os.Remove(private)
	tmp := filepath.Join(private, "s")
	ln, err := net.ListenUnix(network, &net.UnixAddr{Name: tmp, Net: network})
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", path, err)
	}
	ln.SetUnlinkOnClose(false)
	fail := func(err error) (*net.UnixListener, error) {
		ln.Close()
		os.Remove(tmp)
		return nil, err
	}
	if gid >= 0 {
		if err := os.Lchown(tmp, -1, gid); err != nil {
			return fail(fmt.Errorf("setting the group of %s: %w", path, err))
		}
	}
	if err := os.Chmod(tmp, mode); err != nil {
		return fail(fmt.Errorf("setting the mode of %s: %w", path, err))
	}
	if replace {
		err = os.Rename(tmp, path)
	} else {
		err = os.Link(tmp, path)
		os.Remove(tmp)
	}
	if err != nil {
		return fail(fmt.Errorf("publishing the socket at %s: %w", path, err))
	}
	return ln, nil
}

// MkdirAll creates dir and its missing parents with exactly mode (set with
// chmod after mkdir, so that the umask does not narrow it). Directories
// that exist are left as they are: their owner chose their mode.
func MkdirAll(dir string, mode fs.FileMode) error {
	dir = filepath.Clean(dir)
	if fi, err := os.Stat(dir); err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("%s: %w", dir, errNotDir)
		}
		return nil
	}
	if parent := filepath.Dir(dir); parent != dir {
		if err := MkdirAll(parent, mode); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, mode); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil // made meanwhile by someone else, with their mode
		}
		return err
	}
	return os.Chmod(dir, mode)
}

var errNotDir = errors.New("not a directory")
