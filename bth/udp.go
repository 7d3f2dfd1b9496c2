package bth

import "encoding/binary"

// UDPLen is the length of the UDP header.
const UDPLen = 8

// UDPPort is the RoCEv2 destination port.
const UDPPort = 4791

// UDP is the 8-byte UDP header.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-------------------------------+-------------------------------+
//	|          Source Port          |       Destination Port        |
//	+-------------------------------+-------------------------------+
//	|            Length             |           Checksum            |
//	+-------------------------------+-------------------------------+
//
// RoCEv2 sends the checksum as zero (over IPv6 too, as rdma_rxe and RoCE
// NICs do) and the ICRC masks it.
type UDP []byte

const (
	udpSrcPort  = 0
	udpDstPort  = 2
	udpLength   = 4
	udpChecksum = 6
)

// SrcPort returns the source port.
func (b UDP) SrcPort() uint16 { return binary.BigEndian.Uint16(b[udpSrcPort:]) }

// DstPort returns the destination port.
func (b UDP) DstPort() uint16 { return binary.BigEndian.Uint16(b[udpDstPort:]) }

// Length returns the length of the datagram, header included.
func (b UDP) Length() uint16 { return binary.BigEndian.Uint16(b[udpLength:]) }

// Checksum returns the checksum field.
func (b UDP) Checksum() uint16 { return binary.BigEndian.Uint16(b[udpChecksum:]) }

// SetSrcPort sets the source port.
func (b UDP) SetSrcPort(p uint16) { binary.BigEndian.PutUint16(b[udpSrcPort:], p) }

// SetDstPort sets the destination port.
func (b UDP) SetDstPort(p uint16) { binary.BigEndian.PutUint16(b[udpDstPort:], p) }

// SetLength sets the datagram length.
func (b UDP) SetLength(n uint16) { binary.BigEndian.PutUint16(b[udpLength:], n) }

// SetChecksum sets the checksum field.
func (b UDP) SetChecksum(v uint16) { binary.BigEndian.PutUint16(b[udpChecksum:], v) }

// UDPFields is the decoded form of a UDP header.
type UDPFields struct {
	SrcPort, DstPort uint16
	Length           uint16
	Checksum         uint16
}

// Fields decodes b.
func (b UDP) Fields() UDPFields {
	return UDPFields{SrcPort: b.SrcPort(), DstPort: b.DstPort(), Length: b.Length(), Checksum: b.Checksum()}
}

// Encode writes f into b, which must hold UDPLen bytes.
func (f *UDPFields) Encode(b UDP) {
	b.SetSrcPort(f.SrcPort)
	b.SetDstPort(f.DstPort)
	b.SetLength(f.Length)
	b.SetChecksum(f.Checksum)
}
