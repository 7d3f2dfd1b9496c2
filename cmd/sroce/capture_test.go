package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"testing"

	"github.com/gopacket/gopacket/layers"
	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/capture"
)

// TestPeekUDP checks how frames that bth.Parse rejects are told apart:
// UDP to port 4791 (malformed RoCEv2) or anything else (skipped).
func TestPeekUDP(t *testing.T) {
	fs := fixtures(t)
	v4, v6, vlan := fs[0].frame, fs[2].frame, fs[3].frame
	laterFragment := bytes.Clone(v4)
	binary.BigEndian.PutUint16(laterFragment[14+6:], 0x00b9) // offset 185*8
	badVersion := bytes.Clone(v4)
	badVersion[14] = 0x55
	notUDP := tcpFrame()
	qinq := bytes.Clone(vlan)
	binary.BigEndian.PutUint16(qinq[12:], 0x88a8)
	cases := []struct {
		name  string
		frame []byte
		ok    bool
		sport uint16
	}{
		{"ipv4", v4, true, 0xc001},
		{"ipv6", v6, true, 0xc003},
		{"802.1Q", vlan, true, 0xc001},
		{"802.1ad", qinq, true, 0xc001},
		{"later fragment", laterFragment, false, 0},
		{"ipv4 bad version", badVersion, false, 0},
		{"tcp", notUDP, false, 0},
		{"arp", arpFrame(), false, 0},
		{"short ethernet", v4[:13], false, 0},
		{"short vlan", vlan[:16], false, 0},
		{"short ipv4", v4[:30], false, 0},
		{"short ipv6", v6[:50], false, 0},
		{"short udp", v4[:36], false, 0},
	}
	for _, c := range cases {
		u, ok := peekUDP(c.frame)
		if ok != c.ok || ok && (u.sport != c.sport || u.dport != 4791) {
			t.Errorf("%s: ok %v, %+v", c.name, ok, u)
		}
	}
}

// TestLinkAdapterShortFrames checks that frames too short for their link
// header reach bth.Parse (which rejects them) without a panic.
func TestLinkAdapterShortFrames(t *testing.T) {
	var a capture.LinkAdapter
	var p bth.Packet
	for _, link := range []layers.LinkType{layers.LinkTypeEthernet, layers.LinkTypeLinuxSLL, layers.LinkTypeLinuxSLL2,
		layers.LinkTypeRaw, layers.LinkTypeNull, layers.LinkTypeLoop} {
		for n := 0; n < 24; n++ {
			f, ok := a.Ethernet(make([]byte, n), link)
			if !ok {
				t.Fatalf("link %v refused", link)
			}
			if err := p.Parse(f); err == nil {
				t.Errorf("link %v: %d-byte frame accepted", link, n)
			}
		}
	}
	if _, ok := a.Ethernet([]byte{1, 2, 3}, layers.LinkTypeIEEE802_11); ok {
		t.Errorf("802.11 accepted")
	}
}

// TestAppendJSONString checks string escaping against encoding/json.
func TestAppendJSONString(t *testing.T) {
	for _, s := range []string{"", "plain", `quote " and \ backslash`, "ctl \x00\x01\n\t\x1f", "utf-8 é"} {
		var got string
		if err := json.Unmarshal(appendJSONString(nil, s), &got); err != nil || got != s {
			t.Errorf("%q: got %q, %v", s, got, err)
		}
	}
}
