package perftest

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/sroce/sroce/internal/nsutil"
	"github.com/sroce/sroce/internal/testpair"
	"github.com/sroce/sroce/tools/oob"
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
		{"write-bw", []string{"-R", "-q", "3", "-s", "4096", "-n", "200"}},
		{"read-bw", []string{"-R", "-q", "2", "-b", "-s", "4096", "-n", "200"}},
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
			// As the real tools print them over RDMA CM (seen with
			// Debian's perftest 4.5-0.17): the address lines without
			// RKey and VAddr, the server's note on the QP connection.
			if strings.Contains(srv.Stdout+cli.Stdout, "RKey") {
				t.Errorf("address lines with RKey over RDMA CM:\n%s%s", srv.Stdout, cli.Stdout)
			}
			note := " Waiting for client rdma_cm QP to connect\n Please run the same command with the IB/RoCE interface IP\n"
			if strings.Contains(tc.args[0], "R") != strings.Contains(srv.Stdout, note) {
				t.Errorf("server output (args %q):\n%s", tc.args, srv.Stdout)
			}
		})
	}
}

// TestRDMACMXDPNamespaces runs write-bw -R between two network namespaces
// over AF_XDP on a veth pair, as between two hosts.
func TestRDMACMXDPNamespaces(t *testing.T) {
	ns := nsutil.NewTestPair(t, nsutil.PairConfig{Prefix: "cmA"})
	t.Setenv("SROCE_LINK", "xdp")
	run := func(n *nsutil.Namespace, args []string) (*testpair.Buffer, *testpair.Buffer, <-chan int) {
		return testpair.Go(func(out, errw io.Writer) int {
			code := -1
			if err := n.Do(func() error { code = Run(context.Background(), oob.WriteBW, args, out, errw); return nil }); err != nil {
				fmt.Fprintln(errw, err)
			}
			return code
		})
	}
	sout, serr, sdone := run(ns.A, []string{"-d", ns.Veth.NameA, "-R", "-s", "65536", "-n", "100"})
	for !strings.Contains(sout.String(), "Waiting for client") {
		select {
		case code := <-sdone:
			t.Fatalf("server ended: %d\n%s%s", code, sout, serr)
		case <-time.After(10 * time.Millisecond):
		}
	}
	cout, cerr, cdone := run(ns.B, []string{"-d", ns.Veth.NameB, "-R", "-s", "65536", "-n", "100", nsutil.DefaultAddrA.Addr().String()})
	for _, r := range []struct {
		who       string
		done      <-chan int
		out, errw *testpair.Buffer
	}{{"client", cdone, cout, cerr}, {"server", sdone, sout, serr}} {
		select {
		case code := <-r.done:
			if code != 0 {
				t.Fatalf("%s exit %d\n%s%s", r.who, code, r.out, r.errw)
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("%s did not finish in 60 s\n%s%s", r.who, r.out, r.errw)
		}
	}
	if !strings.Contains(cout.String(), " 65536      100") {
		t.Fatalf("client's report:\n%s", cout)
	}
}

// rxeWriteBWR is the sequence of frames of rxe's own
// `ib_write_bw -R -s 64 -n 5` (cm/testdata/rxe-perftest-R.pcap; ACKs left
// out): CM MADs by attribute, SENDs by payload length, W for an RDMA
// WRITE.
const rxeWriteBWR = "MAD10 MAD13 MAD14 S16 S16 S4 S4 S4 S4 S2 S2 S56 S56 MAD10 MAD13 MAD14 " +
	"S56 S56 S56 S56 S56 S56 S56 S56 W W W W W S56 S56 S8 S8 S8 S8 S8 S8 S8 S8 S8 S8 S56 S56 " +
	"MAD15 MAD16 MAD15 MAD16"

// frameSequence summarizes the RoCEv2 frames of a capture as rxeWriteBWR
// does.
func frameSequence(t *testing.T, file string) string {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var seq []string
	for {
		data, _, err := r.ReadPacketData()
		if err != nil {
			break
		}
		pkt := gopacket.NewPacket(data, r.LinkType(), gopacket.Default)
		udp, ok := pkt.Layer(layers.LayerTypeUDP).(*layers.UDP)
		if !ok || udp.DstPort != 4791 || len(udp.Payload) < 16 {
			continue
		}
		b := udp.Payload
		op, pad := b[0], int(b[1]>>4&3)
		dqp := int(b[5])<<16 | int(b[6])<<8 | int(b[7])
		switch {
		case dqp == 1 && len(b) >= 12+8+18:
			seq = append(seq, fmt.Sprintf("MAD%02x", int(b[12+8+16])<<8|int(b[12+8+17])))
		case op == 4:
			seq = append(seq, fmt.Sprintf("S%d", len(b)-12-4-pad))
		case op == 10:
			seq = append(seq, "W")
		}
	}
	return strings.Join(seq, " ")
}

// TestRDMACMWireLikeRxe captures sroce's write-bw -R pair on loopback with
// tcpdump and compares its sequence of CM MADs, exchange messages and
// WRITEs with rxe's own ib_write_bw -R.
func TestRDMACMWireLikeRxe(t *testing.T) {
	tcpdump, err := exec.LookPath("tcpdump")
	if err != nil {
		t.Skip("tcpdump is not installed: the frame sequence is not compared (apt-get install tcpdump)")
	}
	if os.Geteuid() != 0 {
		t.Skip("capturing on lo needs root")
	}
	t.Setenv("SROCE_LINK", "udp")
	file := filepath.Join(t.TempDir(), "r.pcap")
	cmd := exec.Command(tcpdump, "-i", "lo", "-U", "-s", "0", "-w", file, "udp port 4791 and host "+cmPairs.Server.String())
	stderr := &testpair.Buffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(10 * time.Second); !strings.Contains(stderr.String(), "listening on"); {
		if time.Now().After(end) {
			cmd.Process.Kill()
			t.Fatalf("tcpdump did not start capturing within 10 s: %s", stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	args := []string{"-R", "-s", "64", "-n", "5"}
	srv, cli := cmPairs.RunPair(t, "write-bw", "Waiting for client to connect", args, args)
	time.Sleep(200 * time.Millisecond)
	cmd.Process.Signal(os.Interrupt)
	cmd.Wait()
	if srv.Code != 0 || cli.Code != 0 {
		t.Fatalf("server: %v\nclient: %v", srv, cli)
	}
	if got := frameSequence(t, file); got != rxeWriteBWR {
		t.Fatalf("sroce's write-bw -R\n%s\nrxe's ib_write_bw -R\n%s", got, rxeWriteBWR)
	}
}
