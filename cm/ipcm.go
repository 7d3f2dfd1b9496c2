package cm

import (
	"encoding/binary"
	"net/netip"
	"strconv"
)

// PortSpace is an RDMA CM port space: with a port, it makes the service ID
// of an IP-addressed listener.
type PortSpace uint16

// RDMA CM port spaces, with librdmacm's values (RDMA_PS_*).
const (
	PortSpaceIPoIB PortSpace = 0x0002
	PortSpaceTCP   PortSpace = 0x0106 // RC connections
	PortSpaceUDP   PortSpace = 0x0111 // UD services (SIDR)
	PortSpaceIB    PortSpace = 0x013f
)

// String names the port space.
func (ps PortSpace) String() string {
	switch ps {
	case PortSpaceIPoIB:
		return "IPoIB"
	case PortSpaceTCP:
		return "TCP"
	case PortSpaceUDP:
		return "UDP"
	case PortSpaceIB:
		return "IB"
	}
	return "port space 0x" + strconv.FormatUint(uint64(ps), 16)
}

// ServiceID returns the service ID of port in port space ps:
// 0x0000000001060000 | port for TCP.
func ServiceID(ps PortSpace, port uint16) uint64 { return uint64(ps)<<16 | uint64(port) }

// ParseServiceID splits an RDMA IP CM service ID into its port space and
// port. ok is false when id is not in one of the four port spaces.
func ParseServiceID(id uint64) (ps PortSpace, port uint16, ok bool) {
	if id>>32 != 0 {
		return 0, 0, false
	}
	ps = PortSpace(id >> 16)
	switch ps {
	case PortSpaceIPoIB, PortSpaceTCP, PortSpaceUDP, PortSpaceIB:
		return ps, uint16(id), true
	}
	return 0, 0, false
}

// IP CM header sizes and values.
const (
	IPHeaderLen = 36 // version, IP version, source port, two 16-byte addresses
	// IPCMVersion is the header's version byte: major version 0, minor 0.
	IPCMVersion = 0x00
	// REQAppPrivateLen is how much application private data a REQ carries
	// after the IP CM header.
	REQAppPrivateLen = REQPrivateLen - IPHeaderLen
	// SIDRAppPrivateLen is how much a SIDR_REQ carries after the header.
	SIDRAppPrivateLen = SIDRREQPrivateLen - IPHeaderLen
)

// IPHeader is the IP CM private-data header of the IBTA's annex A11, which
// starts an RDMA CM REQ's (and SIDR_REQ's) private data.
//
//	 0               1               2               3
//	+-------+-------+-------+-------+-------------------------------+
//	| MajV  | MinV  | IPV   | resv  |         Source port           |
//	+-------+-------+-------+-------+-------------------------------+
//	|               Source IP address (16 bytes)                    |
//	|               Destination IP address (16 bytes)               |
//
// An IPv4 address takes the last 4 bytes of its 16, the 12 before it zero.
type IPHeader struct {
	SrcPort uint16
	Src     netip.Addr
	Dst     netip.Addr
}

// Encode writes h into the first IPHeaderLen bytes of b. Src and Dst must
// both be IPv4 (an IPv4-mapped IPv6 address counts as IPv4), which makes an
// IPv4 header, or both IPv6 (one of them may be IPv4-mapped), which makes
// an IPv6 header.
func (h *IPHeader) Encode(b []byte) error {
	if len(b) < IPHeaderLen {
		return errAt("IP CM header", KindTooShort)
	}
	src, dst := h.Src.Unmap(), h.Dst.Unmap()
	switch {
	case src.Is4() && dst.Is4():
		clear(b[:IPHeaderLen])
		b[1] = 4 << 4
		s, d := src.As4(), dst.As4()
		copy(b[4+12:], s[:])
		copy(b[20+12:], d[:])
	case h.Src.Is6() && h.Dst.Is6():
		clear(b[:IPHeaderLen])
		b[1] = 6 << 4
		s, d := h.Src.As16(), h.Dst.As16()
		copy(b[4:], s[:])
		copy(b[20:], d[:])
	default:
		return errAt("IP CM header addresses", KindOutOfRange)
	}
	b[0] = IPCMVersion
	binary.BigEndian.PutUint16(b[2:], h.SrcPort)
	return nil
}

// Decode reads h from b: version 0.0 and IP version 4 or 6, else an error.
// The addresses of an IPv6 header are IPv6 addresses, IPv4-mapped ones
// included.
func (h *IPHeader) Decode(b []byte) error {
	if len(b) < IPHeaderLen {
		return errAt("IP CM header", KindTooShort)
	}
	if b[0] != IPCMVersion {
		return errAt("IP CM header version", KindBadIPHeader)
	}
	h.SrcPort = binary.BigEndian.Uint16(b[2:])
	switch b[1] >> 4 {
	case 4:
		h.Src = netip.AddrFrom4([4]byte(b[4+12 : 4+16]))
		h.Dst = netip.AddrFrom4([4]byte(b[20+12 : 20+16]))
	case 6:
		h.Src = netip.AddrFrom16([16]byte(b[4:20]))
		h.Dst = netip.AddrFrom16([16]byte(b[20:36]))
	default:
		return errAt("IP CM header IP version", KindBadIPHeader)
	}
	return nil
}

// IPPrivateData returns the private data of an RDMA CM REQ or SIDR_REQ: h
// followed by the application's private data app. size is the message's
// private data size (REQPrivateLen or SIDRREQPrivateLen), so app holds at
// most REQAppPrivateLen or SIDRAppPrivateLen bytes.
func IPPrivateData(h IPHeader, app []byte, size int) ([]byte, error) {
	if IPHeaderLen+len(app) > size {
		return nil, errAt("application private data", KindPrivateDataLen)
	}
	b := make([]byte, IPHeaderLen+len(app))
	if err := h.Encode(b); err != nil {
		return nil, err
	}
	copy(b[IPHeaderLen:], app)
	return b, nil
}

// SplitIPPrivateData splits an RDMA CM REQ's or SIDR_REQ's private data
// into the IP CM header and the application's private data after it (which
// the message pads with zeros to its size).
func SplitIPPrivateData(pd []byte) (IPHeader, []byte, error) {
	var h IPHeader
	if err := h.Decode(pd); err != nil {
		return IPHeader{}, nil, err
	}
	return h, pd[IPHeaderLen:], nil
}
