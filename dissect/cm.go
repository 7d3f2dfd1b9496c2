package dissect

// Management datagrams to QP1: the communication manager's messages (REQ,
// REP, RTU, REJ, MRA, DREQ, DREP, SIDR_REQ, SIDR_REP, ClassPortInfo) named
// and summed up in a packet's line and listed field by field.

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/cm"
)

// MAD is what a management datagram to QP1 holds, as far as it decodes.
type MAD struct {
	// Header is the common MAD header (valid when HeaderOK).
	Header   cm.Header
	HeaderOK bool
	// Msg is the CM message (nil for a MAD of another class, an attribute
	// package cm does not decode, or a malformed CM MAD).
	Msg cm.Message
	// Err says why the MAD is malformed (too short, a CM MAD whose
	// message does not decode); nil for a MAD of another class.
	Err error
}

// madClassOffset is where a MAD's management class byte is.
const madClassOffset = 1

// DecodeMAD decodes the MAD a packet carries when it is a UD SEND ONLY to
// QP1 (the GSI QP), where every management datagram goes; ok is false for
// any other packet. A MAD of the CM class is decoded with package cm.
func DecodeMAD(p *bth.Packet) (m MAD, ok bool) {
	if p.Opcode != bth.UDSendOnly || p.BTH().DestQP() != cm.GSIQPN {
		return m, false
	}
	b := p.PayloadBytes()
	if len(b) < cm.MADHeaderLen {
		m.Err = fmt.Errorf("%d bytes, shorter than a MAD header (%d)", len(b), cm.MADHeaderLen)
		return m, true
	}
	m.Header, m.HeaderOK = cm.MAD(b[:cm.MADHeaderLen]).Header(), true
	if b[madClassOffset] != cm.MgmtClassCM {
		return m, true
	}
	_, msg, err := cm.Unmarshal(b)
	var ce *cm.Error
	switch {
	case errors.As(err, &ce) && ce.Kind == cm.KindUnknownAttr:
		// A LAP, an APR or an unknown attribute: named by its header.
	case err != nil:
		m.Err = err
	default:
		m.Msg = msg
	}
	return m, true
}

// madErrReason returns err's message without package cm's prefix.
func madErrReason(err error) string {
	var ce *cm.Error
	if errors.As(err, &ce) {
		return ce.Reason()
	}
	return err.Error()
}

// Name names the MAD for a ladder's arrow or a packet's line: "CM REQ",
// "CM REJ", "CM ClassPortInfo GetResp", "MAD class 0x03 Get attr 0x0011",
// "CM MALFORMED".
func (m *MAD) Name() string {
	switch {
	case !m.HeaderOK:
		return "MAD MALFORMED"
	case m.Header.MgmtClass != cm.MgmtClassCM:
		return fmt.Sprintf("MAD class %#02x %s attr %#04x", m.Header.MgmtClass, m.Header.Method, uint16(m.Header.AttrID))
	case m.Err != nil:
		return "CM MALFORMED"
	}
	s := "CM " + m.Header.AttrID.String()
	if m.Header.Method != cm.MethodSend {
		s += " " + m.Header.Method.String()
	}
	return s
}

// appendMADText appends the text summary of m to b: its name, then the
// message's identifying fields (for a REQ "comm=0x1b2c3d4e
// svc=0x0000000001060000+7174 qpn=0x000011 psn=0x5f8c2e ..."), the reason
// of a REJ in words, and the transaction ID.
func appendMADText(b []byte, m *MAD) []byte {
	b = append(b, "  "...)
	b = append(b, m.Name()...)
	if m.Err != nil {
		b = append(b, ": "...)
		return append(b, madErrReason(m.Err)...)
	}
	kv := func(k string, v uint64, digits int) {
		b = append(b, ' ')
		b = append(b, k...)
		b = append(b, '=')
		b = appendHex(b, v, digits)
	}
	str := func(k, v string) {
		b = append(b, ' ')
		b = append(b, k...)
		b = append(b, '=')
		b = append(b, v...)
	}
	svc := func(id uint64) {
		b = append(b, " svc="...)
		b = appendServiceID(b, id)
	}
	if local, remote, ok := commIDs(m.Msg); ok {
		kv("comm", uint64(local), 8)
		kv("remote", uint64(remote), 8)
	}
	switch msg := m.Msg.(type) {
	case *cm.REQ:
		kv("comm", uint64(msg.LocalCommID), 8)
		svc(msg.ServiceID)
		kv("qpn", uint64(msg.LocalQPN), 6)
		kv("psn", uint64(msg.StartingPSN), 6)
		str("mtu", msg.PathMTU.String())
		b = appendIPCM(b, msg.ServiceID, msg.PrivateData)
	case *cm.REP:
		kv("qpn", uint64(msg.LocalQPN), 6)
		kv("psn", uint64(msg.StartingPSN), 6)
	case *cm.REJ:
		str("rejects", msg.MessageRejected.String())
		b = append(b, " reason="...)
		b = strconv.AppendUint(b, uint64(msg.Reason), 10)
		b = append(b, " ("...)
		b = append(b, msg.Reason.String()...)
		b = append(b, ')')
	case *cm.MRA:
		str("mraed", msg.MessageMRAed.String())
		b = append(b, " timeout="...)
		b = strconv.AppendUint(b, uint64(msg.ServiceTimeout), 10)
	case *cm.DREQ:
		kv("qpn", uint64(msg.RemoteQPN), 6)
	case *cm.SIDRREQ:
		kv("id", uint64(msg.RequestID), 8)
		svc(msg.ServiceID)
		kv("pkey", uint64(msg.PKey), 4)
		b = appendIPCM(b, msg.ServiceID, msg.PrivateData)
	case *cm.SIDRREP:
		kv("id", uint64(msg.RequestID), 8)
		str("status", msg.Status.String())
		kv("qpn", uint64(msg.QPN), 6)
		kv("qkey", uint64(msg.QKey), 0)
	case *cm.ClassPortInfo:
		b = append(b, " version="...)
		b = strconv.AppendUint(b, uint64(msg.ClassVersion), 10)
		kv("cap", uint64(msg.CapabilityMask), 4)
	}
	if m.HeaderOK {
		kv("tid", m.Header.TID, 16)
	}
	return b
}

// appendServiceID appends a service ID: an RDMA CM one as its port space's
// prefix and the port ("0x0000000001060000+7174"), any other in hex.
func appendServiceID(b []byte, id uint64) []byte {
	if _, port, ok := cm.ParseServiceID(id); ok {
		b = appendHex(b, id&^0xffff, 16)
		b = append(b, '+')
		return strconv.AppendUint(b, uint64(port), 10)
	}
	return appendHex(b, id, 16)
}

// appendIPCM appends the IP CM header of an RDMA CM REQ or SIDR_REQ
// (" ip=192.0.2.2:40561>192.0.2.1"), when the service ID is RDMA CM's and
// the private data starts with a valid header.
func appendIPCM(b []byte, svc uint64, pd []byte) []byte {
	if _, _, ok := cm.ParseServiceID(svc); !ok {
		return b
	}
	h, _, err := cm.SplitIPPrivateData(pd)
	if err != nil {
		return append(b, " ip=(no IP CM header)"...)
	}
	b = append(b, " ip="...)
	b = netip.AddrPortFrom(h.Src, h.SrcPort).AppendTo(b)
	b = append(b, '>')
	return h.Dst.AppendTo(b)
}

// appendMADJSON appends m's keys to a packet's JSON object: the MAD
// header's and the CM message's fields under Wireshark's names
// (infiniband.mad.*, infiniband.cm.req.*, ...) where Wireshark has them,
// the message's name as "mad_name", and for what Wireshark 4.0 does not
// decode (MRA, SIDR_REQ, SIDR_REP, ClassPortInfo, a DREQ's QPN) keys of
// our own ("cm_mra_local_comm_id", ...). A malformed MAD adds "mad_error".
func appendMADJSON(b []byte, m *MAD) []byte {
	b = append(b, `,"mad_name":`...)
	b = appendJSONString(b, m.Name())
	if m.HeaderOK {
		h := &m.Header
		b = jsonUint(b, "infiniband.mad.baseversion", uint64(h.BaseVersion))
		b = jsonUint(b, "infiniband.mad.mgmtclass", uint64(h.MgmtClass))
		b = jsonUint(b, "infiniband.mad.classversion", uint64(h.ClassVersion))
		b = jsonUint(b, "infiniband.mad.method", uint64(h.Method))
		b = jsonUint(b, "infiniband.mad.status", uint64(h.Status))
		b = jsonUint(b, "infiniband.mad.transactionid", h.TID)
		b = jsonUint(b, "infiniband.mad.attributeid", uint64(h.AttrID))
		b = jsonUint(b, "infiniband.mad.attributemodifier", uint64(h.AttrMod))
	}
	if m.Err != nil {
		b = append(b, `,"mad_error":`...)
		return appendJSONString(b, madErrReason(m.Err))
	}
	switch msg := m.Msg.(type) {
	case *cm.REQ:
		b = jsonUint(b, "infiniband.cm.req", uint64(msg.LocalCommID))
		b = jsonUint(b, "infiniband.cm.req.serviceid", msg.ServiceID)
		b = jsonUint(b, "infiniband.cm.req.localcaguid", msg.LocalCAGUID)
		b = jsonUint(b, "infiniband.cm.req.localqkey", uint64(msg.LocalQKey))
		b = jsonUint(b, "infiniband.cm.req.localqpn", uint64(msg.LocalQPN))
		b = jsonUint(b, "infiniband.cm.req.responderres", uint64(msg.ResponderResources))
		b = jsonUint(b, "infiniband.cm.req.initdepth", uint64(msg.InitiatorDepth))
		b = jsonUint(b, "infiniband.cm.req.remoteresptout", uint64(msg.RemoteCMResponseTimeout))
		b = jsonUint(b, "infiniband.cm.req.transpsvctype", uint64(msg.Transport))
		b = jsonUint(b, "infiniband.cm.req.startpsn", uint64(msg.StartingPSN))
		b = jsonUint(b, "infiniband.cm.req.localresptout", uint64(msg.LocalCMResponseTimeout))
		b = jsonUint(b, "infiniband.cm.req.retrcount", uint64(msg.RetryCount))
		b = jsonUint(b, "infiniband.cm.req.pkey", uint64(msg.PKey))
		b = jsonUint(b, "infiniband.cm.req.pppmtu", uint64(msg.PathMTU))
		b = jsonUint(b, "infiniband.cm.req.rnrretrcount", uint64(msg.RNRRetryCount))
		b = jsonUint(b, "infiniband.cm.req.maxcmretr", uint64(msg.MaxCMRetries))
		b = jsonBit(b, "infiniband.cm.req.srq", msg.SRQ)
		b = jsonUint(b, "infiniband.cm.req.prim_flowlabel", uint64(msg.Primary.FlowLabel))
		b = jsonUint(b, "infiniband.cm.req.prim_tfcclass", uint64(msg.Primary.TrafficClass))
		b = jsonUint(b, "infiniband.cm.req.prim_hoplim", uint64(msg.Primary.HopLimit))
		b = jsonUint(b, "infiniband.cm.req.prim_sl", uint64(msg.Primary.SL))
		b = jsonUint(b, "infiniband.cm.req.prim_localacktout", uint64(msg.Primary.LocalACKTimeout))
		b = appendIPCMJSON(b, "infiniband.cm.req.ip_cm.", msg.ServiceID, msg.PrivateData)
	case *cm.REP:
		b = jsonUint(b, "infiniband.cm.rep", uint64(msg.LocalCommID))
		b = jsonUint(b, "infiniband.cm.rep.remotecommid", uint64(msg.RemoteCommID))
		b = jsonUint(b, "infiniband.cm.rep.localqkey", uint64(msg.LocalQKey))
		b = jsonUint(b, "infiniband.cm.rep.localqpn", uint64(msg.LocalQPN))
		b = jsonUint(b, "infiniband.cm.rep.startpsn", uint64(msg.StartingPSN))
		b = jsonUint(b, "infiniband.cm.rep.respres", uint64(msg.ResponderResources))
		b = jsonUint(b, "infiniband.cm.rep.initdepth", uint64(msg.InitiatorDepth))
		b = jsonUint(b, "infiniband.cm.rep.tgtackdelay", uint64(msg.TargetACKDelay))
		b = jsonUint(b, "infiniband.cm.rep.rnrretrcount", uint64(msg.RNRRetryCount))
		b = jsonBit(b, "infiniband.cm.rep.srq", msg.SRQ)
		b = jsonUint(b, "infiniband.cm.rep.localcaguid", msg.LocalCAGUID)
	case *cm.RTU:
		b = jsonUint(b, "infiniband.cm.rtu.localcommid", uint64(msg.LocalCommID))
		b = jsonUint(b, "infiniband.cm.rtu.remotecommid", uint64(msg.RemoteCommID))
	case *cm.REJ:
		b = jsonUint(b, "infiniband.cm.rej.localcommid", uint64(msg.LocalCommID))
		b = jsonUint(b, "infiniband.cm.rej.remotecommid", uint64(msg.RemoteCommID))
		b = jsonUint(b, "infiniband.cm.rej.msgrej", uint64(msg.MessageRejected))
		b = jsonUint(b, "infiniband.cm.rej.rejinfolen", uint64(msg.RejectedInfoLen))
		b = jsonUint(b, "infiniband.cm.rej.reason", uint64(msg.Reason))
		b = append(b, `,"cm_rej_reason_name":`...)
		b = appendJSONString(b, msg.Reason.String())
	case *cm.MRA:
		b = jsonUint(b, "cm_mra_local_comm_id", uint64(msg.LocalCommID))
		b = jsonUint(b, "cm_mra_remote_comm_id", uint64(msg.RemoteCommID))
		b = jsonUint(b, "cm_mra_message_mraed", uint64(msg.MessageMRAed))
		b = jsonUint(b, "cm_mra_service_timeout", uint64(msg.ServiceTimeout))
	case *cm.DREQ:
		b = jsonUint(b, "infiniband.cm.dreq.localcommid", uint64(msg.LocalCommID))
		b = jsonUint(b, "infiniband.cm.dreq.remotecommid", uint64(msg.RemoteCommID))
		b = jsonUint(b, "cm_dreq_remote_qpn", uint64(msg.RemoteQPN))
	case *cm.DREP:
		b = jsonUint(b, "infiniband.cm.drsp.localcommid", uint64(msg.LocalCommID))
		b = jsonUint(b, "infiniband.cm.drsp.remotecommid", uint64(msg.RemoteCommID))
	case *cm.SIDRREQ:
		b = jsonUint(b, "cm_sidr_request_id", uint64(msg.RequestID))
		b = jsonUint(b, "cm_sidr_pkey", uint64(msg.PKey))
		b = jsonUint(b, "cm_sidr_service_id", msg.ServiceID)
		b = appendIPCMJSON(b, "cm_sidr_ip_cm_", msg.ServiceID, msg.PrivateData)
	case *cm.SIDRREP:
		b = jsonUint(b, "cm_sidr_request_id", uint64(msg.RequestID))
		b = jsonUint(b, "cm_sidr_status", uint64(msg.Status))
		b = jsonUint(b, "cm_sidr_qpn", uint64(msg.QPN))
		b = jsonUint(b, "cm_sidr_service_id", msg.ServiceID)
		b = jsonUint(b, "cm_sidr_qkey", uint64(msg.QKey))
	case *cm.ClassPortInfo:
		b = jsonUint(b, "cm_cpi_class_version", uint64(msg.ClassVersion))
		b = jsonUint(b, "cm_cpi_capability_mask", uint64(msg.CapabilityMask))
		b = jsonUint(b, "cm_cpi_resp_time_value", uint64(msg.RespTimeValue))
	}
	return b
}

// appendIPCMJSON appends the IP CM header of an RDMA CM REQ or SIDR_REQ
// with keys prefix+"sport", prefix+"sip4" (or "sip6") and prefix+"dip4"
// (or "dip6"), as Wireshark names a REQ's.
func appendIPCMJSON(b []byte, prefix string, svc uint64, pd []byte) []byte {
	if _, _, ok := cm.ParseServiceID(svc); !ok {
		return b
	}
	h, _, err := cm.SplitIPPrivateData(pd)
	if err != nil {
		return b
	}
	v := "4"
	if !h.Src.Is4() {
		v = "6"
	}
	b = jsonUint(b, prefix+"sport", uint64(h.SrcPort))
	b = jsonAddr(b, prefix+"sip"+v, h.Src)
	return jsonAddr(b, prefix+"dip"+v, h.Dst)
}

// appendMADFields appends the fields of m: the common MAD header (layer
// "MAD") and the CM message's fields (layer "CM " and the message's name,
// "CM REQ"), or why the MAD is malformed.
func appendMADFields(fs []Field, m *MAD) []Field {
	layer := "MAD"
	add := func(name, value string) { fs = append(fs, Field{Layer: layer, Name: name, Value: value}) }
	hex, dec, flag := fieldHex, fieldDec, fieldFlag
	timeout := func(v uint8) string { return fmt.Sprintf("%d (%v)", v, cm.TimeoutDuration(v)) }
	if m.HeaderOK {
		h := &m.Header
		add("base version", dec(uint64(h.BaseVersion)))
		class := hex(uint64(h.MgmtClass), 2)
		if h.MgmtClass == cm.MgmtClassCM {
			class += " communication management"
		}
		add("management class", class)
		add("class version", dec(uint64(h.ClassVersion)))
		add("method", hex(uint64(h.Method), 2)+" "+h.Method.String())
		add("status", hex(uint64(h.Status), 4))
		add("class specific", hex(uint64(h.ClassSpecific), 4))
		add("transaction ID", hex(h.TID, 16))
		attr := hex(uint64(h.AttrID), 4)
		if h.MgmtClass == cm.MgmtClassCM {
			attr += " " + h.AttrID.String()
		}
		add("attribute ID", attr)
		add("attribute modifier", hex(uint64(h.AttrMod), 8))
	}
	if m.Err != nil {
		add("malformed", madErrReason(m.Err))
		return fs
	}
	if m.Msg == nil {
		return fs
	}
	layer = "CM " + m.Header.AttrID.String()
	svc := func(id uint64) {
		v := hex(id, 16)
		if ps, port, ok := cm.ParseServiceID(id); ok {
			v += fmt.Sprintf(" (RDMA CM %s port %d)", ps, port)
		}
		add("service ID", v)
	}
	ipcm := func(svcID uint64, pd []byte) {
		if _, _, ok := cm.ParseServiceID(svcID); !ok {
			return
		}
		h, app, err := cm.SplitIPPrivateData(pd)
		if err != nil {
			add("IP CM header", madErrReason(err))
			return
		}
		add("IP CM source", netip.AddrPortFrom(h.Src, h.SrcPort).String())
		add("IP CM destination", h.Dst.String())
		add("application private data", dec(uint64(len(app)))+" bytes")
	}
	path := func(which string, p *cm.Path) {
		add(which+" local GID", netip.AddrFrom16(p.LocalGID).Unmap().String())
		add(which+" remote GID", netip.AddrFrom16(p.RemoteGID).Unmap().String())
		add(which+" flow label", hex(uint64(p.FlowLabel), 5))
		add(which+" packet rate", dec(uint64(p.PacketRate)))
		add(which+" traffic class", hex(uint64(p.TrafficClass), 2))
		add(which+" hop limit", dec(uint64(p.HopLimit)))
		add(which+" SL", dec(uint64(p.SL)))
		add(which+" subnet local", flag(p.SubnetLocal))
		add(which+" local ACK timeout", timeout(p.LocalACKTimeout))
	}
	if local, remote, ok := commIDs(m.Msg); ok {
		add("local comm ID", hex(uint64(local), 8))
		add("remote comm ID", hex(uint64(remote), 8))
	}
	switch msg := m.Msg.(type) {
	case *cm.REQ:
		add("local comm ID", hex(uint64(msg.LocalCommID), 8))
		svc(msg.ServiceID)
		add("local CA GUID", hex(msg.LocalCAGUID, 16))
		add("local Q_Key", hex(uint64(msg.LocalQKey), 8))
		add("local QPN", hex(uint64(msg.LocalQPN), 6))
		add("responder resources", dec(uint64(msg.ResponderResources)))
		add("initiator depth", dec(uint64(msg.InitiatorDepth)))
		add("remote CM response timeout", timeout(msg.RemoteCMResponseTimeout))
		add("transport", msg.Transport.String())
		add("end-to-end flow control", flag(msg.EndToEndFlowControl))
		add("starting PSN", hex(uint64(msg.StartingPSN), 6))
		add("local CM response timeout", timeout(msg.LocalCMResponseTimeout))
		add("retry count", dec(uint64(msg.RetryCount)))
		add("P_Key", hex(uint64(msg.PKey), 4))
		add("path MTU", msg.PathMTU.String())
		add("RNR retry count", dec(uint64(msg.RNRRetryCount)))
		add("max CM retries", dec(uint64(msg.MaxCMRetries)))
		add("SRQ", flag(msg.SRQ))
		add("vendor ID", hex(uint64(msg.VendorID), 6))
		path("primary", &msg.Primary)
		ipcm(msg.ServiceID, msg.PrivateData)
	case *cm.REP:
		add("local Q_Key", hex(uint64(msg.LocalQKey), 8))
		add("local QPN", hex(uint64(msg.LocalQPN), 6))
		add("starting PSN", hex(uint64(msg.StartingPSN), 6))
		add("responder resources", dec(uint64(msg.ResponderResources)))
		add("initiator depth", dec(uint64(msg.InitiatorDepth)))
		add("target ACK delay", timeout(msg.TargetACKDelay))
		add("failover accepted", dec(uint64(msg.FailoverAccepted)))
		add("end-to-end flow control", flag(msg.EndToEndFlowControl))
		add("RNR retry count", dec(uint64(msg.RNRRetryCount)))
		add("SRQ", flag(msg.SRQ))
		add("local CA GUID", hex(msg.LocalCAGUID, 16))
		add("vendor ID", hex(uint64(msg.VendorID), 6))
	case *cm.REJ:
		add("message rejected", dec(uint64(msg.MessageRejected))+" "+msg.MessageRejected.String())
		add("reason", dec(uint64(msg.Reason))+" "+msg.Reason.String())
		add("rejection info length", dec(uint64(msg.RejectedInfoLen)))
	case *cm.MRA:
		add("message MRAed", dec(uint64(msg.MessageMRAed))+" "+msg.MessageMRAed.String())
		add("service timeout", timeout(msg.ServiceTimeout))
	case *cm.DREQ:
		add("remote QPN", hex(uint64(msg.RemoteQPN), 6))
	case *cm.SIDRREQ:
		add("request ID", hex(uint64(msg.RequestID), 8))
		add("P_Key", hex(uint64(msg.PKey), 4))
		svc(msg.ServiceID)
		ipcm(msg.ServiceID, msg.PrivateData)
	case *cm.SIDRREP:
		add("request ID", hex(uint64(msg.RequestID), 8))
		add("status", dec(uint64(msg.Status))+" "+msg.Status.String())
		add("QPN", hex(uint64(msg.QPN), 6))
		svc(msg.ServiceID)
		add("Q_Key", hex(uint64(msg.QKey), 8))
		add("vendor ID", hex(uint64(msg.VendorID), 6))
	case *cm.ClassPortInfo:
		add("base version", dec(uint64(msg.BaseVersion)))
		add("class version", dec(uint64(msg.ClassVersion)))
		add("capability mask", hex(uint64(msg.CapabilityMask), 4))
		add("capability mask 2", hex(uint64(msg.CapabilityMask2), 7))
		add("response time value", timeout(msg.RespTimeValue))
		add("redirect QP", hex(uint64(msg.RedirectQP), 6))
		add("redirect Q_Key", hex(uint64(msg.RedirectQKey), 8))
		add("redirect LID", hex(uint64(msg.RedirectLID), 4))
		add("redirect P_Key", hex(uint64(msg.RedirectPKey), 4))
	}
	return fs
}

// commIDs returns the local and remote communication IDs of the messages
// that carry both (REP, RTU, REJ, MRA, DREQ, DREP).
func commIDs(msg cm.Message) (local, remote uint32, ok bool) {
	switch m := msg.(type) {
	case *cm.REP:
		return m.LocalCommID, m.RemoteCommID, true
	case *cm.RTU:
		return m.LocalCommID, m.RemoteCommID, true
	case *cm.REJ:
		return m.LocalCommID, m.RemoteCommID, true
	case *cm.MRA:
		return m.LocalCommID, m.RemoteCommID, true
	case *cm.DREQ:
		return m.LocalCommID, m.RemoteCommID, true
	case *cm.DREP:
		return m.LocalCommID, m.RemoteCommID, true
	}
	return 0, 0, false
}
