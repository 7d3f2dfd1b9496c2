package qp

import (
	"strconv"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/mr"
)

// Type is a QP transport service type. The values are those of enum
// ibv_qp_type, plus TypeGSI for QP1 (the kernel's IB_QPT_GSI).
type Type uint8

// QP types.
const (
	TypeGSI Type = 1 // QP1: UD with the fixed Q_Key 0x80010000
	TypeRC  Type = 2 // reliable connected
	TypeUC  Type = 3 // unreliable connected
	TypeUD  Type = 4 // unreliable datagram
)

// String returns the type's name: "RC", "UC", "UD" or "GSI".
func (t Type) String() string {
	switch t {
	case TypeGSI:
		return "GSI"
	case TypeRC:
		return "RC"
	case TypeUC:
		return "UC"
	case TypeUD:
		return "UD"
	}
	return "Type(" + strconv.Itoa(int(t)) + ")"
}

// datagram reports whether t is UD or GSI.
func (t Type) datagram() bool { return t == TypeUD || t == TypeGSI }

// State is a QP state (enum ibv_qp_state).
type State uint8

// QP states.
const (
	StateReset State = iota
	StateInit
	StateRTR
	StateRTS
	StateSQD
	StateSQE
	StateErr
	numStates
)

var stateNames = [...]string{"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"}

// String returns the state's name as verbs documentation writes it:
// "RESET", "INIT", "RTR", "RTS", "SQD", "SQE" or "ERR".
func (s State) String() string {
	if s < numStates {
		return stateNames[s]
	}
	return "State(" + strconv.Itoa(int(s)) + ")"
}

// MTU is a path MTU (enum ibv_mtu).
type MTU uint8

// Path MTUs.
const (
	MTU256  MTU = 1
	MTU512  MTU = 2
	MTU1024 MTU = 3
	MTU2048 MTU = 4
	MTU4096 MTU = 5
)

// Bytes returns the MTU in bytes, or 0 for an invalid value.
func (m MTU) Bytes() int {
	if m < MTU256 || m > MTU4096 {
		return 0
	}
	return 128 << m
}

// Valid reports whether m is one of the five IBTA MTUs.
func (m MTU) Valid() bool { return m >= MTU256 && m <= MTU4096 }

// String returns the MTU in bytes, e.g. "1024".
func (m MTU) String() string {
	if !m.Valid() {
		return "MTU(" + strconv.Itoa(int(m)) + ")"
	}
	return strconv.Itoa(m.Bytes())
}

// MTUFromBytes returns the MTU of exactly n bytes (256, 512, 1024, 2048 or
// 4096, what tools accept for -m), and whether n is one of them.
func MTUFromBytes(n int) (MTU, bool) {
	for m := MTU256; m <= MTU4096; m++ {
		if m.Bytes() == n {
			return m, true
		}
	}
	return 0, false
}

// PortHeaderRoom is what rdma_rxe subtracts from the netdev MTU before
// rounding down to an IBTA MTU (RXE_MAX_HDR_LENGTH): room for the IP, UDP
// and transport headers and the ICRC around a full-MTU payload.
const PortHeaderRoom = 80

// PortMTU returns the active MTU of a port on a network interface whose
// MTU is ifaceMTU, as rdma_rxe computes it: the interface MTU less
// PortHeaderRoom, rounded down to an IBTA MTU, never below 256 (1500 gives
// 1024, 9000 gives 4096).
func PortMTU(ifaceMTU int) MTU {
	n := ifaceMTU - PortHeaderRoom
	m := MTU4096
	for m > MTU256 && m.Bytes() > n {
		m--
	}
	return m
}

// AttrMask selects the fields of Attr that ModifyQP applies and that a
// transition requires. The bits are those of enum ibv_qp_attr_mask.
type AttrMask uint32

// Attribute mask bits.
const (
	AttrState            AttrMask = 1 << 0
	AttrCurState         AttrMask = 1 << 1
	AttrEnSQDAsyncNotify AttrMask = 1 << 2
	AttrAccessFlags      AttrMask = 1 << 3
	AttrPKeyIndex        AttrMask = 1 << 4
	AttrPort             AttrMask = 1 << 5
	AttrQKey             AttrMask = 1 << 6
	AttrAV               AttrMask = 1 << 7
	AttrPathMTU          AttrMask = 1 << 8
	AttrTimeout          AttrMask = 1 << 9
	AttrRetryCnt         AttrMask = 1 << 10
	AttrRNRRetry         AttrMask = 1 << 11
	AttrRQPSN            AttrMask = 1 << 12
	AttrMaxQPRdAtomic    AttrMask = 1 << 13
	AttrAltPath          AttrMask = 1 << 14
	AttrMinRNRTimer      AttrMask = 1 << 15
	AttrSQPSN            AttrMask = 1 << 16
	AttrMaxDestRdAtomic  AttrMask = 1 << 17
	AttrPathMigState     AttrMask = 1 << 18
	AttrCap              AttrMask = 1 << 19
	AttrDestQPN          AttrMask = 1 << 20
	attrAll              AttrMask = 1<<21 - 1
)

var attrNames = [...]string{"STATE", "CUR_STATE", "EN_SQD_ASYNC_NOTIFY", "ACCESS_FLAGS",
	"PKEY_INDEX", "PORT", "QKEY", "AV", "PATH_MTU", "TIMEOUT", "RETRY_CNT", "RNR_RETRY",
	"RQ_PSN", "MAX_QP_RD_ATOMIC", "ALT_PATH", "MIN_RNR_TIMER", "SQ_PSN",
	"MAX_DEST_RD_ATOMIC", "PATH_MIG_STATE", "CAP", "DEST_QPN"}

// String lists the bits of m in verbs spelling, e.g. "STATE|AV|PATH_MTU".
func (m AttrMask) String() string {
	s := ""
	for i, n := range attrNames {
		if m&(1<<i) != 0 {
			if s != "" {
				s += "|"
			}
			s += n
		}
	}
	if rest := m &^ attrAll; rest != 0 {
		if s != "" {
			s += "|"
		}
		s += "0x" + strconv.FormatUint(uint64(rest), 16)
	}
	if s == "" {
		return "0"
	}
	return s
}

// Cap holds the sizes of a QP's queues (struct ibv_qp_cap).
type Cap struct {
	MaxSendWR     uint32
	MaxRecvWR     uint32
	MaxSendSGE    uint32
	MaxRecvSGE    uint32
	MaxInlineData uint32
}

// AHAttr describes the path to a remote port (struct ibv_ah_attr with its
// GRH, as RoCE always uses one). Resolving the destination MAC address is
// the caller's job: DMAC is used as given.
type AHAttr struct {
	DGID         bth.GID // destination GID: the peer's IP address
	FlowLabel    uint32  // IPv6 flow label (20 bits)
	SGIDIndex    uint8   // index of the source GID in the device's GID table
	HopLimit     uint8   // IPv4 TTL or IPv6 hop limit; 0 means 64
	TrafficClass uint8   // IPv4 TOS or IPv6 traffic class
	DMAC         [6]byte // destination Ethernet address
	PortNum      uint8   // always 1; 0 is taken as 1
}

// AH is a resolved address handle: the attributes and the Ethernet, IP and
// UDP headers that carry packets to that destination. The device fills it
// in (see Env.ResolveAH); the UDP source port and IPv4 identification are
// set per packet.
type AH struct {
	Attr  AHAttr
	SGID  bth.GID
	Encap bth.Encap
}

// Attr holds QP attributes (struct ibv_qp_attr). ModifyQP reads the fields
// selected by an AttrMask; QueryQP fills in all of them.
type Attr struct {
	State            State
	CurState         State
	PathMTU          MTU
	QKey             uint32
	RQPSN            bth.PSN
	SQPSN            bth.PSN
	DestQPN          bth.QPN
	AccessFlags      mr.Access // remote operations the responder allows
	Cap              Cap
	AH               AHAttr
	PKeyIndex        uint16
	EnSQDAsyncNotify bool
	SQDraining       bool
	MaxRdAtomic      uint8 // READs and atomics this QP may have outstanding
	MaxDestRdAtomic  uint8 // READs and atomics this QP serves at once
	MinRNRTimer      uint8 // RNR NAK timer index sent to peers
	PortNum          uint8
	Timeout          uint8 // retransmit timeout: 4.096 us << Timeout; 0 disables it
	RetryCnt         uint8 // transport retries; 7 retries forever, as in rdma_rxe
	RNRRetry         uint8 // RNR retries; 7 retries forever
}

// SGE is a scatter/gather element: Length bytes at virtual address Addr of
// the memory region with local key LKey (struct ibv_sge).
type SGE = mr.SGE

// WROpcode is the operation of a send work request (enum ibv_wr_opcode).
type WROpcode uint8

// Work request opcodes.
const (
	WROpRDMAWrite        WROpcode = 0
	WROpRDMAWriteWithImm WROpcode = 1
	WROpSend             WROpcode = 2
	WROpSendWithImm      WROpcode = 3
	WROpRDMARead         WROpcode = 4
	WROpAtomicCmpSwp     WROpcode = 5
	WROpAtomicFetchAdd   WROpcode = 6
	WROpLocalInv         WROpcode = 7
	WROpBindMW           WROpcode = 8
	WROpSendWithInv      WROpcode = 9
	WROpRegMR            WROpcode = 0x20 // the kernel's IB_WR_REG_MR; libibverbs has none
)

// String returns the opcode's verbs name without the IBV_WR_ prefix.
func (o WROpcode) String() string {
	switch o {
	case WROpRDMAWrite:
		return "RDMA_WRITE"
	case WROpRDMAWriteWithImm:
		return "RDMA_WRITE_WITH_IMM"
	case WROpSend:
		return "SEND"
	case WROpSendWithImm:
		return "SEND_WITH_IMM"
	case WROpRDMARead:
		return "RDMA_READ"
	case WROpAtomicCmpSwp:
		return "ATOMIC_CMP_AND_SWP"
	case WROpAtomicFetchAdd:
		return "ATOMIC_FETCH_AND_ADD"
	case WROpSendWithInv:
		return "SEND_WITH_INV"
	case WROpLocalInv:
		return "LOCAL_INV"
	case WROpBindMW:
		return "BIND_MW"
	case WROpRegMR:
		return "REG_MR"
	}
	return "WROpcode(" + strconv.Itoa(int(o)) + ")"
}

func (o WROpcode) isSend() bool {
	return o == WROpSend || o == WROpSendWithImm || o == WROpSendWithInv
}
func (o WROpcode) isWrite() bool  { return o == WROpRDMAWrite || o == WROpRDMAWriteWithImm }
func (o WROpcode) isAtomic() bool { return o == WROpAtomicCmpSwp || o == WROpAtomicFetchAdd }

// isRdAtomic reports whether o needs a responder resource (READ, atomics).
func (o WROpcode) isRdAtomic() bool { return o == WROpRDMARead || o.isAtomic() }
func (o WROpcode) hasImm() bool     { return o == WROpSendWithImm || o == WROpRDMAWriteWithImm }

// SendFlags modify a send work request (enum ibv_send_flags).
type SendFlags uint32

// Send flags.
const (
	// Fence makes the request wait until every earlier request of the QP
	// has completed.
	Fence SendFlags = 1 << 0
	// Signaled asks for a completion even when the QP was created without
	// SigAll.
	Signaled SendFlags = 1 << 1
	// Solicited sets the solicited event bit in the last packet of a SEND
	// or RDMA WRITE with immediate.
	Solicited SendFlags = 1 << 2
	// Inline copies the payload when the request is posted, so the buffer
	// may be reused at once.
	Inline SendFlags = 1 << 3
)

// SendWR is a send work request (struct ibv_send_wr). The SGL and
// InlineData are copied when the request is posted.
type SendWR struct {
	WRID   uint64
	Opcode WROpcode
	Flags  SendFlags
	SGL    []SGE
	// InlineData, with the Inline flag, is the payload itself and the SGL
	// is ignored. With the Inline flag and no InlineData, the payload is
	// gathered from the SGL (whose keys must be valid) when the request is
	// posted.
	InlineData []byte
	// Imm is the immediate data of the *_WITH_IMM opcodes: the 32-bit value
	// carried on the wire, as a number (imm_data without the byte swap).
	Imm uint32
	// InvalidateRKey is the R_Key a SEND_WITH_INV invalidates at the peer,
	// and the key a LOCAL_INV invalidates.
	InvalidateRKey uint32
	// RemoteAddr and RKey name the remote memory of RDMA and atomic
	// operations. For BIND_MW, RKey is the window's new key and for
	// REG_MR the fast-registration MR's new key: its upper 24 bits name
	// the window or MR, its key byte is the binder's choice (see
	// mr.IncKey, MW.NewKey and FastMR.NewKey).
	RemoteAddr uint64
	RKey       uint32
	// Bind is the binding a BIND_MW makes (the bind_info of struct
	// ibv_send_wr's bind_mw member).
	Bind mr.MWBind
	// RegAccess is the access flags a REG_MR gives the MR (ib_reg_wr's
	// access); the memory is what FastMR.Map mapped (ib_map_mr_sg).
	RegAccess mr.Access
	// CompareAdd is the compare value of COMPARE_SWAP and the addend of
	// FETCH_ADD; Swap is the swap value of COMPARE_SWAP.
	CompareAdd uint64
	Swap       uint64
	// AH, RemoteQPN and RemoteQKey address a UD send.
	AH         *AH
	RemoteQPN  bth.QPN
	RemoteQKey uint32
}

// RecvWR is a receive work request (struct ibv_recv_wr). The SGL is copied
// when the request is posted.
type RecvWR struct {
	WRID uint64
	SGL  []SGE
}

// WCStatus is the status of a work completion (enum ibv_wc_status).
type WCStatus uint8

// Work completion statuses.
const (
	WCSuccess WCStatus = iota
	WCLocLenErr
	WCLocQPOpErr
	WCLocEECOpErr
	WCLocProtErr
	WCWRFlushErr
	WCMWBindErr
	WCBadRespErr
	WCLocAccessErr
	WCRemInvReqErr
	WCRemAccessErr
	WCRemOpErr
	WCRetryExcErr
	WCRNRRetryExcErr
	WCLocRDDViolErr
	WCRemInvRDReqErr
	WCRemAbortErr
	WCInvEECNErr
	WCInvEECStateErr
	WCFatalErr
	WCRespTimeoutErr
	WCGeneralErr
	WCTMErr
	WCTMRndvIncomplete
)

var wcStatusStr = [...]string{
	"success",
	"local length error",
	"local QP operation error",
	"local EE context operation error",
	"local protection error",
	"Work Request Flushed Error",
	"memory management operation error",
	"bad response error",
	"local access error",
	"remote invalid request error",
	"remote access error",
	"remote operation error",
	"transport retry counter exceeded",
	"RNR retry counter exceeded",
	"local RDD violation error",
	"remote invalid RD request",
	"aborted error",
	"invalid EE context number",
	"invalid EE context state",
	"fatal error",
	"response timeout error",
	"general error",
	"TM error",
	"TM software rendezvous",
}

// String returns the text of ibv_wc_status_str.
func (s WCStatus) String() string {
	if int(s) < len(wcStatusStr) {
		return wcStatusStr[s]
	}
	return "unknown"
}

// WCOpcode is the operation a work completion reports (enum ibv_wc_opcode).
type WCOpcode uint8

// Work completion opcodes.
const (
	WCSend            WCOpcode = 0
	WCRDMAWrite       WCOpcode = 1
	WCRDMARead        WCOpcode = 2
	WCCompSwap        WCOpcode = 3
	WCFetchAdd        WCOpcode = 4
	WCBindMW          WCOpcode = 5
	WCLocalInv        WCOpcode = 6
	WCRegMR           WCOpcode = 10 // the kernel's IB_WC_REG_MR; libibverbs has none
	WCRecv            WCOpcode = 128
	WCRecvRDMAWithImm WCOpcode = 129
)

// String returns the opcode's verbs name without the IBV_WC_ prefix.
func (o WCOpcode) String() string {
	switch o {
	case WCSend:
		return "SEND"
	case WCRDMAWrite:
		return "RDMA_WRITE"
	case WCRDMARead:
		return "RDMA_READ"
	case WCCompSwap:
		return "COMP_SWAP"
	case WCFetchAdd:
		return "FETCH_ADD"
	case WCBindMW:
		return "BIND_MW"
	case WCLocalInv:
		return "LOCAL_INV"
	case WCRegMR:
		return "REG_MR"
	case WCRecv:
		return "RECV"
	case WCRecvRDMAWithImm:
		return "RECV_RDMA_WITH_IMM"
	}
	return "WCOpcode(" + strconv.Itoa(int(o)) + ")"
}

// wcOpcode maps a send opcode to the completion opcode, as rdma_rxe does.
func wcOpcode(o WROpcode) WCOpcode {
	switch o {
	case WROpRDMAWrite, WROpRDMAWriteWithImm:
		return WCRDMAWrite
	case WROpRDMARead:
		return WCRDMARead
	case WROpAtomicCmpSwp:
		return WCCompSwap
	case WROpAtomicFetchAdd:
		return WCFetchAdd
	case WROpBindMW:
		return WCBindMW
	case WROpLocalInv:
		return WCLocalInv
	case WROpRegMR:
		return WCRegMR
	}
	return WCSend
}

// WCFlags qualify a work completion (enum ibv_wc_flags).
type WCFlags uint32

// Work completion flags.
const (
	WCGRH      WCFlags = 1 << 0 // the first 40 bytes of the buffer hold a GRH (UD)
	WCWithImm  WCFlags = 1 << 1 // Imm is valid
	WCIPCsumOK WCFlags = 1 << 2
	WCWithInv  WCFlags = 1 << 3 // InvalidatedRKey is valid
)

// WC is a work completion (struct ibv_wc).
type WC struct {
	WRID            uint64
	Status          WCStatus
	Opcode          WCOpcode
	VendorErr       uint32
	ByteLen         uint32
	Imm             uint32 // immediate data, with WCWithImm
	InvalidatedRKey uint32 // with WCWithInv
	QPNum           bth.QPN
	SrcQP           bth.QPN // UD: the sender's QP number
	Flags           WCFlags
	PKeyIndex       uint16
}

// EventType is the type of an asynchronous event (enum ibv_event_type).
type EventType uint8

// Asynchronous event types.
const (
	EventCQErr            EventType = 0
	EventQPFatal          EventType = 1
	EventQPReqErr         EventType = 2
	EventQPAccessErr      EventType = 3
	EventCommEst          EventType = 4
	EventSQDrained        EventType = 5
	EventDeviceFatal      EventType = 8
	EventPortActive       EventType = 9
	EventPortErr          EventType = 10
	EventSRQErr           EventType = 14
	EventSRQLimitReached  EventType = 15
	EventQPLastWQEReached EventType = 16
)

var eventNames = map[EventType]string{
	EventCQErr:            "CQ error",
	EventQPFatal:          "local work queue catastrophic error",
	EventQPReqErr:         "invalid request local work queue error",
	EventQPAccessErr:      "local access violation work queue error",
	EventCommEst:          "communication established",
	EventSQDrained:        "send queue drained",
	EventDeviceFatal:      "local catastrophic error",
	EventPortActive:       "port active",
	EventPortErr:          "port error",
	EventSRQErr:           "SRQ catastrophic error",
	EventSRQLimitReached:  "SRQ limit reached",
	EventQPLastWQEReached: "last WQE reached",
}

// String returns the text of ibv_event_type_str.
func (e EventType) String() string {
	if s, ok := eventNames[e]; ok {
		return s
	}
	return "unknown"
}
