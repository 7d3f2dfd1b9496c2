package perftest

// sroce send-bw, write-bw, read-bw, atomic-bw, send-lat, write-lat,
// read-lat and atomic-lat: perftest 4.5's ib_* tools (as Debian bookworm
// ships them) on a sroce device. This file holds what every tool shares:
// the command line (oob.ParsePerftest), opening the device, the TCP
// exchange (oob.Conn.Run with this tool's hooks), the QPs and buffers laid
// out as perftest lays them out, and the output (oob's formatters). The
// measuring loops are in bw.go and lat.go, the data patterns and checks
// in data.go.
//
// Buffer layout, as perftest's (the parts a peer can see must match): one
// MR of 2*n*B bytes for n QPs, B = the larger of the message size and the
// negotiated cycle buffer, rounded up to the cache line. QP i sends from,
// or reads into, area i (the first half); its peer writes to, reads from or
// runs atomics on region i (the second half), whose address and rkey go in
// the key message. Within them perftest's BW loops move the address by the
// message size (rounded up to the cache line) after every work request and
// wrap at the cycle buffer, which sroce does too: the same remote addresses
// appear on the wire.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/internal/cli"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/qp"
	"github.com/sroce/sroce/rdma"
	"github.com/sroce/sroce/rdmacm"
	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/tools/oob"
	"github.com/sroce/sroce/verbs"
)

// perftestAbout is the description "sroce <tool> -h" prints before the
// options.
const perftestAbout = `
Run without HOST, %[1]s waits for a client; with the server's HOST, it
connects to it.

%[1]s is perftest's %[2]s (version 4.5, as Debian bookworm ships it) on a
sroce device: the same options, defaults, output and TCP exchange (port
18515), so that either side can be the real tool.

-d names the network interface to run on (IF, or IF@ADDR to bind the UDP
link to one address of the interface, e.g. lo@127.0.0.2); when a sroce
daemon (SROCE_SOCKET, or its usual socket) serves it, the tool runs on the
daemon's device. -x picks the GID
index as on rdma_rxe (0 is the link-local IPv6 GID, 1 usually the IPv4
address); without it sroce picks the index perftest would: the first IPv4
GID, or with --ipv6 the first IPv6 one.

Two sroce peers check the data they move: what a WRITE or SEND delivered,
what a READ returned and what the atomics fetched and left behind (against a
real peer sroce checks what it can tell: the atomics).

Environment: SROCE_LINK=auto|xdp|udp chooses the link (default auto: AF_XDP
as root, the UDP link otherwise); SROCE_ENGINE=auto|sleep|spin|adaptive|inline
how the engine waits for work (default auto: inline on one CPU, adaptive
otherwise); SROCE_STALL_TIMEOUT (default 60s) is how
long a run waits for a completion before it gives up;
SROCE_EXCHANGE_TIMEOUT (default 30s) bounds each message of the exchange;
SROCE_ACCEPT_TIMEOUT (default 10m) is how long a server waits for a client.
SIGINT and SIGTERM end a run with what it was waiting for.

Exit status: 0 on success, 1 when the run failed or was interrupted, 2 for a
bad command line (or an option sroce does not implement). -V and --version
print sroce's version; the exchange says it is perftest %[3]s.`

// perftestUsage returns the usage of test's subcommand.
func perftestUsage(test oob.Test) *cli.Usage {
	prog := "sroce " + test.String()
	return &cli.Usage{Name: prog, Synopsis: prog + " [flags] [HOST]",
		About: fmt.Sprintf(perftestAbout, prog, test.ToolName(), oob.PerftestVersion), Flags: oob.PerftestFlags(test)}
}

// perftestHook, when set (by tests), sees every run when it ends.
var perftestHook func(*perftest)

// perftest is one run of a perftest tool.
type perftest struct {
	*toolRun
	p    oob.Params
	test oob.Test
	verb oob.Verb

	conn     *oob.Conn
	pro      oob.Prologue
	gidIdx   int
	sgid     bth.GID
	outReads int
	cycle    int // negotiated cycle buffer
	cache    int // negotiated cache line size

	pd    rdma.PD
	mr    *region // areas and regions (see the file comment)
	buf   []byte
	area  int       // B: bytes of one area or region
	recv  *recvRing // receive buffers of send tests
	res   *region   // atomic results, one 8-byte slot per outstanding op
	cq    *completions
	qps   []rdma.QP
	ahs   []*verbs.AH
	local []oob.KeyMsg
	peer  []oob.KeyMsg

	t0 time.Time // time origin of the tick counts

	check dataCheck
}

// Run runs the perftest tool test ("sroce write-bw" for oob.WriteBW) with
// the command line args (the tool's options and, for a client, the
// server's host), printing to stdout and stderr what the tool prints, and
// returns the exit status: 0 on success, 1 when the run failed or was
// interrupted, 2 for a bad command line. SIGINT and SIGTERM end the run, as
// does the end of ctx.
func Run(ctx context.Context, test oob.Test, args []string, stdout, stderr io.Writer) int {
	e := &env{Stdout: stdout, Stderr: stderr}
	cmd := test.String()
	u := perftestUsage(test)
	p, err := oob.ParsePerftest(test, args)
	switch {
	case err != nil:
		return u.Fail(e.Stderr, strings.TrimSpace(err.Error()))
	case p.Help:
		u.Write(e.Stdout, true)
		return exitOK
	case p.Version:
		return cli.Version(e.Stdout)
	}
	if err := perftestSupported(p); err != nil {
		return u.Fail(e.Stderr, err.Error())
	}
	t, err := newToolRun(ctx, e, cmd)
	if err != nil {
		fmt.Fprintf(e.Stderr, "sroce %s: %v\n", cmd, err)
		return exitUsage
	}
	pt := &perftest{toolRun: t, p: p, test: test, verb: test.Verb(), t0: time.Now()}
	code := pt.run()
	if perftestHook != nil {
		perftestHook(pt)
	}
	return code
}

// perftestSupported returns an error naming the first option sroce does
// not implement.
func perftestSupported(p oob.Params) error {
	if err := p.CheckSupported(); err != nil {
		return err
	}
	unsupported := []struct {
		set  bool
		name string
	}{
		{p.RDMACM && p.Conn != oob.RC, "-R with a UD or UC connection"},
		{p.UseSRQ, "--use-srq"},
		{p.Reversed, "--reversed"},
		{p.OutJSON, "--out_json"},
		{p.CPUUtil, "--cpu_util"},
	}
	for _, u := range unsupported {
		if u.set {
			return fmt.Errorf("%w: %s", oob.ErrUnsupported, u.name)
		}
	}
	if p.IBPort != 1 {
		return fmt.Errorf("a sroce device has one port: -i %d is not valid", p.IBPort)
	}
	if p.PKeyIndex != 0 {
		return fmt.Errorf("a sroce device has one P_Key: --pkey_index %d is not valid", p.PKeyIndex)
	}
	return nil
}

// client reports whether this side is perftest's client (the machine that
// drives unidirectional tests).
func (pt *perftest) client() bool { return pt.p.Role == oob.Client }

// full reports whether the banner, addresses and tables are printed.
func (pt *perftest) full() bool { return pt.p.Output == oob.FullVerbosity }

// out prints to stdout.
func (pt *perftest) out(s string) { io.WriteString(pt.e.Stdout, s) }

// now returns the tick count: nanoseconds since the run started (perftest
// counts CPU cycles; oob's report arithmetic takes the tick rate).
func (pt *perftest) now() uint64 { return uint64(time.Since(pt.t0)) }

// run is the whole tool: the device, the exchange, the test and the
// report.
func (pt *perftest) run() int {
	defer pt.watchSignals()()
	ctx := pt.ctx
	p := &pt.p
	peer := ""
	if pt.client() {
		peer = p.ServerName
	}
	if err := pt.open(ctx, p.IBDev, peer, p.Queues); err != nil {
		return pt.failErr(err)
	}
	defer pt.close()
	mtu := pt.pathMTU()
	if err := pt.chooseGID(); err != nil {
		return pt.failErr(err)
	}
	pt.setOutReads()
	for _, n := range p.Notes {
		pt.out(n + "\n")
	}

	// The server listens before it says it waits, so that a client started
	// once the banner shows up finds the port open.
	var ln net.Listener
	var cmc *rdmacm.CM
	var link *cmLink
	if p.CommRDMACM {
		var err error
		if cmc, err = pt.openCM(); err != nil {
			return pt.failErr(err)
		}
		defer cmc.Close()
		if pt.client() {
			pt.waitingFor("connecting to %s port %d with RDMA CM", p.ServerName, p.Port)
			link, err = pt.dialCM(ctx, cmc)
		} else {
			link, err = pt.acceptCM(ctx, cmc, orDefault(pt.steps.Accept, 10*time.Minute))
		}
		if err != nil {
			return pt.failErr(err)
		}
		pt.conn = oob.NewConn(link, p.Role)
		pt.conn.Timeouts = pt.steps
		pt.conn.RDMACM = true
	} else if !pt.client() {
		var err error
		if ln, err = oob.Listen(ctx, ":"+strconv.Itoa(p.Port)); err != nil {
			return pt.failErr(err)
		}
		if pt.full() {
			pt.out(oob.WaitingBanner)
		}
		pt.waitingFor("waiting for a client to connect on TCP port %d", p.Port)
		if pt.conn, err = oob.AcceptPerftest(ctx, ln, pt.steps); err != nil {
			return pt.failErr(err)
		}
	} else {
		var err error
		addr := net.JoinHostPort(p.ServerName, strconv.Itoa(p.Port))
		pt.waitingFor("connecting to %s", addr)
		if pt.conn, err = oob.DialPerftest(ctx, addr, pt.steps); err != nil {
			return pt.failErr(err)
		}
	}
	defer pt.conn.Close()
	pt.waitingFor("in the TCP exchange with %s", pt.conn.NetConn().RemoteAddr())
	var err error
	if pt.pro, err = pt.conn.Prologue(ctx, oob.LocalSysData(), mtu); err != nil {
		return pt.failErr(err)
	}
	notes, err := p.AdjustForMTU(pt.pro.MTU)
	for _, n := range notes {
		fmt.Fprintln(pt.e.Stderr, n)
	}
	if err != nil {
		return pt.fail("%s", strings.TrimSpace(err.Error()))
	}
	pt.cycle, pt.cache = int(pt.pro.Sys.CycleBuffer), int(pt.pro.Sys.CacheLineSize)
	if pt.cycle <= 0 || pt.cache <= 0 || pt.cycle%pt.cache != 0 {
		return pt.fail("the peer announced a cycle buffer of %d bytes and a cache line of %d bytes, which sroce cannot use",
			pt.cycle, pt.cache)
	}
	if err := pt.setup(); err != nil {
		return pt.failErr(err)
	}
	pt.out(oob.TestInfo(*p, oob.DeviceInfo{Device: pt.ifname(), Transport: "IB", LinkLayer: "Ethernet",
		MTU: pt.pro.MTU, GIDIndex: pt.gidIdx, OutReads: pt.outReads, Inline: 0}))

	connect := func(remote []oob.KeyMsg) error { return pt.connect(ctx, remote) }
	if p.RDMACM {
		if err := pt.connectDataCM(ctx, cmc, link); err != nil {
			return pt.failErr(err)
		}
		connect = pt.connectedByCM
	}
	hooks := oob.Hooks{
		Connect: connect,
		Ready:   pt.ready,
		Prepare: pt.prepare,
		Run:     pt.runSize,
		Report:  pt.report,
	}
	if _, err := pt.conn.Run(ctx, p.Flow(pt.pro.MTU.Bytes()), pt.local, hooks); err != nil {
		var re *runError
		if errors.As(err, &re) {
			return pt.fail("%s", re.msg)
		}
		return pt.failErr(err)
	}
	if pt.full() {
		pt.out(oob.ResultLine)
	}
	pt.linger(pt.qps)
	if pt.interrupted() != nil {
		return pt.failErr(context.Cause(pt.ctx))
	}
	if err := pt.check.err; err != nil {
		return pt.fail("data check failed: %v", err)
	}
	if err := pt.check.limitErr; err != nil {
		fmt.Fprintln(pt.e.Stderr, err)
		return exitProblem
	}
	return exitOK
}

// runError is a failure of the test itself (a completion error, a stall),
// already described in one sentence.
type runError struct{ msg string }

// Error returns the sentence.
func (e *runError) Error() string { return e.msg }

// runErrorf returns a *runError.
func runErrorf(format string, args ...any) error {
	return &runError{msg: fmt.Sprintf(format, args...)}
}

// pathMTU returns the MTU this side announces: -m, or the port's active
// MTU, with perftest's messages when -m is not valid or too large.
func (pt *perftest) pathMTU() verbs.MTU {
	active := pt.h.activeMTU()
	if pt.p.MTU == 0 {
		return active
	}
	m, ok := verbs.MTUFromBytes(pt.p.MTU)
	if !ok {
		fmt.Fprintf(pt.e.Stderr, " Invalid MTU - %d \n Please choose mtu from {256,512,1024,2048,4096}\n Will run with the port active mtu - %d\n",
			pt.p.MTU, int(active))
		return active
	}
	if m > active {
		fmt.Fprintf(pt.e.Stdout, "Requested mtu is higher than active mtu \nChanging to active mtu - %d\n", int(active))
		return active
	}
	return m
}

// chooseGID picks the GID index: -x, or without it the one perftest's
// get_best_gid_index picks (on the UDP link, which can only send from its
// own address, that address's index if perftest's choice is another).
func (pt *perftest) chooseGID() error {
	if pt.p.GIDGiven {
		pt.gidIdx = pt.p.GIDIndex
	} else if pt.gidIdx = pt.bestGIDIndex(); !pt.usableGID(pt.gidIdx) {
		pt.gidIdx = pt.h.defaultGIDIndex()
	}
	g, err := pt.gid(pt.gidIdx)
	if err != nil {
		return err
	}
	if !pt.usableGID(pt.gidIdx) {
		return fmt.Errorf("the UDP link of %s is bound to %v, so GID index %d cannot be a source; use -x %d",
			pt.ifname(), pt.h.sourceOnly(), pt.gidIdx, pt.h.defaultGIDIndex())
	}
	pt.sgid = g
	return nil
}

// bestGIDIndex is perftest's get_best_gid_index: starting from index 0,
// each later entry of the GID table replaces the choice if it is
// IPv4-mapped and the choice is not (or, with --ipv6, the other way
// round); all of sroce's GIDs are RoCE v2, so the version never decides.
// An empty entry reads as the zero GID, which is not IPv4-mapped.
func (pt *perftest) bestGIDIndex() int {
	isV4 := func(i int) bool {
		g, err := pt.h.QueryGID(i)
		return err == nil && oob.GIDIsIPv4Mapped(g)
	}
	best := 0
	for i := 1; i < pt.h.gidTableLen(); i++ {
		cur, rival := isV4(best), isV4(i)
		if rival && !cur && !pt.p.IPv6 || !rival && cur && pt.p.IPv6 {
			best = i
		}
	}
	return best
}

// setOutReads sets the outstanding READs and atomics as perftest does:
// the device maximum unless -o asks for fewer. perftest first prints, for
// the READ and atomic tools on a device it does not know (rxe, and so
// sroce), that inline data is disabled; sroce says the same.
func (pt *perftest) setOutReads() {
	p := pt.p
	if p.Inline != oob.DefInline {
		pt.out(oob.ResultLine)
		io.WriteString(pt.e.Stderr, oob.UnknownDeviceInlineNote)
	}
	pt.outReads = 1
	if pt.verb != oob.VerbRead && pt.verb != oob.VerbAtomic {
		return
	}
	maxReads := pt.h.maxRdAtomic()
	switch {
	case p.OutReads > maxReads:
		pt.out(oob.ResultLine)
		fmt.Fprintf(pt.e.Stderr, " Number of outstanding reads is above max = %d\n Changing to that max value\n", maxReads)
		pt.outReads = maxReads
	case p.OutReads <= 0:
		pt.outReads = maxReads
	default:
		pt.outReads = p.OutReads
	}
}

// incr is perftest's INC: how far the address moves after a message of
// size bytes, at least one cache line.
func (pt *perftest) incr(size uint64) int {
	s := int(size)
	if s > pt.cache {
		return (s + pt.cache - 1) / pt.cache * pt.cache
	}
	return pt.cache
}

// slots returns how many addresses the BW loops cycle through for
// size-byte messages (1 when they do not cycle).
func (pt *perftest) slots(size uint64) int {
	if !pt.test.IsBW() || int(size) > pt.cycle/2 {
		return 1
	}
	return max(pt.cycle/pt.incr(size), 1)
}

// slotOf returns the slot of the seq-th work request of a QP, as
// perftest's address increments place it: with a post list, each list
// starts over at the first slot.
func (pt *perftest) slotOf(seq uint64, size uint64) int {
	n := uint64(pt.slots(size))
	if pt.p.PostList > 1 {
		return int(seq % uint64(pt.p.PostList) % n)
	}
	return int(seq % n)
}

// runsHere reports whether this side posts the test's work requests.
func (pt *perftest) runsHere() bool {
	switch pt.test {
	case oob.SendLat, oob.WriteLat:
		return true
	case oob.ReadLat, oob.AtomicLat:
		return pt.client()
	}
	return pt.client() || pt.p.Duplex
}

// receives reports whether this side posts receives (send tests).
func (pt *perftest) receives() bool {
	return pt.verb == oob.VerbSend && (!pt.test.IsBW() || !pt.client() || pt.p.Duplex)
}

// setup creates the PD, the buffers, the CQ and the QPs in INIT, fills the
// buffers and builds the key messages.
func (pt *perftest) setup() error {
	p := &pt.p
	n := p.NumQPs
	pt.area = pt.roundCache(max(int(p.Size), pt.cycle))
	var err error
	if pt.pd, err = pt.h.AllocPD(); err != nil {
		return fmt.Errorf("Couldn't allocate PD: %w", err)
	}
	size := 2 * n * pt.area
	if p.Conn == oob.UD {
		size += pt.cache
	}
	access := mr.AccessLocalWrite
	switch pt.verb {
	case oob.VerbWrite:
		access |= mr.AccessRemoteWrite
	case oob.VerbRead:
		access |= mr.AccessRemoteRead
	case oob.VerbAtomic:
		access |= mr.AccessRemoteAtomic
	}
	if pt.mr, err = register(pt.h, pt.pd, size, access); err != nil {
		return fmt.Errorf("Couldn't allocate MR: %w", err)
	}
	pt.buf = pt.mr.Buf()[:size]
	txDepth, rxDepth := p.TxDepth, 0
	if pt.receives() {
		rxDepth = p.RxDepth
		if pt.recv, err = pt.newRecvRing(); err != nil {
			return err
		}
	}
	if pt.verb == oob.VerbAtomic {
		slots := max(txDepth+p.PostList, 1)
		if pt.res, err = register(pt.h, pt.pd, 8*slots*n, mr.AccessLocalWrite); err != nil {
			return fmt.Errorf("Couldn't allocate MR: %w", err)
		}
	}
	if pt.cq, err = pt.newCompletions(n*(txDepth+p.PostList+rxDepth)+16, p.Events); err != nil {
		return err
	}
	typ := verbs.QPTypeRC
	switch p.Conn {
	case oob.UC:
		typ = verbs.QPTypeUC
	case oob.UD:
		typ = verbs.QPTypeUD
	}
	for i := 0; i < n; i++ {
		q, err := pt.pd.CreateQP(&rdma.QPInitAttr{Type: typ, SendCQ: pt.cq.cq, RecvCQ: pt.cq.cq,
			Cap: verbs.QPCap{MaxSendWR: uint32(txDepth + p.PostList), MaxRecvWR: uint32(max(rxDepth, 1)),
				MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			return fmt.Errorf("Couldn't create QP: %w", err)
		}
		attr := verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1}
		mask := verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort
		if p.Conn == oob.UD {
			attr.QKey, mask = oob.DefQKey, mask|verbs.AttrQKey
		} else {
			switch pt.verb {
			case oob.VerbAtomic:
				attr.AccessFlags = mr.AccessRemoteAtomic
			case oob.VerbRead:
				attr.AccessFlags = mr.AccessRemoteRead
			case oob.VerbWrite:
				attr.AccessFlags = mr.AccessRemoteWrite
			default:
				attr.AccessFlags = mr.AccessRemoteWrite | mr.AccessLocalWrite
			}
			mask |= verbs.AttrAccessFlags
		}
		if err := q.Modify(&attr, mask); err != nil {
			return fmt.Errorf("Failed to modify QP to INIT: %w", err)
		}
		pt.qps = append(pt.qps, q)
		pt.watch = pt.qps[0]
		pt.local = append(pt.local, oob.KeyMsg{OutReads: uint16(pt.outReads), QPN: uint32(q.QPN()),
			PSN: randomPSN(), RKey: pt.mr.RKey(), VAddr: pt.mr.Addr() + uint64((n+i)*pt.area), GID: pt.sgid})
	}
	pt.fillBuffers()
	return nil
}

// roundCache rounds v up to a multiple of the cache line.
func (pt *perftest) roundCache(v int) int { return (v + pt.cache - 1) / pt.cache * pt.cache }

// areaOff returns where area i (QP i's own data) starts in the MR.
func (pt *perftest) areaOff(i int) int { return i * pt.area }

// regionOff returns where region i (what QP i's peer accesses) starts in
// the MR.
func (pt *perftest) regionOff(i int) int { return (pt.p.NumQPs + i) * pt.area }

// connect moves the QPs to RTR, and to RTS on the sides that send, and
// creates the UD address handles, as perftest's ctx_connect does (a
// unidirectional BW server's QPs stay in RTR).
func (pt *perftest) connect(ctx context.Context, remote []oob.KeyMsg) error {
	p := pt.p
	pt.peer = remote
	toRTS := !pt.test.IsBW() || pt.client() || p.Duplex
	for i, q := range pt.qps {
		r, l := remote[i], pt.local[i]
		av, err := pt.ahAttr(ctx, r.GID, pt.gidIdx)
		if err != nil {
			return err
		}
		av.TrafficClass = p.TClass
		c := roce.ConnectAttr{AH: av, PathMTU: pt.pro.MTU, DestQPN: bth.QPN(r.QPN), RQPSN: bth.PSN(r.PSN),
			MaxDestRdAtomic: uint8(l.OutReads), MinRNRTimer: oob.DefMinRNRTimer, SQPSN: bth.PSN(l.PSN),
			Timeout: p.QPTimeout, RetryCnt: oob.DefRetryCnt, RNRRetry: oob.DefRNRRetry,
			MaxRdAtomic: uint8(min(int(r.OutReads), qp.MaxRdAtomic)), StayRTR: !toRTS}
		if err := q.Connect(&c); err != nil {
			var ce *roce.ConnectError
			if errors.As(err, &ce) && ce.State == verbs.QPStateRTR {
				return fmt.Errorf("Failed to modify QP %d to RTR: %w", q.QPN(), ce.Err)
			} else if errors.As(err, &ce) {
				return fmt.Errorf("Failed to modify QP to RTS: %w", ce.Err)
			}
			return err
		}
		if toRTS {
			if p.Conn == oob.UD {
				ah, err := pt.pd.CreateAH(&av)
				if err != nil {
					return fmt.Errorf("Failed to create AH: %w", err)
				}
				pt.ahs = append(pt.ahs, ah)
			}
		}
	}
	pt.check.start(pt)
	return nil
}

// ready prints the address lines and the table header, where perftest
// prints them once the keys are exchanged.
func (pt *perftest) ready(remote []oob.KeyMsg) error {
	if !pt.full() {
		return nil
	}
	var b strings.Builder
	addrTest := pt.test
	if pt.p.CommRDMACM {
		addrTest = oob.SendBW // perftest prints the lines of a SEND test then
	}
	for _, k := range pt.local {
		b.WriteString(oob.AddressLine("local", addrTest, k, true))
	}
	for _, k := range remote {
		b.WriteString(oob.AddressLine("remote", addrTest, k, true))
	}
	switch {
	case pt.test.IsBW():
		b.WriteString(oob.BWHeader(pt.p.ReportGbits, false))
	case pt.runsHere():
		b.WriteString(oob.LatHeader(pt.p.DurationMode, false))
	}
	pt.out(b.String())
	return nil
}

// prepare posts the receives of a send test for size-byte messages.
func (pt *perftest) prepare(size uint64) error {
	if pt.recv == nil {
		return nil
	}
	return pt.recv.postAll(size)
}

// runSize runs the test for one message size.
func (pt *perftest) runSize(size uint64) (oob.BWReport, error) {
	if pt.test.IsBW() {
		return pt.runBW(size)
	}
	return oob.BWReport{}, pt.runLat(size)
}

// report prints the BW row of one size: this side's result, the client's
// on a unidirectional server, the sum of both for -b.
func (pt *perftest) report(size uint64, local, remote *oob.BWReport) error {
	var row oob.BWReport
	switch {
	case local != nil && remote != nil:
		row = local.Add(*remote)
	case local != nil:
		row = *local
	case remote != nil:
		row = *remote
	default:
		return nil
	}
	pt.out(oob.BWRow(pt.p, row))
	if pt.p.ReportBoth && pt.p.Duplex && local != nil && remote != nil {
		hdr := oob.BWHeader(pt.p.ReportGbits, false)
		pt.out(oob.ResultLine + "\n Local results: \n" + hdr + oob.BWRow(pt.p, *local) +
			oob.ResultLine + "\n Remote results: \n" + hdr + oob.BWRow(pt.p, *remote))
	}
	if local != nil {
		pt.check.limits(pt.p, *local)
	}
	pt.check.afterPeerRun(pt, size, remote)
	return nil
}

// wrID packs a QP index and a sequence number into a work request ID.
func wrID(qpIndex int, seq uint64) uint64 { return uint64(qpIndex)<<40 | seq&(1<<40-1) }

// splitWRID undoes wrID.
func splitWRID(id uint64) (qpIndex int, seq uint64) { return int(id >> 40), id & (1<<40 - 1) }

// completionError is the failure of a work completion, in perftest's words
// ("Completion with error at client") and in one sentence.
func (pt *perftest) completionError(wc *verbs.WC, scnt, ccnt uint64) error {
	if err := pt.cq.lost(); err != nil {
		// The port went down and the QPs were flushed: say why.
		return runErrorf("%s (the work requests were flushed)", errText(err))
	}
	side := "client"
	if wc.Opcode == verbs.WCRecv || wc.Opcode == verbs.WCRecvRDMAWithImm {
		side = "server"
	}
	q, _ := splitWRID(wc.WRID)
	return runErrorf("Completion with error at %s: %s, wr_id %d, syndrom 0x%x (scnt=%d, ccnt=%d)",
		side, statusText(wc.Status), q, wc.VendorErr, scnt, ccnt)
}

// qpState describes the first QP and the device's recovery counters, for
// a run that stalled: whether requests are still unacknowledged and
// whether the device kept retransmitting them.
func (pt *perftest) qpState() string {
	if len(pt.qps) == 0 {
		return "no QP"
	}
	return pt.toolRun.qpState(pt.qps[0])
}

// qpState describes q and the device's recovery counters.
func (t *toolRun) qpState(q rdma.QP) string {
	c := t.h.counters()
	devc := fmt.Sprintf("%d timeouts, %d packets retransmitted, %d NAKs sent, %d sent, %d received",
		c["timeouts"], c["retransmit_pkts"], c["nak_sent"], c["sent_pkts"], c["rcvd_pkts"])
	if o, ok := q.(interface {
		Outstanding() (int32, bth.PSN, bth.PSN)
	}); ok {
		inflight, sq, rq := o.Outstanding()
		return fmt.Sprintf("QP %#06x %v: %d packets unacknowledged, next PSN %#06x, expecting PSN %#06x; %s",
			uint32(q.QPN()), q.State(), inflight, uint32(sq), uint32(rq), devc)
	}
	// A daemon's QP: its state is in the memory shared with the daemon,
	// the counters are the daemon device's.
	return fmt.Sprintf("QP %#06x %v; the daemon's %s: %s", uint32(q.QPN()), q.State(), t.h.Name(), devc)
}

// stallError describes a wait that gave up: no completion within the
// stall limit, a signal, or another error.
func (pt *perftest) stallError(err error, what string, done, total uint64) error {
	progress := fmt.Sprintf("%d %s", done, what)
	if total > 0 {
		progress = fmt.Sprintf("%d of %d %s", done, total, what)
	}
	var se *signalError
	switch {
	case errors.Is(err, errStall):
		return runErrorf("no completion for %v after %s: the peer stopped answering (%s)", pt.stall, progress, pt.qpState())
	case errors.As(err, &se):
		return runErrorf("%s while waiting for a completion after %s (%s)", se, progress, pt.qpState())
	}
	return runErrorf("%s (after %s)", errText(err), progress)
}
