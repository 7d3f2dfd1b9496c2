package perftest

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/sroce/sroce/internal/testpair"
)

// cmPairs runs tool pairs for the RDMA CM tests on two loopback addresses
// of their own.
var cmPairs = &testpair.Pairs{
	Run:       runTool,
	Server:    netip.MustParseAddr("127.99.65.3"),
	Client:    netip.MustParseAddr("127.99.65.4"),
	FirstPort: 20900,
}

// TestRDMACMPairs runs perftest tools connected with RDMA CM (-R: the
// exchange and the test's QP; -z: the exchange only) sroce against sroce,
// and checks both sides finish with their report.
func TestRDMACMPairs(t *testing.T) {
	t.Setenv("SROCE_LINK", "udp")
	for _, tc := range []struct {
		cmd  string
		args []string
	}{
		{"write-bw", []string{"-R", "-s", "4096", "-n", "200"}},
		{"read-bw", []string{"-R", "-s", "4096", "-n", "200"}},
		{"send-bw", []string{"-R", "-s", "1024", "-n", "200"}},
		{"write-lat", []string{"-R", "-s", "64", "-n", "100"}},
		{"send-lat", []string{"-R", "-s", "64", "-n", "100"}},
		{"write-bw", []string{"-z", "-s", "4096", "-n", "200"}},
	} {
		t.Run(tc.cmd+strings.Join(tc.args, ""), func(t *testing.T) {
			srv, cli := cmPairs.RunPair(t, tc.cmd, "Waiting for client to connect", tc.args, tc.args)
			if srv.Code != 0 || cli.Code != 0 {
				t.Fatalf("server: %v\nclient: %v", srv, cli)
			}
			for _, r := range []testpair.Result{srv, cli} {
				if !strings.Contains(r.Stdout, "rdma_cm QPs") || !strings.Contains(r.Stdout, "Data ex. method : rdma_cm") {
					t.Errorf("the report does not say RDMA CM:\n%s", r.Stdout)
				}
			}
			if !strings.Contains(cli.Stdout, "#bytes") {
				t.Errorf("client printed no results:\n%s", cli.Stdout)
			}
		})
	}
}
