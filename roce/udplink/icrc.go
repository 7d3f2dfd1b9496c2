package udplink

// Checking the ICRC of an IPv4 datagram whose Identification is unknown.
//
// A UDP socket shows the payload, the source address and port, and (the
// socket being bound to one unicast address) the destination; TOS, TTL and
// the header checksum are masked out of the ICRC anyway. What it hides is
// the 16-bit Identification, which the ICRC covers. The link puts a header
// with ID 0 and DF in front of the datagram, as the kernel sends them from
// an unconnected don't-fragment socket (so traffic between two sroce UDP
// links matches at once), and when the ICRC does not match it solves for the
// ID that would make it match.
//
// CRC-32 is affine over GF(2): for messages of the same length,
// crc(m ^ e) = crc(m) ^ raw(e), where raw is the register update from a zero
// register without the final inversion. With e zero except the two ID bytes,
// raw(e) = E(x) * x^(8*t + 32) mod P, where E(x) is the 16-bit polynomial of
// the two bytes and t the number of bytes that follow them. So the syndrome
// s = received ^ computed determines E(x) = s * x^-(8*t + 32) mod P, and a
// solution exists exactly when E has degree below 16, i.e. when the 16
// coefficients that the two bytes cannot produce are zero. A random or
// forged ICRC passes with probability 2^-16 (2^16 acceptable values out of
// 2^32); that is the strength of the check, and the reason the result is
// counted apart from a plain match.
//
// Polynomials are 32-bit words in the reflected order hash/crc32 uses: bit 31
// is the coefficient of x^0, bit 0 that of x^31.

import "github.com/sroce/sroce/bth"

const (
	crcPoly = 0xedb88320 // CRC-32 (IEEE), reflected, without the x^32 term
	crcOne  = 1 << 31    // the polynomial 1
)

// mulX multiplies a by x modulo P.
func mulX(a uint32) uint32 {
	if a&1 != 0 {
		return a>>1 ^ crcPoly
	}
	return a >> 1
}

// divX divides a by x modulo P (the inverse of mulX: P has a constant
// term, so mulX sets bit 31 exactly when it reduced).
func divX(a uint32) uint32 {
	if a&crcOne != 0 {
		return (a^crcPoly)<<1 | 1
	}
	return a << 1
}

// mulMod multiplies a and b modulo P.
func mulMod(a, b uint32) uint32 {
	var p uint32
	for m := uint32(crcOne); a&(m<<1-1) != 0 && m != 0; m >>= 1 {
		if a&m != 0 {
			p ^= b
		}
		b = mulX(b)
	}
	return p
}

// xInvBytes[i] is x^(-8*i) and xInvBytes256[j] is x^(-8*256*j) modulo P,
// so that x^(-8*n) for n < 65536 is one product of two entries.
var xInvBytes, xInvBytes256 [256]uint32

func init() {
	inv8 := uint32(crcOne)
	for i := 0; i < 8; i++ {
		inv8 = divX(inv8)
	}
	xInvBytes[0] = crcOne
	for i := 1; i < 256; i++ {
		xInvBytes[i] = mulMod(xInvBytes[i-1], inv8)
	}
	step := mulMod(xInvBytes[255], inv8)
	xInvBytes256[0] = crcOne
	for j := 1; j < 256; j++ {
		xInvBytes256[j] = mulMod(xInvBytes256[j-1], step)
	}
}

// The ICRC input starts with 8 bytes standing for the LRH, then the IPv4
// header, whose Identification is at bth.IPv4IDOffset.
const icrcLRHLen = 8

// solveIPv4ID returns the IPv4 Identification that explains a syndrome
// (the received ICRC xor the ICRC computed with Identification 0) of a
// datagram whose UDP payload (BTH to ICRC inclusive) is payLen bytes, and
// whether one exists. Everything else in the header must already be as the
// sender had it.
func solveIPv4ID(syndrome uint32, payLen int) (uint16, bool) {
	// ICRC input length: LRH stand-in, IPv4 and UDP headers, the payload
	// without the ICRC. t counts the bytes after the two ID bytes; the
	// exponent is 8*t + 32 bits, a whole number t+4 of bytes.
	n := icrcLRHLen + bth.IPv4MinLen + bth.UDPLen + payLen - bth.ICRCLen
	k := n - (icrcLRHLen + bth.IPv4IDOffset + 2) + 4
	if k < 0 || k >= 1<<16 {
		return 0, false
	}
	e := mulMod(mulMod(syndrome, xInvBytes[k&0xff]), xInvBytes256[k>>8])
	// The first ID byte holds the coefficients of x^15..x^8 (bits 16..23,
	// least significant bit first as the CRC consumes it), the second those
	// of x^7..x^0 (bits 24..31). Anything in bits 0..15 is unreachable.
	if e&0xffff != 0 {
		return 0, false
	}
	return uint16(e>>16&0xff)<<8 | uint16(e>>24), true
}

// checkIPv4 checks the ICRC of a frame the link synthesized (IPv4, ID 0, DF)
// and, when it does not match, looks for the Identification that makes it
// match and writes it into the header (and fixes the header checksum). It
// reports whether the ICRC matched, recovered whether it did so only with a
// recovered ID. A datagram too short to hold a BTH and an ICRC is left to
// the engine's parser.
func checkIPv4(frame []byte) (ok, recovered bool) {
	ip := frame[bth.EthernetLen:]
	payLen := len(ip) - bth.IPv4MinLen - bth.UDPLen
	if payLen < bth.BTHLen+bth.ICRCLen {
		return true, false
	}
	got := bth.CarriedICRC(ip)
	want := bth.ICRC(ip, false)
	if got == want {
		return true, false
	}
	id, ok := solveIPv4ID(got^want, payLen)
	if !ok {
		return false, false
	}
	h := bth.IPv4(ip[:bth.IPv4MinLen])
	h.SetID(id)
	h.SetChecksum(0)
	h.SetChecksum(bth.IPv4Checksum(h))
	return true, true
}
