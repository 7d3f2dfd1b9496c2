package dissect

import (
	"encoding/json"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/sroce/sroce/bth"
)

// fieldsOf builds a frame with e and h, parses it and returns its fields
// by "Layer.name", its JSON line's object and the packet.
func fieldsOf(t *testing.T, e bth.Encap, h bth.Headers, payload int, corrupt bool) (map[string]string, map[string]any, []Field) {
	t.Helper()
	frame := make([]byte, e.Len()+h.TransportLen(payload))
	n, err := bth.Build(frame, &e, &h, make([]byte, payload))
	if err != nil {
		t.Fatal(err)
	}
	frame = frame[:n]
	if corrupt {
		frame[n-1] ^= 0xff
	}
	var p bth.Packet
	if err := p.Parse(frame); err != nil {
		t.Fatal(err)
	}
	ok := p.VerifyICRC()
	fs := AppendFields(nil, &p, ok)
	m := make(map[string]string)
	for _, f := range fs {
		k := f.Layer + "." + f.Name
		if _, dup := m[k]; dup {
			t.Errorf("field %s twice", k)
		}
		m[k] = f.Value
	}
	var obj map[string]any
	if err := json.Unmarshal(appendJSON(nil, 1, &p, ok), &obj); err != nil {
		t.Fatal(err)
	}
	return m, obj, fs
}

// TestAppendFields checks every layer's fields for an IPv6 packet with an
// 802.1Q tag and a RETH and ImmDt, and an IPv4 atomic with a bad ICRC, and
// that the numbers agree with the JSON line of the same packet.
func TestAppendFields(t *testing.T) {
	e := bth.Encap{
		DstMAC: [6]byte{2, 0, 0, 0, 0, 2}, SrcMAC: [6]byte{2, 0, 0, 0, 0, 1},
		HasVLAN: true, VLANTCI: 3<<13 | 42,
		Src: netip.MustParseAddr("2001:db8::1"), Dst: netip.MustParseAddr("2001:db8::2"),
		TOS: 0x6a, TTL: 7, FlowLabel: 0x12345, SrcPort: 0xc001,
	}
	h := bth.Headers{
		BTH:  bth.BTHFields{Opcode: bth.RCWriteOnlyImm, PKey: 0xffff, DestQP: 0x1234, AckReq: true, PSN: 0xabcdef},
		RETH: bth.RETHFields{VA: 0x7f0000001000, RKey: 0x55, DMALen: 3},
		Imm:  0xdeadbeef,
	}
	m, obj, fs := fieldsOf(t, e, h, 3, false)
	for k, want := range map[string]string{
		"Ethernet.destination":  "02:00:00:00:00:02",
		"Ethernet.source":       "02:00:00:00:00:01",
		"Ethernet.EtherType":    "0x8100",
		"802.1Q.priority (PCP)": "3",
		"802.1Q.VLAN ID":        "42",
		"802.1Q.EtherType":      "0x86dd",
		"IPv6.traffic class":    "0x6a (DSCP 26, ECN 2)",
		"IPv6.flow label":       "0x12345",
		"IPv6.hop limit":        "7",
		"IPv6.next header":      "17",
		"IPv6.source":           "2001:db8::1",
		"IPv6.destination":      "2001:db8::2",
		"UDP.source port":       "49153",
		"UDP.destination port":  "4791",
		"BTH.opcode":            "0x0b RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE",
		"BTH.AckReq":            "1",
		"BTH.P_Key":             "0xffff",
		"BTH.destination QP":    "0x001234",
		"BTH.PSN":               "0xabcdef",
		"BTH.pad count":         "1",
		"RETH.virtual address":  "0x7f0000001000",
		"RETH.R_Key":            "0x55",
		"RETH.DMA length":       "3",
		"ImmDt.immediate data":  "0xdeadbeef",
		"Payload.length":        "3 bytes",
	} {
		if m[k] != want {
			t.Errorf("%s = %q, want %q", k, m[k], want)
		}
	}
	if !strings.HasSuffix(m["ICRC.value"], " (ok)") || m["ICRC.computed"] != "" {
		t.Errorf("ICRC fields %q %q", m["ICRC.value"], m["ICRC.computed"])
	}
	if got, want := m["ICRC.value"], strconv.FormatUint(uint64(obj["infiniband.invariant.crc"].(float64)), 16); !strings.HasPrefix(got, strings.Repeat("0", 8-len(want))+want) {
		t.Errorf("ICRC %q, JSON line says %s", got, want)
	}
	// Outermost header first.
	var layers []string
	for _, f := range fs {
		if len(layers) == 0 || layers[len(layers)-1] != f.Layer {
			layers = append(layers, f.Layer)
		}
	}
	if got, want := strings.Join(layers, " "), "Ethernet 802.1Q IPv6 UDP BTH RETH ImmDt Payload ICRC"; got != want {
		t.Errorf("layers %q, want %q", got, want)
	}

	e = bth.Encap{Src: netip.MustParseAddr("192.0.2.1"), Dst: netip.MustParseAddr("192.0.2.2"), TTL: 64, ID: 0x1234, DF: true, SrcPort: 50000}
	h = bth.Headers{
		BTH:    bth.BTHFields{Opcode: bth.RCCompareSwap, PKey: 0xffff, DestQP: 0x11, PSN: 5},
		Atomic: bth.AtomicETHFields{VA: 0x1000, RKey: 9, SwapAdd: 7, Compare: 6},
	}
	m, _, _ = fieldsOf(t, e, h, 0, true)
	for k, want := range map[string]string{
		"IPv4.header length":  "20",
		"IPv4.identification": "0x1234",
		"IPv4.don't fragment": "1",
		"IPv4.TTL":            "64",
		"IPv4.protocol":       "17",
		"IPv4.source":         "192.0.2.1",
		"AtomicETH.swap":      "7",
		"AtomicETH.compare":   "6",
		"AtomicETH.R_Key":     "0x9",
		"BTH.opcode":          "0x13 RC_COMPARE_SWAP",
	} {
		if m[k] != want {
			t.Errorf("%s = %q, want %q", k, m[k], want)
		}
	}
	if !strings.HasSuffix(m["IPv4.header checksum"], "(ok)") {
		t.Errorf("IPv4 checksum %q", m["IPv4.header checksum"])
	}
	if !strings.HasSuffix(m["ICRC.value"], " (BAD)") || len(m["ICRC.computed"]) != 8 {
		t.Errorf("bad ICRC fields %q %q", m["ICRC.value"], m["ICRC.computed"])
	}
}
