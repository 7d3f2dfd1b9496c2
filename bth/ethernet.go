package bth

import "encoding/binary"

// Ethernet and 802.1Q lengths and the EtherTypes of the encapsulation.
const (
	EthernetLen   = 14     // Ethernet II header: two MAC addresses and the EtherType
	VLANTagLen    = 4      // 802.1Q tag: what a tag adds to a frame (see VLAN)
	EtherTypeIPv4 = 0x0800 // IPv4 follows
	EtherTypeIPv6 = 0x86dd // IPv6 follows
	EtherTypeVLAN = 0x8100 // IEEE 802.1Q customer tag
	EtherTypeQinQ = 0x88a8 // IEEE 802.1ad service tag
)

// MACLen is the length of an Ethernet address.
const MACLen = 6

// Ethernet is the 14-byte Ethernet II header.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+---------------------------------------------------------------+
//	|                    Destination MAC address                    |
//	+                               +-------------------------------+
//	|                               |                               |
//	+-------------------------------+                               +
//	|                      Source MAC address                       |
//	+-------------------------------+-------------------------------+
//	|           EtherType           |
//	+-------------------------------+
//
// With an 802.1Q tag the EtherType is EtherTypeVLAN (or EtherTypeQinQ) and
// a VLAN header follows.
type Ethernet []byte

const (
	ethDst  = 0
	ethSrc  = 6
	ethType = 12
)

// DstMAC returns the destination MAC address.
func (b Ethernet) DstMAC() [MACLen]byte { return [MACLen]byte(b[ethDst : ethDst+MACLen]) }

// SrcMAC returns the source MAC address.
func (b Ethernet) SrcMAC() [MACLen]byte { return [MACLen]byte(b[ethSrc : ethSrc+MACLen]) }

// EtherType returns the EtherType (the tag protocol identifier when an
// 802.1Q tag follows).
func (b Ethernet) EtherType() uint16 { return binary.BigEndian.Uint16(b[ethType:]) }

// SetDstMAC sets the destination MAC address.
func (b Ethernet) SetDstMAC(a [MACLen]byte) { copy(b[ethDst:ethDst+MACLen], a[:]) }

// SetSrcMAC sets the source MAC address.
func (b Ethernet) SetSrcMAC(a [MACLen]byte) { copy(b[ethSrc:ethSrc+MACLen], a[:]) }

// SetEtherType sets the EtherType.
func (b Ethernet) SetEtherType(t uint16) { binary.BigEndian.PutUint16(b[ethType:], t) }

// EthernetFields is the decoded form of an Ethernet header.
type EthernetFields struct {
	DstMAC, SrcMAC [MACLen]byte
	EtherType      uint16
}

// Fields decodes b.
func (b Ethernet) Fields() EthernetFields {
	return EthernetFields{DstMAC: b.DstMAC(), SrcMAC: b.SrcMAC(), EtherType: b.EtherType()}
}

// Encode writes f into b, which must hold EthernetLen bytes.
func (f *EthernetFields) Encode(b Ethernet) {
	b.SetDstMAC(f.DstMAC)
	b.SetSrcMAC(f.SrcMAC)
	b.SetEtherType(f.EtherType)
}

// VLAN is the 4-byte 802.1Q tag as it follows an Ethernet header whose
// EtherType is EtherTypeVLAN or EtherTypeQinQ: the tag control information
// (priority, drop eligible indicator, VLAN ID) and the EtherType of what the
// tag encloses.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-----+-+-----------------------+-------------------------------+
//	| PCP |D|        VLAN ID        |          EtherType            |
//	+-----+-+-----------------------+-------------------------------+
//	|<------------ TCI ------------>|
type VLAN []byte

const (
	vlanTCI  = 0
	vlanType = 2
)

// TCI returns the whole tag control information.
func (b VLAN) TCI() uint16 { return binary.BigEndian.Uint16(b[vlanTCI:]) }

// PCP returns the priority code point (0-7).
func (b VLAN) PCP() uint8 { return b[vlanTCI] >> 5 }

// DEI returns the drop eligible indicator.
func (b VLAN) DEI() bool { return b[vlanTCI]&0x10 != 0 }

// VID returns the VLAN identifier (12 bits).
func (b VLAN) VID() uint16 { return b.TCI() & 0x0fff }

// EtherType returns the EtherType of the enclosed packet.
func (b VLAN) EtherType() uint16 { return binary.BigEndian.Uint16(b[vlanType:]) }

// SetTCI sets the tag control information.
func (b VLAN) SetTCI(tci uint16) { binary.BigEndian.PutUint16(b[vlanTCI:], tci) }

// SetEtherType sets the EtherType of the enclosed packet.
func (b VLAN) SetEtherType(t uint16) { binary.BigEndian.PutUint16(b[vlanType:], t) }

// VLANFields is the decoded form of an 802.1Q tag.
type VLANFields struct {
	TCI       uint16 // PCP, DEI and VLAN ID as on the wire
	EtherType uint16
}

// Fields decodes b.
func (b VLAN) Fields() VLANFields { return VLANFields{TCI: b.TCI(), EtherType: b.EtherType()} }

// Encode writes f into b, which must hold VLANTagLen bytes.
func (f *VLANFields) Encode(b VLAN) {
	b.SetTCI(f.TCI)
	b.SetEtherType(f.EtherType)
}
