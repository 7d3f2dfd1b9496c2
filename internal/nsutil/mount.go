package nsutil

import (
	"errors"
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// Named namespaces follow iproute2's convention: /run/netns is a shared
// mount point (so that unmounting a namespace file in one mount namespace
// unmounts it in all of them), and each namespace is an empty file there
// with /proc/<tid>/ns/net bind-mounted onto it.

// prepareRunDir makes RunDir exist and be a shared mount point, as
// `ip netns add` does.
func prepareRunDir() error {
	if err := os.MkdirAll(RunDir, 0o755); err != nil {
		return err
	}
	madeMount := false
	for {
		err := unix.Mount("", RunDir, "none", unix.MS_SHARED|unix.MS_REC, "")
		if err == nil {
			return nil
		}
		if !errors.Is(err, unix.EINVAL) || madeMount {
			return fmt.Errorf("make %s a shared mount: %w", RunDir, err)
		}
		// Not a mount point yet: bind-mount it onto itself, then retry.
		if err := unix.Mount(RunDir, RunDir, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind-mount %s: %w", RunDir, err)
		}
		madeMount = true
	}
}

// createNetns creates a new network namespace and bind-mounts it at path.
// The namespace is made on a helper thread that leaves it again afterwards
// (or is discarded if it cannot).
func createNetns(path string) error {
	if err := prepareRunDir(); err != nil {
		return err
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("%s already exists", path)
		}
		return err
	}
	unix.Close(fd)
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("open own namespace: %w", err)
			return
		}
		defer unix.Close(orig)
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("unshare: %w", err)
			return
		}
		err = unix.Mount("/proc/thread-self/ns/net", path, "none", unix.MS_BIND, "")
		if err != nil {
			err = fmt.Errorf("bind-mount onto %s: %w", path, err)
		}
		if unix.Setns(orig, unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		} // else the goroutine exits locked and the runtime ends the thread.
		done <- err
	}()
	if err := <-done; err != nil {
		os.Remove(path)
		return err
	}
	return nil
}

// removeNetns unmounts and deletes a namespace file, as `ip netns del`
// does. A file that is already gone is not an error.
func removeNetns(path string) error {
	uerr := unix.Unmount(path, unix.MNT_DETACH)
	if uerr != nil && (errors.Is(uerr, unix.ENOENT) || errors.Is(uerr, unix.EINVAL)) {
		uerr = nil // gone, or not mounted (a half-made namespace)
	}
	rerr := os.Remove(path)
	if errors.Is(rerr, os.ErrNotExist) {
		rerr = nil
	}
	return errors.Join(uerr, rerr)
}
