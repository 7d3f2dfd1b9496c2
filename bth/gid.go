package bth

import (
	"encoding/hex"
	"net/netip"
)

// GID is a 128-bit global identifier. For RoCEv2 it is the IP address of
// the port: an IPv6 address, or an IPv4 address in IPv4-mapped form
// (::ffff:a.b.c.d).
type GID [16]byte

// GIDFromAddr returns the GID of an IP address.
func GIDFromAddr(a netip.Addr) GID { return GID(a.As16()) }

// Addr returns the IP address of g; IPv4-mapped GIDs give IPv4 addresses.
func (g GID) Addr() netip.Addr { return netip.AddrFrom16(g).Unmap() }

// IsIPv4 reports whether g is an IPv4-mapped GID.
func (g GID) IsIPv4() bool { return netip.AddrFrom16(g).Is4In6() }

// IsMulticast reports whether g is a multicast GID: an IPv6 multicast
// address (ff00::/8) or an IPv4-mapped one (224.0.0.0/4).
func (g GID) IsMulticast() bool { return g.Addr().IsMulticast() }

// MulticastMAC returns the Ethernet address that frames to the multicast
// group g go to: 01:00:5e and the low 23 bits of an IPv4 group, 33:33 and
// the low 32 bits of an IPv6 one. ok is false when g is not multicast.
func (g GID) MulticastMAC() (mac [MACLen]byte, ok bool) {
	if !g.IsMulticast() {
		return mac, false
	}
	if g.IsIPv4() {
		return [MACLen]byte{0x01, 0x00, 0x5e, g[13] & 0x7f, g[14], g[15]}, true
	}
	return [MACLen]byte{0x33, 0x33, g[12], g[13], g[14], g[15]}, true
}

// IsZero reports whether g is all zeros.
func (g GID) IsZero() bool { return g == GID{} }

// String formats g as eight groups of four hex digits, as ibv_devinfo
// prints GIDs (e.g. 0000:0000:0000:0000:0000:ffff:0a00:0001).
func (g GID) String() string {
	var b [39]byte
	const hx = "0123456789abcdef"
	for i := 0; i < 8; i++ {
		o := i * 5
		b[o] = hx[g[2*i]>>4]
		b[o+1] = hx[g[2*i]&15]
		b[o+2] = hx[g[2*i+1]>>4]
		b[o+3] = hx[g[2*i+1]&15]
		if i < 7 {
			b[o+4] = ':'
		}
	}
	return string(b[:])
}

// ParseGID parses a GID written as an IP address (IPv4 gives the mapped
// form), as eight colon-separated groups of four hex digits, or as 32 hex
// digits.
func ParseGID(s string) (GID, error) {
	if a, err := netip.ParseAddr(s); err == nil {
		return GIDFromAddr(a), nil
	}
	var g GID
	clean := make([]byte, 0, 32)
	for i := 0; i < len(s); i++ {
		if s[i] != ':' {
			clean = append(clean, s[i])
		}
	}
	if len(clean) != 32 {
		return g, errAt(LayerAny, KindOutOfRange)
	}
	if _, err := hex.Decode(g[:], clean); err != nil {
		return g, errAt(LayerAny, KindOutOfRange)
	}
	return g, nil
}
