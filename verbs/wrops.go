package verbs

import (
	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/mr"
)

// The table of work-request opcodes: everything that varies between the
// operations a send work request can ask for, in one place (rdma_rxe's
// rxe_wr_opcode_info[] plays the same part). The post-time checks (qp's
// CheckSendWR and the C library's, generated from this table by package
// shim), the requester, the completer and the responder all read it; a new
// verb enters by adding a row here.

// WRClass is what a work request does, as far as the transport cares.
type WRClass uint8

// Work request classes.
const (
	// ClassSend is a SEND: the message is segmented by the path MTU and
	// consumes a receive request at the peer.
	ClassSend WRClass = iota + 1
	// ClassWrite is an RDMA WRITE: segmented, with a RETH on its first
	// packet.
	ClassWrite
	// ClassRead is an RDMA READ: one request packet, answered by as many
	// READ response packets as the message takes.
	ClassRead
	// ClassAtomic is COMPARE_SWAP or FETCH_ADD: one packet with an
	// AtomicETH, answered by an ATOMIC ACKNOWLEDGE carrying the original
	// value, which lands in the request's 8-byte buffer.
	ClassAtomic
	// ClassAtomicWrite is ATOMIC_WRITE (IBTA 1.5): one packet with a RETH
	// and exactly 8 bytes of payload, which the responder stores at once
	// (8-byte aligned) and answers with a zero-length READ response.
	ClassAtomicWrite
	// ClassLocal is an operation the requester executes itself (BIND_MW,
	// REG_MR, LOCAL_INV): no packet.
	ClassLocal
)

// PayloadRule says what data a work request carries.
type PayloadRule uint8

// Payload rules.
const (
	// PayloadMessage: any length up to the maximum message size, from the
	// SGL or (with the Inline flag, where Inline allows it) inline.
	PayloadMessage PayloadRule = iota + 1
	// PayloadAtomic8: exactly 8 bytes (for COMPARE_SWAP and FETCH_ADD the
	// SGL receiving the original value; for ATOMIC_WRITE the value, from
	// the SGL or inline whatever the QP's max_inline_data) and an 8-byte
	// aligned remote address.
	PayloadAtomic8
	// PayloadNone: no SGL and no inline data.
	PayloadNone
)

// QPTypeSet is a set of QP types, one bit per QPType value.
type QPTypeSet uint16

// Has reports whether t is in s.
func (s QPTypeSet) Has(t QPType) bool { return t < 16 && s&(1<<t) != 0 }

// Sets of QP types the table uses.
const (
	typesRC       QPTypeSet = 1 << QPTypeRC
	typesRCXRC    QPTypeSet = 1<<QPTypeRC | 1<<QPTypeXRCSend
	typesRCUC     QPTypeSet = 1<<QPTypeRC | 1<<QPTypeUC
	typesRCUCXRC  QPTypeSet = typesRCUC | 1<<QPTypeXRCSend
	typesDatagram QPTypeSet = 1<<QPTypeUD | 1<<QPTypeGSI
	typesAll                = typesRCUCXRC | typesDatagram
)

// WROpInfo is one row of the work-request opcode table.
type WROpInfo struct {
	// Name is the verbs name without the IBV_WR_ prefix.
	Name string
	// Types are the QP types that may post it.
	Types QPTypeSet
	// Class is what it does on the wire.
	Class WRClass
	// WC is the opcode of its send completion.
	WC WCOpcode
	// Payload is the rule its data follows.
	Payload PayloadRule
	// Inline reports whether the Inline flag applies (otherwise it is
	// ignored and the SGL is used).
	Inline bool
	// Imm reports whether it carries immediate data (on its last packet).
	Imm bool
	// Inv reports whether it carries an R_Key for the peer to invalidate
	// (an IETH on its last packet).
	Inv bool
	// Solicited reports whether the Solicited flag sets the BTH's SE bit
	// (on its last packet).
	Solicited bool
	// RdAtomic reports whether it takes one of the requester's
	// max_rd_atomic credits and, at the peer, a responder resource (kept
	// to answer a duplicate again).
	RdAtomic bool
	// KernelOnly marks an opcode of the kernel's verbs that libibverbs has
	// no IBV_WR_ value for: programs of the C library cannot post it.
	KernelOnly bool
	// Remote is the remote access the peer's QP must allow for it to be
	// executed (the QP's access flags, and the R_Key's for memory it
	// touches); zero for a SEND.
	Remote mr.Access
	// Response is how the responder answers it: bth.OpAck,
	// bth.OpReadResponse or bth.OpAtomicAck; zero for a local operation.
	Response bth.Op
	// rc holds its RC wire opcodes by message position (index
	// bth.PosOnly-1 to bth.PosLast-1); UC uses the same with the UC
	// service bits.
	rc [4]bth.Opcode
	// ud is its UD opcode, or 0.
	ud bth.Opcode
	// wire reports whether it is sent at all (false for local operations).
	wire bool
	// single reports a request of one packet: only rc[0] is used.
	single bool
}

// wrOps is the table, indexed by WROpcode.
var wrOps = [...]WROpInfo{
	WROpRDMAWrite: {Name: "RDMA_WRITE", Types: typesRCUCXRC, Class: ClassWrite, WC: WCRDMAWrite,
		Payload: PayloadMessage, Inline: true, Remote: mr.AccessRemoteWrite, Response: bth.OpAck,
		rc: [4]bth.Opcode{bth.RCWriteOnly, bth.RCWriteFirst, bth.RCWriteMiddle, bth.RCWriteLast}, wire: true},
	WROpRDMAWriteWithImm: {Name: "RDMA_WRITE_WITH_IMM", Types: typesRCUCXRC, Class: ClassWrite, WC: WCRDMAWrite,
		Payload: PayloadMessage, Inline: true, Imm: true, Solicited: true, Remote: mr.AccessRemoteWrite, Response: bth.OpAck,
		rc: [4]bth.Opcode{bth.RCWriteOnlyImm, bth.RCWriteFirst, bth.RCWriteMiddle, bth.RCWriteLastImm}, wire: true},
	WROpSend: {Name: "SEND", Types: typesAll, Class: ClassSend, WC: WCSend,
		Payload: PayloadMessage, Inline: true, Solicited: true, Response: bth.OpAck,
		rc: [4]bth.Opcode{bth.RCSendOnly, bth.RCSendFirst, bth.RCSendMiddle, bth.RCSendLast}, ud: bth.UDSendOnly, wire: true},
	WROpSendWithImm: {Name: "SEND_WITH_IMM", Types: typesAll, Class: ClassSend, WC: WCSend,
		Payload: PayloadMessage, Inline: true, Imm: true, Solicited: true, Response: bth.OpAck,
		rc: [4]bth.Opcode{bth.RCSendOnlyImm, bth.RCSendFirst, bth.RCSendMiddle, bth.RCSendLastImm}, ud: bth.UDSendOnlyImm, wire: true},
	WROpRDMARead: {Name: "RDMA_READ", Types: typesRCXRC, Class: ClassRead, WC: WCRDMARead,
		Payload: PayloadMessage, RdAtomic: true, Remote: mr.AccessRemoteRead, Response: bth.OpReadResponse,
		rc: [4]bth.Opcode{bth.RCReadRequest}, wire: true, single: true},
	WROpAtomicCmpSwp: {Name: "ATOMIC_CMP_AND_SWP", Types: typesRCXRC, Class: ClassAtomic, WC: WCCompSwap,
		Payload: PayloadAtomic8, RdAtomic: true, Remote: mr.AccessRemoteAtomic, Response: bth.OpAtomicAck,
		rc: [4]bth.Opcode{bth.RCCompareSwap}, wire: true, single: true},
	WROpAtomicFetchAdd: {Name: "ATOMIC_FETCH_AND_ADD", Types: typesRCXRC, Class: ClassAtomic, WC: WCFetchAdd,
		Payload: PayloadAtomic8, RdAtomic: true, Remote: mr.AccessRemoteAtomic, Response: bth.OpAtomicAck,
		rc: [4]bth.Opcode{bth.RCFetchAdd}, wire: true, single: true},
	WROpLocalInv: {Name: "LOCAL_INV", Types: typesRCXRC, Class: ClassLocal, WC: WCLocalInv, Payload: PayloadNone},
	WROpBindMW:   {Name: "BIND_MW", Types: typesRCUCXRC, Class: ClassLocal, WC: WCBindMW, Payload: PayloadNone},
	WROpSendWithInv: {Name: "SEND_WITH_INV", Types: typesRCXRC, Class: ClassSend, WC: WCSend,
		Payload: PayloadMessage, Inline: true, Inv: true, Solicited: true, Response: bth.OpAck,
		rc: [4]bth.Opcode{bth.RCSendOnlyInvalidate, bth.RCSendFirst, bth.RCSendMiddle, bth.RCSendLastInvalidate}, wire: true},
	WROpAtomicWrite: {Name: "ATOMIC_WRITE", Types: typesRC, Class: ClassAtomicWrite, WC: WCAtomicWrite,
		Payload: PayloadAtomic8, Inline: true, RdAtomic: true, Remote: mr.AccessRemoteWrite, Response: bth.OpReadResponse,
		rc: [4]bth.Opcode{bth.RCAtomicWrite}, wire: true, single: true},
	WROpRegMR: {Name: "REG_MR", Types: typesRC, Class: ClassLocal, WC: WCRegMR, Payload: PayloadNone, KernelOnly: true},
}

// NumWROpcodes is one more than the highest opcode of the table: the
// length of a table indexed by WROpcode.
const NumWROpcodes = len(wrOps)

// Info returns o's row of the work-request opcode table, or nil for an
// opcode sroce does not execute.
func (o WROpcode) Info() *WROpInfo {
	if int(o) >= len(wrOps) || wrOps[o].Name == "" {
		return nil
	}
	return &wrOps[o]
}

// AllowedOn reports whether a QP of type t may post o.
func (o WROpcode) AllowedOn(t QPType) bool {
	i := o.Info()
	return i != nil && i.Types.Has(t)
}

// Wire reports whether the request is sent (every class but local
// operations).
func (i *WROpInfo) Wire() bool { return i.wire }

// Segmented reports whether the message is cut into path-MTU packets by
// the requester (SEND and WRITE); READ responses are cut by the responder.
func (i *WROpInfo) Segmented() bool { return i.Class == ClassSend || i.Class == ClassWrite }

// Opcode returns the wire opcode of a packet of the request on a QP of
// type t: the first and last flags give its place in the message (both
// for a single packet).
func (i *WROpInfo) Opcode(t QPType, first, last bool) bth.Opcode {
	if t == QPTypeUD || t == QPTypeGSI {
		return i.ud
	}
	pos := bth.PosMiddle
	switch {
	case i.single || first && last:
		pos = bth.PosOnly
	case first:
		pos = bth.PosFirst
	case last:
		pos = bth.PosLast
	}
	o := i.rc[pos-bth.PosOnly]
	switch t {
	case QPTypeUC:
		o += ucShift
	case QPTypeXRCSend:
		o += xrcShift
	}
	return o
}

// ucShift turns an RC opcode into the UC one of the same operation.
const ucShift = bth.UCSendFirst - bth.RCSendFirst

// xrcShift turns an RC opcode into the XRC one of the same operation.
const xrcShift = bth.XRCSendFirst - bth.RCSendFirst

// wireOps maps a request's wire opcode back to the row of the work request
// that sends it (for the first, middle and last packets of a SEND, any of
// the SEND rows; they agree on everything the responder reads).
var wireOps [256]*WROpInfo

func init() {
	for o := range wrOps {
		i := &wrOps[o]
		if !i.wire {
			continue
		}
		add := func(op bth.Opcode) {
			if wireOps[op] == nil {
				wireOps[op] = i
			}
		}
		ops := i.rc[:]
		if i.single {
			ops = ops[:1]
		}
		for _, op := range ops {
			add(op)
			if i.Types.Has(QPTypeUC) {
				add(op + ucShift)
			}
			if i.Types.Has(QPTypeXRCSend) {
				add(op + xrcShift)
			}
		}
		if i.ud != 0 {
			add(i.ud)
		}
	}
}

// WRInfoOfWire returns the row of the work request a request packet with
// wire opcode op carries, or nil when no work request sroce executes sends
// it: the responder's view of the table.
func WRInfoOfWire(op bth.Opcode) *WROpInfo { return wireOps[op] }

var (
	classNames   = [...]string{"NONE", "SEND", "WRITE", "READ", "ATOMIC", "ATOMIC_WRITE", "LOCAL"}
	payloadNames = [...]string{"INVALID", "MESSAGE", "ATOMIC8", "NONE"}
)

// String returns the class's name, as the C library's generated table
// spells it after SROCE_WR_CLASS_.
func (c WRClass) String() string {
	if int(c) < len(classNames) {
		return classNames[c]
	}
	return classNames[0]
}

// String returns the rule's name, as the C library's generated table
// spells it after SROCE_WR_PAYLOAD_.
func (p PayloadRule) String() string {
	if int(p) < len(payloadNames) {
		return payloadNames[p]
	}
	return payloadNames[0]
}
