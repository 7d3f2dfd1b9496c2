package cm

import (
	"bytes"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/capture"
)

// goldenCapture is one of the captures of rdma_rxe's own RDMA CM exchanges
// in testdata (see testdata/README.md).
type goldenCapture struct {
	file string
	// ps and port are the RDMA CM port space and port the server listened
	// on: every REQ and SIDR_REQ names them in its service ID.
	ps   PortSpace
	port uint16
	// want are the attributes the exchange must show.
	want []AttrID
}

var goldenCaptures = []goldenCapture{
	{"rxe-rping.pcap", PortSpaceTCP, 7174, []AttrID{AttrREQ, AttrREP, AttrRTU, AttrDREQ, AttrDREP}},
	{"rxe-ucmatose.pcap", PortSpaceTCP, 7471, []AttrID{AttrREQ, AttrREP, AttrRTU, AttrDREQ, AttrDREP}},
	{"rxe-rping-mra.pcap", PortSpaceTCP, 7176, []AttrID{AttrREQ, AttrMRA, AttrREP, AttrRTU, AttrDREQ, AttrDREP}},
	{"rxe-rping-rej.pcap", PortSpaceTCP, 7199, []AttrID{AttrREQ, AttrREJ}},
	{"rxe-rping-unanswered.pcap", PortSpaceTCP, 7199, []AttrID{AttrREQ}},
	{"rxe-udaddy.pcap", PortSpaceUDP, 7174, []AttrID{AttrSIDRREQ, AttrSIDRREP}},
	{"rxe-perftest-R.pcap", PortSpaceTCP, 18620, []AttrID{AttrREQ, AttrREP, AttrRTU, AttrDREQ, AttrDREP}},
}

// goldenMAD is a CM MAD found in a capture.
type goldenMAD struct {
	frame int // 1-based
	ip    [2]netip.Addr
	mad   MAD
}

// readGoldenMADs returns the CM MADs of a capture: the payloads of its UD
// SEND ONLY packets to QP1 with the GSI Q_Key. Every frame must be a
// whole RoCEv2 packet.
func readGoldenMADs(t *testing.T, file string) []goldenMAD {
	t.Helper()
	path := filepath.Join("testdata", file)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := capture.Open(f, path)
	if err != nil {
		t.Fatal(err)
	}
	var (
		out []goldenMAD
		p   bth.Packet
	)
	for n := 1; ; n++ {
		data, _, wireLen, err := r.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if len(data) != wireLen {
			t.Fatalf("%s frame %d: %d of %d bytes captured", path, n, len(data), wireLen)
		}
		if err := p.Parse(bytes.Clone(data)); err != nil {
			t.Fatalf("%s frame %d: %v", path, n, err)
		}
		if p.Opcode != bth.UDSendOnly || p.BTH().DestQP() != GSIQPN {
			continue
		}
		m, err := FromPacket(&p)
		if err != nil {
			t.Fatalf("%s frame %d: a UD packet to QP1 that is not a CM MAD: %v", path, n, err)
		}
		ip := p.IPv4Header()
		out = append(out, goldenMAD{frame: n, ip: [2]netip.Addr{ip.Src(), ip.Dst()}, mad: m})
	}
}

// TestGoldenCaptures decodes every CM MAD rdma_rxe sent in the golden
// captures: each must unmarshal, marshal back to the same 256 bytes, carry
// the attributes its exchange must show, and each REQ's and SIDR_REQ's
// service ID and IP CM header must agree with the server's port and the
// packet's IP header.
func TestGoldenCaptures(t *testing.T) {
	for _, g := range goldenCaptures {
		t.Run(g.file, func(t *testing.T) {
			mads := readGoldenMADs(t, g.file)
			seen := map[AttrID]int{}
			for _, gm := range mads {
				h, msg, err := Unmarshal(gm.mad)
				if err != nil {
					t.Errorf("frame %d: %v", gm.frame, err)
					continue
				}
				seen[h.AttrID]++
				out := make([]byte, MADLen)
				if err := Marshal(out, h, msg); err != nil {
					t.Errorf("frame %d: %s: marshal: %v", gm.frame, h.AttrID, err)
					continue
				}
				if !bytes.Equal(out, gm.mad) {
					t.Errorf("frame %d: %s does not marshal back to the bytes rxe sent:\n%s", gm.frame, h.AttrID, diffBytes(gm.mad, out))
				}
				checkIPAddressing(t, g, gm, msg)
			}
			for _, a := range g.want {
				if seen[a] == 0 {
					t.Errorf("no %s among the %d CM MADs (%v)", a, len(mads), seen)
				}
			}
		})
	}
}

// checkIPAddressing checks a REQ's or SIDR_REQ's RDMA CM addressing against
// the capture: the service ID names the server's port space and port, and
// the IP CM header the packet's own source and destination addresses.
func checkIPAddressing(t *testing.T, g goldenCapture, gm goldenMAD, msg Message) {
	t.Helper()
	var sid uint64
	var pd []byte
	switch m := msg.(type) {
	case *REQ:
		sid, pd = m.ServiceID, m.PrivateData
	case *SIDRREQ:
		sid, pd = m.ServiceID, m.PrivateData
	default:
		return
	}
	if ps, port, ok := ParseServiceID(sid); !ok || ps != g.ps || port != g.port {
		t.Errorf("frame %d: service ID %#016x, want port space %s port %d", gm.frame, sid, g.ps, g.port)
	}
	h, _, err := SplitIPPrivateData(pd)
	if err != nil {
		t.Errorf("frame %d: IP CM header: %v", gm.frame, err)
		return
	}
	if h.Src != gm.ip[0] || h.Dst != gm.ip[1] {
		t.Errorf("frame %d: IP CM header %v -> %v, the packet's IP header %v -> %v", gm.frame, h.Src, h.Dst, gm.ip[0], gm.ip[1])
	}
	if h.SrcPort == 0 {
		t.Errorf("frame %d: IP CM header source port 0", gm.frame)
	}
}

// diffBytes lists the offsets (within the MAD) where want and got differ.
func diffBytes(want, got []byte) string {
	var b strings.Builder
	for i := range min(len(want), len(got)) {
		if want[i] != got[i] {
			fmt.Fprintf(&b, "  offset %d: rxe %#02x, marshalled %#02x\n", i, want[i], got[i])
		}
	}
	return b.String()
}
