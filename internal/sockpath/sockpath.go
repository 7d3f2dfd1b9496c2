// Package sockpath is the one rule that finds the sroce daemon's socket,
// for the daemon (where it listens) and for every Go client (package
// client, rdma, the sroce commands and tools). The drop-in C libraries
// follow the same rule (sroce_socket_path in shim/libibverbs/ctl.c);
// docs/operating.md describes it for operators.
//
// A client uses, in this order:
//
//  1. $SROCE_SOCKET when it is set (and nothing else);
//  2. the user's own daemon, when one listens at User() (a connect
//     succeeds: a stale socket file is skipped);
//  3. the system daemon at System.
//
// A daemon listens at $SROCE_SOCKET when set, else at System as root, else
// at User().
package sockpath

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// Env names the environment variable that overrides the rule.
const Env = "SROCE_SOCKET"

// System is the system daemon's socket (the daemon run by root or by the
// systemd unit).
const System = "/run/sroce/sroce.sock"

// probeTimeout bounds the connect that asks whether a daemon listens.
const probeTimeout = time.Second

// User returns the place of the current user's own daemon: System for
// root; else $XDG_RUNTIME_DIR/sroce.sock; else /run/user/UID/sroce.sock
// when that directory exists and is the user's; else
// $TMPDIR/sroce-UID/sroce.sock (a directory of mode 0700 the user owns,
// which the daemon creates and clients check).
func User() string {
	uid := os.Geteuid()
	if uid == 0 {
		return System
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "sroce.sock")
	}
	run := "/run/user/" + strconv.Itoa(uid)
	if ownDir(run, uid) == nil {
		return filepath.Join(run, "sroce.sock")
	}
	return filepath.Join(TempDir(), "sroce.sock")
}

// TempDir is the directory of a user's daemon socket when the user has no
// runtime directory: $TMPDIR/sroce-UID.
func TempDir() string {
	return filepath.Join(os.TempDir(), "sroce-"+strconv.Itoa(os.Geteuid()))
}

// Listen returns where a daemon listens when no --socket is given:
// $SROCE_SOCKET, else System as root, else User().
func Listen() string {
	if p := os.Getenv(Env); p != "" {
		return p
	}
	return User()
}

// Find returns the socket a client connects to: $SROCE_SOCKET when set;
// else the user's own daemon's when a connect to it succeeds; else
// System (whether or not a daemon listens there: the caller's connect
// says).
func Find() string {
	if p := os.Getenv(Env); p != "" {
		return p
	}
	u := User()
	if u != System && trusted(u) && Listening(u) {
		return u
	}
	return System
}

// Listening says whether a daemon accepts connections at path: a connect
// succeeds (a socket file nobody listens on is not one).
func Listening(path string) bool {
	c, err := net.DialTimeout("unixpacket", path, probeTimeout)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// trusted says whether a user's socket may be used: one in the temporary
// directory only when that directory is the user's own and not writable
// by others (anyone may create /tmp/sroce-UID first).
func trusted(path string) bool {
	dir := filepath.Dir(path)
	if dir != TempDir() {
		return true
	}
	return ownDir(dir, os.Geteuid()) == nil
}

// ownDir checks that dir is a directory (not a symbolic link) owned by uid
// that no one else may write to.
func ownDir(dir string, uid int) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok {
		return fmt.Errorf("%s is not a directory", dir)
	}
	if int(st.Uid) != uid {
		return fmt.Errorf("%s belongs to uid %d, not to uid %d", dir, st.Uid, uid)
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("%s may be written by others (mode %04o)", dir, fi.Mode().Perm())
	}
	return nil
}

// PrepareTempDir creates TempDir with mode 0700 when it is missing, or
// checks that it is the user's own and makes it 0700 otherwise: a daemon
// of this user listens in it.
func PrepareTempDir() error {
	dir := TempDir()
	if err := os.Mkdir(dir, 0o700); err != nil && !os.IsExist(err) {
		return err
	}
	if err := ownDir(dir, os.Geteuid()); err != nil {
		return err
	}
	return os.Chmod(dir, 0o700)
}
