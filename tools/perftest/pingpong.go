package perftest

// sroce rc-pingpong and sroce ud-pingpong: rdma-core's ibv_rc_pingpong and
// ibv_ud_pingpong (version 44) on a sroce device. The command line, the
// defaults, the TCP exchange of addresses (package oob) and the output are
// the tools' own, so either side of a run can be the real tool; the data
// path is the tools' too: rx_depth receives posted and topped up, one SEND
// in flight, the next one posted when both the send and a receive have
// completed.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/internal/cli"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/rdma"
	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/tools/oob"
	"github.com/sroce/sroce/verbs"
)

// pingpongAbout is the description "sroce rc-pingpong -h" and "sroce
// ud-pingpong -h" print before the options.
const pingpongAbout = `
%[1]s is rdma-core's %[2]s on a sroce device: the same options,
defaults, output and TCP exchange (port 18515), so that either side can be
the real tool. Run it without a host to wait for a client, with the server's
host to connect to it.

-d names the network interface to run on (IF, or IF@ADDR to bind the UDP
link to one address of the interface, e.g. lo@127.0.0.2); without -d a
client uses the interface of its route to the server and a server the first
interface that is up; when a sroce daemon (SROCE_SOCKET, or its usual
socket) serves it, the tool runs on the daemon's device. -g picks the local GID index as on rdma_rxe (0 is the
link-local IPv6 GID, 1 usually the IPv4 address); without -g sroce uses the
interface's first IPv4 GID, where the real tools would fail on RoCE.
-c makes the client check every byte it gets back.

Environment: SROCE_LINK=auto|xdp|udp chooses the link (default auto: AF_XDP
as root, the UDP link otherwise); SROCE_ENGINE=auto|sleep|spin|adaptive|inline
how the engine waits for work (default auto: inline on one CPU, adaptive
otherwise); SROCE_STALL_TIMEOUT (default 60s) is how
long a run waits for a completion before it gives up;
SROCE_EXCHANGE_TIMEOUT (default 30s) bounds each message of the exchange;
SROCE_ACCEPT_TIMEOUT (default 10m) is how long a server waits for a client.
SIGINT and SIGTERM end a run with what it was waiting for.

Exit status: 0 on success, 1 when the run failed or was interrupted, 2 for a
bad command line.

`

// Work request IDs of the pingpong tools (PINGPONG_RECV_WRID and
// PINGPONG_SEND_WRID).
const (
	ppRecvWRID = 1
	ppSendWRID = 2
)

// pingpongNames returns the subcommand and the rdma-core tool it mirrors.
func pingpongNames(ud bool) (cmd, tool string) {
	if ud {
		return "ud-pingpong", "ibv_ud_pingpong"
	}
	return "rc-pingpong", "ibv_rc_pingpong"
}

// pingpongUsage returns the usage of a pingpong command.
func pingpongUsage(ud bool) *cli.Usage {
	cmd, tool := pingpongNames(ud)
	prog := "sroce " + cmd
	return &cli.Usage{Name: prog, Synopsis: prog + " [flags] [HOST]",
		About: fmt.Sprintf(pingpongAbout, prog, tool), Flags: oob.PingpongFlags(ud)}
}

// pingpong is one run of a pingpong tool.
type pingpong struct {
	*toolRun
	p      oob.PingpongParams
	client bool

	pd     rdma.PD
	mr     *region
	cq     *completions
	qp     rdma.QP
	ah     *verbs.AH
	gidIdx int
	mtu    verbs.MTU

	slot     int // bytes of one message buffer: size, plus the GRH room for UD
	sendOff  int // offset of the send buffer in the MR
	recvOff  int // offset of the receive buffer in the MR
	remote   oob.Dest
	pageSize int
	badIter  int // first iteration whose echo did not match, -1 if none
	badPages []int
}

// Pingpong runs "sroce rc-pingpong" (ud false: rdma-core's
// ibv_rc_pingpong) or "sroce ud-pingpong" (ibv_ud_pingpong) with the
// command line args, printing to stdout and stderr what the tool prints,
// and returns the exit status: 0 on success, 1 when the run failed or was
// interrupted, 2 for a bad command line. SIGINT and SIGTERM end the run, as
// does the end of ctx.
func Pingpong(ctx context.Context, ud bool, args []string, stdout, stderr io.Writer) int {
	e := &env{Stdout: stdout, Stderr: stderr}
	cmd, _ := pingpongNames(ud)
	u := pingpongUsage(ud)
	p, err := oob.ParsePingpong(ud, args)
	switch {
	case err != nil:
		return u.Fail(e.Stderr, err.Error())
	case p.Help:
		u.Write(e.Stdout, true)
		return exitOK
	case p.Version:
		return cli.Version(e.Stdout)
	}
	if err == nil && len(p.Unsupported) > 0 {
		err = fmt.Errorf("option %s is not supported by sroce", p.Unsupported[0])
	}
	if err == nil && p.IBPort != 1 {
		err = fmt.Errorf("a sroce device has one port: -i %d is not valid", p.IBPort)
	}
	if err == nil && p.RxDepth < 2 {
		err = fmt.Errorf("the receive depth (-r) must be at least 2, not %d", p.RxDepth)
	}
	if err != nil {
		return u.Fail(e.Stderr, err.Error())
	}
	t, err := newToolRun(ctx, e, cmd)
	if err != nil {
		fmt.Fprintf(e.Stderr, "sroce %s: %v\n", cmd, err)
		return exitUsage
	}
	pp := &pingpong{toolRun: t, p: p, client: p.ServerName != "", pageSize: os.Getpagesize(), badIter: -1}
	return pp.run()
}

// run sets up, exchanges addresses, ping-pongs and prints the results.
func (pp *pingpong) run() int {
	defer pp.watchSignals()()
	ctx := pp.ctx
	p := pp.p
	if err := pp.open(ctx, p.IBDev, p.ServerName, p.Queues); err != nil {
		return pp.failErr(err)
	}
	defer pp.close()
	if err := pp.setup(); err != nil {
		return pp.failErr(err)
	}
	// The server listens before it prints its address, so that a client
	// started once the line shows up finds the port open.
	var ln net.Listener
	if !pp.client {
		var err error
		if ln, err = oob.Listen(ctx, ":"+strconv.Itoa(p.Port)); err != nil {
			return pp.failErr(err)
		}
	}
	gid, err := pp.gid(pp.gidIdx)
	if err != nil {
		if ln != nil {
			ln.Close()
		}
		return pp.failErr(err)
	}
	local := oob.Dest{QPN: uint32(pp.qp.QPN()), PSN: randomPSN(), GID: gid}
	if p.UD {
		io.WriteString(pp.e.Stdout, oob.UDPingpongLocalLine(local))
	} else {
		io.WriteString(pp.e.Stdout, oob.PingpongLocalLine(local))
	}
	connect := func(remote oob.Dest) error { return pp.connect(ctx, local, remote) }
	var nc net.Conn
	if pp.client {
		addr := net.JoinHostPort(p.ServerName, strconv.Itoa(p.Port))
		pp.waitingFor("connecting to %s", addr)
		nc, err = oob.Dial(ctx, addr, pp.steps.Connect)
	} else {
		pp.waitingFor("waiting for a client to connect on TCP port %d", p.Port)
		actx, cancel := context.WithTimeout(ctx, pp.steps.Accept)
		nc, err = oob.AcceptOne(actx, ln)
		cancel()
	}
	if err != nil {
		return pp.failErr(err)
	}
	pp.waitingFor("in the TCP exchange with %s", nc.RemoteAddr())
	if pp.client {
		pp.remote, err = oob.PingpongClient(ctx, nc, pp.steps, local, connect)
	} else {
		pp.remote, err = oob.PingpongServer(ctx, nc, pp.steps, local, connect)
	}
	if err != nil {
		return pp.failErr(err)
	}
	io.WriteString(pp.e.Stdout, oob.PingpongRemoteLine(pp.remote))

	start := time.Now()
	if status := pp.loop(); status != exitOK {
		return status
	}
	elapsed := time.Since(start)
	io.WriteString(pp.e.Stdout, oob.PingpongResultLines(p.Size, p.Iters, elapsed))
	pp.linger([]rdma.QP{pp.qp})
	if pp.interrupted() != nil {
		return pp.failErr(context.Cause(pp.ctx))
	}
	if pp.badIter >= 0 {
		for _, page := range pp.badPages {
			fmt.Fprintf(pp.e.Stdout, "invalid data in page %d\n", page)
		}
		return pp.fail("the data of exchange %d came back changed (-c)", pp.badIter+1)
	}
	return exitOK
}

// setup creates the PD, the buffer, the CQ and the QP, moves the QP to
// INIT and posts rx_depth receives, as pp_init_ctx and main do.
func (pp *pingpong) setup() error {
	p := pp.p
	pp.slot = int(p.Size)
	if p.UD {
		pp.slot += oob.UDGRHSpace
		if mtu := pp.h.activeMTU().Bytes(); int(p.Size) > mtu {
			return fmt.Errorf("Requested size larger than port MTU (%d)", mtu)
		}
	} else {
		pp.mtu, _ = verbs.MTUFromBytes(p.MTU) // checked with the flags
	}
	pp.gidIdx = p.GIDIndex
	if pp.gidIdx < 0 {
		pp.gidIdx = pp.h.defaultGIDIndex()
	}
	if !pp.usableGID(pp.gidIdx) {
		if _, err := pp.gid(pp.gidIdx); err != nil {
			return err
		}
		return fmt.Errorf("the UDP link of %s is bound to %v, so GID index %d cannot be a source; use -g %d",
			pp.ifname(), pp.h.sourceOnly(), pp.gidIdx, pp.h.defaultGIDIndex())
	}
	// The server receives into and sends from one buffer, so that it
	// echoes what came in, as the tools do. The client keeps what it
	// sends apart from what comes back, so that -c compares the two.
	size := pp.slot
	if pp.client {
		pp.recvOff = pp.slot
		size = 2 * pp.slot
	}
	var err error
	if pp.pd, err = pp.h.AllocPD(); err != nil {
		return fmt.Errorf("Couldn't allocate PD: %w", err)
	}
	if pp.mr, err = register(pp.h, pp.pd, max(size, 1), mr.AccessLocalWrite); err != nil {
		return fmt.Errorf("Couldn't register MR: %w", err)
	}
	for i := range pp.mr.Buf() {
		pp.mr.Buf()[i] = 0x7b
	}
	if pp.cq, err = pp.newCompletions(int(p.RxDepth)+1, p.Events); err != nil {
		return err
	}
	typ := verbs.QPTypeRC
	if p.UD {
		typ = verbs.QPTypeUD
	}
	pp.qp, err = pp.pd.CreateQP(&rdma.QPInitAttr{Type: typ, SendCQ: pp.cq.cq, RecvCQ: pp.cq.cq, SigAll: true,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: p.RxDepth, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return fmt.Errorf("Couldn't create QP: %w", err)
	}
	pp.watch = pp.qp
	attr := verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1}
	mask := verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort
	if p.UD {
		attr.QKey = oob.UDQKey
		mask |= verbs.AttrQKey
	} else {
		mask |= verbs.AttrAccessFlags
	}
	if err := pp.qp.Modify(&attr, mask); err != nil {
		return fmt.Errorf("Failed to modify QP to INIT: %w", err)
	}
	if n := pp.postRecv(int(p.RxDepth)); n < int(p.RxDepth) {
		return fmt.Errorf("Couldn't post receive (%d)", n)
	}
	return nil
}

// postRecv posts n receives into the receive buffer and returns how many
// were posted (pp_post_recv).
func (pp *pingpong) postRecv(n int) int {
	wr := verbs.RecvWR{WRID: ppRecvWRID, SGL: []mr.SGE{pp.mr.SGE(pp.recvOff, pp.slot)}}
	for i := 0; i < n; i++ {
		if err := pp.qp.PostRecv(&wr); err != nil {
			return i
		}
	}
	return n
}

// connect moves the QP to RTR and RTS toward remote (RC) or creates the
// address handle (UD), as pp_connect_ctx does.
func (pp *pingpong) connect(ctx context.Context, local, remote oob.Dest) error {
	av, err := pp.ahAttr(ctx, remote.GID, pp.gidIdx)
	if err != nil {
		return err
	}
	c := roce.ConnectAttr{AH: av, PathMTU: pp.mtu, DestQPN: bth.QPN(remote.QPN), RQPSN: bth.PSN(remote.PSN),
		MaxDestRdAtomic: oob.RCMaxDestRdAtomic, MinRNRTimer: oob.RCMinRNRTimer, SQPSN: bth.PSN(local.PSN),
		Timeout: oob.RCTimeout, RetryCnt: oob.RCRetryCnt, RNRRetry: oob.RCRNRRetry, MaxRdAtomic: oob.RCMaxRdAtomic}
	if err := pp.qp.Connect(&c); err != nil {
		var ce *roce.ConnectError
		if errors.As(err, &ce) {
			return fmt.Errorf("Failed to modify QP to %v: %w", ce.State, ce.Err)
		}
		return err
	}
	if pp.p.UD {
		if pp.ah, err = pp.pd.CreateAH(&av); err != nil {
			return fmt.Errorf("Failed to create AH: %w", err)
		}
	}
	return nil
}

// message returns the part of the buffer at off that a message occupies
// (behind the GRH room for UD).
func (pp *pingpong) message(off int) []byte {
	if pp.p.UD {
		off += oob.UDGRHSpace
	}
	return pp.mr.Buf()[off : off+int(pp.p.Size)]
}

// fillPattern writes the client's message for exchange iter into b: the
// first byte of every page is 0, as rdma-core's -c writes it (so that a
// real client's check passes against a sroce server and the other way
// round), and the other bytes change from one exchange to the next, so
// that an echo of a stale or damaged message is caught.
func (pp *pingpong) fillPattern(b []byte, iter int) {
	for i := range b {
		if i%pp.pageSize == 0 {
			b[i] = 0
			continue
		}
		b[i] = byte(uint32(i)*2654435761>>24) ^ byte(iter*29+1)
	}
}

// checkEcho compares the message that came back for exchange iter with
// what was sent, and notes the pages that differ, as rdma-core reports
// them ("invalid data in page N").
func (pp *pingpong) checkEcho(iter int) {
	if pp.badIter >= 0 {
		return
	}
	got := pp.message(pp.recvOff)
	want := make([]byte, len(got))
	pp.fillPattern(want, iter)
	for off := 0; off < len(got); off += pp.pageSize {
		end := min(off+pp.pageSize, len(got))
		for i := off; i < end; i++ {
			if got[i] != want[i] {
				pp.badIter = iter
				pp.badPages = append(pp.badPages, off/pp.pageSize)
				break
			}
		}
	}
}

// postSend posts the next SEND.
func (pp *pingpong) postSend() error {
	wr := verbs.SendWR{WRID: ppSendWRID, Opcode: verbs.WROpSend, Flags: verbs.Signaled,
		SGL: []mr.SGE{pp.mr.SGE(pp.sendOff, pp.slot)}}
	if pp.p.UD {
		wr.SGL[0] = pp.mr.SGE(pp.sendOff+oob.UDGRHSpace, int(pp.p.Size))
		wr.AH, wr.RemoteQPN, wr.RemoteQKey = pp.ah, bth.QPN(pp.remote.QPN), oob.UDQKey
	}
	return pp.qp.PostSend(&wr)
}

// loop is the tools' main loop: the client sends first; each side posts
// its next SEND once its previous one and a receive have completed, and
// tops the receive queue up when it runs low.
func (pp *pingpong) loop() int {
	iters := int(pp.p.Iters)
	check := pp.client && pp.p.Check
	pending := ppRecvWRID
	if pp.client {
		if check {
			pp.fillPattern(pp.message(pp.sendOff), 0)
		}
		if err := pp.postSend(); err != nil {
			return pp.fail("Couldn't post send: %v", err)
		}
		pending |= ppSendWRID
	}
	routs := int(pp.p.RxDepth)
	scnt, rcnt := 0, 0
	for rcnt < iters || scnt < iters {
		wcs, err := pp.cq.wait()
		if err != nil {
			return pp.stalled(err, scnt, rcnt)
		}
		for _, wc := range wcs {
			if wc.Status != verbs.WCSuccess {
				if err := pp.cq.lost(); err != nil {
					return pp.fail("%s (the work requests were flushed)", errText(err))
				}
				fmt.Fprintf(pp.e.Stderr, "Failed status %s (%d) for wr_id %d\n", wc.Status, int(wc.Status), int(wc.WRID))
				return pp.fail("the %s completed with %s after %d of %d exchanges",
					wrName(wc.WRID), statusText(wc.Status), rcnt, iters)
			}
			switch wc.WRID {
			case ppSendWRID:
				scnt++
			case ppRecvWRID:
				routs--
				if routs <= 1 {
					routs += pp.postRecv(int(pp.p.RxDepth) - routs)
					if routs < int(pp.p.RxDepth) {
						return pp.fail("Couldn't post receive (%d)", routs)
					}
				}
				if check {
					pp.checkEcho(rcnt)
				}
				rcnt++
			default:
				return pp.fail("Completion for unknown wr_id %d", int(wc.WRID))
			}
			pending &^= int(wc.WRID)
			if scnt < iters && pending == 0 {
				if check {
					pp.fillPattern(pp.message(pp.sendOff), scnt)
				}
				if err := pp.postSend(); err != nil {
					return pp.fail("Couldn't post send: %v", err)
				}
				pending = ppRecvWRID | ppSendWRID
			}
		}
	}
	return exitOK
}

// stalled reports a wait that gave up: no completion within the stall
// limit, a signal, or another error.
func (pp *pingpong) stalled(err error, scnt, rcnt int) int {
	var se *signalError
	switch {
	case errors.Is(err, errStall):
		return pp.fail("no completion for %v after %d of %d exchanges: the peer stopped answering (%s)", pp.stall, rcnt, pp.p.Iters, pp.qpState(pp.qp))
	case errors.As(err, &se):
		return pp.fail("%s while waiting for a completion after %d of %d exchanges (%s)", se, rcnt, pp.p.Iters, pp.qpState(pp.qp))
	}
	return pp.fail("%s (after %d of %d exchanges)", errText(err), rcnt, pp.p.Iters)
}

// wrName names a pingpong work request for error messages.
func wrName(id uint64) string {
	if id == ppSendWRID {
		return "send"
	}
	return "receive"
}
