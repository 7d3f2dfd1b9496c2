package oob

// Command line of perftest 4.5's ib_* tools: the options their parser
// (src/perftest_parameters.c at v4.5-0.17) accepts, parsed with GNU
// getopt_long's rules (options and operands in any order, clustered short
// options, "-s1024" and "-s 1024", "--size=1024" and "--size 1024",
// unambiguous prefixes of long options, "--" ends the options), the
// per-tool defaults, and the checks and adjustments perftest applies
// before running.

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/sroce/sroce/internal/cli"
	"github.com/sroce/sroce/verbs"
)

// Defaults of perftest 4.5 (perftest_parameters.h).
const (
	DefPort          = 18515      // -p: TCP port of the exchange
	DefIBPort        = 1          // -i
	DefSizeBW        = 65536      // -s of the BW tests
	DefSizeLat       = 2          // -s of the latency tests
	DefSizeAtomic    = 8          // atomic tests (fixed)
	DefIters         = 1000       // -n
	DefItersWriteBW  = 5000       // ib_write_bw only
	DefTxDepthBW     = 128        // -t of the BW tests
	DefTxDepthLat    = 1          // send queue depth of the latency tests
	DefQPTimeout     = 14         // -u: RC timeout exponent (4.096us << 14)
	DefSL            = 0          // -S
	DefGIDIndex      = -1         // none given; on RoCE perftest then picks one (index 0 or a better RoCEv2/IPv4 one)
	DefNumQPs        = 1          // -q
	DefRxDepthRDMA   = 1          // receive queue depth of WRITE/READ/atomic tests
	DefRxDepthSend   = 512        // -r of the send tests
	DefCQMod         = 100        // -Q: one completion per 100 work requests
	DefQKey          = 0x11111111 // UD
	DefDuration      = 5          // -D period before -D sets one (the margin check uses it)
	DefInline        = -1         // device default
	DefHopLimit      = 64         // -L (raw Ethernet only)
	DefRetryCount    = 7          // --retry_count (rdma_cm)
	DefCacheLineSize = 64         // cache line size when sysfs does not say
	DefPageSize      = 4096       // cycle buffer when the page size is unknown
	// DefMinRNRTimer is the min_rnr_timer perftest sets on RTR.
	DefMinRNRTimer = 12
	// DefGRHHopLimit is the hop limit perftest puts in the GRH.
	DefGRHHopLimit = 0xff
	// DefRNRRetry and DefRetryCnt are the RTS attributes of RC QPs.
	DefRNRRetry = 7
	DefRetryCnt = 7
	// UDAddition is the GRH room perftest adds to UD receive buffers.
	UDAddition = 40
	// MaxSize is the largest message of -a (2^23); perftest sizes its
	// buffers for it.
	MaxSize = 8388608
)

// Limits perftest enforces on option values.
const (
	minIter, maxIter = 5, 100000000
	minTx, maxTx     = 1, 15000
	maxSL            = 15
	maxGIDIndex      = 64
	minQP, maxQP     = 1, 16384
	minRx, maxRx     = 1, 16384
	ucMaxRx          = 16000
	minCQMod         = 1
	maxCQMod         = 1024
	maxInline        = 912
	maxInlineUD      = 884
	msgSizeCQModLim  = 8192
)

// ConnType is perftest's connection type (-c).
type ConnType int

// Connection types, with perftest's values.
const (
	RC     ConnType = iota // reliable connected
	UC                     // unreliable connected
	UD                     // unreliable datagram (send tests)
	RawEth                 // raw Ethernet (not supported by sroce)
	XRC                    // extended RC (not supported by sroce)
	DC                     // dynamically connected (not supported by sroce)
	SRD                    // scalable reliable datagram (not supported by sroce)
)

// connNames are the names perftest prints for the ConnType values.
var connNames = []string{"RC", "UC", "UD", "RawEth", "XRC", "DC", "SRD"}

// String returns the name perftest prints ("RC", "UD", ...).
func (c ConnType) String() string {
	if c >= 0 && int(c) < len(connNames) {
		return connNames[c]
	}
	return "Unknown"
}

// AtomicType is the operation of the atomic tests (-A).
type AtomicType int

// Atomic operations, with perftest's values.
const (
	CmpAndSwap  AtomicType = iota // COMPARE_SWAP
	FetchAndAdd                   // FETCH_ADD (default)
)

// String returns "CMP_AND_SWAP" or "FETCH_AND_ADD".
func (a AtomicType) String() string {
	if a == CmpAndSwap {
		return "CMP_AND_SWAP"
	}
	return "FETCH_AND_ADD"
}

// Verbosity is --output: what a run prints.
type Verbosity int

// Verbosity levels, with perftest's values.
const (
	FullVerbosity Verbosity = -1 // the banner, addresses and table (default)
	OutputBW      Verbosity = 0  // only the average bandwidth
	OutputMsgRate Verbosity = 1  // only the message rate
	OutputLat     Verbosity = 2  // only the average latency
)

// Params are the parsed options of one perftest tool invocation, after
// perftest's own adjustments (force_dependecies): tx_depth clamped to
// the iterations, CQ moderation disabled for large messages, and so on.
type Params struct {
	Test Test
	Role Role
	// ServerName is the operand: the server a client connects to. Empty
	// for a server.
	ServerName string

	Port      int    // -p, --port
	IBDev     string // -d, --ib-dev (sroce: the interface)
	IBPort    int    // -i, --ib-port
	GIDIndex  int    // -x, --gid-index; DefGIDIndex if not given
	GIDGiven  bool   // -x was given
	MTU       int    // -m, --mtu in bytes; 0: the port's active MTU
	Size      uint64 // -s, --size; MaxSize with -a
	SizeGiven bool   // -s was given
	Iters     uint64 // -n, --iters; 0 in duration mode
	TxDepth   int    // -t, --tx-depth
	RxDepth   int    // -r, --rx-depth
	NumQPs    int    // -q, --qp
	Conn      ConnType
	Atomic    AtomicType // -A, --atomic_type
	OutReads  int        // -o, --outs; 0: the device maximum
	QPTimeout uint8      // -u, --qp-timeout
	SL        uint8      // -S, --sl
	Inline    int        // -I, --inline_size; DefInline: device default
	CQMod     int        // -Q, --cq-mod (after adjustments)
	CQModSet  bool       // -Q was given
	PostList  int        // -l, --post_list
	RecvPost  int        // --recv_post_list
	TClass    uint8      // --tclass
	DLID      uint16     // --dlid
	PKeyIndex int        // --pkey_index
	Retry     int        // --retry_count (rdma_cm)

	RunAll       bool      // -a, --all
	Duplex       bool      // -b, --bidirectional
	Events       bool      // -e, --events
	NoPeak       bool      // -N, --noPeak (also set by perftest where peak is not computed)
	CPUFreq      bool      // -F, --CPU-freq
	DurationMode bool      // -D given
	Duration     int       // -D, --duration seconds
	Margin       int       // -f, --margin
	ReportGbits  bool      // --report_gbits
	ReportBoth   bool      // --report-both
	Cycles       bool      // -C, --report-cycles
	Histogram    bool      // -H
	Unsorted     bool      // -U
	RDMACM       bool      // -R, --rdma_cm
	CommRDMACM   bool      // -z, --com_rdma_cm
	IPv6         bool      // --ipv6
	UseSRQ       bool      // --use-srq
	WarmUp       bool      // --perform_warm_up
	OldPostSend  bool      // --use_old_post_send
	MRPerQP      bool      // --mr_per_qp
	Reversed     bool      // --reversed
	Output       Verbosity // --output
	LatencyGap   int       // --latency_gap
	LimitBW      float64   // -w, --limit_bw (0: none)
	LimitMsgRate float64   // -y, --limit_msgrate (0: none)
	OutJSON      bool      // --out_json
	OutJSONFile  string    // --out_json_file
	CPUUtil      bool      // --cpu_util
	WaitDestroy  uint32    // --wait_destroy
	// Queues is sroce's --queues: the receive queues (engines) the
	// device uses; 0 means SROCE_QUEUES, else the default.
	Queues int
	// NoRelaxedOrdering is --disable_pcie_relaxed; ib_write_lat always
	// sets it (it polls the last byte of its buffer). It only changes the
	// banner.
	NoRelaxedOrdering bool

	// Help and Version report -h and -V: the caller prints the usage or
	// the version and exits successfully.
	Help, Version bool

	// Unsupported lists the options given that perftest knows but sroce
	// does not implement (raw Ethernet, multicast, dual port, GPU memory,
	// rate limiting, ...), spelled as on the command line. Parse accepts
	// them so that the caller can name them in its error.
	Unsupported []string

	// Notes are the adjustments perftest announces on stdout/stderr while
	// parsing (e.g. "Post List requested - CQ moderation will be the size
	// of the post list").
	Notes []string
}

// option is one line of a tool's option table, as getopt_long's struct
// option has it.
type option struct {
	short byte   // 0 if long only
	long  string // "" if short only
	arg   bool   // takes an argument
}

// specs turns an option table into the parser's.
func specs(opts []option) []cli.Spec {
	s := make([]cli.Spec, len(opts))
	for i, o := range opts {
		s[i] = cli.Spec{Short: o.short, Long: o.long, Arg: cli.NoArg}
		if o.arg {
			s[i].Arg = cli.NeedArg
		}
	}
	return s
}

// perftestOptions are all the options of perftest 4.5's parser as Debian
// builds it (with PCIe relaxed ordering support), without those that
// exist only with CUDA, ROCm, AES-XTS or DC streams, which sroce treats as
// unknown.
var perftestOptions = []option{
	{'p', "port", true}, {'d', "ib-dev", true}, {'i', "ib-port", true}, {'m', "mtu", true},
	{'s', "size", true}, {'n', "iters", true}, {'t', "tx-depth", true}, {'u', "qp-timeout", true},
	{'S', "sl", true}, {'x', "gid-index", true}, {'a', "all", false}, {'F', "CPU-freq", false},
	{'c', "connection", true}, {'q', "qp", true}, {'e', "events", false}, {'X', "vector", true},
	{'I', "inline_size", true}, {'o', "outs", true}, {'g', "mcg", false}, {'z', "comm_rdma_cm", false},
	{'R', "rdma_cm", false}, {'T', "tos", true}, {'L', "hop_limit", true}, {'h', "help", false},
	{'M', "MGID", true}, {'r', "rx-depth", true}, {'b', "bidirectional", false}, {'Q', "cq-mod", true},
	{'N', "noPeak", false}, {'V', "version", false}, {'C', "report-cycles", false},
	{'H', "report-histogrm", false}, {'U', "report-unsorted", false}, {'A', "atomic_type", true},
	{'O', "dualport", false}, {'l', "post_list", true}, {'D', "duration", true}, {'f', "margin", true},
	{'B', "source_mac", true}, {'E', "dest_mac", true}, {'J', "dest_ip", true}, {'j', "source_ip", true},
	{'K', "dest_port", true}, {'k', "source_port", true}, {'Y', "ethertype", true}, {'w', "limit_bw", true},
	{'y', "limit_msgrate", true}, {'Z', "server", false}, {'P', "client", false}, {'v', "mac_fwd", false},
	{'G', "use_rss", false}, {'W', "report-counters", true},
	{0, "force-link", true}, {0, "remote_mac", true}, {0, "local_mac", true}, {0, "remote_ip", true},
	{0, "local_ip", true}, {0, "remote_port", true}, {0, "local_port", true}, {0, "run_infinitely", false},
	{0, "report_gbits", false}, {0, "use-srq", false}, {0, "report-both", false}, {0, "reversed", false},
	{0, "pkey_index", true}, {0, "inline_recv", true}, {0, "tcp", false}, {0, "burst_size", true},
	{0, "typical_pkt_size", true}, {0, "rate_limit", true}, {0, "rate_limit_type", true},
	{0, "rate_units", true}, {0, "output", true}, {0, "cpu_util", false}, {0, "out_json", false},
	{0, "out_json_file", true}, {0, "latency_gap", true}, {0, "flow_label", true},
	{0, "retry_count", true}, {0, "dont_xchg_versions", false}, {0, "mmap", true},
	{0, "mmap-offset", true}, {0, "ipv6", false}, {0, "raw_ipv6", false}, {0, "report-per-port", false},
	{0, "odp", false}, {0, "use_hugepages", false}, {0, "use_old_post_send", false},
	{0, "promiscuous", false}, {0, "raw_mcast", false}, {0, "mr_per_qp", false}, {0, "dlid", true},
	{0, "tclass", true}, {0, "wait_destroy", true}, {0, "flows", true}, {0, "flows_burst", true},
	{0, "reply_every", true}, {0, "perform_warm_up", false}, {0, "vlan_en", false},
	{0, "vlan_pcp", true}, {0, "recv_post_list", true}, {0, "disable_pcie_relaxed", false},
	// sroce's own: the name every sroce command gives -d, and --queues.
	{0, "device", true}, {0, "queues", true},
	// perftest has two "source_ip"s: -j/--source_ip (raw Ethernet) is
	// listed first in its table, so getopt_long always resolves
	// "--source_ip" to -j; the second one can never be reached.
}

// unsupportedOptions are options sroce parses but does not implement.
var unsupportedOptions = map[string]bool{
	"mcg": true, "MGID": true, "tos": true, "hop_limit": true, "dualport": true,
	"source_mac": true, "dest_mac": true, "dest_ip": true, "source_ip": true, "dest_port": true,
	"source_port": true, "ethertype": true, "server": true, "client": true, "mac_fwd": true,
	"use_rss": true, "report-counters": true, "force-link": true, "remote_mac": true,
	"local_mac": true, "remote_ip": true, "local_ip": true, "remote_port": true, "local_port": true,
	"tcp": true, "burst_size": true, "typical_pkt_size": true, "rate_limit": true,
	"rate_limit_type": true, "rate_units": true, "flow_label": true, "mmap": true, "mmap-offset": true,
	"raw_ipv6": true, "report-per-port": true, "odp": true, "use_hugepages": true, "promiscuous": true,
	"raw_mcast": true, "flows": true, "flows_burst": true, "reply_every": true, "vlan_en": true,
	"vlan_pcp": true, "run_infinitely": true, "vector": true,
	// perftest 4.5 itself cannot run with --dont_xchg_versions: it then
	// compares an empty peer version with 5.70 and exits.
	"dont_xchg_versions": true,
}

// UsageError is a command line error: the caller prints it and the usage.
type UsageError struct{ Msg string }

// Error returns the message.
func (e *UsageError) Error() string { return e.Msg }

// usageErr returns a *UsageError.
func usageErr(format string, args ...any) error {
	return &UsageError{Msg: fmt.Sprintf(format, args...)}
}

// DefaultParams returns the defaults of test before any option.
func DefaultParams(test Test) Params {
	p := Params{
		Test: test, Port: DefPort, IBPort: DefIBPort, GIDIndex: DefGIDIndex,
		QPTimeout: DefQPTimeout, SL: DefSL, NumQPs: DefNumQPs, Conn: RC,
		Inline: DefInline, CQMod: DefCQMod, PostList: 1, RecvPost: 1,
		Duration: DefDuration, Margin: -1, Retry: DefRetryCount, Output: FullVerbosity,
		OutJSONFile: "perftest_out.json",
	}
	if test.IsBW() {
		p.Size, p.TxDepth = DefSizeBW, DefTxDepthBW
	} else {
		p.Size, p.TxDepth = DefSizeLat, DefTxDepthLat
	}
	p.Iters = DefIters
	if test == WriteBW {
		p.Iters = DefItersWriteBW
	}
	p.RxDepth = DefRxDepthRDMA
	if test.Verb() == VerbSend {
		p.RxDepth = DefRxDepthSend
	}
	if test.Verb() == VerbAtomic {
		p.Atomic = FetchAndAdd
		p.Size = DefSizeAtomic
	}
	p.NoRelaxedOrdering = test == WriteLat
	return p
}

// ParsePerftest parses args (without the program name) for test the way
// perftest 4.5's parser does. Errors are *UsageError with perftest's
// message; a caller prints it and the usage text and exits non-zero.
func ParsePerftest(test Test, args []string) (Params, error) {
	p := DefaultParams(test)
	operands, err := cli.Getopt(args, specs(perftestOptions), false, func(o cli.Opt) (bool, error) {
		if err := p.apply(o); err != nil {
			return false, flagErr(o, err)
		}
		return p.Help || p.Version, nil
	})
	if err != nil || p.Help || p.Version {
		return p, asUsageErr(err)
	}
	switch len(operands) {
	case 0:
		p.Role = Server
	case 1:
		p.Role = Client
		p.ServerName = operands[0]
	default:
		return p, usageErr("Invalid Command line. Please check command rerun")
	}
	if p.Reversed {
		p.Role = 1 - p.Role
	}
	return p, p.forceDependencies()
}

// cStrtol parses s like C's strtol(s, &end, 0): optional spaces and sign,
// then "0x" hex, "0" octal or decimal. rest is what strtol leaves.
func cStrtol(s string) (v int64, rest string) {
	t := strings.TrimLeft(s, " \t\n\v\f\r")
	neg := false
	if t != "" && (t[0] == '+' || t[0] == '-') {
		neg = t[0] == '-'
		t = t[1:]
	}
	base := 10
	switch {
	case len(t) > 2 && t[0] == '0' && (t[1] == 'x' || t[1] == 'X') && isDigit(t[2], 16):
		base, t = 16, t[2:]
	case len(t) > 0 && t[0] == '0':
		base = 8
	}
	n := 0
	for n < len(t) && isDigit(t[n], base) {
		n++
	}
	if n == 0 {
		return 0, s
	}
	u, err := strconv.ParseUint(t[:n], base, 64)
	if err != nil || u > math.MaxInt64 {
		u = math.MaxInt64
		if neg {
			u++
		}
	}
	v = int64(u)
	if neg {
		v = -v
	}
	return v, t[n:]
}

// isDigit reports whether c is a digit of base.
func isDigit(c byte, base int) bool {
	switch {
	case c >= '0' && c <= '9':
		return int(c-'0') < base
	case c >= 'a' && c <= 'f':
		return base == 16
	case c >= 'A' && c <= 'F':
		return base == 16
	}
	return false
}

// checkInt is perftest's CHECK_VALUE for int fields: the whole argument
// must be a number.
func checkInt(val, name string) (int64, error) {
	v, rest := cStrtol(val)
	if rest != "" {
		return 0, usageErr(" %s argument %s should be int", name, val)
	}
	return v, nil
}

// checkRange is CHECK_VALUE_IN_RANGE for int fields.
func checkRange(val, name string, lo, hi int64) (int64, error) {
	v, err := checkInt(val, name)
	if err != nil {
		return 0, err
	}
	v = int64(int32(v))
	if v < lo || v > hi {
		return 0, usageErr(" %s should be between %d and %d", name, lo, hi)
	}
	return v, nil
}

// flagErr puts the option as given before the message of err, an
// option's value that perftest refuses: "-n 2: Iteration num should be
// between 5 and 100000000".
func flagErr(o cli.Opt, err error) error {
	given := o.Flag
	if o.HasValue {
		given += " " + o.Value
	}
	return usageErr("%s: %s", given, strings.TrimSpace(err.Error()))
}

// asUsageErr turns the parser's *cli.Error into a *UsageError.
func asUsageErr(err error) error {
	var ce *cli.Error
	if errors.As(err, &ce) {
		return &UsageError{Msg: ce.Msg}
	}
	return err
}

// apply records one option.
func (p *Params) apply(o cli.Opt) error {
	name, val := o.Long, o.Value
	if unsupportedOptions[name] {
		spelled := "--" + name
		if o.Short != 0 {
			spelled = "-" + string(o.Short)
		}
		p.Unsupported = append(p.Unsupported, spelled)
		return nil
	}
	verb := p.Test.Verb()
	var err error
	var v int64
	switch name {
	case "port":
		if v, err = checkInt(val, "Port"); err == nil {
			if v < 1 || v > 65535 {
				return usageErr(" Port should be between 1 and 65535")
			}
			p.Port = int(v)
		}
	case "ib-dev", "device":
		p.IBDev = val
	case "ib-port":
		if v, err = checkInt(val, "IB Port"); err == nil {
			if uint8(v) < 1 {
				return usageErr("IB Port can't be less than 1")
			}
			p.IBPort = int(uint8(v))
		}
	case "mtu":
		if v, err = checkInt(val, "MTU"); err == nil {
			p.MTU = int(int32(v))
		}
	case "iters":
		if v, err = checkRange(val, "Iteration num", minIter, maxIter); err == nil {
			p.Iters = uint64(v)
		}
	case "tx-depth":
		if v, err = checkRange(val, "Tx depth", minTx, maxTx); err == nil {
			p.TxDepth = int(v)
		}
	case "qp-timeout":
		if v, err = checkInt(val, "QP Timeout"); err == nil {
			p.QPTimeout = uint8(v)
		}
	case "sl":
		if v, err = checkInt(val, "Service Level"); err == nil {
			if uint8(v) > maxSL {
				return usageErr(" Only %d Service levels", maxSL)
			}
			p.SL = uint8(v)
		}
	case "gid-index":
		if v, err = checkInt(val, "Gid index"); err == nil {
			if uint8(v) > maxGIDIndex {
				return usageErr(" Gid index should be between 0 and %d", maxGIDIndex)
			}
			p.GIDIndex = int(uint8(v))
			p.GIDGiven = true
		}
	case "all":
		p.RunAll = true
	case "CPU-freq":
		p.CPUFreq = true
	case "connection":
		return p.setConn(val)
	case "qp":
		if !p.Test.IsBW() {
			return usageErr(" Multiple QPs only available on bw tests")
		}
		if v, err = checkRange(val, "num of Qps", minQP, maxQP); err == nil {
			p.NumQPs = int(v)
		}
	case "events":
		if verb == VerbWrite {
			return usageErr(" Events feature not available on WRITE verb")
		}
		p.Events = true
	case "inline_size":
		if v, err = checkRange(val, "Max inline", 0, maxInline); err == nil {
			if verb == VerbRead || verb == VerbAtomic {
				return usageErr(" Inline feature not available on READ/Atomic verbs")
			}
			p.Inline = int(v)
		}
	case "outs":
		if v, err = checkInt(val, "Outstanding Reads"); err == nil {
			if verb != VerbRead && verb != VerbAtomic {
				return usageErr(" Setting Outstanding reads only available on READ verb")
			}
			p.OutReads = int(int32(v))
		}
	case "comm_rdma_cm":
		p.CommRDMACM = true
	case "rdma_cm":
		p.RDMACM = true
	case "help":
		p.Help = true
	case "rx-depth":
		if v, err = checkRange(val, " Rx depth", minRx, maxRx); err == nil {
			if verb != VerbSend && v > DefRxDepthRDMA {
				return usageErr(" On RDMA verbs rx depth can be only 1")
			}
			p.RxDepth = int(v)
		}
	case "bidirectional":
		if !p.Test.IsBW() {
			return usageErr(" Bidirectional is only available in BW test")
		}
		p.Duplex = true
	case "cq-mod":
		if v, err = checkRange(val, "CQ moderation", minCQMod, maxCQMod); err == nil {
			p.CQMod = int(v)
			p.CQModSet = true
		}
	case "noPeak":
		if !p.Test.IsBW() {
			return usageErr(" NoPeak only valid for BW tests")
		}
		p.NoPeak = true
	case "version":
		p.Version = true
	case "report-cycles":
		if p.Test.IsBW() {
			return usageErr(" Available only on Latency tests")
		}
		p.Cycles = true
	case "report-histogrm":
		if p.Test.IsBW() {
			return usageErr(" Available only on Latency tests")
		}
		p.Histogram = true
	case "report-unsorted":
		if p.Test.IsBW() {
			return usageErr(" is Available only on Latency tests")
		}
		p.Unsorted = true
	case "atomic_type":
		if verb != VerbAtomic {
			return usageErr(" You are not running the atomic_lat/bw test! To change the atomic action type, you must run one of the atomic tests")
		}
		switch val {
		case "CMP_AND_SWAP":
			p.Atomic = CmpAndSwap
		case "FETCH_AND_ADD":
			p.Atomic = FetchAndAdd
		default:
			return usageErr(" Invalid Atomic type! please choose from {CMP_AND_SWAP,FETCH_AND_ADD}")
		}
	case "post_list":
		if v, err = checkInt(val, "Send Post List size"); err == nil {
			p.PostList = int(int32(v))
		}
	case "recv_post_list":
		if v, err = checkInt(val, "Receive Post List size"); err == nil {
			p.RecvPost = int(int32(v))
		}
	case "duration":
		if v, err = checkInt(val, "Duration period"); err == nil {
			if int32(v) <= 0 {
				return usageErr(" Duration period must be positive")
			}
			p.Duration = int(int32(v))
			p.DurationMode = true
		}
	case "margin":
		if v, err = checkInt(val, "Margin"); err == nil {
			if int32(v) < 0 {
				return usageErr(" Margin must be non-negative")
			}
			p.Margin = int(int32(v))
		}
	case "limit_bw":
		p.LimitBW, _ = strconv.ParseFloat(strings.TrimSpace(val), 32)
		if p.LimitBW < 0 {
			return usageErr(" Invalid Minimum BW Limit")
		}
	case "limit_msgrate":
		p.LimitMsgRate, _ = strconv.ParseFloat(strings.TrimSpace(val), 32)
		if p.LimitMsgRate < 0 {
			return usageErr(" Invalid Minimum msgRate Limit")
		}
	case "size":
		return p.setSize(val)
	case "report_gbits":
		p.ReportGbits = true
	case "use-srq":
		p.UseSRQ = true
	case "report-both":
		p.ReportBoth = true
	case "reversed":
		p.Reversed = true
	case "pkey_index":
		if v, err = checkInt(val, "Pkey index"); err == nil {
			p.PKeyIndex = int(int32(v))
		}
	case "inline_recv":
		_, err = checkInt(val, "Inline Receive size")
	case "output":
		switch val {
		case "bandwidth":
			p.Output = OutputBW
		case "message_rate":
			p.Output = OutputMsgRate
		case "latency":
			p.Output = OutputLat
		default:
			return usageErr(" Invalid verbosity level output flag. Please use bandwidth, latency, message_rate")
		}
	case "cpu_util":
		p.CPUUtil = true
	case "out_json":
		p.OutJSON = true
	case "out_json_file":
		p.OutJSONFile = val
	case "latency_gap":
		if v, err = checkInt(val, "Latency gap time"); err == nil {
			if int32(v) < 0 {
				return usageErr(" Latency gap time must be non-negative")
			}
			p.LatencyGap = int(int32(v))
		}
	case "retry_count":
		if v, err = checkInt(val, "Retry Count"); err == nil {
			if int32(v) < 0 {
				return usageErr(" Retry Count must be non-negative")
			}
			p.Retry = int(int32(v))
		}
	case "ipv6":
		p.IPv6 = true
	case "use_old_post_send":
		p.OldPostSend = true
	case "mr_per_qp":
		p.MRPerQP = true
	case "dlid":
		if v, err = checkInt(val, "dlid"); err == nil {
			p.DLID = uint16(v)
		}
	case "tclass":
		if v, err = checkInt(val, "traffic class"); err == nil {
			p.TClass = uint8(v)
		}
	case "queues":
		if v, err = checkInt(val, "queues"); err == nil {
			if v < 1 {
				return usageErr(" The number of queues must be at least 1")
			}
			p.Queues = int(v)
		}
	case "wait_destroy":
		if v, err = checkInt(val, "wait_destroy"); err == nil {
			p.WaitDestroy = uint32(v)
		}
	case "perform_warm_up":
		p.WarmUp = true
	case "disable_pcie_relaxed":
		p.NoRelaxedOrdering = true
	default:
		return usageErr("unhandled option --%s", name)
	}
	return err
}

// setConn is perftest's change_conn_type.
func (p *Params) setConn(val string) error {
	verb := p.Test.Verb()
	switch val {
	case "RC":
		p.Conn = RC
	case "UC":
		if verb == VerbRead || verb == VerbAtomic {
			return usageErr(" UC connection not possible in READ/ATOMIC verbs")
		}
		p.Conn = UC
	case "UD":
		if verb != VerbSend {
			return usageErr(" UD connection only possible in SEND verb")
		}
		p.Conn = UD
	case "RawEth", "XRC", "DC", "SRD":
		p.Unsupported = append(p.Unsupported, "-c "+val)
	default:
		return usageErr(" Invalid Connection type. Please choose from {RC,UC,UD,XRC,DC,SRD}")
	}
	return nil
}

// setSize parses -s: a number (strtol base 0, trailing text ignored as
// perftest ignores it) optionally followed by K or M.
func (p *Params) setSize(val string) error {
	factor := int64(1)
	switch {
	case strings.HasSuffix(val, "K"):
		factor, val = 1024, val[:len(val)-1]
	case strings.HasSuffix(val, "M"):
		factor, val = 1024*1024, val[:len(val)-1]
	}
	v, _ := cStrtol(val)
	size := uint64(v * factor)
	if size < 1 || size > math.MaxUint32/2 {
		return usageErr(" Message Size should be between 1 and %d", math.MaxUint32/2)
	}
	p.Size = size
	p.SizeGiven = true
	return nil
}

// forceDependencies applies perftest's force_dependecies for the options
// sroce supports.
func (p *Params) forceDependencies() error {
	if !p.DurationMode {
		if uint64(p.TxDepth) > p.Iters {
			p.TxDepth = int(p.Iters)
		}
		if p.Test.Verb() == VerbSend && uint64(p.RxDepth) > p.Iters {
			p.RxDepth = int(p.Iters)
		}
		if (p.Conn == UD || p.Conn == UC) && p.RxDepth == DefRxDepthSend {
			p.RxDepth = int(min(p.Iters, ucMaxRx))
		}
	}
	if p.Size > msgSizeCQModLim && p.Conn != UD && !p.RunAll && !p.Events {
		if !p.CQModSet {
			p.CQMod = 1
		} else if p.CQMod > 1 {
			p.Notes = append(p.Notes, "Warning: Large message requested and CQ moderation enabled", "Warning: It can lead to inaccurate results")
		}
	}
	if p.CQMod > p.TxDepth {
		p.CQMod = p.TxDepth
	}
	if p.Test.Verb() == VerbRead || p.Test.Verb() == VerbAtomic {
		p.Inline = 0
	}
	if p.RunAll {
		if p.Test.Verb() == VerbAtomic {
			return usageErr("Message size cannot be changed for Atomic tests")
		}
		p.Size = MaxSize
	}
	if p.Test.Verb() == VerbAtomic && p.Size != DefSizeAtomic {
		return usageErr("Message size cannot be changed for Atomic tests")
	}
	if p.UseSRQ && p.Test.Verb() != VerbSend {
		return usageErr(" Using SRQ only avavilible in SEND tests.")
	}
	if p.UseSRQ && p.NumQPs > p.RxDepth {
		return usageErr(" Using SRQ depth should be greater than number of QPs.")
	}
	if p.PostList > 1 {
		if !p.Test.IsBW() {
			return usageErr("Post list is supported in BW tests only")
		}
		if !p.DurationMode && p.Iters%uint64(p.PostList) != 0 {
			return usageErr("Number of iterations must be a multiple of post list size")
		}
		if !p.CQModSet {
			p.CQMod = p.PostList
			p.Notes = append(p.Notes, "Post List requested - CQ moderation will be the size of the post list")
		} else if p.PostList%p.CQMod != 0 {
			return usageErr("Post list size must be a multiple of CQ moderation")
		}
	}
	if p.RecvPost > 1 {
		if !p.Test.IsBW() {
			return usageErr("Receive post list is supported in BW tests only")
		}
		if !p.DurationMode && p.Iters%uint64(p.RecvPost) != 0 {
			return usageErr("Number of iterations must be a multiple of receive post list size")
		}
	}
	if p.DurationMode {
		p.Iters = 0
		p.NoPeak = true
		if p.Events {
			return usageErr("Duration mode doesn't work with events.")
		}
		if p.RunAll {
			return usageErr("Duration mode currently doesn't support running on all sizes.")
		}
	}
	if !p.DurationMode && p.CPUUtil {
		p.Notes = append(p.Notes, " CPU Utilization works only with Duration mode.")
	}
	if p.RDMACM {
		if p.Conn == UC {
			return usageErr(" UC is not supported in librdmacm")
		}
		p.CommRDMACM = true
	}
	if p.Test.Verb() == VerbSend && p.Test.IsBW() && p.Role == Server && !p.Duplex {
		p.NoPeak = true
	}
	if p.Conn == UD && p.Inline > maxInlineUD {
		p.Inline = maxInlineUD
		p.Notes = append(p.Notes, fmt.Sprintf("Setting inline size to %d (Max inline size in UD)", maxInlineUD))
	}
	if p.Output != FullVerbosity {
		if p.Test.IsBW() && p.Output != OutputBW && p.Output != OutputMsgRate {
			return usageErr(" Output verbosity level for BW can be: bandwidth, message_rate")
		}
		if !p.Test.IsBW() && p.Output != OutputLat {
			return usageErr(" Output verbosity level for LAT can be: latency")
		}
	}
	if p.LatencyGap > 0 && p.Test.IsBW() {
		return usageErr(" Latency gap feature is only for latency tests")
	}
	if p.DurationMode && p.Margin < 0 {
		p.Margin = p.Duration / 4
	}
	if p.Test.Verb() == VerbSend && p.RxDepth%2 == 1 && !p.RunAll {
		p.RxDepth++
	}
	if !p.DurationMode && p.Iters > 20000 && p.Test.IsBW() {
		p.NoPeak = true
	}
	if !(p.Duration > 2*p.Margin) {
		return usageErr("please check that DURATION > 2*MARGIN")
	}
	return nil
}

// Flow returns the exchange sequence these parameters select; mtuBytes
// is the path MTU, which bounds -a for UD send tests.
func (p Params) Flow(mtuBytes int) Flow {
	f := Flow{Test: p.Test, Duplex: p.Duplex, RunAll: p.RunAll, Duration: p.DurationMode}
	if p.RunAll {
		f.Sizes = RunAllSizes(p.Test, p.Conn == UD, mtuBytes)
	} else {
		f.Sizes = []uint64{p.Size}
	}
	return f
}

// UsePeak reports whether the BW table's peak column is computed.
func (p Params) UsePeak() bool { return !p.NoPeak }

// LocalSysData returns this host's values for the system data exchange:
// the page size and the cache line size (from sysfs, 64 if unknown).
func LocalSysData() SysData {
	s := SysData{CycleBuffer: int32(os.Getpagesize()), CacheLineSize: DefCacheLineSize}
	if s.CycleBuffer <= 0 {
		s.CycleBuffer = DefPageSize
	}
	if b, err := os.ReadFile("/sys/devices/system/cpu/cpu0/cache/index0/coherency_line_size"); err == nil {
		if v, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && v > 0 {
			s.CacheLineSize = int32(v)
		}
	}
	return s
}

// ErrUnsupported is returned by CheckSupported.
var ErrUnsupported = errors.New("option not supported by sroce")

// CheckSupported returns an error naming the first option that sroce does
// not implement, or nil.
func (p Params) CheckSupported() error {
	if len(p.Unsupported) > 0 {
		return fmt.Errorf("%w: %s", ErrUnsupported, p.Unsupported[0])
	}
	return nil
}

// AdjustForMTU applies perftest's check_mtu rule once the path MTU is
// known: a UD send test cannot send more than one MTU per message, so a
// default or -a size is lowered to the MTU (with the two lines perftest
// prints to stderr, returned), and a size given with -s is an error.
func (p *Params) AdjustForMTU(mtu verbs.MTU) ([]string, error) {
	if p.Conn != UD || p.Size <= uint64(mtu.Bytes()) {
		return nil, nil
	}
	if p.RunAll || !p.SizeGiven {
		p.Size = uint64(mtu.Bytes())
		return []string{fmt.Sprintf(" Max msg size in UD is MTU %d", mtu.Bytes()), " Changing to this MTU"}, nil
	}
	return nil, usageErr(" Max message size in UD cannot be greater than MTU")
}
