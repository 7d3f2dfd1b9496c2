package dissect

// Decoding one frame: the link adapter presents it as Ethernet, bth.Packet
// parses it, and for what Parse rejects PeekUDP tells a malformed RoCEv2
// packet (UDP to port 4791) from other traffic.

import (
	"errors"
	"net/netip"

	"github.com/gopacket/gopacket/layers"
	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/capture"
)

// Kind is what Decode made of a frame.
type Kind uint8

// Frame kinds.
const (
	// Skipped is a frame that is not RoCEv2: another protocol, or a
	// datagram to another port.
	Skipped Kind = iota
	// Unsupported is a frame of a link type that Decode does not read;
	// it is counted as skipped.
	Unsupported
	// RoCE is a RoCEv2 packet, decoded into Decoder.Packet. Its ICRC may
	// still be wrong: see Frame.ICRCOK.
	RoCE
	// Malformed is a UDP datagram to port 4791 that bth.Parse rejects.
	Malformed
	// Truncated is a UDP datagram to port 4791 that the capture's snap
	// length cut short, so it was not decoded.
	Truncated
)

// Endpoints are the addresses and ports of a UDP datagram.
type Endpoints struct {
	Src, Dst         netip.Addr
	SrcPort, DstPort uint16
}

// Frame is what Decode found in one frame.
type Frame struct {
	Kind    Kind
	Link    layers.LinkType // the frame's link type
	CapLen  int             // bytes captured
	WireLen int             // bytes on the wire
	// ICRCOK reports, for a RoCE frame, whether its ICRC verifies.
	ICRCOK bool
	// UDP is, for a Malformed or Truncated frame, where the datagram
	// came from and went to.
	UDP Endpoints
	// Err is, for a Malformed frame, why bth.Parse rejected it (a
	// *bth.Error).
	Err error
}

// Decoder decodes frames one at a time. The zero value is ready to use.
type Decoder struct {
	// Packet is the RoCEv2 packet of the last frame Decode found to be
	// RoCE. It refers to that frame's bytes, so it is valid as long as
	// they are.
	Packet bth.Packet

	link capture.LinkAdapter
}

// Decode decodes one frame: data as captured, of link type link and wireLen
// bytes on the wire (len(data) for a whole frame). A RoCEv2 packet is left
// in d.Packet with its ICRC checked. Decode may modify data (to present a
// Linux cooked capture as Ethernet). It allocates nothing for RoCEv2 packets.
func (d *Decoder) Decode(data []byte, link layers.LinkType, wireLen int) Frame {
	f := Frame{Link: link, CapLen: len(data), WireLen: wireLen}
	eth, ok := d.link.Ethernet(data, link)
	if !ok {
		f.Kind = Unsupported
		return f
	}
	err := d.Packet.Parse(eth)
	if err == nil {
		f.Kind = RoCE
		f.ICRCOK = d.Packet.VerifyICRC()
		return f
	}
	u, isUDP := PeekUDP(eth)
	switch {
	case errors.Is(err, bth.ErrNotRoCE) || !isUDP || u.DstPort != bth.UDPPort:
		f.Kind = Skipped
	case len(data) < wireLen:
		f.Kind, f.UDP = Truncated, u
	default:
		f.Kind, f.UDP, f.Err = Malformed, u, err
	}
	return f
}

// udpPortsLen is how much of a UDP header PeekUDP needs: the two ports.
const udpPortsLen = 4

// PeekUDP finds the UDP header of an Ethernet frame without bth.Parse's
// checks: at most one 802.1Q (or 802.1ad) tag, IPv4 (not a later fragment)
// or IPv6 with UDP as the next header, and enough bytes to read the ports.
// It tells a malformed RoCEv2 packet (UDP to port 4791) from other traffic
// that bth.Parse rejects before it looks at the port, such as a fragmented
// or cut-short datagram of another protocol, and says where a malformed
// packet came from. On every frame bth.Parse accepts it finds what Parse
// finds.
func PeekUDP(frame []byte) (u Endpoints, ok bool) {
	if len(frame) < bth.EthernetLen {
		return u, false
	}
	l3 := bth.EthernetLen
	et := bth.Ethernet(frame).EtherType()
	if et == bth.EtherTypeVLAN || et == bth.EtherTypeQinQ {
		if len(frame) < bth.EthernetLen+bth.VLANTagLen {
			return u, false
		}
		et, l3 = bth.VLAN(frame[bth.EthernetLen:]).EtherType(), bth.EthernetLen+bth.VLANTagLen
	}
	var l4 int
	switch et {
	case bth.EtherTypeIPv4:
		ip := bth.IPv4(frame[l3:])
		if len(ip) < bth.IPv4MinLen || ip.Version() != 4 || ip.Protocol() != bth.IPProtocolUDP {
			return u, false
		}
		if ip.FragmentOffset() != 0 { // a later fragment: no UDP header
			return u, false
		}
		u.Src, u.Dst = ip.Src(), ip.Dst()
		l4 = l3 + ip.HeaderLen()
	case bth.EtherTypeIPv6:
		ip := bth.IPv6(frame[l3:])
		if len(ip) < bth.IPv6Len || ip.NextHeader() != bth.IPProtocolUDP {
			return u, false
		}
		u.Src, u.Dst = ip.Src(), ip.Dst()
		l4 = l3 + bth.IPv6Len
	default:
		return u, false
	}
	if len(frame) < l4+udpPortsLen {
		return u, false
	}
	udp := bth.UDP(frame[l4:])
	u.SrcPort, u.DstPort = udp.SrcPort(), udp.DstPort()
	return u, true
}
