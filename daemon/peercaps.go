package daemon

// The client's capabilities, for what the kernel allows only to a
// capable process: the RDMA CM's ports below 1024 (cma_use_port in
// drivers/infiniband/core/cma.c: snum < PROT_SOCK without
// CAP_NET_BIND_SERVICE is EACCES).
//
// The kernel asks capable() of the task making the call. The daemon asks
// the process at the other end of the connection, the one that connected
// (SO_PEERCRED's process), when the request comes:
//
//   - SO_PEERPIDFD gives a pidfd of that very process (Linux 6.5 and
//     later); older kernels give only its pid, which the daemon pins with
//     pidfd_open.
//   - /proc/PID/status gives its effective capabilities (CapEff) and
//     effective uid; /proc/PID/ns/user its user namespace.
//   - A signal 0 through the pidfd afterwards says the process is still
//     there: its pid was not reused meanwhile, so what was read was its.
//
// Only capabilities in the daemon's own user namespace count: a process
// that made a user namespace has every capability there and none here (as
// capable() checks the initial namespace). When the daemon may not read the
// peer's namespace link (a root daemon without CAP_SYS_PTRACE, as the
// systemd unit runs it, reading another user's process), the peer's
// uid_map stands in: a process in the daemon's namespace shows the daemon's
// map, one in a namespace an unprivileged user made shows another.
//
// What remains: the threads of a process may hold different capabilities
// and status shows the main thread's; a process that passes its connection
// on (SCM_RIGHTS, fork) lends its capabilities with it, as long as it
// lives; and without SO_PEERPIDFD, a connecting process that exited while
// another kept its connection could have its pid reused by a process of
// the same effective uid before the request is read (a different uid is
// caught). Whatever cannot be read counts as no capability.

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// capNetBindService is CAP_NET_BIND_SERVICE's bit; protSock is the kernel's
// PROT_SOCK: ports below it need the capability.
const (
	capNetBindService = 10
	protSock          = 1024
)

// peerCapable reports whether the process at the other end of uc, which
// SO_PEERCRED named as cred, has capability bit capBit effective in the
// daemon's user namespace now. An error says why it could not be told
// (and the answer is then false).
func peerCapable(uc *net.UnixConn, cred *unix.Ucred, capBit uint) (bool, error) {
	if cred == nil || cred.Pid <= 0 {
		return false, errors.New("the client's process is not visible here (another PID namespace)")
	}
	pidfd, err := peerPidfd(uc, int(cred.Pid))
	if err != nil {
		return false, err
	}
	defer unix.Close(pidfd)
	dir := "/proc/" + strconv.Itoa(int(cred.Pid))
	status, err := os.ReadFile(dir + "/status")
	if err != nil {
		return false, fmt.Errorf("reading the client's capabilities: %w", err)
	}
	capEff, euid, err := parseStatus(status)
	if err != nil {
		return false, fmt.Errorf("%s/status: %w", dir, err)
	}
	same, err := sameUserNS(dir)
	if err != nil {
		return false, err
	}
	if err := unix.PidfdSendSignal(pidfd, 0, nil, 0); err != nil && !errors.Is(err, unix.EPERM) {
		return false, fmt.Errorf("the client's process ended while its capabilities were read: %w", err)
	}
	if euid != cred.Uid {
		return false, fmt.Errorf("process %d has effective uid %d, the connection's is %d", cred.Pid, euid, cred.Uid)
	}
	return same && capEff&(1<<capBit) != 0, nil
}

// peerPidfd returns a pidfd of the process that connected uc: SO_PEERPIDFD,
// or pidfd_open of its pid on kernels without it.
func peerPidfd(uc *net.UnixConn, pid int) (int, error) {
	raw, err := uc.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd := -1
	var gerr error
	if cerr := raw.Control(func(s uintptr) { fd, gerr = unix.GetsockoptInt(int(s), unix.SOL_SOCKET, unix.SO_PEERPIDFD) }); cerr != nil {
		return -1, cerr
	}
	if gerr == nil {
		return fd, nil
	}
	if !errors.Is(gerr, unix.ENOPROTOOPT) && !errors.Is(gerr, unix.EINVAL) {
		return -1, fmt.Errorf("SO_PEERPIDFD: %w", gerr)
	}
	fd, err = unix.PidfdOpen(pid, 0)
	if err != nil {
		return -1, fmt.Errorf("pidfd_open of the client's process %d: %w", pid, err)
	}
	return fd, nil
}

// parseStatus returns CapEff and the effective uid of a /proc/PID/status.
func parseStatus(b []byte) (capEff uint64, euid uint32, err error) {
	var haveCap, haveUID bool
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		switch k {
		case "CapEff":
			if len(f) == 1 {
				capEff, err = strconv.ParseUint(f[0], 16, 64)
				haveCap = err == nil
			}
		case "Uid":
			if len(f) >= 2 {
				var u uint64
				u, err = strconv.ParseUint(f[1], 10, 32)
				euid, haveUID = uint32(u), err == nil
			}
		}
	}
	if !haveCap || !haveUID {
		return 0, 0, errors.New("no CapEff or Uid line")
	}
	return capEff, euid, nil
}

// sameUserNS reports whether the process of /proc directory dir is in the
// daemon's user namespace.
func sameUserNS(dir string) (bool, error) {
	var self, peer unix.Stat_t
	if err := unix.Stat("/proc/self/ns/user", &self); err != nil {
		return false, fmt.Errorf("the daemon's user namespace: %w", err)
	}
	err := unix.Stat(dir+"/ns/user", &peer)
	if err == nil {
		return self.Dev == peer.Dev && self.Ino == peer.Ino, nil
	}
	if !errors.Is(err, unix.EACCES) && !errors.Is(err, unix.EPERM) {
		return false, fmt.Errorf("the client's user namespace: %w", err)
	}
	return sameUIDMap(dir)
}

// sameUIDMap reports whether the process of /proc directory dir has the
// daemon's uid_map: what tells its user namespace from one an
// unprivileged user made when its namespace link may not be read.
func sameUIDMap(dir string) (bool, error) {
	mine, err := os.ReadFile("/proc/self/uid_map")
	if err != nil {
		return false, fmt.Errorf("the daemon's uid_map: %w", err)
	}
	theirs, err := os.ReadFile(dir + "/uid_map")
	if err != nil {
		return false, fmt.Errorf("the client's uid_map: %w", err)
	}
	return bytes.Equal(mine, theirs), nil
}

// mayBindPort answers a CM request that binds the ID to port: a port below
// protSock needs CAP_NET_BIND_SERVICE, as the kernel's rdma_cm asks
// (EACCES otherwise); port 0 takes an ephemeral one, which needs nothing.
func (c *conn) mayBindPort(port uint16) error {
	if port == 0 || port >= protSock {
		return nil
	}
	ok, err := peerCapable(c.uc, &unix.Ucred{Pid: c.pid, Uid: c.uid}, capNetBindService)
	if err != nil {
		c.s.log.Debug("the client's capabilities could not be read; it is refused a port below 1024",
			"client", c.id, "pid", c.pid, "port", port, "err", err)
	}
	if !ok {
		return unix.EACCES
	}
	return nil
}
