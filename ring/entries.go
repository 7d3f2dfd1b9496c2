package ring

import (
	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/verbs"
)

// The entries (CQE, SendWQE, RecvWQE, UDAddr) are the slots of the
// rings, generated from the structs of sroce_ring.h into header_gen.go.
// They hold plain values only: an address handle travels as its
// attributes, a memory window bind as its numbers. This file holds their
// methods.

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
