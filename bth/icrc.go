package bth

import (
	"encoding/binary"
	"hash/crc32"
)

// The invariant CRC covers everything from the IP header to the end of the
// payload and pad, with the fields that may change in flight masked to ones:
//
//	8 bytes of 0xff (stand-in for the InfiniBand LRH)
//	IPv4: TOS, TTL and header checksum masked
//	IPv6: traffic class, flow label and hop limit masked
//	UDP:  checksum masked
//	BTH:  byte 4 (FECN, BECN, reserved) masked
//	the rest of the transport headers, payload and pad, unmasked
//
// The CRC is CRC-32 (IEEE) and is written to the wire least significant byte
// first.

// icrcLRHLen is the number of 0xff bytes that stand in for the LRH at the
// start of the ICRC input.
const icrcLRHLen = 8

const maxMaskedLen = icrcLRHLen + IPv4MaxLen + UDPLen + BTHLen

// ICRC computes the invariant CRC of a RoCEv2 datagram. ip runs from the
// first byte of the IP header to the end of the ICRC field; the last four
// bytes (the ICRC itself) are not covered. ip must be a well-formed datagram
// (as located by Packet.Parse or built by Build).
func ICRC(ip []byte, ipv6 bool) uint32 {
	var buf [maxMaskedLen]byte
	for i := 0; i < icrcLRHLen; i++ {
		buf[i] = 0xff
	}
	var hl int
	if ipv6 {
		hl = IPv6Len
		h := IPv6(buf[icrcLRHLen : icrcLRHLen+IPv6Len])
		copy(h, ip[:hl])
		h.SetTrafficClass(0xff)
		h.SetFlowLabel(0xfffff)
		h.SetHopLimit(0xff)
	} else {
		hl = IPv4(ip).HeaderLen()
		h := IPv4(buf[icrcLRHLen : icrcLRHLen+IPv4MinLen])
		copy(buf[icrcLRHLen:], ip[:hl])
		h.SetTOS(0xff)
		h.SetTTL(0xff)
		h.SetChecksum(0xffff)
	}
	n := icrcLRHLen + hl
	copy(buf[n:], ip[hl:hl+UDPLen+BTHLen])
	UDP(buf[n : n+UDPLen]).SetChecksum(0xffff)
	BTH(buf[n+UDPLen : n+UDPLen+BTHLen]).maskICRC()
	n += UDPLen + BTHLen
	// The masked headers are hashed here, on the stack, with a slicing-by-8
	// loop: handing buf to hash/crc32 would move it to the heap. The rest of
	// the packet goes to hash/crc32, which uses carry-less multiply.
	crc := crcSlicing8(0, buf[:n])
	return crc32.Update(crc, crc32.IEEETable, ip[hl+UDPLen+BTHLen:len(ip)-ICRCLen])
}

var slicing8 [8][256]uint32

func init() {
	slicing8[0] = *crc32.IEEETable
	for i := 0; i < 256; i++ {
		c := slicing8[0][i]
		for t := 1; t < 8; t++ {
			c = slicing8[0][c&0xff] ^ c>>8
			slicing8[t][i] = c
		}
	}
}

// crcSlicing8 continues the CRC-32 (IEEE) crc over p, like crc32.Update.
func crcSlicing8(crc uint32, p []byte) uint32 {
	crc = ^crc
	for len(p) >= 8 {
		crc ^= binary.LittleEndian.Uint32(p)
		crc = slicing8[0][p[7]] ^ slicing8[1][p[6]] ^ slicing8[2][p[5]] ^ slicing8[3][p[4]] ^
			slicing8[4][crc>>24] ^ slicing8[5][crc>>16&0xff] ^ slicing8[6][crc>>8&0xff] ^ slicing8[7][crc&0xff]
		p = p[8:]
	}
	for _, b := range p {
		crc = slicing8[0][byte(crc)^b] ^ crc>>8
	}
	return ^crc
}

// CarriedICRC returns the ICRC stored in the last four bytes of b, a
// datagram or frame that ends with its ICRC field.
func CarriedICRC(b []byte) uint32 { return binary.LittleEndian.Uint32(b[len(b)-ICRCLen:]) }

// PutICRC computes the ICRC of the datagram ip (see ICRC) and stores it in
// its last four bytes.
func PutICRC(ip []byte, ipv6 bool) {
	binary.LittleEndian.PutUint32(ip[len(ip)-ICRCLen:], ICRC(ip, ipv6))
}
