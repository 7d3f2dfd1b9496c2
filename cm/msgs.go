package cm

import (
	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/verbs"
)

// Private data sizes in bytes: what each message carries after its fields.
const (
	REQPrivateLen     = 92
	MRAPrivateLen     = 222
	REJPrivateLen     = 148
	REPPrivateLen     = 196
	RTUPrivateLen     = 224
	DREQPrivateLen    = 220
	DREPPrivateLen    = 224
	SIDRREQPrivateLen = 216
	SIDRREPPrivateLen = 136
	REJARILen         = 72 // REJ's additional rejection information
	SIDRREPInfoLen    = 72 // SIDR_REP's additional information
	ClassPortInfoLen  = 72
)

// Message is a CM message or ClassPortInfo: its attribute ID and its
// encoding into (and decoding from) the MAD data.
type Message interface {
	// Attr returns the MAD attribute ID of the message.
	Attr() AttrID
	// Encode writes the message into data, which must hold DataLen bytes
	// (ClassPortInfoLen for ClassPortInfo). Reserved bits are zero.
	Encode(data []byte) error
	// Decode reads the message from data, which must hold as many bytes.
	Decode(data []byte) error
}

// Transport is a REQ's transport service type.
type Transport uint8

// Transport service types.
const (
	TransportRC Transport = 0
	TransportUC Transport = 1
	TransportRD Transport = 2
)

// String names the transport.
func (t Transport) String() string {
	switch t {
	case TransportRC:
		return "RC"
	case TransportUC:
		return "UC"
	case TransportRD:
		return "RD"
	}
	return "reserved transport"
}

// Path is a REQ's primary or alternate path (44 bytes). On RoCEv2 the GIDs
// are the IP addresses of the two ports and the LIDs are zero.
type Path struct {
	LocalLID        uint16
	RemoteLID       uint16
	LocalGID        bth.GID
	RemoteGID       bth.GID
	FlowLabel       uint32 // 20 bits
	PacketRate      uint8  // 6 bits, the IBTA's rate encoding
	TrafficClass    uint8
	HopLimit        uint8
	SL              uint8 // 4 bits
	SubnetLocal     bool
	LocalACKTimeout uint8 // 5 bits: 4.096 µs × 2^value
}

const pathLen = 44

func pathLocs(o uint8) (lid1, lid2, fl, rate, tc, hl, sl, sn, ack loc) {
	return u16(o), u16(o + 2), loc{o + 36, 4, 12, 20}, bitsAt(o+39, 2, 6), u8(o + 40), u8(o + 41),
		bitsAt(o+42, 0, 4), bitsAt(o+42, 4, 1), bitsAt(o+43, 0, 5)
}

func (p *Path) encode(e *enc, o uint8, name string) {
	lid1, lid2, fl, rate, tc, hl, sl, sn, ack := pathLocs(o)
	e.put(lid1, uint64(p.LocalLID), name+" local LID")
	e.put(lid2, uint64(p.RemoteLID), name+" remote LID")
	copy(e.d[o+4:], p.LocalGID[:])
	copy(e.d[o+20:], p.RemoteGID[:])
	e.put(fl, uint64(p.FlowLabel), name+" flow label")
	e.put(rate, uint64(p.PacketRate), name+" packet rate")
	e.put(tc, uint64(p.TrafficClass), name+" traffic class")
	e.put(hl, uint64(p.HopLimit), name+" hop limit")
	e.put(sl, uint64(p.SL), name+" SL")
	e.flag(sn, p.SubnetLocal, name+" subnet local")
	e.put(ack, uint64(p.LocalACKTimeout), name+" local ACK timeout")
}

func (p *Path) decode(d []byte, o uint8) {
	lid1, lid2, fl, rate, tc, hl, sl, sn, ack := pathLocs(o)
	*p = Path{
		LocalLID: uint16(get(d, lid1)), RemoteLID: uint16(get(d, lid2)),
		FlowLabel: uint32(get(d, fl)), PacketRate: uint8(get(d, rate)),
		TrafficClass: uint8(get(d, tc)), HopLimit: uint8(get(d, hl)), SL: uint8(get(d, sl)),
		SubnetLocal: getBool(d, sn), LocalACKTimeout: uint8(get(d, ack)),
	}
	copy(p.LocalGID[:], d[o+4:])
	copy(p.RemoteGID[:], d[o+20:])
}

func start(data []byte, n int, msg string) (*enc, error) {
	if len(data) < n {
		return nil, errAt(msg, KindTooShort)
	}
	clear(data[:n])
	return &enc{d: data, msg: msg}, nil
}

func check(data []byte, n int, msg string) error {
	if len(data) < n {
		return errAt(msg, KindTooShort)
	}
	return nil
}

// REQ is the connection request (attribute 0x0010), sent by the active side.
type REQ struct {
	LocalCommID             uint32
	VendorID                uint32 // 24 bits: the sender's vendor ID for enhanced connection establishment (ECE)
	ServiceID               uint64
	LocalCAGUID             uint64
	LocalQKey               uint32
	LocalQPN                bth.QPN // 24 bits
	ResponderResources      uint8
	LocalEECN               uint32 // 24 bits
	InitiatorDepth          uint8
	RemoteEECN              uint32 // 24 bits
	RemoteCMResponseTimeout uint8  // 5 bits: 4.096 µs × 2^value
	Transport               Transport
	EndToEndFlowControl     bool
	StartingPSN             bth.PSN // 24 bits
	LocalCMResponseTimeout  uint8   // 5 bits
	RetryCount              uint8   // 3 bits
	PKey                    uint16
	PathMTU                 verbs.MTU // 4 bits
	RDCExists               bool
	RNRRetryCount           uint8 // 3 bits
	MaxCMRetries            uint8 // 4 bits
	SRQ                     bool
	ExtendedTransport       uint8 // 3 bits
	Primary                 Path
	Alternate               Path
	SAPSupported            bool
	PrivateData             []byte // up to REQPrivateLen bytes
}

var (
	reqCommID    = u32(0)
	reqVendorID  = loc{4, 4, 0, 24}
	reqService   = u64(8)
	reqGUID      = u64(16)
	reqQKey      = u32(28)
	reqQPN       = u24(32)
	reqRespRes   = u8(35)
	reqLEECN     = u24(36)
	reqInitDepth = u8(39)
	reqREECN     = u24(40)
	reqRemoteTO  = bitsAt(43, 0, 5)
	reqTransport = bitsAt(43, 5, 2)
	reqEEFC      = bitsAt(43, 7, 1)
	reqPSN       = u24(44)
	reqLocalTO   = bitsAt(47, 0, 5)
	reqRetry     = bitsAt(47, 5, 3)
	reqPKey      = u16(48)
	reqMTU       = bitsAt(50, 0, 4)
	reqRDC       = bitsAt(50, 4, 1)
	reqRNR       = bitsAt(50, 5, 3)
	reqMaxCM     = bitsAt(51, 0, 4)
	reqSRQ       = bitsAt(51, 4, 1)
	reqExtTrans  = bitsAt(51, 5, 3)
	reqSAP       = bitsAt(139, 5, 1)
)

const (
	reqPrimary   = 52
	reqAlternate = reqPrimary + pathLen
	reqPrivate   = 140
)

// Attr returns AttrREQ.
func (*REQ) Attr() AttrID { return AttrREQ }

// Encode writes r into data.
func (r *REQ) Encode(data []byte) error {
	e, err := start(data, DataLen, "REQ")
	if err != nil {
		return err
	}
	e.put(reqCommID, uint64(r.LocalCommID), "local comm ID")
	e.put(reqVendorID, uint64(r.VendorID), "vendor ID")
	e.put(reqService, r.ServiceID, "service ID")
	e.put(reqGUID, r.LocalCAGUID, "local CA GUID")
	e.put(reqQKey, uint64(r.LocalQKey), "local Q_Key")
	e.put(reqQPN, uint64(r.LocalQPN), "local QPN")
	e.put(reqRespRes, uint64(r.ResponderResources), "responder resources")
	e.put(reqLEECN, uint64(r.LocalEECN), "local EECN")
	e.put(reqInitDepth, uint64(r.InitiatorDepth), "initiator depth")
	e.put(reqREECN, uint64(r.RemoteEECN), "remote EECN")
	e.put(reqRemoteTO, uint64(r.RemoteCMResponseTimeout), "remote CM response timeout")
	e.put(reqTransport, uint64(r.Transport), "transport service type")
	e.flag(reqEEFC, r.EndToEndFlowControl, "end-to-end flow control")
	e.put(reqPSN, uint64(r.StartingPSN), "starting PSN")
	e.put(reqLocalTO, uint64(r.LocalCMResponseTimeout), "local CM response timeout")
	e.put(reqRetry, uint64(r.RetryCount), "retry count")
	e.put(reqPKey, uint64(r.PKey), "P_Key")
	e.put(reqMTU, uint64(r.PathMTU), "path MTU")
	e.flag(reqRDC, r.RDCExists, "RDC exists")
	e.put(reqRNR, uint64(r.RNRRetryCount), "RNR retry count")
	e.put(reqMaxCM, uint64(r.MaxCMRetries), "max CM retries")
	e.flag(reqSRQ, r.SRQ, "SRQ")
	e.put(reqExtTrans, uint64(r.ExtendedTransport), "extended transport type")
	r.Primary.encode(e, reqPrimary, "primary")
	r.Alternate.encode(e, reqAlternate, "alternate")
	e.flag(reqSAP, r.SAPSupported, "SAP supported")
	e.bytes(reqPrivate, REQPrivateLen, r.PrivateData, "private data")
	return e.err
}

// Decode reads r from data. PrivateData is all REQPrivateLen bytes (the
// message does not carry the length the sender used).
func (r *REQ) Decode(data []byte) error {
	if err := check(data, DataLen, "REQ"); err != nil {
		return err
	}
	d := data
	*r = REQ{
		LocalCommID: uint32(get(d, reqCommID)), VendorID: uint32(get(d, reqVendorID)),
		ServiceID:   get(d, reqService),
		LocalCAGUID: get(d, reqGUID), LocalQKey: uint32(get(d, reqQKey)),
		LocalQPN: bth.QPN(get(d, reqQPN)), ResponderResources: uint8(get(d, reqRespRes)),
		LocalEECN: uint32(get(d, reqLEECN)), InitiatorDepth: uint8(get(d, reqInitDepth)),
		RemoteEECN: uint32(get(d, reqREECN)), RemoteCMResponseTimeout: uint8(get(d, reqRemoteTO)),
		Transport: Transport(get(d, reqTransport)), EndToEndFlowControl: getBool(d, reqEEFC),
		StartingPSN: bth.PSN(get(d, reqPSN)), LocalCMResponseTimeout: uint8(get(d, reqLocalTO)),
		RetryCount: uint8(get(d, reqRetry)), PKey: uint16(get(d, reqPKey)),
		PathMTU: verbs.MTU(get(d, reqMTU)), RDCExists: getBool(d, reqRDC),
		RNRRetryCount: uint8(get(d, reqRNR)), MaxCMRetries: uint8(get(d, reqMaxCM)),
		SRQ: getBool(d, reqSRQ), ExtendedTransport: uint8(get(d, reqExtTrans)),
		SAPSupported: getBool(d, reqSAP),
		PrivateData:  cloneBytes(d[reqPrivate : reqPrivate+REQPrivateLen]),
	}
	r.Primary.decode(d, reqPrimary)
	r.Alternate.decode(d, reqAlternate)
	return nil
}

// MsgKind says which message an MRA or REJ answers: the IBTA's "message
// MRAed" and "message rejected" codes.
type MsgKind uint8

// Message codes of MRA and REJ.
const (
	MsgREQ   MsgKind = 0
	MsgREP   MsgKind = 1
	MsgOther MsgKind = 2 // LAP in an MRA; any other message in a REJ
)

// String names the code.
func (k MsgKind) String() string {
	switch k {
	case MsgREQ:
		return "REQ"
	case MsgREP:
		return "REP"
	case MsgOther:
		return "other (LAP)"
	}
	return "reserved"
}

// MRA is the message receipt acknowledgement (attribute 0x0011): the sender
// needs more time than the peer's CM response timeout to answer.
type MRA struct {
	LocalCommID    uint32
	RemoteCommID   uint32
	MessageMRAed   MsgKind // 2 bits
	ServiceTimeout uint8   // 5 bits: 4.096 µs × 2^value
	PrivateData    []byte  // up to MRAPrivateLen bytes
}

var (
	mraLocal   = u32(0)
	mraRemote  = u32(4)
	mraMsg     = bitsAt(8, 0, 2)
	mraTimeout = bitsAt(9, 0, 5)
)

const mraPrivate = 10

// Attr returns AttrMRA.
func (*MRA) Attr() AttrID { return AttrMRA }

// Encode writes m into data.
func (m *MRA) Encode(data []byte) error {
	e, err := start(data, DataLen, "MRA")
	if err != nil {
		return err
	}
	e.put(mraLocal, uint64(m.LocalCommID), "local comm ID")
	e.put(mraRemote, uint64(m.RemoteCommID), "remote comm ID")
	e.put(mraMsg, uint64(m.MessageMRAed), "message MRAed")
	e.put(mraTimeout, uint64(m.ServiceTimeout), "service timeout")
	e.bytes(mraPrivate, MRAPrivateLen, m.PrivateData, "private data")
	return e.err
}

// Decode reads m from data.
func (m *MRA) Decode(data []byte) error {
	if err := check(data, DataLen, "MRA"); err != nil {
		return err
	}
	*m = MRA{
		LocalCommID: uint32(get(data, mraLocal)), RemoteCommID: uint32(get(data, mraRemote)),
		MessageMRAed: MsgKind(get(data, mraMsg)), ServiceTimeout: uint8(get(data, mraTimeout)),
		PrivateData: cloneBytes(data[mraPrivate : mraPrivate+MRAPrivateLen]),
	}
	return nil
}

// REJ is the reject message (attribute 0x0012).
type REJ struct {
	LocalCommID     uint32
	RemoteCommID    uint32
	MessageRejected MsgKind // 2 bits
	RejectedInfoLen uint8   // 7 bits: how many bytes of ARI are meaningful
	Reason          RejReason
	ARI             []byte // additional rejection information, up to REJARILen bytes
	PrivateData     []byte // up to REJPrivateLen bytes
}

var (
	rejLocal   = u32(0)
	rejRemote  = u32(4)
	rejMsg     = bitsAt(8, 0, 2)
	rejInfoLen = bitsAt(9, 0, 7)
	rejReason  = u16(10)
)

const (
	rejARI     = 12
	rejPrivate = 84
)

// Attr returns AttrREJ.
func (*REJ) Attr() AttrID { return AttrREJ }

// Encode writes r into data.
func (r *REJ) Encode(data []byte) error {
	e, err := start(data, DataLen, "REJ")
	if err != nil {
		return err
	}
	e.put(rejLocal, uint64(r.LocalCommID), "local comm ID")
	e.put(rejRemote, uint64(r.RemoteCommID), "remote comm ID")
	e.put(rejMsg, uint64(r.MessageRejected), "message rejected")
	e.put(rejInfoLen, uint64(r.RejectedInfoLen), "rejected info length")
	e.put(rejReason, uint64(r.Reason), "reason")
	e.bytes(rejARI, REJARILen, r.ARI, "ARI")
	e.bytes(rejPrivate, REJPrivateLen, r.PrivateData, "private data")
	return e.err
}

// Decode reads r from data. ARI is the first RejectedInfoLen bytes of the
// ARI field (at most REJARILen).
func (r *REJ) Decode(data []byte) error {
	if err := check(data, DataLen, "REJ"); err != nil {
		return err
	}
	n := int(get(data, rejInfoLen))
	*r = REJ{
		LocalCommID: uint32(get(data, rejLocal)), RemoteCommID: uint32(get(data, rejRemote)),
		MessageRejected: MsgKind(get(data, rejMsg)), RejectedInfoLen: uint8(n),
		Reason:      RejReason(get(data, rejReason)),
		ARI:         cloneBytes(data[rejARI : rejARI+min(n, REJARILen)]),
		PrivateData: cloneBytes(data[rejPrivate : rejPrivate+REJPrivateLen]),
	}
	return nil
}

// REP is the reply to a REQ (attribute 0x0013), sent by the passive side.
type REP struct {
	LocalCommID         uint32
	RemoteCommID        uint32
	LocalQKey           uint32
	LocalQPN            bth.QPN // 24 bits
	LocalEECN           uint32  // 24 bits
	StartingPSN         bth.PSN // 24 bits
	ResponderResources  uint8
	InitiatorDepth      uint8
	TargetACKDelay      uint8 // 5 bits
	FailoverAccepted    uint8 // 2 bits
	EndToEndFlowControl bool
	RNRRetryCount       uint8 // 3 bits
	SRQ                 bool
	LocalCAGUID         uint64
	VendorID            uint32 // 24 bits (ECE), carried in the bytes after the QPN, EECN and PSN
	PrivateData         []byte // up to REPPrivateLen bytes
}

var (
	repLocal    = u32(0)
	repRemote   = u32(4)
	repQKey     = u32(8)
	repQPN      = u24(12)
	repEECN     = u24(16)
	repPSN      = u24(20)
	repRespRes  = u8(24)
	repInit     = u8(25)
	repAckDelay = bitsAt(26, 0, 5)
	repFailover = bitsAt(26, 5, 2)
	repEEFC     = bitsAt(26, 7, 1)
	repRNR      = bitsAt(27, 0, 3)
	repSRQ      = bitsAt(27, 3, 1)
	repGUID     = u64(28)
	repVendorH  = u8(15)
	repVendorM  = u8(19)
	repVendorL  = u8(23)
)

const repPrivate = 36

// Attr returns AttrREP.
func (*REP) Attr() AttrID { return AttrREP }

// Encode writes r into data.
func (r *REP) Encode(data []byte) error {
	e, err := start(data, DataLen, "REP")
	if err != nil {
		return err
	}
	e.put(repLocal, uint64(r.LocalCommID), "local comm ID")
	e.put(repRemote, uint64(r.RemoteCommID), "remote comm ID")
	e.put(repQKey, uint64(r.LocalQKey), "local Q_Key")
	e.put(repQPN, uint64(r.LocalQPN), "local QPN")
	e.put(repEECN, uint64(r.LocalEECN), "local EECN")
	e.put(repPSN, uint64(r.StartingPSN), "starting PSN")
	e.put(repRespRes, uint64(r.ResponderResources), "responder resources")
	e.put(repInit, uint64(r.InitiatorDepth), "initiator depth")
	e.put(repAckDelay, uint64(r.TargetACKDelay), "target ACK delay")
	e.put(repFailover, uint64(r.FailoverAccepted), "failover accepted")
	e.flag(repEEFC, r.EndToEndFlowControl, "end-to-end flow control")
	e.put(repRNR, uint64(r.RNRRetryCount), "RNR retry count")
	e.flag(repSRQ, r.SRQ, "SRQ")
	e.put(repGUID, r.LocalCAGUID, "local CA GUID")
	putVendor3(e, r.VendorID, repVendorH, repVendorM, repVendorL)
	e.bytes(repPrivate, REPPrivateLen, r.PrivateData, "private data")
	return e.err
}

// Decode reads r from data.
func (r *REP) Decode(data []byte) error {
	if err := check(data, DataLen, "REP"); err != nil {
		return err
	}
	d := data
	*r = REP{
		LocalCommID: uint32(get(d, repLocal)), RemoteCommID: uint32(get(d, repRemote)),
		LocalQKey: uint32(get(d, repQKey)), LocalQPN: bth.QPN(get(d, repQPN)),
		LocalEECN: uint32(get(d, repEECN)), StartingPSN: bth.PSN(get(d, repPSN)),
		ResponderResources: uint8(get(d, repRespRes)), InitiatorDepth: uint8(get(d, repInit)),
		TargetACKDelay: uint8(get(d, repAckDelay)), FailoverAccepted: uint8(get(d, repFailover)),
		EndToEndFlowControl: getBool(d, repEEFC), RNRRetryCount: uint8(get(d, repRNR)),
		SRQ: getBool(d, repSRQ), LocalCAGUID: get(d, repGUID),
		VendorID:    uint32(get(d, repVendorH)<<16 | get(d, repVendorM)<<8 | get(d, repVendorL)),
		PrivateData: cloneBytes(d[repPrivate : repPrivate+REPPrivateLen]),
	}
	return nil
}

// commPair is the two communication IDs that start RTU, DREQ and DREP.
var (
	pairLocal  = u32(0)
	pairRemote = u32(4)
)

// RTU is the ready-to-use message (attribute 0x0014) that completes a
// connection's establishment.
type RTU struct {
	LocalCommID  uint32
	RemoteCommID uint32
	PrivateData  []byte // up to RTUPrivateLen bytes
}

// Attr returns AttrRTU.
func (*RTU) Attr() AttrID { return AttrRTU }

// Encode writes r into data.
func (r *RTU) Encode(data []byte) error {
	e, err := start(data, DataLen, "RTU")
	if err != nil {
		return err
	}
	e.put(pairLocal, uint64(r.LocalCommID), "local comm ID")
	e.put(pairRemote, uint64(r.RemoteCommID), "remote comm ID")
	e.bytes(8, RTUPrivateLen, r.PrivateData, "private data")
	return e.err
}

// Decode reads r from data.
func (r *RTU) Decode(data []byte) error {
	if err := check(data, DataLen, "RTU"); err != nil {
		return err
	}
	*r = RTU{uint32(get(data, pairLocal)), uint32(get(data, pairRemote)), cloneBytes(data[8 : 8+RTUPrivateLen])}
	return nil
}

// DREQ is the disconnection request (attribute 0x0015).
type DREQ struct {
	LocalCommID  uint32
	RemoteCommID uint32
	RemoteQPN    bth.QPN // 24 bits: the receiver's QPN (or EECN)
	PrivateData  []byte  // up to DREQPrivateLen bytes
}

var dreqQPN = u24(8)

// Attr returns AttrDREQ.
func (*DREQ) Attr() AttrID { return AttrDREQ }

// Encode writes r into data.
func (r *DREQ) Encode(data []byte) error {
	e, err := start(data, DataLen, "DREQ")
	if err != nil {
		return err
	}
	e.put(pairLocal, uint64(r.LocalCommID), "local comm ID")
	e.put(pairRemote, uint64(r.RemoteCommID), "remote comm ID")
	e.put(dreqQPN, uint64(r.RemoteQPN), "remote QPN")
	e.bytes(12, DREQPrivateLen, r.PrivateData, "private data")
	return e.err
}

// Decode reads r from data.
func (r *DREQ) Decode(data []byte) error {
	if err := check(data, DataLen, "DREQ"); err != nil {
		return err
	}
	*r = DREQ{
		uint32(get(data, pairLocal)), uint32(get(data, pairRemote)),
		bth.QPN(get(data, dreqQPN)), cloneBytes(data[12 : 12+DREQPrivateLen]),
	}
	return nil
}

// DREP is the reply to a DREQ (attribute 0x0016).
type DREP struct {
	LocalCommID  uint32
	RemoteCommID uint32
	PrivateData  []byte // up to DREPPrivateLen bytes
}

// Attr returns AttrDREP.
func (*DREP) Attr() AttrID { return AttrDREP }

// Encode writes r into data.
func (r *DREP) Encode(data []byte) error {
	e, err := start(data, DataLen, "DREP")
	if err != nil {
		return err
	}
	e.put(pairLocal, uint64(r.LocalCommID), "local comm ID")
	e.put(pairRemote, uint64(r.RemoteCommID), "remote comm ID")
	e.bytes(8, DREPPrivateLen, r.PrivateData, "private data")
	return e.err
}

// Decode reads r from data.
func (r *DREP) Decode(data []byte) error {
	if err := check(data, DataLen, "DREP"); err != nil {
		return err
	}
	*r = DREP{uint32(get(data, pairLocal)), uint32(get(data, pairRemote)), cloneBytes(data[8 : 8+DREPPrivateLen])}
	return nil
}

// SIDRREQ is the service ID resolution request (attribute 0x0017): which
// UD QP and Q_Key serve a service ID.
type SIDRREQ struct {
	RequestID   uint32
	PKey        uint16
	ServiceID   uint64
	PrivateData []byte // up to SIDRREQPrivateLen bytes
}

var (
	sidrReqID   = u32(0)
	sidrReqPKey = u16(4)
	sidrReqSvc  = u64(8)
)

const sidrReqPrivate = 16

// Attr returns AttrSIDRREQ.
func (*SIDRREQ) Attr() AttrID { return AttrSIDRREQ }

// Encode writes r into data.
func (r *SIDRREQ) Encode(data []byte) error {
	e, err := start(data, DataLen, "SIDR_REQ")
	if err != nil {
		return err
	}
	e.put(sidrReqID, uint64(r.RequestID), "request ID")
	e.put(sidrReqPKey, uint64(r.PKey), "P_Key")
	e.put(sidrReqSvc, r.ServiceID, "service ID")
	e.bytes(sidrReqPrivate, SIDRREQPrivateLen, r.PrivateData, "private data")
	return e.err
}

// Decode reads r from data.
func (r *SIDRREQ) Decode(data []byte) error {
	if err := check(data, DataLen, "SIDR_REQ"); err != nil {
		return err
	}
	*r = SIDRREQ{
		uint32(get(data, sidrReqID)), uint16(get(data, sidrReqPKey)), get(data, sidrReqSvc),
		cloneBytes(data[sidrReqPrivate : sidrReqPrivate+SIDRREQPrivateLen]),
	}
	return nil
}

// SIDRStatus is a SIDR_REP's status.
type SIDRStatus uint8

// SIDR_REP statuses.
const (
	SIDRValid              SIDRStatus = 0 // QPN and Q_Key are valid
	SIDRServiceUnsupported SIDRStatus = 1 // service ID not supported
	SIDRRejected           SIDRStatus = 2 // rejected by the service provider
	SIDRNoQP               SIDRStatus = 3 // no QP available
	SIDRRedirect           SIDRStatus = 4 // request redirected (additional information holds ClassPortInfo)
	SIDRClassVersionUnsupp SIDRStatus = 5 // class version not supported
)

var sidrStatusText = [...]string{
	SIDRValid: "valid", SIDRServiceUnsupported: "service ID not supported",
	SIDRRejected: "rejected by the service provider", SIDRNoQP: "no QP available",
	SIDRRedirect: "redirect", SIDRClassVersionUnsupp: "class version not supported",
}

// String describes the status.
func (s SIDRStatus) String() string {
	if int(s) < len(sidrStatusText) {
		return sidrStatusText[s]
	}
	return "reserved status"
}

// SIDRREP is the reply to a SIDR_REQ (attribute 0x0018).
type SIDRREP struct {
	RequestID   uint32
	Status      SIDRStatus
	InfoLen     uint8   // how many bytes of Info are meaningful
	QPN         bth.QPN // 24 bits
	ServiceID   uint64
	QKey        uint32
	VendorID    uint32 // 24 bits (ECE): the high 16 after the information length, the low 8 after the QPN
	Info        []byte // additional information, up to SIDRREPInfoLen bytes
	PrivateData []byte // up to SIDRREPPrivateLen bytes
}

var (
	sidrRepID      = u32(0)
	sidrRepStatus  = u8(4)
	sidrRepInfoLen = u8(5)
	sidrRepQPN     = u24(8)
	sidrRepSvc     = u64(12)
	sidrRepQKey    = u32(20)
	sidrRepVendorH = u16(6)
	sidrRepVendorL = u8(11)
)

const (
	sidrRepInfo    = 24
	sidrRepPrivate = 96
)

// Attr returns AttrSIDRREP.
func (*SIDRREP) Attr() AttrID { return AttrSIDRREP }

// Encode writes r into data.
func (r *SIDRREP) Encode(data []byte) error {
	e, err := start(data, DataLen, "SIDR_REP")
	if err != nil {
		return err
	}
	e.put(sidrRepID, uint64(r.RequestID), "request ID")
	e.put(sidrRepStatus, uint64(r.Status), "status")
	e.put(sidrRepInfoLen, uint64(r.InfoLen), "additional information length")
	e.put(sidrRepQPN, uint64(r.QPN), "QPN")
	e.put(sidrRepSvc, r.ServiceID, "service ID")
	e.put(sidrRepQKey, uint64(r.QKey), "Q_Key")
	if r.VendorID>>24 != 0 {
		e.outOfRange("vendor ID")
	} else {
		e.put(sidrRepVendorH, uint64(r.VendorID>>8), "vendor ID")
		e.put(sidrRepVendorL, uint64(r.VendorID&0xff), "vendor ID")
	}
	e.bytes(sidrRepInfo, SIDRREPInfoLen, r.Info, "additional information")
	e.bytes(sidrRepPrivate, SIDRREPPrivateLen, r.PrivateData, "private data")
	return e.err
}

// Decode reads r from data. Info is the first InfoLen bytes of the
// additional information (at most SIDRREPInfoLen).
func (r *SIDRREP) Decode(data []byte) error {
	if err := check(data, DataLen, "SIDR_REP"); err != nil {
		return err
	}
	n := int(get(data, sidrRepInfoLen))
	*r = SIDRREP{
		RequestID: uint32(get(data, sidrRepID)), Status: SIDRStatus(get(data, sidrRepStatus)),
		InfoLen: uint8(n), QPN: bth.QPN(get(data, sidrRepQPN)), ServiceID: get(data, sidrRepSvc),
		QKey:        uint32(get(data, sidrRepQKey)),
		VendorID:    uint32(get(data, sidrRepVendorH)<<8 | get(data, sidrRepVendorL)),
		Info:        cloneBytes(data[sidrRepInfo : sidrRepInfo+min(n, SIDRREPInfoLen)]),
		PrivateData: cloneBytes(data[sidrRepPrivate : sidrRepPrivate+SIDRREPPrivateLen]),
	}
	return nil
}

// putVendor3 writes a 24-bit vendor ID split over three single bytes, most
// significant first; a wider value is an error.
func putVendor3(e *enc, v uint32, h, m, l loc) {
	if v>>24 != 0 {
		e.outOfRange("vendor ID")
		return
	}
	e.put(h, uint64(v>>16), "vendor ID")
	e.put(m, uint64(v>>8&0xff), "vendor ID")
	e.put(l, uint64(v&0xff), "vendor ID")
}
