package oob

import (
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/sroce/sroce/bth"
)

// The tools carry GIDs as bth.GID: 16 bytes in wire (network) byte order,
// for RoCEv2 an IPv6 address or an IPv4-mapped one (::ffff:a.b.c.d) for an
// IPv4 interface address. What differs is how the tools print and test
// them, below.

// FormatGID formats g as glibc's inet_ntop(AF_INET6) does, which is what
// the rdma-core pingpong tools print: the longest run of two or more zero
// groups (the first of equal runs) becomes "::", and an address whose
// first 96 bits are zero, or zero followed by ffff, ends in dotted IPv4
// ("::ffff:192.0.2.1", "::10.0.0.1"). Unlike Go's netip it prints the
// deprecated IPv4-compatible form the same way glibc does; unlike
// bth.GID's String (ibv_devinfo's eight groups of four digits) it
// compresses zeros.
func FormatGID(g bth.GID) string {
	var w [8]uint16
	for i := range w {
		w[i] = uint16(g[2*i])<<8 | uint16(g[2*i+1])
	}
	// Find the longest run of zero groups (ties: the first).
	bestBase, bestLen := -1, 0
	for i := 0; i < 8; {
		if w[i] != 0 {
			i++
			continue
		}
		j := i
		for j < 8 && w[j] == 0 {
			j++
		}
		if j-i > bestLen {
			bestBase, bestLen = i, j-i
		}
		i = j
	}
	if bestLen < 2 {
		bestBase = -1
	}
	var b strings.Builder
	for i := 0; i < 8; i++ {
		if bestBase >= 0 && i >= bestBase && i < bestBase+bestLen {
			if i == bestBase {
				b.WriteByte(':')
			}
			continue
		}
		if i != 0 {
			b.WriteByte(':')
		}
		if i == 6 && bestBase == 0 && (bestLen == 6 || (bestLen == 5 && w[5] == 0xffff)) {
			fmt.Fprintf(&b, "%d.%d.%d.%d", g[12], g[13], g[14], g[15])
			return b.String()
		}
		b.WriteString(strconv.FormatUint(uint64(w[i]), 16))
	}
	if bestBase >= 0 && bestBase+bestLen == 8 {
		b.WriteByte(':')
	}
	return b.String()
}

// GIDInterfaceID returns the low 64 bits of g. The pingpong tools address
// the peer through a GRH only when the peer's interface ID is nonzero.
func GIDInterfaceID(g bth.GID) uint64 {
	var v uint64
	for _, c := range g[8:] {
		v = v<<8 | uint64(c)
	}
	return v
}

// GIDIsIPv4Mapped reports whether g is ::ffff:a.b.c.d (or the IPv4-mapped
// multicast form ff0e::ffff:a.b.c.d), the test perftest applies before
// refusing a peer whose GID is of the other IP version. bth.GID's IsIPv4
// does not take the multicast form.
func GIDIsIPv4Mapped(g bth.GID) bool {
	mapped := [12]byte{10: 0xff, 11: 0xff}
	if [12]byte(g[:12]) == mapped {
		return true
	}
	mcast := [12]byte{0: 0xff, 1: 0x0e, 10: 0xff, 11: 0xff}
	return [12]byte(g[:12]) == mcast
}

// WireGID returns g as the pingpong tools put it in their address message:
// 32 lower-case hex digits. rdma-core's gid_to_wire_gid copies the GID into
// four host-order 32-bit words and prints each with "%08x" after htobe32;
// on either byte order the digits come out in the GID's own byte order, so
// this is simply the hex of the 16 bytes (checked against a capture of
// ibv_rc_pingpong between two rxe guests, testdata/real-*.txt).
func WireGID(g bth.GID) string { return hex.EncodeToString(g[:]) }

// ParseWireGID parses the 32 hex digits of a pingpong address message.
func ParseWireGID(s string) (bth.GID, error) {
	var g bth.GID
	if len(s) != 32 {
		return g, fmt.Errorf("GID %q is not 32 hex digits", s)
	}
	if _, err := hex.Decode(g[:], []byte(s)); err != nil {
		return g, fmt.Errorf("GID %q is not 32 hex digits", s)
	}
	return g, nil
}
