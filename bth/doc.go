// Package bth holds sroce's wire formats: the InfiniBand transport headers
// carried by RoCEv2 (BTH, RETH, AETH, AtomicETH, AtomicAckETH, ImmDt, IETH,
// DETH, FETH), the opcode table, 24-bit PSN and QPN arithmetic, the RoCEv2
// encapsulation (Ethernet, optional 802.1Q tag, IPv4 or IPv6, UDP port 4791)
// and the invariant CRC (ICRC).
//
// A RoCEv2 frame looks like this:
//
//	+----------+--------+----------+-----+-----+-----------+---------+-----+------+
//	| Ethernet | [VLAN] | IPv4/IPv6| UDP | BTH | ext. hdrs | payload | pad | ICRC |
//	|    14    |  [4]   |  20/40   |  8  | 12  |  0..28    |  0..MTU | 0-3 |  4   |
//	+----------+--------+----------+-----+-----+-----------+---------+-----+------+
//
// Header types are accessors over []byte in the style of gVisor's
// pkg/tcpip/header: a BTH is a []byte of at least BTHLen bytes with getters
// and setters, and BTHFields is the decoded form with an Encode method. The
// encapsulation headers are the same kind of type: Ethernet, VLAN (the
// 802.1Q tag), IPv4, IPv6 and UDP.
// Accessors do not check lengths; Parse does, once, for the whole frame, and
// returns a Packet that locates every header and the payload without copying
// or allocating.
package bth
