package oob

import (
	"fmt"

	"github.com/sroce/sroce/internal/cli"
)

// flagList builds a flags section line by line.
type flagList []cli.Help

// add appends the flag -short/--long taking a value named arg ("" for a
// switch).
func (l *flagList) add(short byte, long, arg, format string, args ...any) {
	*l = append(*l, cli.Help{Short: short, Long: long, Arg: arg, Text: fmt.Sprintf(format, args...)})
}

// deviceText and queuesText are the lines of sroce's own -d and --queues.
const (
	deviceText = "network interface to use, or IF@ADDR to bind the UDP link to ADDR (--ib-dev is the same)"
	queuesText = "receive queues of the interface the device uses, one engine each (default: SROCE_QUEUES, else the queue count capped by the CPUs)"
)

// PerftestFlags returns the flags section of test's usage: the options
// of the perftest tool that sroce implements, with their defaults.
func PerftestFlags(test Test) []cli.Help {
	var l flagList
	verb := test.Verb()
	if verb != VerbAtomic {
		l.add('a', "all", "", "run every size from 2 to 2^23 bytes")
	} else {
		l.add('A', "atomic_type", "TYPE", "CMP_AND_SWAP or FETCH_AND_ADD (default FETCH_AND_ADD)")
	}
	if test.IsBW() {
		l.add('b', "bidirectional", "", "measure both directions at once")
	}
	switch verb {
	case VerbSend:
		l.add('c', "connection", "TYPE", "RC, UC or UD (default RC)")
	case VerbWrite:
		l.add('c', "connection", "TYPE", "RC or UC (default RC)")
	default:
		l.add('c', "connection", "TYPE", "RC (default RC)")
	}
	if !test.IsBW() {
		l.add('C', "report-cycles", "", "report in clock ticks instead of microseconds")
	}
	l.add('d', "device", "IF", deviceText)
	l.add('D', "duration", "SEC", "run for SEC seconds instead of a number of iterations")
	if verb != VerbWrite {
		l.add('e', "events", "", "sleep on completion events instead of polling")
	}
	l.add('f', "margin", "SEC", "leave out SEC at both ends of a -D run (default duration/4)")
	l.add('F', "CPU-freq", "", "accepted for compatibility")
	if !test.IsBW() {
		l.add('H', "report-histogrm", "", "print every sample")
	}
	l.add('i', "ib-port", "PORT", "port of the device (default %d)", DefIBPort)
	if verb != VerbRead && verb != VerbAtomic {
		l.add('I', "inline_size", "SIZE", "largest message sent inline")
	}
	if test.IsBW() {
		l.add('l', "post_list", "N", "post N work requests at a time")
	}
	l.add('m', "mtu", "MTU", "path MTU: 256, 512, 1024, 2048 or 4096 (default: the port's)")
	iters := DefIters
	if test == WriteBW {
		iters = DefItersWriteBW
	}
	l.add('n', "iters", "N", "iterations, at least %d (default %d)", minIter, iters)
	if test.IsBW() {
		l.add('N', "noPeak", "", "do not compute the peak bandwidth")
	}
	if verb == VerbRead || verb == VerbAtomic {
		l.add('o', "outs", "N", "outstanding reads/atomics (default: the device maximum)")
	}
	l.add('p', "port", "PORT", "TCP port of the exchange (default %d)", DefPort)
	if test.IsBW() {
		l.add('q', "qp", "N", "number of QPs (default %d)", DefNumQPs)
		l.add('Q', "cq-mod", "N", "one completion every N work requests (default %d)", DefCQMod)
	}
	if verb == VerbSend {
		l.add('r', "rx-depth", "N", "receive queue depth (default %d)", DefRxDepthSend)
	}
	l.add('R', "rdma_cm", "", "connect the QPs and run the exchange with RDMA CM (RC)")
	if verb != VerbAtomic {
		size := DefSizeBW
		if !test.IsBW() {
			size = DefSizeLat
		}
		l.add('s', "size", "SIZE", "message size, K and M suffixes allowed (default %d)", size)
	}
	l.add('S', "sl", "SL", "service level (default %d)", DefSL)
	if test.IsBW() {
		l.add('t', "tx-depth", "N", "send queue depth (default %d)", DefTxDepthBW)
	}
	l.add('u', "qp-timeout", "T", "QP timeout, 4.096us * 2^T (default %d)", DefQPTimeout)
	if !test.IsBW() {
		l.add('U', "report-unsorted", "", "print every sample in measurement order")
	}
	l.add('x', "gid-index", "INDEX", "GID index (default: one chosen like perftest does)")
	l.add('z', "comm_rdma_cm", "", "run the exchange over RDMA CM instead of TCP")
	l.add(0, "ipv6", "", "prefer an IPv6 GID")
	l.add(0, "output", "WHAT", "print only bandwidth, message_rate or latency")
	if test.IsBW() {
		l.add(0, "report_gbits", "", "report Gb/s instead of MB/s")
		l.add(0, "report-both", "", "with -b, report each direction separately")
		l.add(0, "reversed", "", "the server sends to the client")
	}
	l.add(0, "tclass", "TC", "traffic class of the GRH")
	l.add(0, "queues", "N", queuesText)
	l = append(l, cli.HelpFlag)
	l.add('V', "version", "", "print the version of sroce and exit")
	return l
}

// PingpongFlags returns the flags section of the RC or UD pingpong tool's
// usage.
func PingpongFlags(ud bool) []cli.Help {
	var l flagList
	size := RCPingpongSize
	if ud {
		size = UDPingpongSize
	}
	l.add('p', "port", "PORT", "TCP port of the exchange (default %d)", PingpongPort)
	l.add('d', "device", "IF", deviceText)
	l.add('i', "ib-port", "PORT", "port of the device (default %d)", PingpongIBPort)
	l.add('s', "size", "SIZE", "message size (default %d)", size)
	if !ud {
		l.add('m', "mtu", "MTU", "path MTU (default %d)", RCPingpongMTU)
	}
	l.add('r', "rx-depth", "N", "receives posted at a time (default %d)", PingpongRxDepth)
	l.add('n', "iters", "N", "number of exchanges (default %d)", PingpongIters)
	l.add('l', "sl", "SL", "service level (default %d)", PingpongSL)
	l.add('e', "events", "", "sleep on completion events instead of polling")
	l.add('g', "gid-idx", "INDEX", "local GID index (needed on RoCE)")
	l.add('c', "chk", "", "check the received data")
	l.add(0, "queues", "N", queuesText)
	return append(l, cli.HelpFlag, cli.VersionFlag)
}
