package ring

import (
	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/verbs"
)

// The entries below are the slots of the rings, field for field the
// structs of sroce_ring.h. They hold plain values only: an address
// handle travels as its attributes, a memory window bind as its numbers.
// Explicit padding fields keep Go's layout and C's identical.

// CQE is a completion queue entry (struct sroce_cqe): the fields of
// verbs.WC, which are the fields a struct ibv_wc needs.
type CQE struct {
	WRID            uint64
	Status          uint8 // verbs.WCStatus
	Opcode          uint8 // verbs.WCOpcode
	_               uint16
	VendorErr       uint32
	ByteLen         uint32
	Imm             uint32 // immediate data as a number (imm_data before htonl)
	InvalidatedRKey uint32
	QPNum           uint32
	SrcQP           uint32
	Flags           uint32 // verbs.WCFlags
	PKeyIndex       uint16
	SLID            uint16
	SL              uint8
	DLIDPathBits    uint8
	_               uint16
}

// SetWC stores wc in the entry.
func (e *CQE) SetWC(wc *verbs.WC) {
	*e = CQE{WRID: wc.WRID, Status: uint8(wc.Status), Opcode: uint8(wc.Opcode), VendorErr: wc.VendorErr,
		ByteLen: wc.ByteLen, Imm: wc.Imm, InvalidatedRKey: wc.InvalidatedRKey, QPNum: uint32(wc.QPNum),
		SrcQP: uint32(wc.SrcQP), Flags: uint32(wc.Flags), PKeyIndex: wc.PKeyIndex, SL: wc.SL}
}

// WC returns the completion the entry holds.
func (e *CQE) WC(wc *verbs.WC) {
	*wc = verbs.WC{WRID: e.WRID, Status: verbs.WCStatus(e.Status), Opcode: verbs.WCOpcode(e.Opcode),
		VendorErr: e.VendorErr, ByteLen: e.ByteLen, Imm: e.Imm, InvalidatedRKey: e.InvalidatedRKey,
		QPNum: bth.QPN(e.QPNum), SrcQP: bth.QPN(e.SrcQP), Flags: verbs.WCFlags(e.Flags), PKeyIndex: e.PKeyIndex,
		SL: e.SL}
}

// UDAddr is the destination of a UD send as plain values (struct
// sroce_ud_addr): the address handle's attributes, the remote QPN and
// Q_Key.
type UDAddr struct {
	DGID         [16]byte
	FlowLabel    uint32
	RemoteQPN    uint32
	RemoteQKey   uint32
	SGIDIndex    uint8
	HopLimit     uint8
	TrafficClass uint8
	PortNum      uint8
	DMAC         [6]byte
	_            [2]byte
}

// SetAH stores the attributes of an address handle.
func (a *UDAddr) SetAH(attr *verbs.AHAttr) {
	a.DGID = attr.DGID
	a.FlowLabel = attr.FlowLabel
	a.SGIDIndex, a.HopLimit, a.TrafficClass, a.PortNum = attr.SGIDIndex, attr.HopLimit, attr.TrafficClass, attr.PortNum
	a.DMAC = attr.DMAC
}

// AHAttr returns the address handle attributes.
func (a *UDAddr) AHAttr() verbs.AHAttr {
	return verbs.AHAttr{DGID: a.DGID, FlowLabel: a.FlowLabel, SGIDIndex: a.SGIDIndex, HopLimit: a.HopLimit,
		TrafficClass: a.TrafficClass, DMAC: a.DMAC, PortNum: a.PortNum}
}

// SendWQE is the fixed part of a send queue slot (struct
// sroce_send_wqe). The slot's tail holds NumSGE SGEs (mr.SGE, struct
// sroce_sge), or with the
// inline flag InlineLen bytes of payload; a QP's stride leaves room for
// its max_send_sge SGEs or its max_inline_data bytes, whichever is more.
type SendWQE struct {
	WRID           uint64
	Opcode         uint8 // verbs.WROpcode
	NumSGE         uint8
	InlineLen      uint16
	Flags          uint32 // verbs.SendFlags
	Imm            uint32
	InvalidateRKey uint32
	RemoteAddr     uint64
	RKey           uint32
	Length         uint32 // payload bytes, summed at post time
	CompareAdd     uint64
	Swap           uint64
	// BIND_MW: the window's binding; REG_MR: RegAccess.
	BindAddr   uint64
	BindLength uint64
	BindLKey   uint32
	BindAccess uint32
	RegAccess  uint32
	// AH names the address handle of a UD send on a daemon's ring
	// (the handle the daemon gave the client); in process it is 0.
	AH uint32
	UD UDAddr
}

// RecvWQE is the fixed part of a receive queue slot (struct
// sroce_recv_wqe); the slot's tail holds NumSGE SGEs (mr.SGE, struct
// sroce_sge).
type RecvWQE struct {
	WRID   uint64
	NumSGE uint32
	Length uint32 // bytes the SGL can take, summed at post time
}

// SetWR stores everything of wr but its SGL and inline data, and the
// destination of a UD send given as ah (nil for connected QPs).
func (e *SendWQE) SetWR(wr *verbs.SendWR, ah *verbs.AHAttr) {
	*e = SendWQE{WRID: wr.WRID, Opcode: uint8(wr.Opcode), Flags: uint32(wr.Flags), Imm: wr.Imm,
		InvalidateRKey: wr.InvalidateRKey, RemoteAddr: wr.RemoteAddr, RKey: wr.RKey,
		CompareAdd: wr.CompareAdd, Swap: wr.Swap, BindAddr: wr.Bind.Addr, BindLength: wr.Bind.Length,
		BindLKey: wr.Bind.LKey, BindAccess: uint32(wr.Bind.Access), RegAccess: uint32(wr.RegAccess)}
	if ah != nil {
		e.UD.SetAH(ah)
		e.UD.RemoteQPN, e.UD.RemoteQKey = uint32(wr.RemoteQPN), wr.RemoteQKey
	}
}
