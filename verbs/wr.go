package verbs

import (
	"strconv"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/mr"
)

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
	WROpAtomicWrite      WROpcode = 15   // IBV_WR_ATOMIC_WRITE: 8 bytes written at once
	WROpRegMR            WROpcode = 0x20 // the kernel's IB_WR_REG_MR; libibverbs has none
)

// String returns the opcode's verbs name without the IBV_WR_ prefix.
func (o WROpcode) String() string {
	if i := o.Info(); i != nil {
		return i.Name
	}
	return "WROpcode(" + strconv.Itoa(int(o)) + ")"
}

// WCOpcode returns the opcode of the completion a send request of opcode
// o reports, as rdma_rxe maps them (every SEND variant completes as
// WCSend, and so does an opcode outside the table).
func (o WROpcode) WCOpcode() WCOpcode {
	if i := o.Info(); i != nil {
		return i.WC
	}
	return WCSend
}

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
	SGL    []mr.SGE
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
	// RemoteSRQN is the XRC SRQ at the peer that an XRC_SEND QP's request
	// goes to (qp_type.xrc.remote_srqn of struct ibv_send_wr).
	RemoteSRQN uint32
}

// RecvWR is a receive work request (struct ibv_recv_wr). The SGL is copied
// when the request is posted.
type RecvWR struct {
	WRID uint64
	SGL  []mr.SGE
}
