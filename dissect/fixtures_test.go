package dissect

// Test fixtures: frames built with bth.Build for many opcodes (IPv4, IPv6,
// 802.1Q), frames that are not RoCEv2, one with a bad ICRC and malformed
// ones, with what dissect must say about each; and a helper that dissects
// a capture file held in memory.

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/gopacket/gopacket/layers"
	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/capture"
	"github.com/sroce/sroce/internal/capturetest"
)

// dissectBytes runs a Dissector in format over the capture file b and
// returns what it wrote, in text followed by the summary line (as sroce
// dissect prints it), and the Dissector, whose Tally holds the counts.
func dissectBytes(t testing.TB, b []byte, format Format) (string, *Dissector) {
	t.Helper()
	r, err := capture.Open(bytes.NewReader(b), "capture")
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	d := New(&out, format)
	if err := d.Run(r); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if format == Text {
		out.WriteString(d.Tally.Summary() + "\n")
	}
	return out.String(), d
}

// Addresses of the fixture frames.
var (
	hostA  = netip.MustParseAddr("192.0.2.1")
	hostB  = netip.MustParseAddr("192.0.2.2")
	hostA6 = netip.MustParseAddr("fd00::1")
	hostB6 = netip.MustParseAddr("fd00::2")
)

// Frame kinds: how dissect must count a fixture frame.
const (
	kindRoCE      = "roce"      // decoded, ICRC correct
	kindBadICRC   = "badicrc"   // decoded, ICRC wrong
	kindSkipped   = "skipped"   // not RoCEv2
	kindMalformed = "malformed" // to UDP 4791 but not decodable
)

// fixture is one frame with what dissect must say about it.
type fixture struct {
	name  string
	frame []byte
	kind  string
	text  []string       // substrings of its text line
	json  map[string]any // fields of its JSON object (compared as text)
	not   []string       // JSON keys it must not have
}

// encap returns the encapsulation from src to dst (both IPv4 or both IPv6)
// with UDP source port sport, tagged with VLAN vid when vid is not zero.
func encap(src, dst netip.Addr, sport, vid uint16) bth.Encap {
	return bth.Encap{
		DstMAC: [6]byte{0x52, 0x54, 0, 0, 0, 2}, SrcMAC: [6]byte{0x52, 0x54, 0, 0, 0, 1},
		HasVLAN: vid != 0, VLANTCI: 3<<13 | vid,
		Src: src, Dst: dst, TTL: 64, ID: 0x1234, DF: true, SrcPort: sport,
	}
}

// hdrs returns headers for op with the given destination QP and PSN.
func hdrs(op bth.Opcode, qp bth.QPN, psn bth.PSN, ackReq bool) bth.Headers {
	return bth.Headers{BTH: bth.BTHFields{Opcode: op, PKey: 0xffff, DestQP: qp, PSN: psn, AckReq: ackReq}}
}

// build returns a whole RoCEv2 frame with a payload of n bytes.
func build(t testing.TB, e bth.Encap, h bth.Headers, n int) []byte {
	t.Helper()
	payload := make([]byte, n)
	for i := range payload {
		payload[i] = byte(i)
	}
	frame := make([]byte, e.Len()+h.TransportLen(n))
	m, err := bth.Build(frame, &e, &h, payload)
	if err != nil {
		t.Fatalf("build %v: %v", h.BTH.Opcode, err)
	}
	return frame[:m]
}

// fixtures returns the test frames in capture order.
func fixtures(t testing.TB) []fixture {
	t.Helper()
	a2b := encap(hostA, hostB, 0xc001, 0)
	b2a := encap(hostB, hostA, 0xc002, 0)
	v6 := encap(hostA6, hostB6, 0xc003, 0)
	vlan := encap(hostA, hostB, 0xc001, 100)
	var fs []fixture
	add := func(f fixture) { fs = append(fs, f) }

	h := hdrs(bth.RCSendOnly, 0x11, 0x5f8c2d, true)
	add(fixture{name: "send only", frame: build(t, a2b, h, 64), kind: kindRoCE,
		text: []string{"192.0.2.1:49153 > 192.0.2.2", "RC_SEND_ONLY ", "destqp=0x000011", "psn=0x5f8c2d", "ackreq", "payload=64", "icrc=ok"},
		json: map[string]any{"ip.src": "192.0.2.1", "ip.dst": "192.0.2.2", "udp.srcport": 0xc001,
			"infiniband.bth.opcode": 4, "opcode_name": "RC_SEND_ONLY", "infiniband.bth.se": 0, "infiniband.bth.m": 0,
			"infiniband.bth.padcnt": 0, "infiniband.bth.tver": 0, "infiniband.bth.p_key": 0xffff,
			"infiniband.bth.destqp": 0x11, "infiniband.bth.a": 1, "infiniband.bth.psn": 0x5f8c2d,
			"payload_len": 64, "icrc_ok": true},
		not: []string{"ipv6.src", "vlan.id", "infiniband.reth.va", "infiniband.aeth.syndrome", "icrc_computed"}})

	h = hdrs(bth.RCAcknowledge, 0x12, 0x5f8c2d, false)
	h.AETH = bth.AETHFields{Syndrome: bth.SyndromeACKUnlimited, MSN: 1}
	add(fixture{name: "ack", frame: build(t, b2a, h, 0), kind: kindRoCE,
		text: []string{"192.0.2.2:49154 > 192.0.2.1", "RC_ACKNOWLEDGE", "destqp=0x000012", "payload=0", "AETH ACK credits=31 msn=1"},
		json: map[string]any{"infiniband.bth.opcode": 17, "infiniband.bth.a": 0, "infiniband.aeth.syndrome": 31,
			"aeth_syndrome_name": "ACK credits=31", "infiniband.aeth.msn": 1, "payload_len": 0}})

	h = hdrs(bth.RCWriteFirst, 0x11, 0x10, false)
	h.RETH = bth.RETHFields{VA: 0x7f2c5e400000, RKey: 0x1d2b, DMALen: 8192}
	add(fixture{name: "write first v6", frame: build(t, v6, h, 1024), kind: kindRoCE,
		text: []string{"[fd00::1]:49155 > fd00::2", "RC_RDMA_WRITE_FIRST", "payload=1024", "RETH va=0x7f2c5e400000 rkey=0x1d2b dmalen=8192"},
		json: map[string]any{"ipv6.src": "fd00::1", "ipv6.dst": "fd00::2", "infiniband.bth.opcode": 6,
			"infiniband.reth.va": uint64(0x7f2c5e400000), "infiniband.reth.r_key": 0x1d2b, "infiniband.reth.dmalen": 8192},
		not: []string{"ip.src", "ip.dst"}})

	h = hdrs(bth.RCWriteMiddle, 0x11, 0x11, false)
	add(fixture{name: "write middle vlan", frame: build(t, vlan, h, 1024), kind: kindRoCE,
		text: []string{"RC_RDMA_WRITE_MIDDLE", "psn=0x000011", "payload=1024", "vlan=100"},
		json: map[string]any{"vlan.id": 100, "infiniband.bth.opcode": 7, "infiniband.bth.psn": 0x11},
		not:  []string{"infiniband.reth.va"}})

	h = hdrs(bth.RCWriteLastImm, 0x11, 0x12, true)
	h.BTH.SE = true
	h.Imm = 0xcafef00d
	add(fixture{name: "write last imm", frame: build(t, a2b, h, 3), kind: kindRoCE,
		text: []string{"RC_RDMA_WRITE_LAST_WITH_IMMEDIATE", "ackreq,se", "payload=3", "ImmDt 0xcafef00d"},
		json: map[string]any{"infiniband.bth.opcode": 9, "infiniband.bth.se": 1, "infiniband.bth.padcnt": 1,
			"infiniband.immdt": uint64(0xcafef00d), "payload_len": 3}})

	h = hdrs(bth.RCReadRequest, 0x11, 0x20, true)
	h.RETH = bth.RETHFields{VA: 0x5555aaaa0000, RKey: 0x77, DMALen: 4096}
	add(fixture{name: "read request", frame: build(t, a2b, h, 0), kind: kindRoCE,
		text: []string{"RC_RDMA_READ_REQUEST", "RETH va=0x5555aaaa0000 rkey=0x77 dmalen=4096"},
		json: map[string]any{"infiniband.bth.opcode": 12, "infiniband.reth.dmalen": 4096}})

	h = hdrs(bth.RCReadResponseFirst, 0x12, 0x20, false)
	h.AETH = bth.AETHFields{Syndrome: bth.SyndromeACKUnlimited, MSN: 2}
	add(fixture{name: "read response first", frame: build(t, b2a, h, 1024), kind: kindRoCE,
		text: []string{"RC_RDMA_READ_RESPONSE_FIRST", "AETH ACK credits=31 msn=2"},
		json: map[string]any{"infiniband.bth.opcode": 13, "infiniband.aeth.msn": 2}})

	h = hdrs(bth.RCReadResponseMiddle, 0x12, 0x21, false)
	add(fixture{name: "read response middle", frame: build(t, b2a, h, 1024), kind: kindRoCE,
		text: []string{"RC_RDMA_READ_RESPONSE_MIDDLE"}, json: map[string]any{"infiniband.bth.opcode": 14},
		not: []string{"infiniband.aeth.syndrome"}})

	h = hdrs(bth.RCAcknowledge, 0x12, 0x30, false)
	h.AETH = bth.AETHFields{Syndrome: bth.RNRSyndrome(12), MSN: 3}
	add(fixture{name: "rnr nak", frame: build(t, b2a, h, 0), kind: kindRoCE,
		text: []string{"AETH RNR NAK timer=12 (640us) msn=3"},
		json: map[string]any{"infiniband.aeth.syndrome": 0x2c, "aeth_syndrome_name": "RNR NAK timer=12 (640us)"}})

	h = hdrs(bth.RCAcknowledge, 0x12, 0x31, false)
	h.AETH = bth.AETHFields{Syndrome: bth.NAKSyndrome(bth.NAKPSNSeqError), MSN: 3}
	add(fixture{name: "nak", frame: build(t, b2a, h, 0), kind: kindRoCE,
		text: []string{"AETH NAK PSN sequence error msn=3"},
		json: map[string]any{"infiniband.aeth.syndrome": 0x60}})

	h = hdrs(bth.RCFetchAdd, 0x11, 0x40, true)
	h.Atomic = bth.AtomicETHFields{VA: 0x1000, RKey: 0xabc, SwapAdd: 1, Compare: 0}
	add(fixture{name: "fetch add", frame: build(t, a2b, h, 0), kind: kindRoCE,
		text: []string{"RC_FETCH_ADD", "AtomicETH va=0x1000 rkey=0xabc add=1"},
		json: map[string]any{"infiniband.bth.opcode": 20, "infiniband.reth.va": 0x1000, "infiniband.reth.r_key": 0xabc,
			"infiniband.atomiceth.swapdt": 1, "infiniband.atomiceth.cmpdt": 0},
		not: []string{"infiniband.reth.dmalen"}})

	h = hdrs(bth.RCCompareSwap, 0x11, 0x41, true)
	h.Atomic = bth.AtomicETHFields{VA: 0x1008, RKey: 0xabc, SwapAdd: 1<<64 - 1, Compare: 7}
	add(fixture{name: "compare swap", frame: build(t, a2b, h, 0), kind: kindRoCE,
		text: []string{"RC_COMPARE_SWAP", "AtomicETH va=0x1008 rkey=0xabc compare=7 swap=18446744073709551615"},
		json: map[string]any{"infiniband.bth.opcode": 19, "infiniband.atomiceth.swapdt": uint64(1<<64 - 1),
			"infiniband.atomiceth.cmpdt": 7}})

	h = hdrs(bth.RCAtomicAcknowledge, 0x12, 0x41, false)
	h.AETH = bth.AETHFields{Syndrome: bth.SyndromeACKUnlimited, MSN: 9}
	h.AtomicAck = 0x8000000000000001
	add(fixture{name: "atomic ack", frame: build(t, b2a, h, 0), kind: kindRoCE,
		text: []string{"RC_ATOMIC_ACKNOWLEDGE", "AETH ACK credits=31 msn=9  AtomicAckETH orig=9223372036854775809"},
		json: map[string]any{"infiniband.bth.opcode": 18, "infiniband.atomicacketh.origremdt": uint64(0x8000000000000001),
			"infiniband.aeth.msn": 9}})

	h = hdrs(bth.RCSendOnlyImm, 0x11, 0x50, true)
	h.Imm = 0x01020304
	add(fixture{name: "send only imm", frame: build(t, a2b, h, 5), kind: kindRoCE,
		text: []string{"RC_SEND_ONLY_WITH_IMMEDIATE", "ImmDt 0x01020304", "payload=5"},
		json: map[string]any{"infiniband.immdt": 0x01020304, "infiniband.bth.padcnt": 3, "payload_len": 5}})

	h = hdrs(bth.RCSendOnlyInvalidate, 0x11, 0x51, true)
	h.IETH = 0xdeadbeef
	add(fixture{name: "send only invalidate", frame: build(t, a2b, h, 8), kind: kindRoCE,
		text: []string{"RC_SEND_ONLY_WITH_INVALIDATE", "IETH rkey=0xdeadbeef"},
		json: map[string]any{"infiniband.bth.opcode": 23, "infiniband.ieth": uint64(0xdeadbeef)}})

	h = hdrs(bth.UDSendOnly, 0x13, 0x60, false)
	h.DETH = bth.DETHFields{QKey: 0x11111111, SrcQP: 0x14}
	add(fixture{name: "ud send v6", frame: build(t, v6, h, 512), kind: kindRoCE,
		text: []string{"UD_SEND_ONLY", "DETH qkey=0x11111111 srcqp=0x000014"},
		json: map[string]any{"infiniband.bth.opcode": 100, "infiniband.deth.q_key": 0x11111111, "infiniband.deth.srcqp": 0x14}})

	h = hdrs(bth.UDSendOnlyImm, 0x13, 0x61, false)
	h.DETH = bth.DETHFields{QKey: 0x22222222, SrcQP: 0x15}
	h.Imm = 7
	add(fixture{name: "ud send imm", frame: build(t, a2b, h, 40), kind: kindRoCE,
		text: []string{"UD_SEND_ONLY_WITH_IMMEDIATE", "DETH qkey=0x22222222 srcqp=0x000015  ImmDt 0x00000007"},
		json: map[string]any{"infiniband.bth.opcode": 101, "infiniband.immdt": 7}})

	h = hdrs(bth.UCSendOnly, 0x15, 0x70, false)
	add(fixture{name: "uc send", frame: build(t, vlan, h, 16), kind: kindRoCE,
		text: []string{"UC_SEND_ONLY", "vlan=100"}, json: map[string]any{"infiniband.bth.opcode": 0x24}})

	h = hdrs(bth.RCFlush, 0x11, 0x80, true)
	h.FETH = bth.FETHFields{SelectivityLevel: 1, PlacementType: 2}
	h.RETH = bth.RETHFields{VA: 0x2000, RKey: 0x99, DMALen: 64}
	add(fixture{name: "flush", frame: build(t, a2b, h, 0), kind: kindRoCE,
		text: []string{"RC_FLUSH", "FETH selectivity=1 placement=2  RETH va=0x2000 rkey=0x99 dmalen=64"},
		json: map[string]any{"infiniband.bth.opcode": 0x1c, "feth_selectivity_level": 1, "feth_placement_type": 2,
			"infiniband.reth.va": 0x2000}})

	h = hdrs(bth.RCAtomicWrite, 0x11, 0x81, true)
	h.RETH = bth.RETHFields{VA: 0x3000, RKey: 0x99, DMALen: 8}
	add(fixture{name: "atomic write", frame: build(t, a2b, h, 8), kind: kindRoCE,
		text: []string{"RC_ATOMIC_WRITE", "payload=8"}, json: map[string]any{"infiniband.bth.opcode": 0x1d}})

	h = hdrs(bth.XRCSendOnly, 0x11, 0x82, true)
	h.XRCETH = bth.XRCETHFields{SRQN: 0x00a1b2}
	add(fixture{name: "xrc send", frame: build(t, a2b, h, 24), kind: kindRoCE,
		text: []string{"XRC_SEND_ONLY", "XRCETH srq=0x00a1b2", "payload=24"},
		json: map[string]any{"infiniband.bth.opcode": 0xa4, "xrceth_srqn": 0xa1b2}})

	h = hdrs(bth.Opcode(0xab), 0x11, 0x83, true)
	h.XRCETH = bth.XRCETHFields{SRQN: 0x17}
	h.RETH = bth.RETHFields{VA: 0x4000, RKey: 0x99, DMALen: 16}
	h.Imm = 0x0a0b0c0d
	add(fixture{name: "xrc write imm", frame: build(t, a2b, h, 16), kind: kindRoCE,
		text: []string{"XRC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", "XRCETH srq=0x000017  RETH va=0x4000 rkey=0x99 dmalen=16  ImmDt 0x0a0b0c0d"},
		json: map[string]any{"infiniband.bth.opcode": 0xab, "xrceth_srqn": 0x17, "infiniband.immdt": 0x0a0b0c0d}})

	h = hdrs(bth.XRCAcknowledge, 0x12, 0x82, false)
	h.AETH = bth.AETHFields{Syndrome: bth.SyndromeACKUnlimited, MSN: 3}
	add(fixture{name: "xrc ack", frame: build(t, b2a, h, 0), kind: kindRoCE,
		text: []string{"XRC_ACKNOWLEDGE", "AETH"}, json: map[string]any{"infiniband.bth.opcode": 0xb1}})

	h = hdrs(bth.CNP, 0x11, 0, false)
	h.BTH.BECN = true
	add(fixture{name: "cnp", frame: build(t, b2a, h, 0), kind: kindRoCE,
		text: []string{"CNP", "becn"}, json: map[string]any{"infiniband.bth.opcode": 0x81, "payload_len": 0}})

	bad := build(t, a2b, hdrs(bth.RCSendOnly, 0x11, 0x90, true), 32)
	bad[len(bad)-1] ^= 0xff
	add(fixture{name: "bad icrc", frame: bad, kind: kindBadICRC,
		text: []string{"RC_SEND_ONLY", "icrc=BAD", "ICRC carried="},
		json: map[string]any{"icrc_ok": false}})

	unknown := build(t, a2b, hdrs(bth.RCSendOnly, 0x11, 0x91, true), 32)
	unknown[14+20+8] = 0x1f // a reserved RC opcode
	add(fixture{name: "unknown opcode", frame: unknown, kind: kindMalformed,
		text: []string{"192.0.2.1:49153 > 192.0.2.2", "MALFORMED: bth: unknown opcode"},
		json: map[string]any{"ip.src": "192.0.2.1", "ip.dst": "192.0.2.2", "udp.srcport": 0xc001, "error": "bth: unknown opcode"}})

	frag := build(t, a2b, hdrs(bth.RCSendOnly, 0x11, 0x92, true), 32)
	frag[14+6] |= 0x20 // more fragments: RoCEv2 is never fragmented
	add(fixture{name: "fragmented roce", frame: frag, kind: kindMalformed,
		text: []string{"192.0.2.1:49153 > 192.0.2.2", "MALFORMED: ipv4: bad IP header"},
		json: map[string]any{"error": "ipv4: bad IP header"}})

	add(fixture{name: "arp", frame: arpFrame(), kind: kindSkipped})
	add(fixture{name: "tcp", frame: tcpFrame(), kind: kindSkipped})

	dns := build(t, a2b, hdrs(bth.RCSendOnly, 0x11, 0x93, true), 32)
	binary.BigEndian.PutUint16(dns[14+20+2:], 53)
	add(fixture{name: "udp to port 53", frame: dns, kind: kindSkipped})

	fragDNS := bytes.Clone(dns)
	fragDNS[14+6] |= 0x20
	add(fixture{name: "fragmented udp to port 53", frame: fragDNS, kind: kindSkipped})

	// One more RoCEv2 packet after the others, so that counting resumes.
	h = hdrs(bth.RCSendLast, 0x11, 0xffffff, true)
	add(fixture{name: "send last", frame: build(t, a2b, h, 1), kind: kindRoCE,
		text: []string{"RC_SEND_LAST", "psn=0xffffff", "payload=1"},
		json: map[string]any{"infiniband.bth.psn": 0xffffff, "infiniband.bth.padcnt": 3}})
	return fs
}

// arpFrame returns an ARP request.
func arpFrame() []byte {
	f := make([]byte, 14+28)
	copy(f, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x52, 0x54, 0, 0, 0, 1, 0x08, 0x06})
	copy(f[14:], []byte{0, 1, 0x08, 0, 6, 4, 0, 1})
	return f
}

// tcpFrame returns an IPv4 TCP SYN.
func tcpFrame() []byte {
	f := make([]byte, 14+20+20)
	copy(f[12:], []byte{0x08, 0x00, 0x45, 0, 0, 40, 0, 1, 0x40, 0, 64, 6})
	copy(f[14+12:], []byte{192, 0, 2, 1, 192, 0, 2, 2})
	binary.BigEndian.PutUint16(f[34:], 40000)
	binary.BigEndian.PutUint16(f[36:], 4791)
	f[34+12] = 5 << 4
	f[34+13] = 0x02
	return f
}

// frames returns the frames of fs.
func frames(fs []fixture) [][]byte {
	out := make([][]byte, len(fs))
	for i, f := range fs {
		out[i] = f.frame
	}
	return out
}

// fixturePcap returns the frames of fs as a classic pcap file.
func fixturePcap(t testing.TB, fs []fixture) []byte {
	t.Helper()
	return capturetest.Pcap(t, layers.LinkTypeEthernet, capturetest.Records(frames(fs)))
}

// textLines maps frame numbers to the lines of dissect's text output; the
// summary line (the last) is returned apart.
func textLines(t *testing.T, out string) (lines map[int]string, summary string) {
	t.Helper()
	all := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(all) == 0 {
		t.Fatalf("no output")
	}
	lines = map[int]string{}
	for _, l := range all[:len(all)-1] {
		f := strings.Fields(l)
		n, err := strconv.Atoi(f[0])
		if err != nil {
			t.Fatalf("line does not start with a frame number: %q", l)
		}
		if _, dup := lines[n]; dup {
			t.Fatalf("two lines for frame %d", n)
		}
		lines[n] = l
	}
	return lines, all[len(all)-1]
}

// jsonObjects maps frame numbers to the objects of dissect's JSON output.
// Numbers are kept as json.Number, so 64-bit values stay exact.
func jsonObjects(t *testing.T, out string) map[int]map[string]any {
	t.Helper()
	objs := map[int]map[string]any{}
	for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		if l == "" {
			continue
		}
		d := json.NewDecoder(strings.NewReader(l))
		d.UseNumber()
		var o map[string]any
		if err := d.Decode(&o); err != nil {
			t.Fatalf("not a JSON object: %q: %v", l, err)
		}
		if d.More() {
			t.Fatalf("more than one value on a line: %q", l)
		}
		num, ok := o["frame.number"].(json.Number)
		if !ok {
			t.Fatalf("no frame.number: %q", l)
		}
		n, err := num.Int64()
		if err != nil {
			t.Fatal(err)
		}
		objs[int(n)] = o
	}
	return objs
}
