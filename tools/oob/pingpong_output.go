package oob

// Defaults and output lines of ibv_rc_pingpong and ibv_ud_pingpong
// (rdma-core 44.0).

import (
	"fmt"
	"strconv"
	"time"
)

// Defaults shared by ibv_rc_pingpong and ibv_ud_pingpong.
const (
	PingpongPort    = 18515 // -p
	PingpongIBPort  = 1     // -i
	PingpongRxDepth = 500   // -r: receives posted at a time
	PingpongIters   = 1000  // -n
	PingpongSL      = 0     // -l
	PingpongGIDIdx  = -1    // -g: no GID, so no GRH (RoCE needs -g)
	// PingpongGRHHopLimit is the hop limit both tools put in the GRH
	// (used when the peer's GID has a nonzero interface ID).
	PingpongGRHHopLimit = 1
)

// Defaults of ibv_rc_pingpong and the QP attributes it uses.
const (
	RCPingpongSize = 4096 // -s
	RCPingpongMTU  = 1024 // -m, path MTU in bytes

	RCMinRNRTimer     = 12 // RTR: min_rnr_timer
	RCMaxDestRdAtomic = 1  // RTR: max_dest_rd_atomic
	RCTimeout         = 14 // RTS: timeout (4.096us << 14 = 67ms)
	RCRetryCnt        = 7  // RTS: retry_cnt
	RCRNRRetry        = 7  // RTS: rnr_retry (7: retry forever)
	RCMaxRdAtomic     = 1  // RTS: max_rd_atomic
)

// Defaults of ibv_ud_pingpong. Its usage text claims a default size of
// 2048 but the code uses 1024; the size must not exceed the port's active
// MTU, which UD uses as its path MTU (there is no -m).
const (
	UDPingpongSize = 1024       // -s
	UDQKey         = 0x11111111 // Q_Key of both sides' UD QPs
	// UDGRHSpace is the room for the GRH at the start of every UD receive
	// buffer: receives are posted with size+40 bytes, sends start 40 bytes
	// into the buffer.
	UDGRHSpace = 40
)

// PingpongLocalLine is ibv_rc_pingpong's line about this side, printed
// before the exchange:
//
//	"  local address:  LID 0x0000, QPN 0x000011, PSN 0x123456, GID ::ffff:10.0.0.1"
func PingpongLocalLine(d Dest) string {
	return fmt.Sprintf("  local address:  LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n", d.LID, d.QPN, d.PSN, FormatGID(d.GID))
}

// UDPingpongLocalLine is ibv_ud_pingpong's version of the local line,
// which has a colon instead of a comma before "GID":
//
//	"  local address:  LID 0x0000, QPN 0x000012, PSN 0xe6354a: GID ::ffff:192.0.2.2"
func UDPingpongLocalLine(d Dest) string {
	return fmt.Sprintf("  local address:  LID 0x%04x, QPN 0x%06x, PSN 0x%06x: GID %s\n", d.LID, d.QPN, d.PSN, FormatGID(d.GID))
}

// PingpongRemoteLine is the line about the peer both tools print after
// the exchange:
//
//	"  remote address: LID 0x0000, QPN 0x000011, PSN 0x0d079a, GID ::ffff:192.0.2.2"
func PingpongRemoteLine(d Dest) string {
	return fmt.Sprintf("  remote address: LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n", d.LID, d.QPN, d.PSN, FormatGID(d.GID))
}

// PingpongResultLines are the two result lines both tools print at the end
// for size-byte messages, iters round trips and the elapsed time:
//
//	"8192000 bytes in 0.01 seconds = 6553.60 Mbit/sec"
//	"1000 iters in 0.01 seconds = 10.00 usec/iter"
//
// The tools count bytes both ways (size*iters*2) and keep the elapsed
// microseconds in a C float, so the arithmetic below is done the same way
// (float32 where they use float) to print the same digits.
func PingpongResultLines(size, iters uint32, elapsed time.Duration) string {
	usec := float32(elapsed.Microseconds())
	bytes := int64(size) * int64(iters) * 2
	secs := float64(usec) / 1000000.
	mbit := float64(bytes) * 8. / float64(usec)
	perIter := usec / float32(iters)
	return strconv.FormatInt(bytes, 10) + " bytes in " + cFloat(secs, 0, 2) + " seconds = " + cFloat(mbit, 0, 2) + " Mbit/sec\n" +
		strconv.FormatInt(int64(int32(iters)), 10) + " iters in " + cFloat(secs, 0, 2) + " seconds = " + cFloat(float64(perIter), 0, 2) + " usec/iter\n"
}
