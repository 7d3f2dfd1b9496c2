package rping

// The two sides of rping, and the routing of CM events to the ID (the
// listener or a connection) they are for, as rping's CM thread does.

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"time"

	"github.com/sroce/sroce/rdmacm"
	"github.com/sroce/sroce/verbs"
)

// resolveWait is rping's timeout for address and route resolution, 2 s.
const resolveWait = 2000 * time.Millisecond

// The tools' bounds on a server's wait for its client and on each step of
// a run (see tools/perftest): Go durations in the environment.
const (
	envAccept     = "SROCE_ACCEPT_TIMEOUT"
	envStall      = "SROCE_STALL_TIMEOUT"
	defaultAccept = 10 * time.Minute
)

// envDuration reads a duration from the environment, def when unset or
// not a positive duration.
func envDuration(name string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(name)); err == nil && d > 0 {
		return d
	}
	return def
}

// subscribe returns the channel of id's events (a listener's
// CONNECT_REQUESTs included).
func (r *runner) subscribe(id *rdmacm.ID) chan *rdmacm.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.subs == nil {
		r.subs = map[*rdmacm.ID]chan *rdmacm.Event{}
	}
	ch := r.subs[id]
	if ch == nil {
		ch = make(chan *rdmacm.Event, 64)
		r.subs[id] = ch
	}
	return ch
}

// route reads the event channel and hands each event to its ID's
// subscriber, until ctx ends.
func (r *runner) route(ctx context.Context) {
	for {
		e, err := r.ch.Get(ctx)
		if err != nil {
			return
		}
		to := e.ID
		if e.Type == rdmacm.EventConnectRequest {
			to = e.ListenID
		}
		select {
		case r.subscribe(to) <- e:
		case <-ctx.Done():
			return
		}
	}
}

// waitEvent waits at most d (0: until ctx ends) for the next event of
// sub; an event other than want is a failure, reported as rping does.
func (r *runner) waitEvent(ctx context.Context, sub chan *rdmacm.Event, want rdmacm.EventType, d time.Duration, state string) (*rdmacm.Event, error) {
	var timeout <-chan time.Time
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		timeout = t.C
	}
	for {
		select {
		case e := <-sub:
			r.dbg("cma_event type %v cma_id %p (%s)\n", e.Type, e.ID, map[bool]string{true: "parent", false: "child"}[e.ID == r.cmID])
			switch {
			case e.Type == rdmacm.EventDisconnected:
				fmt.Fprintf(r.errw, "%s DISCONNECT EVENT...\n", map[bool]string{true: "server", false: "client"}[r.o.server == 1])
				if want == e.Type {
					return e, nil
				}
				return e, errDisconnected
			case e.Type == want:
				return e, nil
			case e.Type == rdmacm.EventTimewaitExit:
				continue
			}
			return e, r.cmFail(e)
		case <-timeout:
			return nil, fmt.Errorf("waited %v for %v (%s): no CM event came", d, want, state)
		case <-ctx.Done():
			return nil, fmt.Errorf("stopped while waiting for %v: %w", want, ctx.Err())
		}
	}
}

func (r *runner) runServer(ctx context.Context, lid *rdmacm.ID) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go r.route(ctx)
	if err := lid.BindAddr(netip.AddrPortFrom(r.o.addr, r.o.port)); err != nil {
		fmt.Fprintf(r.errw, "rdma_bind_addr: %v\n", err)
		return errReported
	}
	r.dbg("rdma_bind_addr successful\n")
	r.dbg("rdma_listen\n")
	if err := lid.Listen(3); err != nil {
		fmt.Fprintf(r.errw, "rdma_listen: %v\n", err)
		return errReported
	}
	sub := r.subscribe(lid)
	for {
		e, err := r.waitEvent(ctx, sub, rdmacm.EventConnectRequest, envDuration(envAccept, defaultAccept), "a client's CONNECT_REQUEST")
		if err != nil {
			return err
		}
		r.dbg("child cma %p\n", e.ID)
		if !r.o.persistent {
			return r.serve(ctx, e)
		}
		go r.serve(ctx, e)
	}
}

// serve runs the server side of one connection.
func (r *runner) serve(ctx context.Context, req *rdmacm.Event) error {
	child := req.ID
	defer child.Destroy()
	sub := r.subscribe(child)
	c, err := r.setupConn(ctx, child, true)
	if err != nil {
		fmt.Fprintf(r.errw, "setup_qp failed: %v\n", err)
		child.Reject(nil)
		return errReported
	}
	c.events = sub
	defer c.close()
	r.dbg("accepting client connection request\n")
	var param *rdmacm.ConnParam
	if r.o.selfQP {
		if err := r.selfModify(c); err != nil {
			return err
		}
		param = connParam(c)
	}
	if err := child.Accept(param); err != nil {
		fmt.Fprintf(r.errw, "rdma_accept: %v\n", err)
		return errReported
	}
	if _, err := r.waitEvent(ctx, sub, rdmacm.EventEstablished, envDuration(envStall, StepTimeout), "CONNECTED"); err != nil {
		fmt.Fprintf(r.errw, "connect error %d\n", -1)
		return err
	}
	err = c.testServer()
	child.Disconnect()
	if c.disconn {
		return nil
	}
	if err != nil && err != errReported {
		fmt.Fprintf(r.errw, "rping server failed: %v\n", err)
		return errReported
	}
	return err
}

// testServer is the server's ping loop; it ends when the client
// disconnects.
func (c *conn) testServer() error {
	for {
		if err := c.recvInfo("the client's source buffer"); err != nil {
			return c.waitFailed("RDMA_READ_ADV", err)
		}
		c.r.dbg("server received sink adv\n")
		if int(c.bufLen) > c.size {
			fmt.Fprintf(c.r.errw, "cq completion failed status %d\n", int(verbs.WCLocLenErr))
			return errReported
		}
		if err := c.rdma(verbs.WROpRDMARead, int(c.bufLen), verbs.WCRDMARead, "the RDMA READ"); err != nil {
			return c.waitFailed("RDMA_READ_COMPLETE", err)
		}
		c.r.dbg("server received read complete\n")
		if c.r.o.verbose {
			fmt.Fprintf(c.r.out, "server ping data: %s\n", cstring(c.rdmaMR.Buf()))
		}
		if err := c.sendInfo(nil); err != nil {
			return err
		}
		c.r.dbg("server posted go ahead\n")
		if err := c.recvInfo("the client's sink buffer"); err != nil {
			return c.waitFailed("RDMA_WRITE_ADV", err)
		}
		n := len(cstring(c.rdmaMR.Buf())) + 1
		if err := c.rdma(verbs.WROpRDMAWrite, min(n, c.size), verbs.WCRDMAWrite, "the RDMA WRITE"); err != nil {
			return c.waitFailed("RDMA_WRITE_COMPLETE", err)
		}
		c.r.dbg("server rdma write complete \n")
		if err := c.sendInfo(nil); err != nil {
			return err
		}
		c.r.dbg("server posted go ahead\n")
	}
}

// connParam is rping's connection parameters.
func connParam(c *conn) *rdmacm.ConnParam {
	p := &rdmacm.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}
	if c.r.o.selfQP {
		p.QPNum = c.qp.QPN()
	}
	return p
}

// selfModify moves a QP rping made itself through INIT, RTR and RTS with
// the CM's attributes (-q).
func (r *runner) selfModify(c *conn) error {
	for _, st := range []verbs.QPState{verbs.QPStateInit, verbs.QPStateRTR, verbs.QPStateRTS} {
		a, mask, err := c.id.InitQPAttr(st)
		if err == nil {
			err = c.qp.Modify(&a, mask)
		}
		if err != nil {
			fmt.Fprintf(r.errw, "rping_modify_qp: %v\n", err)
			return errReported
		}
	}
	return nil
}

func (r *runner) runClient(ctx context.Context, id *rdmacm.ID) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go r.route(ctx)
	sub := r.subscribe(id)
	var src netip.AddrPort
	if r.o.src.IsValid() {
		src = netip.AddrPortFrom(r.o.src, 0)
	}
	if err := id.ResolveAddr(src, netip.AddrPortFrom(r.o.addr, r.o.port), resolveWait); err != nil {
		fmt.Fprintf(r.errw, "rdma_resolve_addr: %v\n", err)
		return errReported
	}
	if _, err := r.waitEvent(ctx, sub, rdmacm.EventAddrResolved, 2*resolveWait, "addr/route resolution"); err != nil {
		return err
	}
	if err := id.ResolveRoute(resolveWait); err != nil {
		fmt.Fprintf(r.errw, "rdma_resolve_route: %v\n", err)
		return errReported
	}
	if _, err := r.waitEvent(ctx, sub, rdmacm.EventRouteResolved, 2*resolveWait, "addr/route resolution"); err != nil {
		return err
	}
	r.dbg("rdma_resolve_addr - rdma_resolve_route successful\n")
	c, err := r.setupConn(ctx, id, false)
	if err != nil {
		fmt.Fprintf(r.errw, "setup_qp failed: %v\n", err)
		return errReported
	}
	c.events = sub
	defer c.close()
	if err := id.Connect(connParam(c)); err != nil {
		fmt.Fprintf(r.errw, "rdma_connect: %v\n", err)
		return errReported
	}
	want := rdmacm.EventEstablished
	if r.o.selfQP {
		want = rdmacm.EventConnectResponse
	}
	// The CM gives up after its own retries (15 REQs, about 100 s):
	// wait for that, not less.
	if _, err := r.waitEvent(ctx, sub, want, 3*time.Minute, "CONNECTED"); err != nil {
		return err
	}
	if r.o.selfQP {
		if err := r.selfModify(c); err != nil {
			return err
		}
		if err := id.Accept(nil); err != nil {
			fmt.Fprintf(r.errw, "rdma_establish: %v\n", err)
			return errReported
		}
	}
	r.dbg("rdma_connect successful\n")
	err = c.testClient()
	if err != nil && !c.disconn {
		if err != errReported {
			fmt.Fprintf(r.errw, "rping client failed: %v\n", err)
		}
		id.Disconnect()
		return errReported
	}
	if !c.disconn {
		id.Disconnect()
		// rping's CM thread prints the DISCONNECTED event when the DREP
		// comes, before the ID is destroyed.
		r.waitEvent(ctx, sub, rdmacm.EventDisconnected, 5*time.Second, "DISCONNECTED")
	}
	return nil
}

// testClient is the client's ping loop: count pings (0: forever).
func (c *conn) testClient() error {
	start := byte(65)
	buf := c.startMR.Buf()
	for ping := 0; c.r.o.count == 0 || ping < c.r.o.count; ping++ {
		n := copy(buf, fmt.Sprintf("rdma-ping-%d: ", ping))
		ch := start
		for i := n; i < c.size; i++ {
			buf[i] = ch
			ch++
			if ch > 122 {
				ch = 65
			}
		}
		start++
		if start > 122 {
			start = 65
		}
		buf[c.size-1] = 0
		if err := c.sendInfo(c.startMR); err != nil {
			return err
		}
		if err := c.recvInfo("the server's go-ahead after its RDMA READ"); err != nil {
			return c.waitFailed("RDMA_WRITE_ADV", err)
		}
		if err := c.sendInfo(c.rdmaMR); err != nil {
			return err
		}
		if err := c.recvInfo("the server's go-ahead after its RDMA WRITE"); err != nil {
			return c.waitFailed("RDMA_WRITE_COMPLETE", err)
		}
		if c.r.o.validate && !bytes.Equal(buf, c.rdmaMR.Buf()) {
			fmt.Fprintf(c.r.errw, "data mismatch!\n")
			return errReported
		}
		if c.r.o.verbose {
			fmt.Fprintf(c.r.out, "ping data: %s\n", cstring(c.rdmaMR.Buf()))
		}
	}
	return nil
}

// stateDisconnected is rping's DISCONNECTED in its enum test_state.
const stateDisconnected = 10

// waitFailed prints, when the peer disconnected during a wait, the line
// rping prints then ("wait for RDMA_READ_ADV state 10"; the run still
// ends well), and returns err.
func (c *conn) waitFailed(state string, err error) error {
	if err == errDisconnected {
		fmt.Fprintf(c.r.errw, "wait for %s state %d\n", state, stateDisconnected)
	}
	return err
}
