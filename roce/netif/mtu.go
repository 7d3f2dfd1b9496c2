package netif

import (
	"fmt"

	"github.com/sroce/sroce/qp"
)

// HeaderRoom is what rxe subtracts from the netdev MTU before rounding down
// to an InfiniBand MTU (RXE_MAX_HDR_LENGTH): room for the IP, UDP and
// transport headers and the ICRC around a full-MTU payload.
const HeaderRoom = 80

// MaxPathMTU is the largest InfiniBand MTU, rxe's max_mtu.
const MaxPathMTU = 4096

// MTU is an InfiniBand MTU as the verbs enum (enum ibv_mtu): MTU256 = 1 up
// to MTU4096 = 5. ibv_devinfo prints it as "1024 (3)". It is the engine's
// path MTU type.
type MTU = qp.MTU

// InfiniBand MTUs.
const (
	MTU256  = qp.MTU256
	MTU512  = qp.MTU512
	MTU1024 = qp.MTU1024
	MTU2048 = qp.MTU2048
	MTU4096 = qp.MTU4096
)

// MTUFromBytes returns the enum value of an MTU given in bytes, which must
// be exactly 256, 512, 1024, 2048 or 4096 (what tools accept for -m).
func MTUFromBytes(n int) (MTU, error) {
	for m := MTU256; m <= MTU4096; m++ {
		if m.Bytes() == n {
			return m, nil
		}
	}
	return 0, fmt.Errorf("netif: invalid InfiniBand MTU %d (want 256, 512, 1024, 2048 or 4096)", n)
}

// PathMTUEnum returns the active MTU rxe gives a port whose netdev has MTU
// ifMTU: ifMTU - HeaderRoom rounded down to 256..4096, never below 256.
func PathMTUEnum(ifMTU int) MTU {
	n := ifMTU - HeaderRoom
	m := MTU4096
	for m > MTU256 && m.Bytes() > n {
		m--
	}
	return m
}

// PathMTU returns the active path MTU in bytes for an interface MTU, as
// rxe computes it: 1500 -> 1024, 9000 -> 4096, 1100 -> 512.
func PathMTU(ifMTU int) int { return PathMTUEnum(ifMTU).Bytes() }
