package verbs

import (
	"strconv"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/mr"
)

// QPType is a QP transport service type. The values are those of enum
// ibv_qp_type, plus QPTypeGSI for QP1 (the kernel's IB_QPT_GSI).
type QPType uint8

// QP types.
const (
	QPTypeGSI QPType = 1 // QP1: UD with the fixed Q_Key GSIQKey
	QPTypeRC  QPType = 2 // reliable connected
	QPTypeUC  QPType = 3 // unreliable connected
	QPTypeUD  QPType = 4 // unreliable datagram
	// QPTypeXRCSend is an XRC initiator: the send half of an RC
	// connection whose every request names the XRC SRQ that receives it.
	QPTypeXRCSend QPType = 9
	// QPTypeXRCRecv is an XRC target: the receive half, which takes each
	// message's receive request (and protection domain) from the XRC SRQ
	// of its domain that the request names.
	QPTypeXRCRecv QPType = 10
)

// Reliable reports whether t is acknowledged and retransmitted: RC and
// the two halves of XRC.
func (t QPType) Reliable() bool {
	return t == QPTypeRC || t == QPTypeXRCSend || t == QPTypeXRCRecv
}

// String returns the type's name: "RC", "UC", "UD" or "GSI".
func (t QPType) String() string {
	switch t {
	case QPTypeGSI:
		return "GSI"
	case QPTypeRC:
		return "RC"
	case QPTypeUC:
		return "UC"
	case QPTypeUD:
		return "UD"
	case QPTypeXRCSend:
		return "XRC_SEND"
	case QPTypeXRCRecv:
		return "XRC_RECV"
	}
	return "Type(" + strconv.Itoa(int(t)) + ")"
}

// QPState is a QP state (enum ibv_qp_state).
type QPState uint8

// QP states.
const (
	QPStateReset QPState = iota
	QPStateInit
	QPStateRTR
	QPStateRTS
	QPStateSQD
	QPStateSQE
	QPStateErr
)

var stateNames = [...]string{"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"}

// String returns the state's name as verbs documentation writes it:
// "RESET", "INIT", "RTR", "RTS", "SQD", "SQE" or "ERR".
func (s QPState) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "State(" + strconv.Itoa(int(s)) + ")"
}

// Q_Keys, P_Keys and the GRH, as the IBTA and rdma_rxe define them.
const (
	// GSIQKey is the Q_Key of QP1.
	GSIQKey = 0x80010000
	// ControlledQKey is the high bit of a Q_Key. A UD send request whose
	// Q_Key has it set is sent with the QP's own Q_Key instead (IBTA
	// C10-15).
	ControlledQKey = 0x80000000
	// GRHLen is the space at the start of a UD receive buffer that receives
	// the GRH (or, for IPv4, the IP header in its last 20 bytes).
	GRHLen = 40
	// DefaultPKey is the only partition key: the default, full membership.
	DefaultPKey = 0xffff
)

// QPAttrMask selects the fields of QPAttr that a modify applies and that a
// transition requires. The bits are those of enum ibv_qp_attr_mask.
type QPAttrMask uint32

// Attribute mask bits.
const (
	AttrState            QPAttrMask = 1 << 0
	AttrCurState         QPAttrMask = 1 << 1
	AttrEnSQDAsyncNotify QPAttrMask = 1 << 2
	AttrAccessFlags      QPAttrMask = 1 << 3
	AttrPKeyIndex        QPAttrMask = 1 << 4
	AttrPort             QPAttrMask = 1 << 5
	AttrQKey             QPAttrMask = 1 << 6
	AttrAV               QPAttrMask = 1 << 7
	AttrPathMTU          QPAttrMask = 1 << 8
	AttrTimeout          QPAttrMask = 1 << 9
	AttrRetryCnt         QPAttrMask = 1 << 10
	AttrRNRRetry         QPAttrMask = 1 << 11
	AttrRQPSN            QPAttrMask = 1 << 12
	AttrMaxQPRdAtomic    QPAttrMask = 1 << 13
	AttrAltPath          QPAttrMask = 1 << 14
	AttrMinRNRTimer      QPAttrMask = 1 << 15
	AttrSQPSN            QPAttrMask = 1 << 16
	AttrMaxDestRdAtomic  QPAttrMask = 1 << 17
	AttrPathMigState     QPAttrMask = 1 << 18
	AttrCap              QPAttrMask = 1 << 19
	AttrDestQPN          QPAttrMask = 1 << 20
	// AttrAll is every bit above: a mask with any other bit is invalid.
	AttrAll QPAttrMask = 1<<21 - 1
)

var attrNames = [...]string{"STATE", "CUR_STATE", "EN_SQD_ASYNC_NOTIFY", "ACCESS_FLAGS",
	"PKEY_INDEX", "PORT", "QKEY", "AV", "PATH_MTU", "TIMEOUT", "RETRY_CNT", "RNR_RETRY",
	"RQ_PSN", "MAX_QP_RD_ATOMIC", "ALT_PATH", "MIN_RNR_TIMER", "SQ_PSN",
	"MAX_DEST_RD_ATOMIC", "PATH_MIG_STATE", "CAP", "DEST_QPN"}

// String lists the bits of m in verbs spelling, e.g. "STATE|AV|PATH_MTU".
func (m QPAttrMask) String() string {
	s := ""
	for i, n := range attrNames {
		if m&(1<<i) != 0 {
			if s != "" {
				s += "|"
			}
			s += n
		}
	}
	if rest := m &^ AttrAll; rest != 0 {
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

// QPCap holds the sizes of a QP's queues (struct ibv_qp_cap).
type QPCap struct {
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
	FlowLabel    uint32  // IPv6 flow label: its low 20 bits, the rest ignored
	SGIDIndex    uint8   // index of the source GID in the device's GID table
	HopLimit     uint8   // IPv4 TTL or IPv6 hop limit; 0 means 64
	TrafficClass uint8   // IPv4 TOS or IPv6 traffic class
	DMAC         [6]byte // destination Ethernet address
	PortNum      uint8   // always 1; 0 is taken as 1
}

// AH is a resolved address handle (struct ibv_ah): the attributes and the
// Ethernet, IP and UDP headers that carry packets to that destination.
// The device fills it in when it resolves the attributes; the UDP source
// port and IPv4 identification are set per packet.
type AH struct {
	Attr  AHAttr
	SGID  bth.GID
	Encap bth.Encap
}

// QPAttr holds QP attributes (struct ibv_qp_attr). A modify reads the
// fields selected by a QPAttrMask; a query fills in all of them.
type QPAttr struct {
	State            QPState
	CurState         QPState
	PathMTU          MTU
	QKey             uint32
	RQPSN            bth.PSN
	SQPSN            bth.PSN
	DestQPN          bth.QPN
	AccessFlags      mr.Access // remote operations the responder allows
	Cap              QPCap
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
