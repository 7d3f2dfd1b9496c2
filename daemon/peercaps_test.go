package daemon

import "testing"

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
