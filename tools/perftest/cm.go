package perftest

// perftest over RDMA CM (-z, -R), as perftest 4.5 does it: the exchange
// runs over a first RDMA CM connection on the port (-p) instead of TCP,
// one SEND per message, the keys as the binary struct pingpong_dest; with
// -R the test's QP is connected by a second RDMA CM connection on the same
// port, between two key exchanges of zeros, instead of from the keys.
// The client disconnects the test connection, then the exchange's.

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/cm"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/rdma"
	"github.com/sroce/sroce/rdmacm"
	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/tools/oob"
	"github.com/sroce/sroce/verbs"
)

const (
	cmMsgMax  = 256 // the largest exchange message (a key message is 56 bytes)
	cmRecvs   = 8
	cmRetries = 7 // rnr_retry_count perftest asks for
)

// cmLink is the exchange channel over RDMA CM: a net.Conn whose Write is
// one SEND and whose Read takes the received messages in order, so that
// oob.Conn runs perftest's exchange over it unchanged.
type cmLink struct {
	pt     *perftest
	ch     *rdmacm.EventChannel
	id     *rdmacm.ID
	qp     *roce.QP
	scq    *roce.CQ
	rcq    *roce.CQ
	smr    *roce.MR
	rmr    *roce.MR
	msgs   chan []byte
	gone   chan struct{} // closed when the peer disconnects or Close runs
	stop   context.CancelFunc
	ctx    context.Context
	peer   netip.AddrPort
	data   []cmData             // the test's connections (-R), disconnected first
	dataCh *rdmacm.EventChannel // their events on the server (its listener's channel)
	client bool

	mu       sync.Mutex
	pending  []byte
	rdl, wdl time.Time
	dlch     chan struct{} // closed (and replaced) when a deadline changes
	goneOnce sync.Once
	closed   bool
}

// cmData is one test QP's RDMA CM connection (-R) and the channel of its
// events.
type cmData struct {
	ch *rdmacm.EventChannel
	id *rdmacm.ID
}

// errCMDown is what the link's reads and writes return once the peer
// disconnected: oob reports it as the peer having closed the exchange.
var errCMDown = fmt.Errorf("the RDMA CM connection of the exchange is down: %w", net.ErrClosed)

func (pt *perftest) cmConnParam(qpn uint32, verb oob.Verb) *rdmacm.ConnParam {
	p := &rdmacm.ConnParam{RetryCount: uint8(min(max(pt.p.Retry, 0), 7)), RNRRetryCount: cmRetries}
	if verb == oob.VerbRead || verb == oob.VerbAtomic {
		p.ResponderResources, p.InitiatorDepth = uint8(pt.outReads), uint8(pt.outReads)
	}
	if qpn != 0 {
		p.QPNum = bth.QPN(qpn)
	}
	return p
}

// cmEvent waits up to limit for an event of want on ch; another event is
// an error naming it.
func cmEvent(ctx context.Context, ch *rdmacm.EventChannel, want rdmacm.EventType, limit time.Duration, what string) (*rdmacm.Event, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for {
		e, err := ch.Get(ctx)
		if err != nil {
			if ctx.Err() == context.DeadlineExceeded {
				return nil, fmt.Errorf("no %v came within %v while %s", want, limit, what)
			}
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		switch {
		case e.Type == want:
			return e, nil
		case e.Type == rdmacm.EventTimewaitExit:
			continue
		}
		return e, fmt.Errorf("unexpected CM event %v (status %d) while %s", e.Type, e.Status, what)
	}
}

// openCM starts the CM on the tool's device. A daemon's device has the
// daemon's CM, which sroce's tools do not speak to.
func (pt *perftest) openCM() (*rdmacm.CM, error) {
	p := pt.h.port()
	if p == nil {
		return nil, fmt.Errorf("%s is the sroce daemon's device: sroce's tools run -R and --rdma_cm only on a device of their own (run the real tool through `sroce run` to use the daemon's RDMA CM)", pt.h.Name())
	}
	return rdmacm.New(rdmacm.Config{}, p)
}

// serverAddr resolves the server operand.
func serverAddr(ctx context.Context, name string, port int) (netip.AddrPort, error) {
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", name)
	if err != nil || len(addrs) == 0 {
		return netip.AddrPort{}, fmt.Errorf("Problem in resolving basic address and port: %q", name)
	}
	return netip.AddrPortFrom(addrs[0].Unmap(), uint16(port)), nil
}

// resolve runs an active ID through ADDR_RESOLVED and ROUTE_RESOLVED.
func resolve(ctx context.Context, id *rdmacm.ID, ch *rdmacm.EventChannel, dst netip.AddrPort) error {
	if err := id.ResolveAddr(netip.AddrPort{}, dst, 2*time.Second); err != nil {
		return err
	}
	if _, err := cmEvent(ctx, ch, rdmacm.EventAddrResolved, 5*time.Second, "resolving "+dst.String()); err != nil {
		return err
	}
	if err := id.ResolveRoute(2 * time.Second); err != nil {
		return err
	}
	_, err := cmEvent(ctx, ch, rdmacm.EventRouteResolved, 5*time.Second, "resolving the route to "+dst.String())
	return err
}

// dialCM connects the exchange to the server, retrying while the server
// is not listening yet (REJECTED, UNREACHABLE) until the connect limit.
func (pt *perftest) dialCM(ctx context.Context, c *rdmacm.CM) (*cmLink, error) {
	dst, err := serverAddr(ctx, pt.p.ServerName, pt.p.Port)
	if err != nil {
		return nil, err
	}
	end := time.Now().Add(pt.steps.Connect + oob.DefaultConnectTimeout)
	for {
		l, err := pt.tryDialCM(ctx, c, dst)
		if err == nil {
			return l, nil
		}
		if time.Now().After(end) || ctx.Err() != nil {
			return nil, fmt.Errorf("Couldn't connect to %v with RDMA CM: %w", dst, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (pt *perftest) tryDialCM(ctx context.Context, c *rdmacm.CM, dst netip.AddrPort) (*cmLink, error) {
	ch := rdmacm.NewEventChannel()
	id, err := c.CreateID(ch, cm.PortSpaceTCP, nil)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*cmLink, error) {
		id.DestroyQP()
		id.Destroy()
		ch.Destroy()
		return nil, err
	}
	if err := resolve(ctx, id, ch, dst); err != nil {
		return fail(err)
	}
	l, err := pt.newCMLink(ctx, id, ch, true)
	if err != nil {
		return fail(err)
	}
	if err := id.Connect(pt.cmConnParam(0, oob.VerbSend)); err != nil {
		l.release()
		return fail(err)
	}
	if _, err := cmEvent(ctx, ch, rdmacm.EventEstablished, oob.DefaultConnectTimeout, "connecting the exchange"); err != nil {
		l.release()
		return fail(err)
	}
	l.peer = dst
	l.connected()
	return l, nil
}

// acceptCM waits for the client's exchange connection on the port.
func (pt *perftest) acceptCM(ctx context.Context, c *rdmacm.CM, limit time.Duration) (*cmLink, error) {
	ch := rdmacm.NewEventChannel()
	lid, err := c.CreateID(ch, cm.PortSpaceTCP, nil)
	if err != nil {
		return nil, err
	}
	defer lid.Destroy() // perftest destroys its listener once connected
	if err := lid.BindAddr(netip.AddrPortFrom(netip.IPv4Unspecified(), uint16(pt.p.Port))); err != nil {
		return nil, fmt.Errorf(" rdma_bind_addr failed: %w", err)
	}
	if err := lid.Listen(1); err != nil {
		return nil, fmt.Errorf("rdma_listen failed: %w", err)
	}
	if pt.full() {
		pt.out(oob.WaitingBanner)
	}
	pt.waitingFor("waiting for a client to connect with RDMA CM on port %d", pt.p.Port)
	e, err := cmEvent(ctx, ch, rdmacm.EventConnectRequest, limit, "waiting for a client")
	if err != nil {
		return nil, err
	}
	l, err := pt.newCMLink(ctx, e.ID, ch, false)
	if err != nil {
		e.ID.Reject(nil)
		return nil, err
	}
	if err := e.ID.Accept(pt.cmConnParam(0, oob.VerbSend)); err != nil {
		l.release()
		return nil, err
	}
	l.peer = e.ID.PeerAddr()
	l.connected()
	return l, nil
}

// newCMLink creates the exchange's QP on id and starts taking its
// messages.
func (pt *perftest) newCMLink(ctx context.Context, id *rdmacm.ID, ch *rdmacm.EventChannel, client bool) (*cmLink, error) {
	dev := id.Device()
	l := &cmLink{pt: pt, ch: ch, id: id, client: client, msgs: make(chan []byte, cmRecvs),
		gone: make(chan struct{}), dlch: make(chan struct{})}
	var err error
	if l.scq, err = dev.CreateCQ(16, nil); err != nil {
		return nil, err
	}
	if l.rcq, err = dev.CreateCQ(cmRecvs*2, nil); err != nil {
		return nil, err
	}
	if l.qp, err = id.CreateQP(id.PD(), &roce.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: l.scq, RecvCQ: l.rcq,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: cmRecvs, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return nil, err
	}
	if l.smr, err = id.PD().RegMR(make([]byte, cmMsgMax), 0); err != nil {
		return nil, err
	}
	if l.rmr, err = id.PD().RegMR(make([]byte, cmRecvs*cmMsgMax), mr.AccessLocalWrite); err != nil {
		return nil, err
	}
	for i := 0; i < cmRecvs; i++ {
		if err := l.postRecv(i); err != nil {
			return nil, err
		}
	}
	lctx, cancel := context.WithCancel(ctx)
	l.stop, l.ctx = cancel, lctx
	go l.receive(lctx)
	return l, nil
}

// connected starts watching the connection's events, once the caller has
// taken those of its establishment.
func (l *cmLink) connected() { go l.watch(l.ctx) }

func (l *cmLink) postRecv(i int) error {
	return l.qp.PostRecv(&verbs.RecvWR{WRID: uint64(i), SGL: []mr.SGE{l.rmr.SGE(i*cmMsgMax, cmMsgMax)}})
}

// receive hands each received message to Read and reposts its buffer.
func (l *cmLink) receive(ctx context.Context) {
	var wcs [cmRecvs]verbs.WC
	for {
		n, err := l.rcq.Wait(ctx, wcs[:])
		if err != nil {
			return
		}
		for _, w := range wcs[:n] {
			if w.Status != verbs.WCSuccess {
				l.down()
				return
			}
			i := int(w.WRID)
			msg := append([]byte(nil), l.rmr.Buf()[i*cmMsgMax:i*cmMsgMax+int(min(w.ByteLen, cmMsgMax))]...)
			l.postRecv(i)
			select {
			case l.msgs <- msg:
			case <-ctx.Done():
				return
			}
		}
	}
}

// watch ends the link when the peer disconnects it.
func (l *cmLink) watch(ctx context.Context) {
	for {
		e, err := l.ch.Get(ctx)
		if err != nil {
			return
		}
		if e.ID == l.id && (e.Type == rdmacm.EventDisconnected || e.Type == rdmacm.EventDeviceRemoval) {
			l.down()
		}
	}
}

func (l *cmLink) down() { l.goneOnce.Do(func() { close(l.gone) }) }

// deadline returns the read or write deadline and the channel that
// closes when it changes.
func (l *cmLink) deadline(read bool) (time.Time, chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if read {
		return l.rdl, l.dlch
	}
	return l.wdl, l.dlch
}

// wait blocks until ready yields, the deadline passes or the link goes
// down.
func (l *cmLink) wait(read bool, ready <-chan []byte) ([]byte, error) {
	for {
		dl, changed := l.deadline(read)
		var timer <-chan time.Time
		if !dl.IsZero() {
			d := time.Until(dl)
			if d <= 0 {
				return nil, os.ErrDeadlineExceeded
			}
			t := time.NewTimer(d)
			defer t.Stop()
			timer = t.C
		}
		select {
		case m := <-ready:
			return m, nil
		case <-l.gone:
			return nil, errCMDown
		case <-timer:
			return nil, os.ErrDeadlineExceeded
		case <-changed:
		}
	}
}

// Read returns the next bytes of the received messages.
func (l *cmLink) Read(b []byte) (int, error) {
	l.mu.Lock()
	if len(l.pending) > 0 {
		n := copy(b, l.pending)
		l.pending = l.pending[n:]
		l.mu.Unlock()
		return n, nil
	}
	l.mu.Unlock()
	m, err := l.wait(true, l.msgs)
	if err != nil {
		return 0, err
	}
	n := copy(b, m)
	l.mu.Lock()
	l.pending = m[n:]
	l.mu.Unlock()
	return n, nil
}

// Write sends b as one message and waits for its completion, within the
// write deadline.
func (l *cmLink) Write(b []byte) (int, error) {
	if len(b) > cmMsgMax {
		return 0, fmt.Errorf("a %d-byte exchange message is longer than %d", len(b), cmMsgMax)
	}
	select {
	case <-l.gone:
		return 0, errCMDown
	default:
	}
	copy(l.smr.Buf(), b)
	if err := l.qp.PostSend(&verbs.SendWR{Opcode: verbs.WROpSend, Flags: verbs.Signaled, SGL: []mr.SGE{l.smr.SGE(0, len(b))}}); err != nil {
		return 0, err
	}
	for {
		dl, changed := l.deadline(false)
		ctx, cancel := context.WithCancel(context.Background())
		if !dl.IsZero() {
			ctx, cancel = context.WithDeadline(context.Background(), dl)
		}
		stop := make(chan struct{})
		go func() {
			select {
			case <-changed:
			case <-l.gone:
			case <-stop:
			}
			cancel()
		}()
		var wcs [1]verbs.WC
		n, _ := l.scq.Wait(ctx, wcs[:])
		close(stop)
		cancel()
		if n == 1 {
			if wcs[0].Status != verbs.WCSuccess {
				l.down()
				return 0, fmt.Errorf("the exchange message's SEND completed with %v: %w", wcs[0].Status, net.ErrClosed)
			}
			return len(b), nil
		}
		select {
		case <-l.gone:
			return 0, errCMDown
		default:
		}
		if !dl.IsZero() && !time.Now().Before(dl) {
			return 0, os.ErrDeadlineExceeded
		}
	}
}

// Close disconnects the test's connection (-R) and then the exchange's,
// as perftest's client does; a server waits for the client's
// disconnections (a second at most each) and releases its side.
func (l *cmLink) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.mu.Unlock()
	for _, d := range l.data {
		if l.client {
			d.id.Disconnect()
		}
		cmEvent(context.Background(), d.ch, rdmacm.EventDisconnected, time.Second, "closing the test's connection")
		d.id.Destroy()
		d.ch.Destroy()
	}
	if l.dataCh != nil {
		l.dataCh.Destroy()
	}
	if l.client {
		l.id.Disconnect()
	}
	select {
	case <-l.gone:
	case <-time.After(time.Second):
	}
	l.release()
	l.id.Destroy()
	l.ch.Destroy()
	return nil
}

// release frees the link's QP and buffers.
func (l *cmLink) release() {
	l.down()
	if l.stop != nil {
		l.stop()
	}
	l.id.DestroyQP()
	for _, m := range []*roce.MR{l.smr, l.rmr} {
		if m != nil {
			m.Dereg()
		}
	}
	for _, q := range []*roce.CQ{l.scq, l.rcq} {
		if q != nil {
			q.Destroy()
		}
	}
}

// cmAddr is a net.Addr for the exchange's peer.
type cmAddr netip.AddrPort

func (a cmAddr) Network() string { return "rdma_cm" }
func (a cmAddr) String() string  { return netip.AddrPort(a).String() }

// LocalAddr returns the ID's address.
func (l *cmLink) LocalAddr() net.Addr { return cmAddr(l.id.LocalAddr()) }

// RemoteAddr returns the peer's address.
func (l *cmLink) RemoteAddr() net.Addr { return cmAddr(l.peer) }

// SetDeadline sets both deadlines.
func (l *cmLink) SetDeadline(t time.Time) error {
	l.setDeadline(&l.rdl, t)
	l.setDeadline(&l.wdl, t)
	return nil
}

// SetReadDeadline sets the read deadline.
func (l *cmLink) SetReadDeadline(t time.Time) error { l.setDeadline(&l.rdl, t); return nil }

// SetWriteDeadline sets the write deadline.
func (l *cmLink) SetWriteDeadline(t time.Time) error { l.setDeadline(&l.wdl, t); return nil }

func (l *cmLink) setDeadline(p *time.Time, t time.Time) {
	l.mu.Lock()
	*p = t
	close(l.dlch)
	l.dlch = make(chan struct{})
	l.mu.Unlock()
}

var _ net.Conn = (*cmLink)(nil)

// orDefault returns d, or def when d is zero.
func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// connectDataCM connects the test's QPs (-R) with RDMA CM connections on
// the port, between the two key exchanges of zeros perftest makes around
// them: the client requests one per QP naming it, and each QP is moved to
// INIT, RTR and RTS with the CM's attributes (rdma_init_qp_attr) before
// the REP (server) or the RTU (client). The server listens before the
// first exchange, so a client's request never finds the port closed, and
// takes the requests in whatever order they come, as perftest does.
func (pt *perftest) connectDataCM(ctx context.Context, c *rdmacm.CM, l *cmLink) error {
	ch := rdmacm.NewEventChannel()
	l.dataCh = ch
	var lid *rdmacm.ID
	if !pt.client() {
		var err error
		if lid, err = c.CreateID(ch, cm.PortSpaceTCP, nil); err != nil {
			return err
		}
		defer lid.Destroy()
		if err := lid.BindAddr(netip.AddrPortFrom(netip.IPv4Unspecified(), uint16(pt.p.Port))); err != nil {
			return fmt.Errorf(" rdma_bind_addr failed: %w", err)
		}
		if err := lid.Listen(len(pt.qps)); err != nil {
			return fmt.Errorf("rdma_listen failed: %w", err)
		}
	}
	if _, err := pt.conn.ExchangeKeys(ctx, oob.KeyMsg{}); err != nil {
		return err
	}
	var err error
	if pt.client() {
		err = pt.connectQPsCM(ctx, c, l)
	} else {
		err = pt.acceptQPsCM(ctx, l)
	}
	if err != nil {
		return err
	}
	_, err = pt.conn.ExchangeKeys(ctx, oob.KeyMsg{})
	return err
}

// moveQP moves q to INIT, RTR and RTS with id's attributes.
func moveQP(id *rdmacm.ID, q rdma.QP) error {
	for _, st := range []verbs.QPState{verbs.QPStateInit, verbs.QPStateRTR, verbs.QPStateRTS} {
		a, mask, err := id.InitQPAttr(st)
		if err == nil {
			err = q.Modify(&a, mask)
		}
		if err != nil {
			return fmt.Errorf("Failed to modify QP %d to %v: %w", q.QPN(), st, err)
		}
	}
	return nil
}

// connectQPsCM connects each QP in turn, retrying a request the server
// was not ready for within the step limit.
func (pt *perftest) connectQPsCM(ctx context.Context, c *rdmacm.CM, l *cmLink) error {
	step := orDefault(pt.steps.Step, oob.DefaultStepTimeout)
	dst, err := serverAddr(ctx, pt.p.ServerName, pt.p.Port)
	if err != nil {
		return err
	}
	for _, q := range pt.qps {
		ch := rdmacm.NewEventChannel()
		var id *rdmacm.ID
		for end := time.Now().Add(step); ; {
			if id, err = c.CreateID(ch, cm.PortSpaceTCP, nil); err != nil {
				return err
			}
			if err = resolve(ctx, id, ch, dst); err == nil {
				if err = id.Connect(pt.cmConnParam(uint32(q.QPN()), pt.verb)); err == nil {
					_, err = cmEvent(ctx, ch, rdmacm.EventConnectResponse, step, "connecting the test's QP")
				}
			}
			if err == nil {
				break
			}
			id.Destroy()
			if time.Now().After(end) {
				return err
			}
			time.Sleep(100 * time.Millisecond)
		}
		l.data = append(l.data, cmData{ch: ch, id: id})
		if err := moveQP(id, q); err != nil {
			id.Reject(nil)
			return err
		}
		if err := id.Accept(nil); err != nil {
			return err
		}
		if _, err := cmEvent(ctx, ch, rdmacm.EventEstablished, step, "connecting the test's QP"); err != nil {
			return err
		}
	}
	return nil
}

// acceptQPsCM takes one request per QP, in the order they come, and
// waits until every connection is established.
func (pt *perftest) acceptQPsCM(ctx context.Context, l *cmLink) error {
	step := orDefault(pt.steps.Step, oob.DefaultStepTimeout)
	ctx, cancel := context.WithTimeout(ctx, step)
	defer cancel()
	established := 0
	for established < len(pt.qps) {
		e, err := l.dataCh.Get(ctx)
		if err != nil {
			return fmt.Errorf("%d of %d test connections established within %v: %w", established, len(pt.qps), step, err)
		}
		switch e.Type {
		case rdmacm.EventConnectRequest:
			if len(l.data) == len(pt.qps) {
				e.ID.Reject(nil)
				e.ID.Destroy()
				continue
			}
			q := pt.qps[len(l.data)]
			l.data = append(l.data, cmData{ch: l.dataCh, id: e.ID})
			if err := moveQP(e.ID, q); err != nil {
				e.ID.Reject(nil)
				return err
			}
			if err := e.ID.Accept(pt.cmConnParam(uint32(q.QPN()), pt.verb)); err != nil {
				return err
			}
		case rdmacm.EventEstablished:
			established++
		case rdmacm.EventTimewaitExit:
		default:
			return fmt.Errorf("unexpected CM event %v (status %d) while connecting the test's QPs", e.Type, e.Status)
		}
	}
	return nil
}

// connectedByCM is the Connect hook of -R: the QP is connected already.
func (pt *perftest) connectedByCM(remote []oob.KeyMsg) error {
	pt.peer = remote
	pt.check.start(pt)
	return nil
}
