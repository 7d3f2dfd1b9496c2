// Package ctl is the control protocol between the sroce daemon and its
// clients: the messages of sroce_ctl.h (in this directory), field for field,
// and the framing of one message as a SOCK_SEQPACKET datagram. The C
// header is the reference for the drop-in libibverbs of shim/; the tests
// compile it and compare every offset and size with the structs below.
//
// Messages are fixed-layout structs in the host's (little-endian) byte
// order, copied to and from the datagram as they lie in memory, so every
// struct here holds plain values only, with explicit padding.
package ctl

import (
	"errors"
	"fmt"
	"unsafe"
)

// Protocol constants (SROCE_CTL_*).
const (
	Magic   = 0x4c435253 // "SRCL"
	Version = 7          // 2: the CM operations; 3: RESIZE_CQ, REREG_MR, MODIFY_SRQ of max_wr; 4: ATTACH_MCAST, DETACH_MCAST; 5: CM_JOIN_MCAST, CM_LEAVE_MCAST; 6: XRC (OPEN_XRCD, CLOSE_XRCD, OPEN_QP, CREATE_SRQ of a domain); 7: doorbells name their QP or SRQ (CtxPage.Bells)
	MaxMsg  = 8192       // the largest datagram either way
	MaxFDs  = 4          // descriptors one datagram may carry
	NameLen = 64         // device name buffer, NUL-terminated
)

// Op is a request's operation (enum sroce_ctl_op).
type Op uint16

// The operations.
const (
	OpHello       Op = 1
	OpListDevices Op = 2
	OpOpen        Op = 3
	OpQueryDevice Op = 4
	OpQueryPort   Op = 5
	OpQueryGID    Op = 6
	OpQueryPKey   Op = 7
	OpQueryStats  Op = 8 // request: Open (the context's device, or empty); after OPEN only (EINVAL before); reply: a Stats as JSON
	OpQueryRes    Op = 9 // request: ResQuery; before or after OPEN; reply: a ResPage as JSON

	OpAllocPD   Op = 10
	OpDeallocPD Op = 11
	OpRegMR     Op = 12
	OpDeregMR   Op = 13
	OpAllocMW   Op = 14
	OpDeallocMW Op = 15
	OpReregMR   Op = 16 // request: ReregMR (fds: the memfd with ReregChangeTranslation); reply: MR

	OpCreateCompChannel  Op = 20
	OpDestroyCompChannel Op = 21
	OpCreateCQ           Op = 22
	OpDestroyCQ          Op = 23
	OpResizeCQ           Op = 24 // request: ResizeCQ; reply: CQ, fds: the new memfd

	OpCreateQP    Op = 30
	OpModifyQP    Op = 31
	OpQueryQP     Op = 32
	OpDestroyQP   Op = 33
	OpAttachMcast Op = 34 // request: Mcast
	OpDetachMcast Op = 35 // request: Mcast

	OpCreateSRQ  Op = 40
	OpModifySRQ  Op = 41
	OpQuerySRQ   Op = 42
	OpDestroySRQ Op = 43
	OpOpenQP     Op = 36
	OpOpenXRCD   Op = 44
	OpCloseXRCD  Op = 45

	OpCreateAH  Op = 50
	OpDestroyAH Op = 51

	OpCMCreateChannel  Op = 60
	OpCMDestroyChannel Op = 61
	OpCMCreateID       Op = 62
	OpCMDestroyID      Op = 63
	OpCMBind           Op = 64
	OpCMResolveAddr    Op = 65
	OpCMResolveRoute   Op = 66
	OpCMQuery          Op = 67
	OpCMListen         Op = 68
	OpCMConnect        Op = 69
	OpCMAccept         Op = 70
	OpCMReject         Op = 71
	OpCMDisconnect     Op = 72
	OpCMInitQPAttr     Op = 73
	OpCMNotify         Op = 74
	OpCMSetOption      Op = 75
	OpCMMigrateID      Op = 76
	OpCMJoinMcast      Op = 77 // request: CMMcast
	OpCMLeaveMcast     Op = 78 // request: CMMcast
)

var opNames = map[Op]string{
	OpHello: "HELLO", OpListDevices: "LIST_DEVICES", OpOpen: "OPEN", OpQueryDevice: "QUERY_DEVICE",
	OpQueryPort: "QUERY_PORT", OpQueryGID: "QUERY_GID", OpQueryPKey: "QUERY_PKEY", OpQueryStats: "QUERY_STATS", OpQueryRes: "QUERY_RESOURCES",
	OpAllocPD: "ALLOC_PD", OpDeallocPD: "DEALLOC_PD", OpRegMR: "REG_MR", OpDeregMR: "DEREG_MR",
	OpAllocMW: "ALLOC_MW", OpDeallocMW: "DEALLOC_MW", OpReregMR: "REREG_MR",
	OpCreateCompChannel: "CREATE_COMP_CHANNEL", OpDestroyCompChannel: "DESTROY_COMP_CHANNEL",
	OpCreateCQ: "CREATE_CQ", OpDestroyCQ: "DESTROY_CQ", OpResizeCQ: "RESIZE_CQ",
	OpCreateQP: "CREATE_QP", OpModifyQP: "MODIFY_QP", OpQueryQP: "QUERY_QP", OpDestroyQP: "DESTROY_QP",
	OpAttachMcast: "ATTACH_MCAST", OpDetachMcast: "DETACH_MCAST",
	OpCreateSRQ: "CREATE_SRQ", OpModifySRQ: "MODIFY_SRQ", OpQuerySRQ: "QUERY_SRQ", OpDestroySRQ: "DESTROY_SRQ",
	OpOpenXRCD: "OPEN_XRCD", OpCloseXRCD: "CLOSE_XRCD", OpOpenQP: "OPEN_QP",
	OpCreateAH: "CREATE_AH", OpDestroyAH: "DESTROY_AH",
	OpCMCreateChannel: "CM_CREATE_CHANNEL", OpCMDestroyChannel: "CM_DESTROY_CHANNEL",
	OpCMCreateID: "CM_CREATE_ID", OpCMDestroyID: "CM_DESTROY_ID", OpCMBind: "CM_BIND",
	OpCMResolveAddr: "CM_RESOLVE_ADDR", OpCMResolveRoute: "CM_RESOLVE_ROUTE", OpCMQuery: "CM_QUERY",
	OpCMListen: "CM_LISTEN", OpCMConnect: "CM_CONNECT", OpCMAccept: "CM_ACCEPT", OpCMReject: "CM_REJECT",
	OpCMDisconnect: "CM_DISCONNECT", OpCMInitQPAttr: "CM_INIT_QP_ATTR", OpCMNotify: "CM_NOTIFY",
	OpCMSetOption: "CM_SET_OPTION", OpCMMigrateID: "CM_MIGRATE_ID",
	OpCMJoinMcast: "CM_JOIN_MCAST", OpCMLeaveMcast: "CM_LEAVE_MCAST",
}

// IsCM says whether the op is one of the connection manager's (CM_*),
// which a connection may send before OPEN.
func (o Op) IsCM() bool { return o >= OpCMCreateChannel && o <= OpCMLeaveMcast }

// String returns the op's name ("CREATE_QP"), or "op N" for an unknown one.
func (o Op) String() string {
	if s, ok := opNames[o]; ok {
		return s
	}
	return fmt.Sprintf("op %d", uint16(o))
}

// Hdr starts every datagram (struct sroce_ctl_hdr).
type Hdr struct {
	Magic   uint32
	Version uint16
	Op      Op
	Len     uint32 // bytes of the datagram, header included
	Seq     uint32 // the client's request number, echoed in the reply
	Err     int32  // reply: 0 or a positive errno value
	NFDs    uint32 // descriptors passed with the datagram
}

// HdrSize is the size of Hdr on the wire.
const HdrSize = int(unsafe.Sizeof(Hdr{}))

// Hello is HELLO's request and reply (struct sroce_ctl_hello).
type Hello struct {
	ABI      uint32
	NDevices uint32
	Version  [32]byte
}

// Devices starts LIST_DEVICES' reply; Count Device entries follow.
type Devices struct {
	Count uint32
	_     uint32
}

// Device describes one device the daemon serves (struct sroce_ctl_device).
type Device struct {
	Name     [NameLen]byte
	IfName   [16]byte
	NodeGUID uint64
	IfIndex  uint32
	_        uint32
}

// Open is OPEN's request (struct sroce_ctl_open).
type Open struct {
	Name [NameLen]byte
}

// CtxPage is the context page a connection shares with the daemon
// (struct sroce_ctx_page).
type CtxPage struct {
	NeedWakeup uint32
	_          [15]uint32
	// Bells are the doorbells: bit n%64 of word n/64 names the QP or
	// SRQ of doorbell number n. The client sets bits (atomic OR), the
	// daemon exchanges words with 0.
	Bells [CtxBellWords]uint64
}

// CtxBellWords is the number of doorbell words of the context page
// (SROCE_CTX_BELL_WORDS), CtxBells the doorbell numbers they hold
// (number 0 names nothing).
const (
	CtxBellWords = 504
	CtxBells     = CtxBellWords * 64
)

// CtxPageSize is the size of the context page's memfd.
const CtxPageSize = 4096

// DeviceAttr is QUERY_DEVICE's reply (struct sroce_ctl_device_attr).
type DeviceAttr struct {
	FWVer                 [64]byte
	NodeGUID              uint64
	SysImageGUID          uint64
	MaxMRSize             uint64
	PageSizeCap           uint64
	VendorID              uint32
	VendorPartID          uint32
	HWVer                 uint32
	MaxQP                 uint32
	MaxQPWR               uint32
	DeviceCapFlags        uint32
	MaxSGE                uint32
	MaxSGERd              uint32
	MaxCQ                 uint32
	MaxCQE                uint32
	MaxMR                 uint32
	MaxPD                 uint32
	MaxQPRdAtom           uint32
	MaxEERdAtom           uint32
	MaxResRdAtom          uint32
	MaxQPInitRdAtom       uint32
	MaxEEInitRdAtom       uint32
	AtomicCap             uint32
	MaxEE                 uint32
	MaxRDD                uint32
	MaxMW                 uint32
	MaxRawIPv6QP          uint32
	MaxRawEthyQP          uint32
	MaxMcastGrp           uint32
	MaxMcastQPAttach      uint32
	MaxTotalMcastQPAttach uint32
	MaxAH                 uint32
	MaxFMR                uint32
	MaxMapPerFMR          uint32
	MaxSRQ                uint32
	MaxSRQWR              uint32
	MaxSRQSGE             uint32
	MaxPKeys              uint16
	LocalCAAckDelay       uint8
	PhysPortCnt           uint8
	MaxInlineData         uint32
}

// Port is the request of QUERY_PORT, QUERY_GID and QUERY_PKEY (struct
// sroce_ctl_port).
type Port struct {
	PortNum uint32
	Index   uint32
}

// PortAttr is QUERY_PORT's reply (struct sroce_ctl_port_attr).
type PortAttr struct {
	State         uint32
	MaxMTU        uint32
	ActiveMTU     uint32
	GIDTblLen     int32
	PortCapFlags  uint32
	MaxMsgSz      uint32
	BadPKeyCntr   uint32
	QKeyViolCntr  uint32
	PKeyTblLen    uint16
	LID           uint16
	SMLID         uint16
	LMC           uint8
	MaxVLNum      uint8
	SMSL          uint8
	SubnetTimeout uint8
	InitTypeReply uint8
	ActiveWidth   uint8
	ActiveSpeed   uint8
	PhysState     uint8
	LinkLayer     uint8
	Flags         uint8
	PortCapFlags2 uint32
	ActiveSpeedEx uint32
	LinkMTU       uint32
}

// GID is QUERY_GID's reply (struct sroce_ctl_gid).
type GID struct {
	GID         [16]byte
	GIDType     uint32 // 0 IB/RoCE v1, 1 RoCE v2 (enum ibv_gid_type_sysfs)
	NdevIfIndex uint32
}

// PKey is QUERY_PKEY's reply (struct sroce_ctl_pkey).
type PKey struct {
	PKey uint16
	_    uint16
	_    uint32
}

// Handle is a request or reply that holds one handle (struct
// sroce_ctl_handle).
type Handle struct {
	Handle uint32
	_      uint32
}

// Mcast is the request of ATTACH_MCAST and DETACH_MCAST (struct
// sroce_ctl_mcast): a QP's handle and a multicast group.
type Mcast struct {
	QP  uint32
	LID uint16
	_   uint16
	GID [16]byte
}

// RegMR is REG_MR's request (struct sroce_ctl_reg_mr). With a descriptor
// (a sealed memfd) the range is at FDOffset of it; without, it is the
// range at Addr of the client process's shared file mappings.
type RegMR struct {
	PD       uint32
	Access   uint32
	Addr     uint64
	Length   uint64
	IOVA     uint64
	FDOffset uint64
}

// ReregMR is REREG_MR's request (struct sroce_ctl_rereg_mr): Flags (enum
// ibv_rereg_mr_flags) select the fields of Reg that count.
type ReregMR struct {
	Handle uint32
	Flags  uint32
	Reg    RegMR
}

// MR is REG_MR's and REREG_MR's reply (struct sroce_ctl_mr).
type MR struct {
	Handle uint32
	LKey   uint32
	RKey   uint32
	_      uint32
}

// MW is ALLOC_MW's request {PD, type} and reply {handle, rkey} (struct
// sroce_ctl_mw).
type MW struct {
	PDOrHandle uint32
	TypeOrRKey uint32
}

// CreateCQ is CREATE_CQ's request (struct sroce_ctl_create_cq).
type CreateCQ struct {
	CQE        uint32
	Channel    uint32
	CompVector uint32
	_          uint32
}

// ResizeCQ is RESIZE_CQ's request (struct sroce_ctl_resize_cq).
type ResizeCQ struct {
	Handle uint32
	CQE    uint32
}

// CQ is CREATE_CQ's and RESIZE_CQ's reply (struct sroce_ctl_cq).
type CQ struct {
	Handle     uint32
	CQE        uint32
	RingOffset uint64
	MemSize    uint64
}

// CQCtl is a CQ's control block (struct sroce_cq_ctl).
type CQCtl struct {
	Arm      uint32 // 1: next completion, 2: next solicited; the daemon clears it
	Overflow uint32
	_        [14]uint32
}

// CQEvent is a completion channel's datagram (struct sroce_ctl_cq_event).
type CQEvent struct {
	CQ uint32
	_  uint32
}

// AsyncEvent is an asynchronous event's datagram (struct
// sroce_ctl_async_event).
type AsyncEvent struct {
	EventType uint32
	Handle    uint32
}

// QPCap is struct sroce_ctl_qp_cap.
type QPCap struct {
	MaxSendWR     uint32
	MaxRecvWR     uint32
	MaxSendSGE    uint32
	MaxRecvSGE    uint32
	MaxInlineData uint32
}

// CreateQP is CREATE_QP's request (struct sroce_ctl_create_qp).
type CreateQP struct {
	PD       uint32
	SendCQ   uint32
	RecvCQ   uint32
	SRQ      uint32
	QPType   uint8
	SQSigAll uint8
	_        uint16
	Cap      QPCap
}

// QP is CREATE_QP's reply (struct sroce_ctl_qp).
type QP struct {
	Handle   uint32
	QPN      uint32
	Cap      QPCap
	Bell     uint32 // the QP's doorbell number
	SQOffset uint64
	RQOffset uint64
	MemSize  uint64
}

// QPCtl is a QP's control block (struct sroce_qp_ctl).
type QPCtl struct {
	State uint32
	_     [15]uint32
}

// AHAttr is struct sroce_ctl_ah_attr.
type AHAttr struct {
	DGID         [16]byte
	FlowLabel    uint32
	SGIDIndex    uint8
	HopLimit     uint8
	TrafficClass uint8
	SL           uint8
	IsGlobal     uint8
	PortNum      uint8
	StaticRate   uint8
	SrcPathBits  uint8
	DLID         uint16
	DMAC         [6]byte
}

// QPAttr is struct sroce_ctl_qp_attr.
type QPAttr struct {
	QPState          uint32
	CurQPState       uint32
	PathMTU          uint32
	PathMigState     uint32
	QKey             uint32
	RQPSN            uint32
	SQPSN            uint32
	DestQPNum        uint32
	QPAccessFlags    uint32
	Cap              QPCap
	AHAttr           AHAttr
	PKeyIndex        uint16
	EnSQDAsyncNotify uint8
	SQDraining       uint8
	MaxRdAtomic      uint8
	MaxDestRdAtomic  uint8
	MinRNRTimer      uint8
	PortNum          uint8
	Timeout          uint8
	RetryCnt         uint8
	RNRRetry         uint8
	SQSigAll         uint8
	QPType           uint32
}

// ModifyQP is MODIFY_QP's request and QUERY_QP's request and reply
// (struct sroce_ctl_modify_qp).
type ModifyQP struct {
	Handle   uint32
	AttrMask uint32
	Attr     QPAttr
}

// SRQ is the request of CREATE_SRQ, MODIFY_SRQ and the reply of QUERY_SRQ
// (struct sroce_ctl_srq).
type SRQ struct {
	PDOrHandle uint32
	AttrMask   uint32
	MaxWR      uint32
	MaxSGE     uint32
	SRQLimit   uint32
	XRCD       uint32
	CQ         uint32
	_          uint32
}

// OpenQP is OPEN_QP's request (struct sroce_ctl_open_qp).
type OpenQP struct {
	XRCD   uint32
	QPN    uint32
	QPType uint8
	_      [7]uint8
}

// OpenXRCD is OPEN_XRCD's request (struct sroce_ctl_open_xrcd).
type OpenXRCD struct {
	OFlags uint32
	_      uint32
}

// SRQCreated is CREATE_SRQ's reply, and MODIFY_SRQ's with IBV_SRQ_MAX_WR
// (struct sroce_ctl_srq_created).
type SRQCreated struct {
	Handle     uint32
	MaxWR      uint32
	MaxSGE     uint32
	SRQNum     uint32
	RingOffset uint64
	MemSize    uint64
	Bell       uint32 // the SRQ's doorbell number
	_          uint32
}

// AH is CREATE_AH's request and reply (struct sroce_ctl_ah).
type AH struct {
	PDOrHandle uint32
	_          uint32
	Attr       AHAttr
}

// ErrShort reports a body shorter than its op's struct.
var ErrShort = errors.New("message body shorter than its operation's struct")

// Bytes returns v's memory as a byte slice (it aliases v).
func Bytes[T any](v *T) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(v)), unsafe.Sizeof(*v))
}

// Get copies the first sizeof(T) bytes of b into a T.
func Get[T any](b []byte) (T, error) {
	var v T
	n := copy(Bytes(&v), b)
	if n < int(unsafe.Sizeof(v)) {
		return v, ErrShort
	}
	return v, nil
}

// SetName stores s, NUL-terminated and truncated to fit, in a name buffer.
func SetName(dst []byte, s string) {
	clear(dst)
	copy(dst[:len(dst)-1], s)
}

// Name returns the NUL-terminated string of a name buffer.
func Name(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// Append appends a message (header and body parts) to buf and returns it;
// the header's Len is set from the parts.
func Append(buf []byte, h Hdr, parts ...[]byte) []byte {
	n := HdrSize
	for _, p := range parts {
		n += len(p)
	}
	h.Magic, h.Version, h.Len = Magic, Version, uint32(n)
	buf = append(buf, Bytes(&h)...)
	for _, p := range parts {
		buf = append(buf, p...)
	}
	return buf
}

// Parse checks a datagram's header and returns it with the body.
func Parse(b []byte) (Hdr, []byte, error) {
	if len(b) < HdrSize {
		return Hdr{}, nil, fmt.Errorf("datagram of %d bytes is shorter than the %d-byte header", len(b), HdrSize)
	}
	h, _ := Get[Hdr](b)
	switch {
	case h.Magic != Magic:
		return h, nil, fmt.Errorf("bad magic %#x (want %#x)", h.Magic, Magic)
	case h.Version != Version:
		return h, nil, fmt.Errorf("protocol version %d, this daemon speaks %d", h.Version, Version)
	case int(h.Len) != len(b):
		return h, nil, fmt.Errorf("header says %d bytes, datagram has %d", h.Len, len(b))
	case h.NFDs > MaxFDs:
		return h, nil, fmt.Errorf("header announces %d descriptors, at most %d", h.NFDs, MaxFDs)
	}
	return h, b[HdrSize:], nil
}

// SRQCtl is an SRQ's control block (struct sroce_srq_ctl).
type SRQCtl struct {
	_ [16]uint32
}

// Stats is QUERY_STATS' reply, as JSON: what "sroce stat" shows of a
// device the daemon serves.
type Stats struct {
	Device    string    `json:"device"`
	Interface string    `json:"interface"`
	LinkMode  string    `json:"link_mode"`
	Reason    string    `json:"link_mode_reason"`
	PortState string    `json:"port_state"`
	ActiveMTU int       `json:"active_mtu"`
	Seconds   float64   `json:"seconds_open"`
	Clients   int       `json:"clients"`
	Engine    []Counter `json:"counters"`
	Link      []Counter `json:"link_counters"`
	CM        []Counter `json:"cm_counters,omitempty"` // the RDMA CM's QP1 agent on the device
	PortErr   string    `json:"port_error,omitempty"`
}

// Counter is one named counter of Stats.
type Counter struct {
	Name  string `json:"name"`
	Value uint64 `json:"value"`
}
