package rdmacm

// The agent: one per device, the owner of QP1. Its goroutine takes the
// MADs QP1 receives to the device's cm.Manager, ticks the Manager's timers
// and hands the Manager's events to the IDs; the MADs the Manager wants
// sent go out as UD SENDs to the peer's QP1. The Manager, the IDs and the
// agents' connection tables are under CM.mu; the send side (QP1's send
// queue, the address handle cache) is under agent.sendMu, taken while
// CM.mu is still held so MADs leave in the order the Manager made them.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/cm"
	"github.com/sroce/sroce/monotime"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/verbs"
)

const (
	recvSlots   = 128
	sendSlots   = 64
	recvSlotLen = verbs.GRHLen + cm.MADLen
	// tickEvery bounds how long the agent sleeps between timer checks.
	tickEvery = 10 * time.Millisecond
	// resolveWait bounds the neighbour resolution of a MAD's destination.
	resolveWait = 2 * time.Second
	// settleWait bounds how long an event waits for QP1 to send the MADs
	// that precede it.
	settleWait = 100 * time.Millisecond
)

// Stats are an agent's counters: what QP1 on one device sent and received.
type Stats struct {
	Device       string
	MADsSent     uint64
	MADsReceived uint64
	// Dropped counts received MADs dropped, by reason ("bad class
	// version", "too short", "unknown connection", ...), MADs not sent
	// ("no route to the peer", "send queue full"), and events posted
	// before QP1 had sent the MADs that precede them ("MAD send not
	// completed in time").
	Dropped map[string]uint64
	cm.Counters
	HalfOpen int // passive connections not yet established, now
	Conns    int // connections the Manager holds, now
}

// Counter is one named figure of Stats.List.
type Counter struct {
	Name  string
	Value uint64
}

// List returns the figures as named counters in a fixed order, the way
// `sroce stat` and the daemon's metrics show them: cm_mads_sent,
// cm_mads_received, the Manager's counters, cm_half_open and cm_conns
// (now), then cm_dropped_REASON for each drop reason seen (sorted, spaces
// as underscores).
func (s *Stats) List() []Counter {
	c := &s.Counters
	l := []Counter{
		{"cm_mads_sent", s.MADsSent}, {"cm_mads_received", s.MADsReceived},
		{"cm_resends", c.Resends}, {"cm_dups_answered", c.DupsAnswered},
		{"cm_rej_sent", c.REJSent}, {"cm_rej_received", c.REJReceived},
		{"cm_established", c.Established}, {"cm_disconnects", c.Disconnects},
		{"cm_timeouts", c.Timeouts}, {"cm_half_open_full", c.HalfOpenFull},
		{"cm_no_listener", c.NoListener}, {"cm_unknown_conn", c.UnknownConn},
		{"cm_half_open", uint64(s.HalfOpen)}, {"cm_conns", uint64(s.Conns)},
	}
	reasons := make([]string, 0, len(s.Dropped))
	for r := range s.Dropped {
		reasons = append(reasons, r)
	}
	sort.Strings(reasons)
	for _, r := range reasons {
		l = append(l, Counter{"cm_dropped_" + strings.ReplaceAll(r, " ", "_"), s.Dropped[r]})
	}
	return l
}

type agent struct {
	c    *CM
	port Port
	dev  *roce.Device
	pd   *roce.PD
	scq  *roce.CQ
	rcq  *roce.CQ
	qp   *roce.QP
	smr  *roce.MR
	rmr  *roce.MR
	guid uint64

	// Under CM.mu.
	mgr     *cm.Manager
	conns   map[uint32]*ID  // by local communication ID
	srcIx   map[bth.GID]int // the GID index a peer addressed us on
	pending []cm.Out        // MADs the agent itself answers with
	posts   []idEvent       // events to post once the MADs before them are sent

	sendMu   sync.Mutex
	ahs      map[bth.GID]*verbs.AH
	slot     int
	inflight int

	sent, received atomic.Uint64
	dropMu         sync.Mutex
	dropped        map[string]uint64

	stop chan struct{}
	done chan struct{}
}

func newAgent(c *CM, p Port, cfg cm.Config) (*agent, error) {
	dev := p.Device()
	if dev == nil {
		return nil, errors.New("rdmacm: a port has no device")
	}
	g := p.NodeGUID()
	a := &agent{c: c, port: p, dev: dev, guid: binary.BigEndian.Uint64(g[:]),
		conns: map[uint32]*ID{}, srcIx: map[bth.GID]int{}, ahs: map[bth.GID]*verbs.AH{},
		dropped: map[string]uint64{}, stop: make(chan struct{}), done: make(chan struct{})}
	cfg.HoldRTU = true
	a.mgr = cm.NewManager(cfg)
	if err := a.openQP1(); err != nil {
		a.release()
		return nil, fmt.Errorf("rdmacm: QP1 on %s: %w", dev.Name(), err)
	}
	go a.loop()
	return a, nil
}

func (a *agent) openQP1() error {
	var err error
	if a.pd, err = a.dev.AllocPD(); err != nil {
		return err
	}
	if a.scq, err = a.dev.CreateCQ(sendSlots, nil); err != nil {
		return err
	}
	if a.rcq, err = a.dev.CreateCQ(recvSlots, nil); err != nil {
		return err
	}
	if a.smr, err = a.pd.RegMR(make([]byte, sendSlots*cm.MADLen), mr.AccessLocalWrite); err != nil {
		return err
	}
	if a.rmr, err = a.pd.RegMR(make([]byte, recvSlots*recvSlotLen), mr.AccessLocalWrite); err != nil {
		return err
	}
	a.qp, err = a.pd.CreateQP(&roce.QPInitAttr{Type: verbs.QPTypeGSI, SendCQ: a.scq, RecvCQ: a.rcq,
		Cap: verbs.QPCap{MaxSendWR: sendSlots, MaxRecvWR: recvSlots, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return err
	}
	steps := []struct {
		attr verbs.QPAttr
		mask verbs.QPAttrMask
	}{
		{verbs.QPAttr{State: verbs.QPStateInit, QKey: verbs.GSIQKey}, verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrQKey},
		{verbs.QPAttr{State: verbs.QPStateRTR}, verbs.AttrState},
		{verbs.QPAttr{State: verbs.QPStateRTS}, verbs.AttrState | verbs.AttrSQPSN},
	}
	for _, s := range steps {
		if err := a.qp.Modify(&s.attr, s.mask); err != nil {
			return err
		}
	}
	for i := 0; i < recvSlots; i++ {
		if err := a.postRecv(i); err != nil {
			return err
		}
	}
	return nil
}

func (a *agent) postRecv(i int) error {
	return a.qp.PostRecv(&verbs.RecvWR{WRID: uint64(i), SGL: []mr.SGE{a.rmr.SGE(i*recvSlotLen, recvSlotLen)}})
}

// release frees what openQP1 made.
func (a *agent) release() {
	if a.qp != nil {
		a.qp.Destroy()
	}
	for _, m := range []*roce.MR{a.smr, a.rmr} {
		if m != nil {
			m.Dereg()
		}
	}
	for _, q := range []*roce.CQ{a.scq, a.rcq} {
		if q != nil {
			q.Destroy()
		}
	}
	if a.pd != nil {
		a.pd.Dealloc()
	}
}

func (a *agent) now() monotime.Time { return a.dev.Clock().Now() }

func (a *agent) drop(reason string) {
	a.dropMu.Lock()
	a.dropped[reason]++
	a.dropMu.Unlock()
}

// loop is the agent's goroutine: receive, tick, dispatch, send.
func (a *agent) loop() {
	defer close(a.done)
	var wcs [32]verbs.WC
	for {
		select {
		case <-a.stop:
			return
		case <-a.dev.Closed():
			a.c.deviceGone(a)
			return
		default:
		}
		wait := tickEvery
		a.c.mu.Lock()
		if d, ok := a.mgr.Deadline(); ok {
			wait = min(wait, max(d.Sub(a.now()), 0))
		}
		a.c.mu.Unlock()
		n, _ := a.rcq.WaitTimeout(wcs[:], max(wait, time.Millisecond))
		a.c.mu.Lock()
		for i := range wcs[:n] {
			a.receive(&wcs[i])
		}
		a.mgr.Tick(a.now())
		a.flushLocked()
		for i := range wcs[:n] {
			if wcs[i].Status != verbs.WCWRFlushErr {
				a.postRecv(int(wcs[i].WRID))
			}
		}
	}
}

// receive hands one QP1 completion to the Manager (CM.mu held).
func (a *agent) receive(wc *verbs.WC) {
	if wc.Status != verbs.WCSuccess {
		if wc.Status != verbs.WCWRFlushErr {
			a.drop("receive error " + wc.Status.String())
		}
		return
	}
	a.received.Add(1)
	i := int(wc.WRID)
	if i < 0 || i >= recvSlots {
		a.drop("bad receive slot")
		return
	}
	buf := a.rmr.Buf()[i*recvSlotLen : (i+1)*recvSlotLen]
	if int(wc.ByteLen) < verbs.GRHLen+cm.MADLen {
		a.drop("too short")
		return
	}
	src, dst, ok := grhAddrs(buf[:verbs.GRHLen])
	if !ok {
		a.drop("no GRH")
		return
	}
	if ix, ok := gidIndexOf(a.dev, dst.Addr()); ok {
		a.srcIx[src] = ix
	}
	from := cm.Addr{GID: src, QPN: wc.SrcQP}
	mad := buf[verbs.GRHLen : verbs.GRHLen+cm.MADLen]
	if m, err := cm.ParseMAD(mad); err == nil && m.Method() == cm.MethodGet && m.AttrID() == cm.AttrClassPortInfo {
		a.answerClassPortInfo(from, m)
		return
	}
	if err := a.mgr.Receive(a.now(), from, mad); err != nil {
		a.drop(dropReason(err))
	}
}

// dropReason names the counter of a MAD the Manager refused.
func dropReason(err error) string {
	var ce *cm.Error
	switch {
	case errors.As(err, &ce):
		return ce.Reason()
	case errors.Is(err, cm.ErrUnknownID):
		return "unknown connection"
	case errors.Is(err, cm.ErrNotCMMessage):
		return "not a CM message"
	}
	return err.Error()
}

// answerClassPortInfo answers a Get(ClassPortInfo): class version 2, the
// Manager's response time.
func (a *agent) answerClassPortInfo(to cm.Addr, req cm.MAD) {
	b := make([]byte, cm.MADLen)
	h := cm.CMHeader(cm.MethodGetResp, req.TID(), cm.AttrClassPortInfo)
	cpi := &cm.ClassPortInfo{BaseVersion: cm.BaseVersion, ClassVersion: cm.ClassVersionCM, RespTimeValue: respTimeout}
	if cm.Marshal(b, h, cpi) == nil {
		a.pending = append(a.pending, cm.Out{To: to, MAD: b})
	}
}

// grhAddrs reads the source and destination GIDs from a UD receive
// buffer's GRH space: an IPv6 header, or an IPv4 header in its last 20
// bytes.
func grhAddrs(g []byte) (src, dst bth.GID, ok bool) {
	switch {
	case g[0]>>4 == 6:
		copy(src[:], g[8:24])
		copy(dst[:], g[24:40])
		return src, dst, true
	case g[20]>>4 == 4:
		src[10], src[11], dst[10], dst[11] = 0xff, 0xff, 0xff, 0xff
		copy(src[12:], g[32:36])
		copy(dst[12:], g[36:40])
		return src, dst, true
	}
	return src, dst, false
}

// flushLocked dispatches the Manager's events until it raises no more,
// then sends every MAD it produced. Called with CM.mu held; returns with
// it released.
func (a *agent) flushLocked() {
	var outs []cm.Out
	for {
		o, evs := a.mgr.Take()
		outs = append(outs, o...)
		if len(a.pending) > 0 {
			outs = append(outs, a.pending...)
			a.pending = nil
		}
		if len(evs) == 0 {
			break
		}
		for _, e := range evs {
			a.c.handle(a, e)
		}
	}
	srcs := make([]int, len(outs))
	for i, o := range outs {
		srcs[i] = -1
		if ix, ok := a.srcIx[o.To.GID]; ok {
			srcs[i] = ix
		}
	}
	posts := a.posts
	a.posts = nil
	a.sendMu.Lock()
	a.c.mu.Unlock()
	for i, o := range outs {
		a.transmit(o, srcs[i])
	}
	if len(posts) > 0 && len(outs) > 0 {
		a.settle()
	}
	a.sendMu.Unlock()
	for _, p := range posts {
		p.id.post(p.e)
	}
}

// idEvent is an event for an ID.
type idEvent struct {
	id *ID
	e  *Event
}

// establish sends the RTU of an active connection and queues its
// ESTABLISHED with param (CM.mu held).
func (a *agent) establish(id *ID, param ConnParam) error {
	if err := a.mgr.SendRTU(a.now(), id.commID, nil); err != nil {
		return err
	}
	id.state = stateEstablished
	a.later(id, &Event{Type: EventEstablished, ID: id, Param: param})
	return nil
}

// later queues e for id until the MADs the Manager produced with it are
// posted: an ESTABLISHED reaches the application after the RTU is on its
// way, as with the kernel's rdma_cm (CM.mu held).
func (a *agent) later(id *ID, e *Event) { a.posts = append(a.posts, idEvent{id, e}) }

// ah returns the address handle to a peer's GID (sendMu held), resolving
// the MAC through the port when it is not cached.
func (a *agent) ah(g bth.GID, srcIx int) (*verbs.AH, error) {
	if ah := a.ahs[g]; ah != nil {
		return ah, nil
	}
	if srcIx < 0 {
		ix, err := a.port.SourceGIDIndex(g)
		if err != nil {
			return nil, err
		}
		srcIx = ix
	}
	ctx, cancel := context.WithTimeout(context.Background(), resolveWait)
	defer cancel()
	attr, err := a.port.AHAttr(ctx, g, srcIx)
	if err != nil {
		return nil, err
	}
	ah, err := a.pd.CreateAH(&attr)
	if err != nil {
		return nil, err
	}
	a.ahs[g] = ah
	return ah, nil
}

// peerMAC returns the MAC of a peer's GID, from QP1's address handle to
// it (resolved through the port when not cached).
func (a *agent) peerMAC(g bth.GID, srcIx int) ([6]byte, error) {
	a.sendMu.Lock()
	defer a.sendMu.Unlock()
	ah, err := a.ah(g, srcIx)
	if err != nil {
		return [6]byte{}, err
	}
	return ah.Attr.DMAC, nil
}

// transmit posts one MAD on QP1 from GID index srcIx (-1: as the route
// says) (sendMu held).
func (a *agent) transmit(o cm.Out, srcIx int) {
	var wcs [sendSlots]verbs.WC
	a.inflight -= a.scq.Poll(wcs[:])
	if a.inflight >= sendSlots {
		a.drop("send queue full")
		return
	}
	ah, err := a.ah(o.To.GID, srcIx)
	if err != nil {
		a.drop("no route to the peer")
		return
	}
	s := a.slot
	a.slot = (a.slot + 1) % sendSlots
	copy(a.smr.Buf()[s*cm.MADLen:], o.MAD)
	err = a.qp.PostSend(&verbs.SendWR{WRID: uint64(s), Opcode: verbs.WROpSend, Flags: verbs.Signaled,
		SGL: []mr.SGE{a.smr.SGE(s*cm.MADLen, cm.MADLen)}, AH: ah, RemoteQPN: o.To.QPN, RemoteQKey: verbs.GSIQKey})
	if err != nil {
		a.drop("send failed")
		return
	}
	a.inflight++
	a.sent.Add(1)
}

// settle waits, at most settleWait, until QP1 has sent every MAD posted
// so far, so that what the application does on an event (a SEND after
// ESTABLISHED) reaches the wire after the MAD that caused it (the RTU), as
// with the kernel's CM (sendMu held).
func (a *agent) settle() {
	var wcs [sendSlots]verbs.WC
	end := time.Now().Add(settleWait)
	for a.inflight > 0 {
		left := time.Until(end)
		if left <= 0 {
			a.drop("MAD send not completed in time")
			return
		}
		n, _ := a.scq.WaitTimeout(wcs[:], left)
		a.inflight -= n
	}
}

// stats returns the agent's counters (CM.mu held).
func (a *agent) stats() Stats {
	s := Stats{Device: a.dev.Name(), MADsSent: a.sent.Load(), MADsReceived: a.received.Load(),
		Counters: a.mgr.Counters(), HalfOpen: a.mgr.HalfOpen(), Conns: a.mgr.Len(), Dropped: map[string]uint64{}}
	a.dropMu.Lock()
	for k, v := range a.dropped {
		s.Dropped[k] = v
	}
	a.dropMu.Unlock()
	return s
}

// close stops the goroutine and frees QP1.
func (a *agent) close() {
	close(a.stop)
	<-a.done
	a.release()
}
