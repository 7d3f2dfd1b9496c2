package verbs

import (
	"strconv"

	"github.com/sroce/sroce/bth"
)

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
	WCAtomicWrite     WCOpcode = 9
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
	case WCAtomicWrite:
		return "ATOMIC_WRITE"
	case WCRecv:
		return "RECV"
	case WCRecvRDMAWithImm:
		return "RECV_RDMA_WITH_IMM"
	}
	return "WCOpcode(" + strconv.Itoa(int(o)) + ")"
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
	SL              uint8 // UD over RoCE: the received packet's header types (WCSLRoCEv2IPv4, WCSLRoCEv2IPv6)
}

// A UD receive's WC.SL over RoCE, which has no service level on the wire:
// the type of the packet's headers, as ConnectX (mlx5) reports it there
// (bit 3: a UDP header, RoCEv2; bits 2:0: the L3 header, 1 IPv6, 2 IPv4).
// UCX up to 1.17 reads it to find the destination address in the 40 bytes
// before a UD payload (the IPv4 header starts at byte 20) and drops every
// packet whose destination is not its own; rdma_rxe reports 0, on which
// UCX's ud_verbs takes an IPv4 packet for an IPv6 one and drops it.
const (
	WCSLRoCEv2IPv6 uint8 = 0x8 | 0x1
	WCSLRoCEv2IPv4 uint8 = 0x8 | 0x2
)
