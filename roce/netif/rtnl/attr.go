package rtnl

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"golang.org/x/sys/unix"
)

// Attribute layout (struct nlattr), each attribute padded to 4 bytes:
//
//	0      2      4
//	+------+------+-------------------+
//	| len  | type | value (len-4)     |
//	+------+------+-------------------+
const (
	attrHdrLen = 4
	// Flag bits of the type field (NLA_F_NESTED, NLA_F_NET_BYTEORDER);
	// Attr.Type has them cleared.
	attrNested    = 0x8000
	attrByteOrder = 0x4000
)

// Attr is one netlink attribute.
type Attr struct {
	Type uint16 // flag bits (NLA_F_NESTED, NLA_F_NET_BYTEORDER) cleared
	Data []byte
}

// ParseAttrs splits b into attributes. Data slices point into b.
func ParseAttrs(b []byte) ([]Attr, error) {
	var attrs []Attr
	for len(b) >= attrHdrLen {
		l := int(binary.NativeEndian.Uint16(b[0:]))
		t := binary.NativeEndian.Uint16(b[2:]) &^ (attrNested | attrByteOrder)
		if l < attrHdrLen || l > len(b) {
			return attrs, fmt.Errorf("rtnl: bad attribute length %d (%d bytes left)", l, len(b))
		}
		attrs = append(attrs, Attr{Type: t, Data: b[attrHdrLen:l]})
		l = alignUp(l)
		if l >= len(b) {
			break
		}
		b = b[l:]
	}
	return attrs, nil
}

// Uint8 returns the attribute as a u8 (0 if too short).
func (a Attr) Uint8() uint8 {
	if len(a.Data) < 1 {
		return 0
	}
	return a.Data[0]
}

// Uint32 returns the attribute as a host-order u32 (0 if too short).
func (a Attr) Uint32() uint32 {
	if len(a.Data) < 4 {
		return 0
	}
	return binary.NativeEndian.Uint32(a.Data)
}

// String returns the attribute as a NUL-terminated string.
func (a Attr) String() string { return cString(a.Data) }

// Addr returns the attribute as an IPv4 or IPv6 address (invalid if it is
// neither 4 nor 16 bytes long).
func (a Attr) Addr() netip.Addr {
	switch len(a.Data) {
	case 4:
		return netip.AddrFrom4([4]byte(a.Data))
	case 16:
		return netip.AddrFrom16([16]byte(a.Data))
	}
	return netip.Addr{}
}

// Encoder builds a message body: a fixed family header followed by
// attributes. The zero value is ready to use.
type Encoder struct {
	b []byte
}

// Header appends raw bytes (a family header such as ifinfomsg), padded to
// 4 bytes.
func (e *Encoder) Header(b []byte) {
	e.b = append(e.b, b...)
	e.pad()
}

// Bytes appends an attribute with the given value.
func (e *Encoder) Bytes(typ uint16, v []byte) {
	l := attrHdrLen + len(v)
	e.b = binary.NativeEndian.AppendUint16(e.b, uint16(l))
	e.b = binary.NativeEndian.AppendUint16(e.b, typ)
	e.b = append(e.b, v...)
	e.pad()
}

// Uint8 appends a u8 attribute.
func (e *Encoder) Uint8(typ uint16, v uint8) { e.Bytes(typ, []byte{v}) }

// Uint32 appends a host-order u32 attribute.
func (e *Encoder) Uint32(typ uint16, v uint32) {
	e.Bytes(typ, binary.NativeEndian.AppendUint32(nil, v))
}

// String appends a NUL-terminated string attribute.
func (e *Encoder) String(typ uint16, s string) { e.Bytes(typ, append([]byte(s), 0)) }

// Addr appends an address attribute: 4 bytes for IPv4, 16 for IPv6.
func (e *Encoder) Addr(typ uint16, a netip.Addr) { e.Bytes(typ, a.AsSlice()) }

// Nested appends an attribute whose value is built by fn.
func (e *Encoder) Nested(typ uint16, fn func(*Encoder)) {
	start := len(e.b)
	e.b = append(e.b, 0, 0, 0, 0)
	fn(e)
	binary.NativeEndian.PutUint16(e.b[start:], uint16(len(e.b)-start))
	binary.NativeEndian.PutUint16(e.b[start+2:], typ|attrNested)
}

// Encode returns the body built so far.
func (e *Encoder) Encode() []byte { return e.b }

func (e *Encoder) pad() {
	for len(e.b)%unix.NLMSG_ALIGNTO != 0 {
		e.b = append(e.b, 0)
	}
}

// Family headers. Each Encode returns the header's wire form; each Parse
// function decodes it from the start of a message's Data and returns the
// attributes that follow.

// IfInfomsg is struct ifinfomsg, the header of link messages.
type IfInfomsg struct {
	Family uint8
	Type   uint16
	Index  int32
	Flags  uint32
	Change uint32
}

// Encode returns the 16-byte wire form.
func (h IfInfomsg) Encode() []byte {
	b := make([]byte, unix.SizeofIfInfomsg)
	b[0] = h.Family
	binary.NativeEndian.PutUint16(b[2:], h.Type)
	binary.NativeEndian.PutUint32(b[4:], uint32(h.Index))
	binary.NativeEndian.PutUint32(b[8:], h.Flags)
	binary.NativeEndian.PutUint32(b[12:], h.Change)
	return b
}

// ParseIfInfomsg decodes a link message.
func ParseIfInfomsg(b []byte) (IfInfomsg, []Attr, error) {
	if len(b) < unix.SizeofIfInfomsg {
		return IfInfomsg{}, nil, fmt.Errorf("rtnl: link message of %d bytes", len(b))
	}
	h := IfInfomsg{
		Family: b[0],
		Type:   binary.NativeEndian.Uint16(b[2:]),
		Index:  int32(binary.NativeEndian.Uint32(b[4:])),
		Flags:  binary.NativeEndian.Uint32(b[8:]),
		Change: binary.NativeEndian.Uint32(b[12:]),
	}
	attrs, err := ParseAttrs(b[unix.SizeofIfInfomsg:])
	return h, attrs, err
}

// IfAddrmsg is struct ifaddrmsg, the header of address messages.
type IfAddrmsg struct {
	Family    uint8
	PrefixLen uint8
	Flags     uint8 // low 8 bits of the flags; IFA_FLAGS carries all 32
	Scope     uint8
	Index     uint32
}

// Encode returns the 8-byte wire form.
func (h IfAddrmsg) Encode() []byte {
	b := make([]byte, unix.SizeofIfAddrmsg)
	b[0], b[1], b[2], b[3] = h.Family, h.PrefixLen, h.Flags, h.Scope
	binary.NativeEndian.PutUint32(b[4:], h.Index)
	return b
}

// ParseIfAddrmsg decodes an address message.
func ParseIfAddrmsg(b []byte) (IfAddrmsg, []Attr, error) {
	if len(b) < unix.SizeofIfAddrmsg {
		return IfAddrmsg{}, nil, fmt.Errorf("rtnl: address message of %d bytes", len(b))
	}
	h := IfAddrmsg{Family: b[0], PrefixLen: b[1], Flags: b[2], Scope: b[3],
		Index: binary.NativeEndian.Uint32(b[4:])}
	attrs, err := ParseAttrs(b[unix.SizeofIfAddrmsg:])
	return h, attrs, err
}

// NdMsg is struct ndmsg, the header of neighbour messages.
type NdMsg struct {
	Family uint8
	Index  int32
	State  uint16 // NUD_*
	Flags  uint8  // NTF_*
	Type   uint8
}

// Encode returns the 12-byte wire form.
func (h NdMsg) Encode() []byte {
	b := make([]byte, unix.SizeofNdMsg)
	b[0] = h.Family
	binary.NativeEndian.PutUint32(b[4:], uint32(h.Index))
	binary.NativeEndian.PutUint16(b[8:], h.State)
	b[10], b[11] = h.Flags, h.Type
	return b
}

// ParseNdMsg decodes a neighbour message.
func ParseNdMsg(b []byte) (NdMsg, []Attr, error) {
	if len(b) < unix.SizeofNdMsg {
		return NdMsg{}, nil, fmt.Errorf("rtnl: neighbour message of %d bytes", len(b))
	}
	h := NdMsg{Family: b[0], Index: int32(binary.NativeEndian.Uint32(b[4:])),
		State: binary.NativeEndian.Uint16(b[8:]), Flags: b[10], Type: b[11]}
	attrs, err := ParseAttrs(b[unix.SizeofNdMsg:])
	return h, attrs, err
}

// RtMsg is struct rtmsg, the header of route messages.
type RtMsg struct {
	Family   uint8
	DstLen   uint8
	SrcLen   uint8
	Tos      uint8
	Table    uint8
	Protocol uint8
	Scope    uint8
	Type     uint8
	Flags    uint32
}

// Encode returns the 12-byte wire form.
func (h RtMsg) Encode() []byte {
	b := make([]byte, unix.SizeofRtMsg)
	b[0], b[1], b[2], b[3] = h.Family, h.DstLen, h.SrcLen, h.Tos
	b[4], b[5], b[6], b[7] = h.Table, h.Protocol, h.Scope, h.Type
	binary.NativeEndian.PutUint32(b[8:], h.Flags)
	return b
}

// ParseRtMsg decodes a route message.
func ParseRtMsg(b []byte) (RtMsg, []Attr, error) {
	if len(b) < unix.SizeofRtMsg {
		return RtMsg{}, nil, fmt.Errorf("rtnl: route message of %d bytes", len(b))
	}
	h := RtMsg{Family: b[0], DstLen: b[1], SrcLen: b[2], Tos: b[3], Table: b[4],
		Protocol: b[5], Scope: b[6], Type: b[7], Flags: binary.NativeEndian.Uint32(b[8:])}
	attrs, err := ParseAttrs(b[unix.SizeofRtMsg:])
	return h, attrs, err
}
