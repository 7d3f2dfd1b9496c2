// Package oob implements the out-of-band TCP exchanges that the reference
// RDMA tools run around their data transfers, their command lines and
// their output lines, so that a sroce tool and the real one can be the two
// sides of a test. It knows nothing about QPs: callers pass their QP
// numbers, PSNs, keys and GIDs in and get the peer's back.
//
// Two families are covered, in the versions Debian bookworm ships:
//
//   - rdma-core 44.0's ibv_rc_pingpong and ibv_ud_pingpong: one 52-byte
//     address message each way and a "done" (pingpong.go; Dest,
//     PingpongClient, PingpongServer; ParsePingpong; PingpongLocalLine and
//     friends).
//   - perftest 4.5-0.17's ib_{send,write,read,atomic}_{bw,lat}: a version
//     string ("6.06"), page and cache line sizes, the MTU, then 108-byte
//     key messages per QP and barriers, BW result reports and a final
//     "done" (perftest_wire.go for the messages, Conn for the steps, Flow
//     and Conn.Run for each tool's order of steps; ParsePerftest,
//     TestInfo, AddressLine, BWRow, LatRow for the command line and the
//     output).
//
// Every step runs under a deadline (Timeouts, and the caller's context),
// and every failure is an *ExchangeError whose message is one sentence
// and which matches ErrPeerClosed, ErrTimeout, ErrMalformed, ErrVersion or
// ErrConnect with errors.Is.
//
// The formats were read in the tools' sources (rdma-core tag v44.0,
// libibverbs/examples; perftest tag v4.5-0.17, src/perftest_*.c and the
// main() of each tool) and checked against captures of the real tools
// between two rdma_rxe guests, which testdata/real-*.txt hold and the
// tests replay against this package.
package oob
