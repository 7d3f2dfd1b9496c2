package verbs

import "strconv"

// MTU is a path MTU (enum ibv_mtu): 1 for 256 bytes up to 5 for 4096.
type MTU uint8

// Path MTUs.
const (
	MTU256  MTU = 1 // IBV_MTU_256
	MTU512  MTU = 2 // IBV_MTU_512
	MTU1024 MTU = 3 // IBV_MTU_1024 (rxe on a 1500-byte Ethernet MTU)
	MTU2048 MTU = 4 // IBV_MTU_2048
	MTU4096 MTU = 5 // IBV_MTU_4096
)

// Bytes returns the MTU in bytes (perftest's MTU_SIZE), or 0 for an
// invalid value.
func (m MTU) Bytes() int {
	if !m.Valid() {
		return 0
	}
	return 128 << m
}

// Valid reports whether m is one of the five IBTA MTUs.
func (m MTU) Valid() bool { return m >= MTU256 && m <= MTU4096 }

// String returns the MTU in bytes, e.g. "1024".
func (m MTU) String() string {
	if !m.Valid() {
		return "MTU(" + strconv.Itoa(int(m)) + ")"
	}
	return strconv.Itoa(m.Bytes())
}

// MTUFromBytes returns the MTU of exactly n bytes (256, 512, 1024, 2048 or
// 4096, what tools accept for -m), and whether n is one of them.
func MTUFromBytes(n int) (MTU, bool) {
	for m := MTU256; m <= MTU4096; m++ {
		if m.Bytes() == n {
			return m, true
		}
	}
	return 0, false
}

// PortHeaderRoom is what rdma_rxe subtracts from the netdev MTU before
// rounding down to an IBTA MTU (RXE_MAX_HDR_LENGTH): room for the IP, UDP
// and transport headers and the ICRC around a full-MTU payload.
const PortHeaderRoom = 80

// PortMTU returns the active MTU of a port on a network interface whose
// MTU is ifaceMTU, as rdma_rxe computes it: the interface MTU less
// PortHeaderRoom, rounded down to an IBTA MTU, never below 256 (1500 gives
// 1024, 9000 gives 4096).
func PortMTU(ifaceMTU int) MTU {
	n := ifaceMTU - PortHeaderRoom
	m := MTU4096
	for m > MTU256 && m.Bytes() > n {
		m--
	}
	return m
}
