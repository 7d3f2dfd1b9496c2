package oob

import (
	"fmt"
	"strings"
)

// PerftestUsage returns sroce's usage text for test, invoked as prog: the
// options of the perftest tool that sroce implements, with their defaults.
func PerftestUsage(test Test, prog string) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	verb := test.Verb()
	w("Usage:\n  %s [options]          run as server and wait for a client\n", prog)
	w("  %s [options] <host>   run as client of the server at <host>\n\n", prog)
	w("Options (as in perftest's %s):\n", test.ToolName())
	if verb != VerbAtomic {
		w("  -a, --all                 run every size from 2 to 2^23 bytes\n")
	} else {
		w("  -A, --atomic_type=<type>  CMP_AND_SWAP or FETCH_AND_ADD (default FETCH_AND_ADD)\n")
	}
	if test.IsBW() {
		w("  -b, --bidirectional       measure both directions at once\n")
	}
	switch verb {
	case VerbSend:
		w("  -c, --connection=<type>   RC, UC or UD (default RC)\n")
	case VerbWrite:
		w("  -c, --connection=<type>   RC or UC (default RC)\n")
	default:
		w("  -c, --connection=<type>   RC (default RC)\n")
	}
	if !test.IsBW() {
		w("  -C, --report-cycles       report in clock ticks instead of microseconds\n")
	}
	w("  -d, --ib-dev=<if>         network interface to use\n")
	w("  -D, --duration=<sec>      run for <sec> seconds instead of a number of iterations\n")
	if verb != VerbWrite {
		w("  -e, --events              sleep on completion events instead of polling\n")
	}
	w("  -f, --margin=<sec>        leave out <sec> at both ends of a -D run (default duration/4)\n")
	w("  -F, --CPU-freq            accepted for compatibility\n")
	w("  -h, --help                show this text\n")
	if !test.IsBW() {
		w("  -H, --report-histogrm     print every sample\n")
	}
	w("  -i, --ib-port=<port>      port of the device (default %d)\n", DefIBPort)
	if verb != VerbRead && verb != VerbAtomic {
		w("  -I, --inline_size=<size>  largest message sent inline\n")
	}
	if test.IsBW() {
		w("  -l, --post_list=<n>       post <n> work requests at a time\n")
	}
	w("  -m, --mtu=<mtu>           path MTU: 256, 512, 1024, 2048 or 4096 (default: the port's)\n")
	iters := DefIters
	if test == WriteBW {
		iters = DefItersWriteBW
	}
	w("  -n, --iters=<n>           iterations, at least %d (default %d)\n", minIter, iters)
	if test.IsBW() {
		w("  -N, --noPeak              do not compute the peak bandwidth\n")
	}
	if verb == VerbRead || verb == VerbAtomic {
		w("  -o, --outs=<n>            outstanding reads/atomics (default: the device maximum)\n")
	}
	w("  -p, --port=<port>         TCP port of the exchange (default %d)\n", DefPort)
	if test.IsBW() {
		w("  -q, --qp=<n>              number of QPs (default %d)\n", DefNumQPs)
		w("  -Q, --cq-mod=<n>          one completion every <n> work requests (default %d)\n", DefCQMod)
	}
	if verb == VerbSend {
		w("  -r, --rx-depth=<n>        receive queue depth (default %d)\n", DefRxDepthSend)
	}
	w("  -R, --rdma_cm             connect the QPs and run the exchange with RDMA CM (RC)\n")
	w("  -z, --comm_rdma_cm        run the exchange over RDMA CM instead of TCP\n")
	if verb != VerbAtomic {
		size := DefSizeBW
		if !test.IsBW() {
			size = DefSizeLat
		}
		w("  -s, --size=<size>         message size, K and M suffixes allowed (default %d)\n", size)
	}
	w("  -S, --sl=<sl>             service level (default %d)\n", DefSL)
	if test.IsBW() {
		w("  -t, --tx-depth=<n>        send queue depth (default %d)\n", DefTxDepthBW)
	}
	w("  -u, --qp-timeout=<t>      QP timeout, 4.096us * 2^t (default %d)\n", DefQPTimeout)
	if !test.IsBW() {
		w("  -U, --report-unsorted     print every sample in measurement order\n")
	}
	w("  -V, --version             print the perftest version this tool matches\n")
	w("  -x, --gid-index=<index>   GID index (default: one chosen like perftest does)\n")
	w("      --ipv6                prefer an IPv6 GID\n")
	w("      --output=<what>       print only bandwidth, message_rate or latency\n")
	if test.IsBW() {
		w("      --report_gbits        report Gb/s instead of MB/s\n")
		w("      --report-both         with -b, report each direction separately\n")
		w("      --reversed            the server sends to the client\n")
	}
	w("      --tclass=<tc>         traffic class of the GRH\n")
	return b.String()
}

// PingpongUsage returns sroce's usage text for the RC or UD pingpong tool.
func PingpongUsage(ud bool, prog string) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	tool, size := "ibv_rc_pingpong", RCPingpongSize
	if ud {
		tool, size = "ibv_ud_pingpong", UDPingpongSize
	}
	w("Usage:\n  %s [options]          run as server and wait for a client\n", prog)
	w("  %s [options] <host>   run as client of the server at <host>\n\n", prog)
	w("Options (as in rdma-core's %s):\n", tool)
	w("  -p, --port=<port>         TCP port of the exchange (default %d)\n", PingpongPort)
	w("  -d, --ib-dev=<if>         network interface to use\n")
	w("  -i, --ib-port=<port>      port of the device (default %d)\n", PingpongIBPort)
	w("  -s, --size=<size>         message size (default %d)\n", size)
	if !ud {
		w("  -m, --mtu=<mtu>           path MTU (default %d)\n", RCPingpongMTU)
	}
	w("  -r, --rx-depth=<n>        receives posted at a time (default %d)\n", PingpongRxDepth)
	w("  -n, --iters=<n>           number of exchanges (default %d)\n", PingpongIters)
	w("  -l, --sl=<sl>             service level (default %d)\n", PingpongSL)
	w("  -e, --events              sleep on completion events instead of polling\n")
	w("  -g, --gid-idx=<index>     local GID index (needed on RoCE)\n")
	w("  -c, --chk                 check the received data\n")
	return b.String()
}
