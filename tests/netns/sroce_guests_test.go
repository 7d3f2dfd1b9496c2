package netns

// sroce against sroce where rdma_rxe runs: two guests, each running the
// sroce binary (built static and shared with the guests over 9p) on its
// eth0 over AF_XDP, the way a user would run it on a machine without an
// RDMA NIC. rxe's own perftest tools between the same guests are the
// yardstick: the guests are slow (TCG), so only the ratio says something.
// While sroce runs, its XDP program takes UDP port 4791 away from the
// kernel's rxe; rxe gets it back when sroce exits.

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/internal/rxeguest"
)

// bootSroceGuests returns the shared guests (sharedGuests: rxe-a at
// 192.0.2.1 and rxe-b at .2 on one LAN, reset for t), their LAN and the
// host directory they mount, with a static sroce in it (sharedShare).
func bootSroceGuests(t testing.TB) (lan *rxeguest.LAN, a, b *rxeguest.Guest, share string) {
	t.Helper()
	lan, a, b = sharedGuests(t)
	return lan, a, b, sharedShare(t)
}

// guestSroceSlowdown is how many times slower than rxe's tool between the
// same guests a sroce tool may be. sroce works in user space over AF_XDP
// in copy mode, in an emulated guest: a few times slower is expected, an
// order of magnitude is not.
const guestSroceSlowdown = 20

// TestSroceInGuests runs sroce write-bw and read-bw between two guests,
// after rxe's ib_write_bw and ib_read_bw with the same flags.
func TestSroceInGuests(t *testing.T) {
	laneParallel(t, 19*time.Second, needPair)
	if testing.Short() {
		t.Skip("skipping sroce in rxe guests in -short mode")
	}
	if os.Geteuid() != 0 {
		t.Skip("skipping: sroce in rxe guests needs root (namespaces, qemu)")
	}
	rxeguest.Skip(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	lan, a, b, _ := bootSroceGuests(t)
	sroce := "SROCE_LINK=xdp SROCE_STALL_TIMEOUT=60s " + rxeguest.SharePath + "/sroce"

	for _, c := range []struct{ name, real, args string }{
		{"write-bw", "ib_write_bw", "-x 1 -s 65536 -n 200 -F"},
		{"read-bw", "ib_read_bw", "-x 1 -s 65536 -n 200 -F"},
	} {
		t.Run(c.name, func(t *testing.T) {
			real := c.real + " -d rxe0 " + c.args
			rxeBW, _ := guestBW(t, ctx, lan, a, b, real, real)
			ours := sroce + " " + c.name + " -d eth0 " + c.args
			sroceBW, pcap := guestBW(t, ctx, lan, a, b, ours, ours)
			t.Logf("%s between two TCG guests: rxe %.2f MB/s, sroce %.2f MB/s", c.name, rxeBW, sroceBW)
			if rxeBW > 0 && sroceBW > 0 && sroceBW*guestSroceSlowdown < rxeBW {
				t.Errorf("sroce %s is %.0f times slower than rxe's %s between the same guests (%.2f against %.2f MB/s); "+
					"the client's tap shows: %s", c.name, rxeBW/sroceBW, c.real, sroceBW, rxeBW, resentBy(pcap, a.IP()))
			}
		})
	}
}

// guestBW runs a bandwidth tool pair, server on a and client on b, with
// the RoCEv2 traffic on b's tap captured, checks both sides and returns
// the client's average bandwidth (MB/s) and the capture.
func guestBW(t *testing.T, ctx context.Context, lan *rxeguest.LAN, a, b *rxeguest.Guest, server, client string) (float64, string) {
	t.Helper()
	pcap := filepath.Join(t.TempDir(), "roce.pcap")
	capt, err := rxeguest.StartCapture(ctx, lan.NS, b.Tap(), pcap, "udp port 4791")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	srv, cli, err := runToolPair(ctx, a, b, 18515, server, client)
	took := time.Since(start)
	capt.Stop()
	if err != nil {
		t.Errorf("%s: %v (after %v)\nserver: %s%s\nclient: %s%s", client, err, took.Round(time.Millisecond),
			srv.Stdout, srv.Stderr, cli.Stdout, cli.Stderr)
		return 0, pcap
	}
	var avg float64
	for i, out := range []string{string(srv.Stdout), string(cli.Stdout)} {
		row := bwRow.FindString(out)
		if row == "" {
			t.Errorf("%s printed no BW row:\n%s", []string{"server", "client"}[i], out)
			return 0, pcap
		}
		f := strings.Fields(row)
		avg, _ = strconv.ParseFloat(f[3], 64)
	}
	t.Logf("%s: %v, average %.2f MB/s", client, took.Round(time.Millisecond), avg)
	return avg, pcap
}

// resentBy describes how much more than once the responder at guest
// answered: READ response packets sent against the distinct PSNs they
// carry, and the READ requests the other side sent against the distinct
// ones (its retries).
func resentBy(pcap string, guest netip.Addr) string {
	frames, _, err := rxeguest.ReadPcapFile(pcap)
	if err != nil {
		return fmt.Sprintf("the capture is unreadable: %v", err)
	}
	resp, reqs := 0, 0
	respPSN, reqPSN := map[bth.PSN]bool{}, map[bth.PSN]bool{}
	var p bth.Packet
	for _, f := range frames {
		if p.Parse(f.Data) != nil || p.Info().Service != bth.ServiceRC {
			continue
		}
		psn := p.BTH().PSN()
		switch {
		case p.SrcAddr().Unmap() == guest.Unmap() && !p.Info().Request:
			resp++
			respPSN[psn] = true
		case p.SrcAddr().Unmap() != guest.Unmap() && p.Info().Request:
			reqs++
			reqPSN[psn] = true
		}
	}
	return fmt.Sprintf("the server sent %d response packets for %d distinct PSNs, the client %d requests for %d distinct PSNs",
		resp, len(respPSN), reqs, len(reqPSN))
}
