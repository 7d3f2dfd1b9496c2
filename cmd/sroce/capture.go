package main

// Finding the UDP header of a frame read from a capture (package capture),
// to tell a malformed RoCEv2 packet from other traffic.

import (
	"net/netip"

	"github.com/sroce/sroce/bth"
)

// udpView describes the UDP datagram that an Ethernet frame visibly
// carries.
type udpView struct {
	src, dst     netip.Addr
	sport, dport uint16
}

// udpPortsLen is how much of a UDP header peekUDP needs: the two ports.
const udpPortsLen = 4

// peekUDP finds the UDP header of an Ethernet frame without bth.Parse's
// checks: at most one 802.1Q tag, IPv4 (not a later fragment) or IPv6 with
// UDP as the next header, and enough bytes to read the ports. dissect uses
// it to tell a malformed RoCEv2 packet (UDP to port 4791) from other
// traffic that bth.Parse rejects before it looks at the port, such as a
// fragmented or cut-short datagram of another protocol, and to say where a
// malformed packet came from.
func peekUDP(f []byte) (u udpView, ok bool) {
	if len(f) < bth.EthernetLen {
		return u, false
	}
	l3 := bth.EthernetLen
	et := bth.Ethernet(f).EtherType()
	if et == bth.EtherTypeVLAN || et == bth.EtherTypeQinQ {
		if len(f) < bth.EthernetLen+bth.VLANTagLen {
			return u, false
		}
		et, l3 = bth.VLAN(f[bth.EthernetLen:]).EtherType(), bth.EthernetLen+bth.VLANTagLen
	}
	var l4 int
	switch et {
	case bth.EtherTypeIPv4:
		ip := bth.IPv4(f[l3:])
		if len(ip) < bth.IPv4MinLen || ip.Version() != 4 || ip.Protocol() != bth.IPProtocolUDP {
			return u, false
		}
		if ip.FragmentOffset() != 0 { // a later fragment: no UDP header
			return u, false
		}
		u.src, u.dst = ip.Src(), ip.Dst()
		l4 = l3 + ip.HeaderLen()
	case bth.EtherTypeIPv6:
		ip := bth.IPv6(f[l3:])
		if len(ip) < bth.IPv6Len || ip.NextHeader() != bth.IPProtocolUDP {
			return u, false
		}
		u.src, u.dst = ip.Src(), ip.Dst()
		l4 = l3 + bth.IPv6Len
	default:
		return u, false
	}
	if len(f) < l4+udpPortsLen {
		return u, false
	}
	udp := bth.UDP(f[l4:])
	u.sport, u.dport = udp.SrcPort(), udp.DstPort()
	return u, true
}
