// Package rping is rdma-core's rping on a sroce device: an RDMA CM
// connection, then a ping-pong of RDMA READs and WRITEs over buffers each
// side advertises, with rping's flags, protocol and output, so that either
// side may be the real tool; its exit status is that of every sroce
// command (0, 1 for a failed run, 2 for a bad command line).
//
// The protocol, per ping: the client fills its start buffer with
// "rdma-ping-N: " and a rotating run of the letters A..z, and SENDs its
// address, rkey and size (struct rping_rdma_info: 64-bit address, 32-bit
// rkey, 32-bit size, network byte order); the server RDMA READs it into
// its buffer and SENDs a go-ahead; the client SENDs the address of its
// sink buffer; the server RDMA WRITEs the string back there and SENDs the
// go-ahead again. The client disconnects after -C pings; the server ends
// when the client disconnects.
//
// The device is the one on the interface that holds the address the side
// binds (-a on the server, -I on the client) or, on a client without -I,
// the interface of the route to the server; SROCE_LINK and SROCE_ENGINE
// pick the link and engine as for the other tools.
package rping

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sroce/sroce/cm"
	"github.com/sroce/sroce/internal/cli"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/rdmacm"
	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/roce/iface"
	"github.com/sroce/sroce/roce/netif"
	"github.com/sroce/sroce/tools/device"
	"github.com/sroce/sroce/verbs"
)

// Defaults and limits of rping.
const (
	DefaultPort = 7174
	DefaultSize = 64
	MinSize     = 26 // sizeof "2147483647" plus sizeof "rdma-ping-%d: "
	BufSize     = 64 * 1024
	sqDepth     = 16
	infoLen     = 16 // struct rping_rdma_info
	// StepTimeout bounds every wait once connected: a completion or a CM
	// event the protocol expects (SROCE_STALL_TIMEOUT overrides it). A
	// server waits for its client SROCE_ACCEPT_TIMEOUT (10 minutes).
	StepTimeout = 60 * time.Second
	// Exit statuses: those of every sroce command.
	exitOK    = cli.ExitOK
	exitFail  = cli.ExitProblem // the run failed (rping's exit(-1))
	exitUsage = cli.ExitUsage   // bad command line
)

// options are rping's command line.
type options struct {
	server     int // -1 unset, 0 client, 1 server
	addr       netip.Addr
	addrGiven  bool
	src        netip.Addr
	port       uint16
	count      int
	size       int
	verbose    bool
	validate   bool
	debug      bool
	persistent bool
	selfQP     bool
}

// optionTable is rping's getopt string "a:I:Pp:C:S:t:scvVdq", each
// letter with a long name of sroce's, and -h/--help and --version.
var optionTable = []struct {
	spec cli.Spec
	arg  string // the value's name in the usage, "" for a switch
	text string
}{
	{cli.Spec{Short: 's', Long: "server"}, "", "server side; to bind to any address with IPv6 use -a ::0"},
	{cli.Spec{Short: 'c', Long: "client"}, "", "client side"},
	{cli.Spec{Short: 'a', Long: "addr", Arg: cli.NeedArg}, "ADDR", "address: the server's (a client's -a is needed), or the one a server binds"},
	{cli.Spec{Short: 'I', Long: "source", Arg: cli.NeedArg}, "ADDR", "source address a client binds to"},
	{cli.Spec{Short: 'p', Long: "port", Arg: cli.NeedArg}, "PORT", fmt.Sprintf("port (default %d)", DefaultPort)},
	{cli.Spec{Short: 'S', Long: "size", Arg: cli.NeedArg}, "SIZE", fmt.Sprintf("ping data size, %d to %d (default %d)", MinSize, BufSize-1, DefaultSize)},
	{cli.Spec{Short: 'C', Long: "count", Arg: cli.NeedArg}, "COUNT", "ping count times (default: until stopped)"},
	{cli.Spec{Short: 'v', Long: "verbose"}, "", "display ping data to stdout"},
	{cli.Spec{Short: 'V', Long: "validate"}, "", "validate ping data"},
	{cli.Spec{Short: 'd', Long: "debug"}, "", "debug printfs"},
	{cli.Spec{Short: 'P', Long: "persistent"}, "", "persistent server mode allowing multiple connections"},
	{cli.Spec{Short: 'q', Long: "self-qp"}, "", "use self-created, self-modified QP"},
	{cli.Spec{Short: 't', Long: "tos", Arg: cli.NeedArg}, "TOS", "type of service (not supported by sroce)"},
	{cli.Spec{Short: 'h', Long: "help"}, "", cli.HelpFlag.Text},
	{cli.Spec{Long: "version"}, "", cli.VersionFlag.Text},
}

// about is the description of "sroce rping --help".
const about = `
rdma-core's rping on a sroce device: an RDMA CM connection, then a
ping-pong of RDMA READs and WRITEs, with rping's flags, protocol and
output, so that either side may be the real rping. The device is the one
on the interface holding the address the side binds (-a on the server, -I
on the client) or, on a client without -I, the interface of the route to
the server. SROCE_LINK and SROCE_ENGINE pick the link and engine as for
the other tools.

Exit status: 0 when the pings went well, 1 when the run failed, 2 for a
bad command line.`

// usage is rping's usage text.
func usage() *cli.Usage {
	u := &cli.Usage{Name: "sroce rping", Synopsis: "sroce rping -s|-c [-a ADDR] [flags]", About: about}
	for _, o := range optionTable {
		u.Flags = append(u.Flags, cli.Help{Short: o.spec.Short, Long: o.spec.Long, Arg: o.arg, Text: o.text})
	}
	return u
}

// Usage prints the usage text, with the description, to w.
func Usage(w io.Writer) { usage().Write(w, true) }

// atoi is C's atoi: leading digits, 0 when there are none.
func atoi(s string) int {
	s = strings.TrimSpace(s)
	end := 0
	if end < len(s) && (s[0] == '-' || s[0] == '+') {
		end++
	}
	for end < len(s) && s[end] >= '0' && s[end] <= '9' {
		end++
	}
	n, _ := strconv.Atoi(s[:end])
	return n
}

// errGetaddr is a name that does not resolve: rping prints getaddrinfo's
// complaint and exits with its code.
type errGetaddr struct{ name string }

func (e errGetaddr) Error() string {
	return "getaddrinfo failed (Name or service not known) - invalid hostname or IP address"
}

func lookup(ctx context.Context, s string) (netip.Addr, error) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap(), nil
	}
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", s)
	if err != nil || len(addrs) == 0 {
		return netip.Addr{}, errGetaddr{s}
	}
	return addrs[0].Unmap(), nil
}

// errHelp and errVersion are what parse returns for -h and --version.
var (
	errHelp    = errors.New("help")
	errVersion = errors.New("version")
)

// parse reads rping's command line (optionTable); a bad one is a
// *cli.Error naming the flag.
func parse(ctx context.Context, args []string) (*options, error) {
	o := &options{server: -1, port: DefaultPort, size: DefaultSize, addr: netip.IPv4Unspecified()}
	specs := make([]cli.Spec, len(optionTable))
	for i := range optionTable {
		specs[i] = optionTable[i].spec
	}
	operands, err := cli.Getopt(args, specs, false, func(f cli.Opt) (bool, error) {
		bad := func(why string) error { return cli.Errorf("invalid value %q for %s: %s", f.Value, f.Flag, why) }
		val := f.Value
		switch f.Short {
		case 'a', 'I':
			addr, err := lookup(ctx, val)
			if err != nil {
				return false, bad(err.Error())
			}
			if f.Short == 'a' {
				o.addr, o.addrGiven = addr, true
			} else {
				o.src = addr
			}
		case 'P':
			o.persistent = true
		case 'p':
			n, err := strconv.ParseUint(strings.TrimSpace(val), 10, 16)
			if err != nil {
				return false, bad("not a port number")
			}
			o.port = uint16(n)
		case 's':
			o.server = 1
		case 'c':
			o.server = 0
		case 'S':
			o.size = atoi(val)
			if o.size < MinSize || o.size > BufSize-1 {
				return false, bad(fmt.Sprintf("invalid size %d (valid range is %d to %d)", o.size, MinSize, BufSize-1))
			}
		case 'C':
			o.count = atoi(val)
			if o.count < 0 {
				return false, bad(fmt.Sprintf("invalid count %d", o.count))
			}
		case 'v':
			o.verbose = true
		case 'V':
			o.validate = true
		case 'd':
			o.debug = true
		case 'q':
			o.selfQP = true
		case 't':
			return false, cli.Errorf("%s (type of service) is not supported by sroce", f.Flag)
		case 'h':
			return true, errHelp
		default:
			return true, errVersion
		}
		return false, nil
	})
	switch {
	case err != nil:
		return nil, err
	case len(operands) > 0:
		return nil, cli.Errorf("rping takes no arguments, not %q", operands)
	case o.server == -1:
		return nil, cli.Errorf("give -s (server) or -c (client)")
	}
	return o, nil
}

// Main runs rping with args (without the program name) and returns its
// exit status: 0, 1 for a failed run (where rping exits -1), 2 for a bad
// command line (where rping exits with EINVAL), with the error and the
// usage on stderr. -h/--help prints the usage and --version sroce's
// version on stdout.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parse(ctx, args)
	switch {
	case errors.Is(err, errHelp):
		Usage(stdout)
		return exitOK
	case errors.Is(err, errVersion):
		return cli.Version(stdout)
	case err != nil:
		return usage().Fail(stderr, err.Error())
	}
	r := &runner{o: o, out: stdout, errw: stderr}
	if err := r.run(ctx); err != nil {
		if !errors.Is(err, errReported) {
			fmt.Fprintf(stderr, "rping: %v\n", err)
		}
		return exitFail
	}
	return exitOK
}

// errReported is a failure whose message rping has printed already.
var errReported = errors.New("reported")

type runner struct {
	o    *options
	out  io.Writer
	errw io.Writer
	port *iface.Port
	cm   *rdmacm.CM
	ch   *rdmacm.EventChannel
	cmID *rdmacm.ID // the listener on the server, the connection on the client

	mu   sync.Mutex
	subs map[*rdmacm.ID]chan *rdmacm.Event
}

func (r *runner) dbg(format string, args ...any) {
	if r.o.debug {
		fmt.Fprintf(r.out, format, args...)
	}
}

// interfaceOf returns the interface holding addr.
func interfaceOf(addr netip.Addr) (string, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return "", err
	}
	for _, ifc := range ifs {
		as, _ := ifc.Addrs()
		for _, a := range as {
			if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Unmap() == addr {
				return ifc.Name, nil
			}
		}
	}
	if addr.IsLoopback() {
		return "lo", nil // lo answers for all of 127.0.0.0/8
	}
	return "", fmt.Errorf("no network interface has the address %v", addr)
}

// openDevice opens the sroce device the side runs on (see the package
// documentation).
func (r *runner) openDevice(ctx context.Context) error {
	var spec device.Spec
	bind := r.o.src
	if r.o.server == 1 {
		bind = r.o.addr
	}
	switch {
	case bind.IsValid() && !bind.IsUnspecified():
		name, err := interfaceOf(bind)
		if err != nil {
			return err
		}
		spec = device.Spec{Ifname: name, Addr: bind}
	case r.o.server == 0:
		name, src, err := netif.SourceFor(r.o.addr)
		if err != nil {
			return err
		}
		spec = device.Spec{Ifname: name, Addr: src}
	default:
		name, err := device.DefaultInterface(ctx, "")
		if err != nil {
			return err
		}
		spec = device.Spec{Ifname: name}
	}
	mode, err := device.LinkMode()
	if err != nil {
		return err
	}
	octx, cancel := context.WithTimeout(ctx, device.ResolveTimeout)
	defer cancel()
	if r.port, err = device.Open(octx, spec, mode); err != nil {
		return err
	}
	r.dbg("opened %v\n", r.port)
	return nil
}

func (r *runner) run(ctx context.Context) error {
	if err := r.openDevice(ctx); err != nil {
		return err
	}
	defer r.port.Close()
	var err error
	if r.cm, err = rdmacm.New(rdmacm.Config{}, r.port); err != nil {
		return err
	}
	defer r.cm.Close()
	r.ch = rdmacm.NewEventChannel()
	defer r.ch.Destroy()
	id, err := r.cm.CreateID(r.ch, cm.PortSpaceTCP, nil)
	if err != nil {
		return err
	}
	r.dbg("created cm_id %p\n", id)
	defer id.Destroy()
	r.cmID = id
	if r.o.server == 1 {
		return r.runServer(ctx, id)
	}
	return r.runClient(ctx, id)
}

// cmFail prints a failed CM event as rping's event handler does.
func (r *runner) cmFail(e *rdmacm.Event) error {
	if e.Type == rdmacm.EventDeviceRemoval {
		fmt.Fprintf(r.errw, "cma detected device removal!!!!\n")
	} else {
		fmt.Fprintf(r.errw, "cma event %v, error %d\n", e.Type, e.Status)
	}
	return errReported
}

// conn is one connection's QP, buffers and the goroutines that feed its
// completions and CM events to the protocol.
type conn struct {
	r       *runner
	id      *rdmacm.ID
	pd      *roce.PD
	cq      *roce.CQ
	qp      *roce.QP
	recvMR  *roce.MR // 16 bytes: the peer's rping_rdma_info
	sendMR  *roce.MR // 16 bytes: ours
	rdmaMR  *roce.MR // the sink (client) or the buffer read into (server)
	startMR *roce.MR // client: the source the server reads
	wcs     chan verbs.WC
	events  chan *rdmacm.Event
	stop    context.CancelFunc
	disconn bool
	server  bool
	size    int
	bufAddr uint64 // the peer's advertised buffer
	bufRKey uint32
	bufLen  uint32
}

func (r *runner) setupConn(ctx context.Context, id *rdmacm.ID, server bool) (*conn, error) {
	dev := id.Device()
	c := &conn{r: r, id: id, server: server, size: r.o.size, wcs: make(chan verbs.WC, 64), events: make(chan *rdmacm.Event, 16)}
	var err error
	if c.pd, err = dev.AllocPD(); err != nil {
		return nil, err
	}
	r.dbg("created pd %p\n", c.pd)
	if c.cq, err = dev.CreateCQ(sqDepth*2, nil); err != nil {
		return nil, err
	}
	r.dbg("created cq %p\n", c.cq)
	attr := &roce.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: c.cq, RecvCQ: c.cq,
		Cap: verbs.QPCap{MaxSendWR: sqDepth, MaxRecvWR: 2, MaxSendSGE: 1, MaxRecvSGE: 1}}
	if r.o.selfQP {
		if c.qp, err = c.pd.CreateQP(attr); err == nil {
			err = c.qp.Modify(&verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1}, verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags)
		}
	} else {
		c.qp, err = id.CreateQP(c.pd, attr)
	}
	if err != nil {
		return nil, fmt.Errorf("rdma_create_qp: %w", err)
	}
	r.dbg("created qp %p\n", c.qp)
	if c.recvMR, err = c.pd.RegMR(make([]byte, infoLen), mr.AccessLocalWrite); err != nil {
		return nil, err
	}
	if c.sendMR, err = c.pd.RegMR(make([]byte, infoLen), 0); err != nil {
		return nil, err
	}
	rw := mr.AccessLocalWrite | mr.AccessRemoteRead | mr.AccessRemoteWrite
	if c.rdmaMR, err = c.pd.RegMR(make([]byte, c.size), rw); err != nil {
		return nil, err
	}
	if !server {
		if c.startMR, err = c.pd.RegMR(make([]byte, c.size), rw); err != nil {
			return nil, err
		}
	}
	r.dbg("allocated & registered buffers...\n")
	if err := c.postRecv(); err != nil {
		return nil, fmt.Errorf("ibv_post_recv failed: %w", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	c.stop = cancel
	go func() {
		var wcs [8]verbs.WC
		for {
			n, err := c.cq.Wait(cctx, wcs[:])
			if err != nil {
				return
			}
			for _, w := range wcs[:n] {
				select {
				case c.wcs <- w:
				case <-cctx.Done():
					return
				}
			}
		}
	}()
	return c, nil
}

func (c *conn) postRecv() error {
	return c.qp.PostRecv(&verbs.RecvWR{SGL: []mr.SGE{c.recvMR.SGE(0, infoLen)}})
}

func (c *conn) close() {
	if c.stop != nil {
		c.stop()
	}
	if c.r.o.selfQP {
		c.qp.Destroy()
	} else {
		c.id.DestroyQP()
	}
	for _, m := range []*roce.MR{c.recvMR, c.sendMR, c.rdmaMR, c.startMR} {
		if m != nil {
			m.Dereg()
		}
	}
	c.cq.Destroy()
	c.pd.Dealloc()
}

// errDisconnected ends the protocol loop: the peer disconnected.
var errDisconnected = errors.New("disconnected")

// next waits for the next completion the protocol cares about (not a
// SEND's), handling the CM events that come meanwhile.
func (c *conn) next(what string) (verbs.WC, error) {
	stall := envDuration(envStall, StepTimeout)
	t := time.NewTimer(stall)
	defer t.Stop()
	for {
		select {
		case w := <-c.wcs:
			if w.Status == verbs.WCWRFlushErr {
				continue
			}
			if w.Status != verbs.WCSuccess {
				fmt.Fprintf(c.r.errw, "cq completion failed status %d\n", int(w.Status))
				return w, errReported
			}
			if w.Opcode == verbs.WCSend {
				c.r.dbg("send completion\n")
				continue
			}
			return w, nil
		case e := <-c.events:
			if err := c.event(e); err != nil {
				return verbs.WC{}, err
			}
		case <-t.C:
			return verbs.WC{}, fmt.Errorf("waited %v for %s: no completion came", stall, what)
		}
	}
}

// event handles a CM event once connected.
func (c *conn) event(e *rdmacm.Event) error {
	c.r.dbg("cma_event type %v cma_id %p (%s)\n", e.Type, e.ID, map[bool]string{true: "parent", false: "child"}[e.ID == c.r.cmID])
	switch e.Type {
	case rdmacm.EventDisconnected:
		fmt.Fprintf(c.r.errw, "%s DISCONNECT EVENT...\n", map[bool]string{true: "server", false: "client"}[c.server])
		c.disconn = true
		return errDisconnected
	case rdmacm.EventEstablished, rdmacm.EventTimewaitExit:
		return nil
	case rdmacm.EventConnectRequest:
		// Another client while this one runs: not taken.
		e.ID.Reject(nil)
		e.ID.Destroy()
		return nil
	}
	return c.r.cmFail(e)
}

// recvInfo waits for the peer's SEND of an rping_rdma_info.
func (c *conn) recvInfo(what string) error {
	w, err := c.next(what)
	if err != nil {
		return err
	}
	if w.Opcode != verbs.WCRecv {
		return fmt.Errorf("waiting for %s, got a %v completion", what, w.Opcode)
	}
	if w.ByteLen != infoLen {
		fmt.Fprintf(c.r.errw, "Received bogus data, size %d\n", w.ByteLen)
		return errReported
	}
	b := c.recvMR.Buf()
	c.bufAddr, c.bufRKey, c.bufLen = binary.BigEndian.Uint64(b), binary.BigEndian.Uint32(b[8:]), binary.BigEndian.Uint32(b[12:])
	c.r.dbg("Received rkey %x addr %x len %d from peer\n", c.bufRKey, c.bufAddr, c.bufLen)
	return c.postRecv()
}

// sendInfo SENDs the address, rkey and size of m (or a go-ahead).
func (c *conn) sendInfo(m *roce.MR) error {
	b := c.sendMR.Buf()
	if m != nil {
		binary.BigEndian.PutUint64(b, m.Addr())
		binary.BigEndian.PutUint32(b[8:], m.RKey())
		binary.BigEndian.PutUint32(b[12:], uint32(c.size))
		c.r.dbg("RDMA addr %x rkey %x len %d\n", m.Addr(), m.RKey(), c.size)
	}
	err := c.qp.PostSend(&verbs.SendWR{Opcode: verbs.WROpSend, Flags: verbs.Signaled, SGL: []mr.SGE{c.sendMR.SGE(0, infoLen)}})
	if err != nil {
		fmt.Fprintf(c.r.errw, "post send error %v\n", err)
		return errReported
	}
	return nil
}

// rdma posts an RDMA READ or WRITE of n bytes between the sink buffer
// and the peer's advertised buffer, and waits for its completion.
func (c *conn) rdma(op verbs.WROpcode, n int, want verbs.WCOpcode, what string) error {
	err := c.qp.PostSend(&verbs.SendWR{Opcode: op, Flags: verbs.Signaled, SGL: []mr.SGE{c.rdmaMR.SGE(0, n)},
		RemoteAddr: c.bufAddr, RKey: c.bufRKey})
	if err != nil {
		fmt.Fprintf(c.r.errw, "post send error %v\n", err)
		return errReported
	}
	w, err := c.next(what)
	if err != nil {
		return err
	}
	if w.Opcode != want {
		return fmt.Errorf("waiting for %s, got a %v completion", what, w.Opcode)
	}
	return nil
}

// cstring returns b up to its first NUL.
func cstring(b []byte) []byte {
	for i, x := range b {
		if x == 0 {
			return b[:i]
		}
	}
	return b
}
