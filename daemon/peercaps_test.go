package daemon

import (
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
)

// TestParseStatus reads CapEff and the effective uid from a
// /proc/PID/status, and refuses one without them.
func TestParseStatus(t *testing.T) {
	status := "Name:\tx\nUid:\t1000\t0\t0\t0\nGid:\t1000\t1000\t1000\t1000\nCapInh:\t0000000000000000\nCapPrm:\t0000000000000400\nCapEff:\t0000000000000400\n"
	c, euid, err := parseStatus([]byte(status))
	if err != nil || c != 1<<capNetBindService || euid != 0 {
		t.Errorf("parseStatus = %x, %d, %v; want CAP_NET_BIND_SERVICE, uid 0", c, euid, err)
	}
	if _, _, err := parseStatus([]byte("Name:\tx\nUid:\t1\t1\t1\t1\n")); err == nil {
		t.Error("a status without CapEff was read")
	}
}

// TestSameUserNS tells this process's user namespace from a child's new
// one, by the namespace link and by the uid_map that stands in for it.
func TestSameUserNS(t *testing.T) {
	for _, f := range []func(string) (bool, error){sameUserNS, sameUIDMap} {
		if same, err := f("/proc/self"); err != nil || !same {
			t.Errorf("this process: %v, %v; want the daemon's namespace", same, err)
		}
	}
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skipf("skipping: no sleep to run in a user namespace: %v", err)
	}
	cmd := exec.Command(sleep, "30")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}}}
	if err := cmd.Start(); err != nil {
		t.Skipf("skipping: this host makes no user namespace: %v", err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	dir := "/proc/" + strconv.Itoa(cmd.Process.Pid)
	for _, f := range []func(string) (bool, error){sameUserNS, sameUIDMap} {
		if same, err := f(dir); err != nil || same {
			t.Errorf("a child in a new user namespace: %v, %v; want another namespace", same, err)
		}
	}
}
