package main

// sroce demo: two sroce engines talking RDMA to each other. As root they
// run in two network namespaces joined by a veth pair, over AF_XDP (or the
// UDP link with --mode udp); otherwise over the loopback interface with the
// UDP link. One RC QP on each side; the demo runs SEND, RDMA WRITE, RDMA
// WRITE with immediate, RDMA READ, FETCH_ADD and COMPARE_SWAP, checks every
// byte, times a burst of WRITEs and prints both devices' counters.
//
// Ownership: the main goroutine drives the QPs (post, wait, verify); each
// port's device loop runs on its own goroutine (roce/iface) and calls the
// tap (packet counts and -v printing) from there. Cleanup runs in reverse
// order of creation, also from the Ctrl-C handler.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/dissect"
	"github.com/sroce/sroce/internal/nsutil"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/roce/iface"
	"github.com/sroce/sroce/roce/tracesock"
	"github.com/sroce/sroce/verbs"
)

// demoAbout is the description printed by "sroce demo -h".
const demoAbout = `
Demo shows two sroce engines doing RDMA with each other, end to end, and
explains what happened.

As root it creates two network namespaces joined by a veth pair, opens a
sroce device on the veth end in each (AF_XDP with the XDP steering program,
or the UDP link with --mode udp), connects one RC queue pair on each side and
performs SEND, RDMA WRITE, RDMA WRITE with immediate, RDMA READ, FETCH_ADD and
COMPARE_SWAP from A to B, --iters times each, checking every byte and every
atomic result. Then it times a burst of --burst RDMA WRITEs of --size bytes
and prints the throughput and the interesting counters of both devices
(packets, ACKs, NAKs, retransmissions, drops).

Without root it runs the same over the loopback interface, between
127.0.0.1 and 127.0.0.2, with the UDP link, and says so.

--netem impairs the veth in both directions with netem's options, e.g.
--netem "loss 2%" or --netem "delay 1ms reorder 25% loss 1%" (root only);
the counters then show the retransmissions that repaired the damage.
-v prints every packet the two engines send, one line each, in the format
of "sroce dissect".

--explain runs each operation once (--iters 1) on a 2500-byte message (path
MTU 1024, so a message takes three packets) and follows each one with its
ladder: both engines' events on one timeline (work requests posted, every
packet with the analysis of "sroce ladder", timers, retransmissions and why,
completions, QP state changes), with a plain-language line under each step
that matters. --loss PCT makes both engines drop that share of the frames
they send (the engine's own impairment, seeded by --seed, so a run loses the
same frames again; no root or netem needed), and the ladders then show the
recovery step by step: the lost packet, the gap the receiver sees, its
sequence NAK or the retransmit timer, the retransmission and what the ACK
covered. Without root, --netem "loss N%" is taken as --loss N.

While it runs, "sroce trace" can attach to either device.

The namespaces, XDP programs and sockets are always removed, also when the
demo fails or is interrupted with Ctrl-C.

Exit status: 0 when every operation completed with correct data, 1 on any
failure (with one sentence saying what), 2 for a bad command line.`

// demoConfig is the parsed command line of sroce demo.
type demoConfig struct {
	mode    iface.Mode
	size    int
	iters   int
	burst   int
	mtu     int
	netem   *nsutil.Netem
	verbose bool
	timeout time.Duration
	explain bool
	loss    float64 // the engines' own impairment, percent
	seed    uint64
}

// runDemo implements "sroce demo".
func runDemo(e *env, args []string) int {
	f := newFlags(e, "demo", "sroce demo [--mode "+linkModes+"] [--size N] [--iters N] [--netem OPTIONS] [-v]", demoAbout)
	mode := f.String("mode", "auto", "link (`MODE`): "+iface.ModeSentence())
	size := f.Int("size", 65536, "message size in `BYTES`")
	iters := f.Int("iters", 10, "repetitions of each operation")
	burst := f.Int("burst", 256, "RDMA WRITEs in the timed burst")
	mtu := f.Int("mtu", 1500, "MTU of the veth pair (path MTU = MTU-80 rounded down, 1500 gives 1024)")
	netem := f.String("netem", "", "impair the veth with netem `OPTIONS`, e.g. \"loss 2%\" (root)")
	timeout := f.Duration("timeout", 10*time.Second, "give up on an operation after this long")
	verbose := f.Bool("verbose", false, "print every packet sent, as sroce dissect does")
	f.Short('v', "verbose")
	explain := f.Bool("explain", false, "follow every operation with its ladder, explained")
	loss := f.Float64("loss", 0, "make both engines drop `PCT` percent of the frames they send")
	seed := f.Uint64("seed", 1, "seed of --loss's choice of frames")
	pos, status, ok := f.parse(args)
	if !ok {
		return status
	}
	if len(pos) != 0 {
		return f.usageError("demo takes no arguments")
	}
	cfg := demoConfig{size: *size, iters: *iters, burst: *burst, mtu: *mtu, verbose: *verbose, timeout: *timeout,
		explain: *explain, loss: *loss, seed: *seed}
	if cfg.explain {
		if !f.IsSet("size") {
			cfg.size = explainSize
		}
		if !f.IsSet("iters") {
			cfg.iters = 1
		}
	}
	m, msg := parseLinkMode("--mode", *mode)
	if msg != "" {
		return f.usageError(msg)
	}
	cfg.mode = m
	switch {
	case cfg.size < 1 || cfg.size > 1<<30:
		return f.usageError("--size must be between 1 and 1073741824 bytes")
	case cfg.iters < 1:
		return f.usageError("--iters must be at least 1")
	case cfg.burst < 1 || cfg.burst > roce.MaxQPWR:
		return f.usageError(fmt.Sprintf("--burst must be between 1 and %d", roce.MaxQPWR))
	case cfg.mtu < 592 || cfg.mtu > 9000:
		return f.usageError("--mtu must be between 592 and 9000")
	case cfg.timeout <= 0:
		return f.usageError("--timeout must be positive")
	case !(cfg.loss >= 0 && cfg.loss < 100):
		return f.usageError("--loss must be a percentage from 0 up to, not including, 100")
	}
	if *netem != "" {
		n, err := parseNetem(*netem)
		if err != nil {
			return f.usageError(err.Error())
		}
		cfg.netem = &n
		if nsutil.Available() != nil && n == (nsutil.Netem{Loss: n.Loss}) && cfg.loss == 0 {
			// No namespaces to put netem on: the engines lose the
			// frames themselves.
			cfg.loss, cfg.netem = n.Loss, nil
			fmt.Fprintf(e.Stderr, "sroce demo: not root, so --netem \"%s\" is done by the engines' own impairment (--loss %g)\n", *netem, n.Loss)
		}
	}
	if err := demo(e, &cfg); err != nil {
		if demoInterrupted.Load() {
			// The signal handler is removing what the demo made and then
			// exits with 128+signal; an operation that failed because its
			// port was closed under it is not the demo's result.
			time.Sleep(30 * time.Second)
			fmt.Fprintln(e.Stderr, "sroce demo: interrupted, and the cleanup did not finish within 30s")
			return 130
		}
		fmt.Fprintf(e.Stderr, "sroce demo: %v\n", err)
		return exitProblem
	}
	return exitOK
}

// demoInterrupted is set when SIGINT or SIGTERM starts the demo's cleanup.
var demoInterrupted atomic.Bool

// parseNetem parses netem options as tc writes them: "loss 2%",
// "delay 1ms 200us reorder 25%", "duplicate 1% corrupt 0.1% limit 1000".
func parseNetem(s string) (nsutil.Netem, error) {
	var n nsutil.Netem
	tok := strings.Fields(s)
	pct := func(i int, what string) (float64, error) {
		if i >= len(tok) {
			return 0, fmt.Errorf("netem %s needs a percentage", what)
		}
		v, err := strconv.ParseFloat(strings.TrimSuffix(tok[i], "%"), 64)
		if err != nil || v < 0 || v > 100 {
			return 0, fmt.Errorf("netem %s: %q is not a percentage between 0 and 100", what, tok[i])
		}
		return v, nil
	}
	for i := 0; i < len(tok); i++ {
		var err error
		switch kw := tok[i]; kw {
		case "loss":
			i++
			n.Loss, err = pct(i, kw)
		case "reorder":
			i++
			n.Reorder, err = pct(i, kw)
		case "duplicate":
			i++
			n.Duplicate, err = pct(i, kw)
		case "corrupt":
			i++
			n.Corrupt, err = pct(i, kw)
		case "delay":
			i++
			if i >= len(tok) {
				return n, errors.New("netem delay needs a duration such as 1ms")
			}
			if n.Delay, err = time.ParseDuration(tok[i]); err != nil || n.Delay < 0 {
				return n, fmt.Errorf("netem delay: %q is not a duration such as 1ms", tok[i])
			}
			if i+1 < len(tok) {
				if j, err := time.ParseDuration(tok[i+1]); err == nil {
					n.Jitter = j
					i++
				}
			}
		case "limit":
			i++
			if i >= len(tok) {
				return n, errors.New("netem limit needs a packet count")
			}
			if n.Limit, err = strconv.Atoi(tok[i]); err != nil || n.Limit < 1 {
				return n, fmt.Errorf("netem limit: %q is not a packet count", tok[i])
			}
		default:
			return n, fmt.Errorf("unknown netem option %q (known: loss, delay, reorder, duplicate, corrupt, limit)", kw)
		}
		if err != nil {
			return n, err
		}
	}
	if n.Reorder > 0 && n.Delay == 0 {
		return n, errors.New("netem reorder needs a delay, e.g. \"delay 1ms reorder 25%\"")
	}
	if n == (nsutil.Netem{}) {
		return n, errors.New("--netem has no options")
	}
	return n, nil
}

// demoNet is the network the demo runs on and the two ports.
type demoNet struct {
	pair   *nsutil.Pair // nil on loopback
	ports  [2]*iface.Port
	where  [2]string // namespace of each port, "" on loopback
	addrs  [2]netip.Addr
	taps   [2]*demoTap
	mu     sync.Mutex
	closed bool
}

// close closes the ports and removes the namespaces. It may be called
// twice (normal end and the signal handler).
func (n *demoNet) close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return
	}
	n.closed = true
	for _, p := range n.ports {
		if p != nil {
			p.Close()
		}
	}
	if n.pair != nil {
		n.pair.Close()
	}
}

// demoTap counts what one port sends and, with -v, prints it.
type demoTap struct {
	side   string
	pkt    bth.Packet
	acks   atomic.Uint64 // ACK and ATOMIC ACK packets sent
	naks   atomic.Uint64 // NAK packets sent (sequence errors, RNR, ...)
	respTx atomic.Uint64 // READ response packets sent
	print  *demoPrinter
}

// tap is the iface.Options.Tap of a port.
func (t *demoTap) tap(dir iface.Direction, frame []byte) {
	if dir != iface.TX {
		return
	}
	if t.pkt.Parse(frame) != nil {
		return
	}
	switch t.pkt.Opcode {
	case bth.RCAcknowledge, bth.RCAtomicAcknowledge:
		if t.pkt.AETH().Syndrome().IsACK() {
			t.acks.Add(1)
		} else {
			t.naks.Add(1)
		}
	case bth.RCReadResponseFirst, bth.RCReadResponseMiddle, bth.RCReadResponseLast, bth.RCReadResponseOnly:
		t.respTx.Add(1)
	}
	if t.print != nil {
		t.print.packet(t.side, frame)
	}
}

// demoPrinter prints packets for -v from both device loops.
type demoPrinter struct {
	mu   sync.Mutex
	w    *bufio.Writer
	pr   dissect.Printer
	pkt  bth.Packet
	n    int
	line []byte
}

func newDemoPrinter(w io.Writer) *demoPrinter {
	p := &demoPrinter{w: bufio.NewWriter(w)}
	// Wide enough for RC_RDMA_WRITE_LAST_WITH_IMMEDIATE, so the columns do
	// not shift in the middle of the run.
	p.pr.OpcodeWidth = len("RC_RDMA_WRITE_LAST_WITH_IMMEDIATE")
	return p
}

// packet prints one frame sent by side.
func (p *demoPrinter) packet(side string, frame []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pkt.Parse(frame) != nil {
		return
	}
	p.n++
	p.line = append(p.line[:0], side...)
	p.line = p.pr.AppendPacket(p.line, p.n, &p.pkt, p.pkt.VerifyICRC())
	p.w.Write(p.line)
	p.w.Flush()
}

// note prints a line between packets, so -v output reads as a story.
func (p *demoPrinter) note(format string, args ...any) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, "--- "+format+"\n", args...)
	p.w.Flush()
}

// demo runs the whole demo.
func demo(e *env, cfg *demoConfig) (err error) {
	privileged := nsutil.Available() == nil
	switch {
	case cfg.mode == iface.ModeXDP && !privileged:
		return errors.New("--mode xdp needs root: AF_XDP and the network namespaces of the demo need CAP_SYS_ADMIN, CAP_NET_ADMIN and CAP_BPF (without root the demo runs over loopback with --mode udp)")
	case cfg.netem != nil && !privileged:
		return errors.New("--netem needs root: it impairs a veth pair between two network namespaces")
	}
	dn := &demoNet{}
	stop := nsutil.HandleSignals(func() {
		demoInterrupted.Store(true)
		fmt.Fprintln(e.Stderr, "sroce demo: interrupted; removing the namespaces, XDP programs and sockets")
		dn.close()
	})
	defer stop()
	defer dn.close()

	var pr *demoPrinter
	if cfg.verbose {
		pr = newDemoPrinter(e.Stdout)
	}
	for i, side := range []string{"A ", "B "} {
		dn.taps[i] = &demoTap{side: side, print: pr}
	}
	out := e.Stdout
	if privileged {
		err = dn.openNamespaces(cfg)
	} else {
		err = dn.openLoopback(cfg)
	}
	if err != nil {
		return err
	}
	dn.describe(out, cfg, privileged)
	for _, p := range dn.ports {
		// "sroce trace" can attach while the demo runs.
		tracesock.Serve(p.Device())
		if cfg.loss > 0 {
			if err := p.Device().SetImpairment(roce.Impairment{Loss: cfg.loss, Seed: cfg.seed}); err != nil {
				return fmt.Errorf("cannot impair %s: %w", p.Device().Name(), err)
			}
			cfg.seed++ // the other side loses other frames
		}
	}
	if cfg.loss > 0 {
		fmt.Fprintf(out, "  both engines drop %g%% of the frames they send (their own impairment, seeded)\n", cfg.loss)
	}
	var ex *explainer
	if cfg.explain {
		if ex, err = newExplainer(out, [2]*roce.Device{dn.ports[0].Device(), dn.ports[1].Device()}); err != nil {
			return err
		}
		defer ex.close()
	}

	ctx := context.Background()
	a, err := newDemoSide("A", dn.ports[0], cfg)
	if err != nil {
		return err
	}
	b, err := newDemoSide("B", dn.ports[1], cfg)
	if err != nil {
		return err
	}
	pr.note("connecting the RC QPs (INIT, RTR, RTS); the peer's MAC comes from the neighbour table")
	if err := a.connect(ctx, b, cfg); err != nil {
		return err
	}
	if err := b.connect(ctx, a, cfg); err != nil {
		return err
	}
	fmt.Fprintf(out, "RC QPs connected: A 0x%06x (PSN 0x%06x) <-> B 0x%06x (PSN 0x%06x), path MTU %d\n\n",
		uint32(a.qp.QPN()), uint32(a.psn), uint32(b.qp.QPN()), uint32(b.psn), a.mtu.Bytes())
	if ex != nil {
		ex.mtu = a.mtu.Bytes()
		fmt.Fprintf(out, "Each step below is a line: the frame number (packets), seconds since the first event, the side (A or B)\n")
		fmt.Fprintf(out, "that reported it, then either an arrow (a packet from A's column to B's or back, with its opcode and PSN,\n")
		fmt.Fprintf(out, "and what the analysis says of it) or \"*\" and what the engine did. Lines with \"~\" explain.\n\n")
		fmt.Fprintf(out, "== connecting: each side moves its QP through RESET, INIT, RTR and RTS (no packets yet)\n")
		ex.show()
	}

	r := &demoRunner{cfg: cfg, a: a, b: b, pr: pr, out: out}
	if ex == nil {
		fmt.Fprintf(out, "%-22s %8s %12s %10s   %s\n", "operation", "messages", "bytes", "time", "result")
	}
	for _, op := range []struct {
		name string
		run  func() (demoResult, error)
	}{
		{"SEND A->B", r.send},
		{"RDMA WRITE A->B", r.write},
		{"RDMA WRITE+imm A->B", r.writeImm},
		{"RDMA READ A<-B", r.read},
		{"FETCH_ADD on B", r.fetchAdd},
		{"COMPARE_SWAP on B", r.compareSwap},
	} {
		pr.note("%s", op.name)
		if ex != nil {
			fmt.Fprintf(out, "== %s\n%s\n", op.name, wrapText(explainIntro(op.name, cfg.size, a.mtu.Bytes()), 100))
		}
		start := time.Now()
		res, err := op.run()
		took := time.Since(start)
		if ex != nil {
			ex.show()
		}
		if err != nil {
			return fmt.Errorf("%s: %w", op.name, err)
		}
		if ex != nil {
			fmt.Fprintf(out, "Result: %d message(s), %d bytes, %s: %s.\n\n", res.msgs, res.bytes, fmtDur(took), res.note)
			continue
		}
		fmt.Fprintf(out, "%-22s %8d %12d %10s   %s\n", op.name, res.msgs, res.bytes, fmtDur(took), res.note)
	}
	if ex != nil {
		ex.summary()
		fmt.Fprintf(out, "(The timed WRITE burst is left out with --explain.)\n")
	} else {
		pr.note("WRITE burst")
		if err := r.writeBurst(); err != nil {
			return fmt.Errorf("WRITE burst: %w", err)
		}
	}
	dn.printCounters(out)
	fmt.Fprintf(out, "\nAll operations completed and every byte was verified.\n")
	return nil
}

// openNamespaces creates the namespaces and opens a port in each.
func (n *demoNet) openNamespaces(cfg *demoConfig) error {
	pc := nsutil.PairConfig{Prefix: "sroce-demo", Veth: nsutil.VethConfig{MTU: cfg.mtu}, Impair: cfg.netem}
	if cfg.netem != nil && cfg.mode != iface.ModeUDP {
		// AF_XDP transmits in copy mode straight to the driver, past the
		// qdisc, so a netem qdisc would not see the engine's frames.
		pc.ImpairWith = nsutil.ImpairForwarder
	}
	pair, err := nsutil.NewPair(pc)
	if err != nil {
		return fmt.Errorf("cannot create the network namespaces: %w", err)
	}
	n.pair = pair
	nss := [2]*nsutil.Namespace{pair.A, pair.B}
	ifs := [2]string{pair.Veth.NameA, pair.Veth.NameB}
	for i := range nss {
		var p *iface.Port
		err := nss[i].Do(func() (err error) {
			p, err = iface.Open(context.Background(), ifs[i], iface.Options{Mode: cfg.mode, Tap: n.taps[i].tap})
			return err
		})
		if err != nil {
			return fmt.Errorf("cannot open the sroce device in namespace %s: %w", nss[i].Name(), err)
		}
		n.ports[i] = p
		n.where[i] = nss[i].Name()
	}
	n.addrs = [2]netip.Addr{nsutil.DefaultAddrA.Addr(), nsutil.DefaultAddrB.Addr()}
	return nil
}

// openLoopback opens two ports on lo with the UDP link.
func (n *demoNet) openLoopback(cfg *demoConfig) error {
	n.addrs = [2]netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2")}
	for i, a := range n.addrs {
		p, err := iface.Open(context.Background(), "lo", iface.Options{Mode: iface.ModeUDP, Addr: a, Tap: n.taps[i].tap})
		if err != nil {
			return fmt.Errorf("cannot open the sroce device on lo (%v): %w", a, err)
		}
		n.ports[i] = p
	}
	return nil
}

// describe prints where the demo runs.
func (n *demoNet) describe(w io.Writer, cfg *demoConfig, privileged bool) {
	a := n.ports[0]
	if n.pair != nil {
		how := "AF_XDP"
		if a.LinkMode() == iface.LinkUDP {
			how = "the UDP link"
		}
		fmt.Fprintf(w, "Two network namespaces joined by a veth pair (MTU %d), one sroce engine in each over %s.\n", cfg.mtu, how)
	} else {
		fmt.Fprintf(w, "Not root: two sroce engines on the loopback interface (127.0.0.1 and 127.0.0.2) over the UDP link.\n")
		fmt.Fprintf(w, "(Run as root to see them talk over AF_XDP between two network namespaces.)\n")
	}
	for i, name := range []string{"A", "B"} {
		p := n.ports[i]
		link := p.LinkMode()
		if at := p.XDPAttach(); at != "" {
			link += ", " + at + " attach"
		}
		where := ""
		if n.where[i] != "" {
			where = " in " + n.where[i]
		}
		fmt.Fprintf(w, "  %s: %s on %s%s, %v, %s, path MTU %d\n", name, p.Device().Name(), p.Ifname(), where, n.addrs[i], link, p.PathMTU())
	}
	if cfg.netem != nil {
		fmt.Fprintf(w, "  link impaired in both directions: %s (%s)\n", cfg.netem, n.pair.Impairment)
	}
}

// demoSide is one end: a port, a PD, CQs, a memory region and an RC QP.
//
// The memory region holds, in order: the message area (size bytes, the
// source or target of SEND, WRITE and READ), the area B's READs are served
// from (size bytes), and an 8-byte word for atomics.
type demoSide struct {
	name   string
	port   *iface.Port
	pd     *roce.PD
	scq    *roce.CQ
	rcq    *roce.CQ
	mr     *roce.MR
	qp     *roce.QP
	gidIdx int
	gid    bth.GID
	psn    bth.PSN
	mtu    verbs.MTU
	size   int
	atomic int // offset of the atomic word
}

func newDemoSide(name string, p *iface.Port, cfg *demoConfig) (*demoSide, error) {
	dev := p.Device()
	s := &demoSide{name: name, port: p, size: cfg.size}
	fail := func(what string, err error) (*demoSide, error) {
		return nil, fmt.Errorf("%s: cannot %s: %w", name, what, err)
	}
	var err error
	if s.pd, err = dev.AllocPD(); err != nil {
		return fail("allocate a PD", err)
	}
	sendWR := max(cfg.burst, 64)
	if s.scq, err = dev.CreateCQ(sendWR+16, nil); err != nil {
		return fail("create a CQ", err)
	}
	if s.rcq, err = dev.CreateCQ(64, nil); err != nil {
		return fail("create a CQ", err)
	}
	s.atomic = (2*cfg.size + 7) &^ 7
	buf := make([]byte, s.atomic+8)
	access := mr.AccessLocalWrite | mr.AccessRemoteWrite | mr.AccessRemoteRead | mr.AccessRemoteAtomic
	if s.mr, err = s.pd.RegMR(buf, access); err != nil {
		return fail("register memory", err)
	}
	if s.qp, err = s.pd.CreateQP(&roce.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: s.scq, RecvCQ: s.rcq,
		Cap: verbs.QPCap{MaxSendWR: uint32(sendWR), MaxRecvWR: 32, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return fail("create the RC QP", err)
	}
	s.gidIdx = p.DefaultGIDIndex()
	if s.gid, err = p.GID(s.gidIdx); err != nil {
		return fail("find a GID", err)
	}
	s.psn = bth.PSN(rand.Uint32() & 0xffffff)
	s.mtu = p.ActiveMTU()
	if cfg.explain && s.mtu > verbs.MTU1024 {
		s.mtu = verbs.MTU1024 // several packets per message, short lines
	}
	return s, nil
}

// connect moves s's QP to RTS towards peer, as ibv_rc_pingpong does after
// exchanging QPN, PSN and GID (here in-process). The retransmit timeout is
// 16.8 ms (attribute 12; ibv_rc_pingpong uses 14, 67 ms, which only makes a
// lossy demo slower). On a clean link retry_cnt 6 makes a vanished peer an
// error after about 120 ms; with --netem it is 7, retry forever, as
// ibv_rc_pingpong sets it: like rdma_rxe, a NAK that acknowledges part of a
// message does not restore the retry budget, so heavy reordering could spend
// a finite one.
func (s *demoSide) connect(ctx context.Context, peer *demoSide, cfg *demoConfig) error {
	retry := uint8(6)
	if cfg.netem != nil || cfg.loss > 0 {
		retry = 7
	}
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ah, err := s.port.AHAttr(actx, peer.gid, s.gidIdx)
	if err != nil {
		return fmt.Errorf("%s cannot address %s: %w", s.name, peer.name, err)
	}
	c := roce.ConnectAttr{Access: mr.AccessRemoteWrite | mr.AccessRemoteRead | mr.AccessRemoteAtomic,
		AH: ah, PathMTU: min(s.mtu, peer.mtu), DestQPN: peer.qp.QPN(), RQPSN: peer.psn,
		MaxDestRdAtomic: 16, MinRNRTimer: 12,
		SQPSN: s.psn, Timeout: 12, RetryCnt: retry, RNRRetry: 7, MaxRdAtomic: 16}
	if err := s.qp.Connect(&c); err != nil {
		return fmt.Errorf("%s: %w", s.name, err)
	}
	return nil
}

// msg returns the message area, read returns the READ source area, and
// word the atomic word.
func (s *demoSide) msg() []byte  { return s.mr.Buf()[:s.size] }
func (s *demoSide) read() []byte { return s.mr.Buf()[s.size : 2*s.size] }
func (s *demoSide) word() uint64 { return binary.NativeEndian.Uint64(s.mr.Buf()[s.atomic:]) }
func (s *demoSide) setWord(v uint64) {
	binary.NativeEndian.PutUint64(s.mr.Buf()[s.atomic:], v)
}

// demoResult is what one operation reports.
type demoResult struct {
	msgs, bytes int
	note        string
}

// demoRunner performs the operations from A to B.
type demoRunner struct {
	cfg  *demoConfig
	a, b *demoSide
	pr   *demoPrinter
	out  io.Writer
}

// wait waits for one completion on cq of side s and checks its status and
// opcode. A port that goes down or a peer that stops answering ends the
// wait with a sentence saying so.
func (r *demoRunner) wait(s *demoSide, cq *roce.CQ, want verbs.WCOpcode) (verbs.WC, error) {
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.timeout)
	defer cancel()
	var wc [1]verbs.WC
	for {
		wctx, wcancel := context.WithTimeout(ctx, 50*time.Millisecond)
		n, err := cq.Wait(wctx, wc[:])
		wcancel()
		if n == 1 {
			break
		}
		for _, p := range []*iface.Port{r.a.port, r.b.port} {
			select {
			case <-p.Lost():
				return wc[0], fmt.Errorf("%s: %w", p.Device().Name(), p.Err())
			default:
			}
			if err := p.DownErr(); err != nil {
				return wc[0], fmt.Errorf("%s: %w", p.Device().Name(), err)
			}
		}
		if ctx.Err() != nil {
			retr, _ := s.port.Stat("retransmit_pkts")
			return wc[0], fmt.Errorf("%s got no completion within %v (%d packets retransmitted so far); the peer is not answering", s.name, r.cfg.timeout, retr)
		}
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return wc[0], fmt.Errorf("%s: %w", s.name, err)
		}
	}
	c := wc[0]
	if c.Status != verbs.WCSuccess {
		msg := fmt.Sprintf("%s's %v completed with status %v", s.name, want, c.Status)
		if c.Status == verbs.WCRetryExcErr {
			msg += " (the peer stopped answering: retries exhausted)"
		}
		return c, errors.New(msg)
	}
	if c.Opcode != want {
		return c, fmt.Errorf("%s got a %v completion, expected %v", s.name, c.Opcode, want)
	}
	return c, nil
}

// fill writes a pattern that differs per operation and iteration.
func fill(b []byte, op byte, i int) {
	x := uint32(op)<<24 ^ uint32(i)*2654435761
	for j := range b {
		x = x*1664525 + 1013904223
		b[j] = byte(x >> 24)
	}
}

func (r *demoRunner) send() (demoResult, error) {
	a, b := r.a, r.b
	for i := 0; i < r.cfg.iters; i++ {
		clear(b.msg())
		if err := b.qp.PostRecv(&verbs.RecvWR{WRID: uint64(i), SGL: []mr.SGE{b.mr.SGE(0, b.size)}}); err != nil {
			return demoResult{}, fmt.Errorf("B cannot post a receive: %w", err)
		}
		fill(a.msg(), 'S', i)
		if err := a.qp.PostSend(&verbs.SendWR{WRID: uint64(i), Opcode: verbs.WROpSend, Flags: verbs.Signaled,
			SGL: []mr.SGE{a.mr.SGE(0, a.size)}}); err != nil {
			return demoResult{}, fmt.Errorf("A cannot post: %w", err)
		}
		if _, err := r.wait(a, a.scq, verbs.WCSend); err != nil {
			return demoResult{}, err
		}
		wc, err := r.wait(b, b.rcq, verbs.WCRecv)
		if err != nil {
			return demoResult{}, err
		}
		if int(wc.ByteLen) != a.size || !bytes.Equal(a.msg(), b.msg()) {
			return demoResult{}, fmt.Errorf("message %d arrived wrong (%d of %d bytes, data equal: %v)", i, wc.ByteLen, a.size, bytes.Equal(a.msg(), b.msg()))
		}
	}
	return demoResult{r.cfg.iters, r.cfg.iters * a.size, "data verified"}, nil
}

func (r *demoRunner) write() (demoResult, error) {
	a, b := r.a, r.b
	for i := 0; i < r.cfg.iters; i++ {
		clear(b.msg())
		fill(a.msg(), 'W', i)
		if err := a.qp.PostSend(&verbs.SendWR{WRID: uint64(i), Opcode: verbs.WROpRDMAWrite, Flags: verbs.Signaled,
			SGL: []mr.SGE{a.mr.SGE(0, a.size)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}); err != nil {
			return demoResult{}, fmt.Errorf("A cannot post: %w", err)
		}
		if _, err := r.wait(a, a.scq, verbs.WCRDMAWrite); err != nil {
			return demoResult{}, err
		}
		if !bytes.Equal(a.msg(), b.msg()) {
			return demoResult{}, fmt.Errorf("B's memory differs from what A wrote (message %d)", i)
		}
	}
	return demoResult{r.cfg.iters, r.cfg.iters * a.size, "data verified in B's memory"}, nil
}

func (r *demoRunner) writeImm() (demoResult, error) {
	a, b := r.a, r.b
	for i := 0; i < r.cfg.iters; i++ {
		clear(b.msg())
		if err := b.qp.PostRecv(&verbs.RecvWR{WRID: uint64(i)}); err != nil {
			return demoResult{}, fmt.Errorf("B cannot post a receive: %w", err)
		}
		fill(a.msg(), 'I', i)
		imm := 0x5e000000 | uint32(i)
		if err := a.qp.PostSend(&verbs.SendWR{WRID: uint64(i), Opcode: verbs.WROpRDMAWriteWithImm, Flags: verbs.Signaled,
			SGL: []mr.SGE{a.mr.SGE(0, a.size)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey(), Imm: imm}); err != nil {
			return demoResult{}, fmt.Errorf("A cannot post: %w", err)
		}
		if _, err := r.wait(a, a.scq, verbs.WCRDMAWrite); err != nil {
			return demoResult{}, err
		}
		wc, err := r.wait(b, b.rcq, verbs.WCRecvRDMAWithImm)
		if err != nil {
			return demoResult{}, err
		}
		if wc.Imm != imm || int(wc.ByteLen) != a.size || !bytes.Equal(a.msg(), b.msg()) {
			return demoResult{}, fmt.Errorf("message %d arrived wrong (immediate 0x%08x, want 0x%08x; %d bytes)", i, wc.Imm, imm, wc.ByteLen)
		}
	}
	return demoResult{r.cfg.iters, r.cfg.iters * a.size, "data and immediate verified"}, nil
}

func (r *demoRunner) read() (demoResult, error) {
	a, b := r.a, r.b
	for i := 0; i < r.cfg.iters; i++ {
		clear(a.msg())
		fill(b.read(), 'R', i)
		if err := a.qp.PostSend(&verbs.SendWR{WRID: uint64(i), Opcode: verbs.WROpRDMARead, Flags: verbs.Signaled,
			SGL: []mr.SGE{a.mr.SGE(0, a.size)}, RemoteAddr: b.mr.Addr() + uint64(b.size), RKey: b.mr.RKey()}); err != nil {
			return demoResult{}, fmt.Errorf("A cannot post: %w", err)
		}
		if _, err := r.wait(a, a.scq, verbs.WCRDMARead); err != nil {
			return demoResult{}, err
		}
		if !bytes.Equal(a.msg(), b.read()) {
			return demoResult{}, fmt.Errorf("the data A read differs from B's memory (message %d)", i)
		}
	}
	return demoResult{r.cfg.iters, r.cfg.iters * a.size, "data verified"}, nil
}

// atomic posts one atomic operation from A on B's word and returns the
// original value A got back.
func (r *demoRunner) atomic(op verbs.WROpcode, want verbs.WCOpcode, cmpAdd, swap uint64, i int) (uint64, error) {
	a, b := r.a, r.b
	a.setWord(0xbad0bad0bad0bad0)
	if err := a.qp.PostSend(&verbs.SendWR{WRID: uint64(i), Opcode: op, Flags: verbs.Signaled,
		SGL: []mr.SGE{a.mr.SGE(a.atomic, 8)}, RemoteAddr: b.mr.Addr() + uint64(b.atomic), RKey: b.mr.RKey(),
		CompareAdd: cmpAdd, Swap: swap}); err != nil {
		return 0, fmt.Errorf("A cannot post: %w", err)
	}
	if _, err := r.wait(a, a.scq, want); err != nil {
		return 0, err
	}
	return a.word(), nil
}

func (r *demoRunner) fetchAdd() (demoResult, error) {
	b := r.b
	const start = 1000
	b.setWord(start)
	sum := uint64(start)
	for i := 0; i < r.cfg.iters; i++ {
		add := uint64(i + 1)
		old, err := r.atomic(verbs.WROpAtomicFetchAdd, verbs.WCFetchAdd, add, 0, i)
		if err != nil {
			return demoResult{}, err
		}
		if old != sum {
			return demoResult{}, fmt.Errorf("FETCH_ADD %d returned %d, expected %d", i, old, sum)
		}
		sum += add
	}
	if got := b.word(); got != sum {
		return demoResult{}, fmt.Errorf("B's word is %d after the adds, expected %d", got, sum)
	}
	return demoResult{r.cfg.iters, 8 * r.cfg.iters, fmt.Sprintf("counter %d -> %d, every old value verified", start, sum)}, nil
}

func (r *demoRunner) compareSwap() (demoResult, error) {
	b := r.b
	cur := uint64(0x5eed)
	b.setWord(cur)
	for i := 0; i < r.cfg.iters; i++ {
		next := cur*0x9e3779b97f4a7c15 + uint64(i)
		old, err := r.atomic(verbs.WROpAtomicCmpSwp, verbs.WCCompSwap, cur, next, i)
		if err != nil {
			return demoResult{}, err
		}
		if old != cur || b.word() != next {
			return demoResult{}, fmt.Errorf("COMPARE_SWAP %d returned %#x (expected %#x), B holds %#x (expected %#x)", i, old, cur, b.word(), next)
		}
		cur = next
	}
	// A compare that does not match leaves the word alone.
	old, err := r.atomic(verbs.WROpAtomicCmpSwp, verbs.WCCompSwap, cur+1, 0, r.cfg.iters)
	if err != nil {
		return demoResult{}, err
	}
	if old != cur || b.word() != cur {
		return demoResult{}, fmt.Errorf("a failing COMPARE_SWAP returned %#x and left %#x, expected %#x untouched", old, b.word(), cur)
	}
	n := r.cfg.iters + 1
	return demoResult{n, 8 * n, fmt.Sprintf("%d swaps and 1 refused compare verified", r.cfg.iters)}, nil
}

// writeBurst posts the burst of WRITEs at once (every 64th and the last
// signaled) and times it until the last completion.
func (r *demoRunner) writeBurst() error {
	a, b := r.a, r.b
	fill(a.msg(), 'B', 0)
	sent0, _ := a.port.Stat("sent_pkts")
	n := r.cfg.burst
	wrs := make([]verbs.SendWR, n)
	signaled := 0
	for i := range wrs {
		wrs[i] = verbs.SendWR{WRID: uint64(i), Opcode: verbs.WROpRDMAWrite,
			SGL: []mr.SGE{a.mr.SGE(0, a.size)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
		if i%64 == 63 || i == n-1 {
			wrs[i].Flags = verbs.Signaled
			signaled++
		}
	}
	start := time.Now()
	if k, err := a.qp.PostSendList(wrs); err != nil {
		return fmt.Errorf("A could post only %d of %d WRITEs: %w", k, n, err)
	}
	for i := 0; i < signaled; i++ {
		if _, err := r.wait(a, a.scq, verbs.WCRDMAWrite); err != nil {
			return err
		}
	}
	dt := time.Since(start)
	if !bytes.Equal(a.msg(), b.msg()) {
		return errors.New("B's memory differs from what A wrote")
	}
	sent1, _ := a.port.Stat("sent_pkts")
	total := float64(n) * float64(a.size)
	pkts := sent1 - sent0
	fmt.Fprintf(r.out, "\nWRITE burst A->B: %d x %s = %s in %s: %.0f Mbit/s (%.1f MB/s), %d packets, %.1f kpps\n",
		n, fmtBytes(a.size), fmtBytes(int(total)), fmtDur(dt), total*8/dt.Seconds()/1e6, total/dt.Seconds()/1e6,
		pkts, float64(pkts)/dt.Seconds()/1e3)
	return nil
}

// printCounters prints the interesting counters of both devices.
func (n *demoNet) printCounters(w io.Writer) {
	fmt.Fprintf(w, "\n%-34s %12s %12s\n", "counters", "A", "B")
	row := func(name string, f func(i int) uint64) {
		fmt.Fprintf(w, "%-34s %12d %12d\n", name, f(0), f(1))
	}
	stat := func(name string) func(int) uint64 {
		return func(i int) uint64 { v, _ := n.ports[i].Stat(name); return v }
	}
	row("packets sent (sent_pkts)", stat("sent_pkts"))
	row("packets received (rcvd_pkts)", stat("rcvd_pkts"))
	row("ACKs sent", func(i int) uint64 { return n.taps[i].acks.Load() })
	row("NAKs sent", func(i int) uint64 { return n.taps[i].naks.Load() })
	row("READ responses sent", func(i int) uint64 { return n.taps[i].respTx.Load() })
	row("retransmitted (retransmit_pkts)", stat("retransmit_pkts"))
	row("retransmit timeouts (timeouts)", stat("timeouts"))
	row("sequence NAKs got (rcvd_seq_err)", stat("rcvd_seq_err"))
	row("gaps seen (out_of_seq_request)", stat("out_of_seq_request"))
	row("duplicates (duplicate_request)", stat("duplicate_request"))
	drops := []string{"icrc_error", "malformed", "bad_dgid", "unknown_qpn", "bad_pkey", "bad_qkey", "bad_addr",
		"wrong_type", "wrong_state", "bad_response", "resp_queue_full", "recv_dropped", "send_err"}
	row("dropped by the engine", func(i int) uint64 {
		var s uint64
		for _, d := range drops {
			v, _ := n.ports[i].Stat(d)
			s += v
		}
		return s
	})
	if n.ports[0].XDPLink() != nil {
		row("dropped by AF_XDP (rx_dropped)", stat("rx_dropped"))
	}
	for _, d := range drops {
		a, _ := n.ports[0].Stat(d)
		b, _ := n.ports[1].Stat(d)
		if a+b > 0 {
			row("  of which "+d, stat(d))
		}
	}
	if n.pair != nil && n.pair.Forwarder != nil {
		st := n.pair.Forwarder.Stats()
		fmt.Fprintf(w, "impairment (both directions): %d frames forwarded, %d lost, %d reordered, %d duplicated, %d corrupted\n",
			st.Received, st.Lost, st.Reordered, st.Duplicated, st.Corrupted)
	}
}

// fmtDur prints a duration with three significant digits in ms or s.
func fmtDur(d time.Duration) string {
	if d < time.Second {
		return fmt.Sprintf("%.1f ms", float64(d)/1e6)
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}

// fmtBytes prints a size in B, KiB or MiB.
func fmtBytes(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}
