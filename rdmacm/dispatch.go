package rdmacm

// What the Manager's events do to the IDs (CM.mu held): a REQ makes a new
// passive ID on the listener's channel, a REP moves the QP to RTR and RTS
// before the RTU, a DREQ moves it to the error state.

import (
	"net/netip"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/cm"
	"github.com/sroce/sroce/verbs"
)

// appPrivate returns the application's part of a received REQ's or
// SIDR_REQ's private data, and the IP CM header before it.
func appPrivate(pd []byte) (cm.IPHeader, []byte, bool) {
	h, app, err := cm.SplitIPPrivateData(pd)
	return h, app, err == nil
}

func (c *CM) handle(a *agent, e cm.Event) {
	switch e.Type {
	case cm.EventConnectRequest:
		c.onRequest(a, e, e.REQ.ServiceID, e.REQ.PrivateData)
		return
	case cm.EventSIDRRequest:
		c.onRequest(a, e, e.SIDRREQ.ServiceID, e.SIDRREQ.PrivateData)
		return
	}
	id := a.conns[e.ID]
	if id == nil {
		return // destroyed: nobody to tell
	}
	switch e.Type {
	case cm.EventConnectResponse:
		r := e.REP
		id.remoteQPN, id.remotePSN = r.LocalQPN, r.StartingPSN
		id.respRes = min(id.respRes, r.InitiatorDepth)
		id.initDepth = min(id.initDepth, r.ResponderResources)
		id.rnr = r.RNRRetryCount
		id.state = stateConnectResponse
		param := ConnParam{PrivateData: r.PrivateData, ResponderResources: r.ResponderResources,
			InitiatorDepth: r.InitiatorDepth, FlowControl: r.EndToEndFlowControl, RNRRetryCount: r.RNRRetryCount,
			SRQ: r.SRQ, QPNum: r.LocalQPN}
		if id.qp == nil {
			a.later(id, &Event{Type: EventConnectResponse, ID: id, Param: param})
			return
		}
		if err := id.modifyQP(verbs.QPStateInit, verbs.QPStateRTR, verbs.QPStateRTS); err != nil {
			a.mgr.Reject(a.now(), id.commID, cm.RejConsumerDefined, nil)
			delete(a.conns, id.commID)
			id.state = stateDisconnected
			a.later(id, &Event{Type: EventConnectError, ID: id, Status: StatusInvalid})
			return
		}
		if err := a.establish(id, param); err != nil {
			delete(a.conns, id.commID)
			id.state = stateDisconnected
			a.later(id, &Event{Type: EventConnectError, ID: id, Status: StatusInvalid})
		}
	case cm.EventEstablished:
		id.state = stateEstablished
		a.later(id, &Event{Type: EventEstablished, ID: id})
	case cm.EventRejected:
		delete(a.conns, id.commID)
		id.finishRequest()
		id.state = stateDisconnected
		var p ConnParam
		if e.REJ != nil {
			p.PrivateData = e.REJ.PrivateData
		}
		a.later(id, &Event{Type: EventRejected, ID: id, Status: int(e.Reason), Param: p})
	case cm.EventUnreachable:
		delete(a.conns, id.commID)
		id.finishRequest()
		id.toErr()
		id.state = stateDisconnected
		a.later(id, &Event{Type: EventUnreachable, ID: id, Status: StatusTimedOut})
	case cm.EventDisconnected:
		id.toErr()
		id.state = stateDisconnected
		var p ConnParam
		if e.DREQ != nil {
			p.PrivateData = e.DREQ.PrivateData
		}
		a.later(id, &Event{Type: EventDisconnected, ID: id, Param: p})
	case cm.EventTimeWaitExit:
		delete(a.conns, id.commID)
		a.later(id, &Event{Type: EventTimewaitExit, ID: id})
	case cm.EventSIDRReply:
		delete(a.conns, id.commID)
		r := e.SIDRREP
		if r.Status != cm.SIDRValid {
			id.state = stateDisconnected
			a.later(id, &Event{Type: EventUnreachable, ID: id, Status: int(r.Status), Param: ConnParam{PrivateData: r.PrivateData}})
			return
		}
		id.state = stateEstablished
		id.remoteQPN, id.remoteQKey = r.QPN, r.QKey
		a.later(id, &Event{Type: EventEstablished, ID: id, Param: ConnParam{PrivateData: r.PrivateData},
			UD: UDParam{QPNum: r.QPN, QKey: r.QKey, AH: id.ahInfo()}})
	}
}

func (id *ID) ahInfo() AHInfo {
	return AHInfo{DGID: id.ah.DGID, SGIDIndex: uint8(id.sgidIx), HopLimit: id.ah.HopLimit, DMAC: id.ah.DMAC}
}

// onRequest makes the passive ID for a REQ or SIDR_REQ and posts
// CONNECT_REQUEST on the listener's channel, or rejects the request.
func (c *CM) onRequest(a *agent, e cm.Event, svc uint64, pd []byte) {
	sidr := e.Type == cm.EventSIDRRequest
	reject := func() {
		if sidr {
			a.mgr.SIDRReply(a.now(), e.ID, cm.SIDRREP{Status: cm.SIDRRejected})
		} else {
			a.mgr.Reject(a.now(), e.ID, cm.RejConsumerDefined, nil)
		}
	}
	hdr, app, ok := appPrivate(pd)
	if !ok {
		a.drop("bad IP CM header")
		reject()
		return
	}
	var l *ID
	for _, x := range c.listen[svc] {
		la := x.src.Addr()
		if c.anyAddr(la) && x.agent == nil || la == hdr.Dst.Unmap() {
			if x.agent == nil || x.agent == a {
				l = x
				break
			}
		}
	}
	if l == nil {
		reject()
		return
	}
	six, ok := gidIndexOf(a.dev, hdr.Dst.Unmap())
	if !ok {
		six = a.srcIx[e.Peer.GID]
	}
	id := &ID{c: c, ch: l.ch, ps: l.ps, ctx: l.ctx, state: stateConnectRequest, agent: a,
		src: netip.AddrPortFrom(hdr.Dst.Unmap(), l.src.Port()), dst: netip.AddrPortFrom(hdr.Src.Unmap(), hdr.SrcPort),
		sgidIx: six, listener: l, commID: e.ID, peer: e.Peer}
	id.mtu = a.dev.QueryPort().ActiveMTU
	id.ah = verbs.AHAttr{DGID: e.Peer.GID, SGIDIndex: uint8(six), HopLimit: 64, PortNum: 1}
	ev := &Event{Type: EventConnectRequest, ID: id, ListenID: l}
	if sidr {
		ev.Param = ConnParam{PrivateData: app}
		ev.UD = UDParam{AH: id.ahInfo()}
	} else {
		r := e.REQ
		id.req = r
		id.remoteQPN, id.remotePSN = r.LocalQPN, r.StartingPSN
		id.retry, id.rnr = r.RetryCount, r.RNRRetryCount
		id.ackTimeout = r.Primary.LocalACKTimeout
		id.mtu = min(id.mtu, r.PathMTU)
		// Chosen now, so that InitQPAttr gives a QP moved before Accept
		// the PSN the REP announces; the depths are librdmacm's defaults
		// until Accept says otherwise.
		id.psn = bth.PSN(c.rng.Uint32() & 0xffffff)
		id.respRes, id.initDepth = r.InitiatorDepth, r.ResponderResources
		p := r.Primary
		// Replies go to the REQ's primary path GID, or where the REQ
		// came from when it names none.
		id.ah = verbs.AHAttr{DGID: p.LocalGID, SGIDIndex: uint8(six), HopLimit: p.HopLimit,
			TrafficClass: p.TrafficClass, FlowLabel: p.FlowLabel, PortNum: 1}
		if p.LocalGID.IsZero() {
			id.ah.DGID = e.Peer.GID
		}
		ev.Param = ConnParam{PrivateData: app, ResponderResources: r.ResponderResources,
			InitiatorDepth: r.InitiatorDepth, FlowControl: r.EndToEndFlowControl, RetryCount: r.RetryCount,
			RNRRetryCount: r.RNRRetryCount, SRQ: r.SRQ, QPNum: r.LocalQPN}
	}
	l.pending++
	c.ids[id] = struct{}{}
	a.conns[e.ID] = id
	a.later(id, ev)
}
