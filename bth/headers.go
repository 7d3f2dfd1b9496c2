package bth

import "encoding/binary"

// Header lengths in bytes.
const (
	BTHLen          = 12
	RETHLen         = 16
	AETHLen         = 4
	AtomicETHLen    = 28
	AtomicAckETHLen = 8
	ImmDtLen        = 4
	IETHLen         = 4
	DETHLen         = 8
	FETHLen         = 4
	XRCETHLen       = 4
	CNPResvLen      = 16 // reserved bytes after the BTH of a CNP
	ICRCLen         = 4
)

// BTH is the 12-byte Base Transport Header.
//
//	 0               1               2               3
//	 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7
//	+---------------+-+-+---+-------+-------------------------------+
//	|    OpCode     |S|M|Pad| TVer  |            P_Key              |
//	+-+-+-----------+-+-+---+-------+-------------------------------+
//	|F|B|   Resv6   |              Destination QP                   |
//	+-+-------------+-----------------------------------------------+
//	|A|   Resv7     |         Packet Sequence Number                |
//	+-+-------------+-----------------------------------------------+
type BTH []byte

const (
	bthOpcode = 0
	bthFlags  = 1 // SE, M, PadCnt, TVer
	bthPKey   = 2
	bthFB     = 4 // FECN, BECN, reserved
	bthDestQP = 5
	bthAck    = 8 // AckReq, reserved
	bthPSN    = 9
)

func get24(b []byte) uint32    { return uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2]) }
func put24(b []byte, v uint32) { b[0], b[1], b[2] = byte(v>>16), byte(v>>8), byte(v) }

// Opcode returns the OpCode field.
func (b BTH) Opcode() Opcode { return Opcode(b[bthOpcode]) }

// SE returns the Solicited Event bit.
func (b BTH) SE() bool { return b[bthFlags]&0x80 != 0 }

// MigReq returns the MigReq bit.
func (b BTH) MigReq() bool { return b[bthFlags]&0x40 != 0 }

// PadCnt returns the pad count (0-3).
func (b BTH) PadCnt() int { return int(b[bthFlags]>>4) & 3 }

// TVer returns the transport header version.
func (b BTH) TVer() uint8 { return b[bthFlags] & 0x0f }

// PKey returns the partition key.
func (b BTH) PKey() uint16 { return binary.BigEndian.Uint16(b[bthPKey:]) }

// FECN returns the forward explicit congestion notification bit.
func (b BTH) FECN() bool { return b[bthFB]&0x80 != 0 }

// BECN returns the backward explicit congestion notification bit.
func (b BTH) BECN() bool { return b[bthFB]&0x40 != 0 }

// DestQP returns the destination QP number.
func (b BTH) DestQP() QPN { return QPN(get24(b[bthDestQP:])) }

// AckReq returns the acknowledge-request bit.
func (b BTH) AckReq() bool { return b[bthAck]&0x80 != 0 }

// PSN returns the packet sequence number.
func (b BTH) PSN() PSN { return PSN(get24(b[bthPSN:])) }

// SetPSN sets the PSN (masked to 24 bits).
func (b BTH) SetPSN(p PSN) { put24(b[bthPSN:], uint32(p)&PSNMask) }

// SetAckReq sets or clears the AckReq bit.
func (b BTH) SetAckReq(v bool) { b[bthAck] = setBit(b[bthAck], 0x80, v) }

// SetDestQP sets the destination QP (masked to 24 bits).
func (b BTH) SetDestQP(q QPN) { put24(b[bthDestQP:], uint32(q)&QPNMask) }

// SetFECN sets or clears the FECN bit.
func (b BTH) SetFECN(v bool) { b[bthFB] = setBit(b[bthFB], 0x80, v) }

// SetBECN sets or clears the BECN bit.
func (b BTH) SetBECN(v bool) { b[bthFB] = setBit(b[bthFB], 0x40, v) }

// maskICRC sets the byte the ICRC masks (FECN, BECN and the reserved bits
// after them) to ones.
func (b BTH) maskICRC() { b[bthFB] = 0xff }

func setBit(x, bit byte, v bool) byte {
	if v {
		return x | bit
	}
	return x &^ bit
}

func b2u(v bool) byte {
	if v {
		return 1
	}
	return 0
}

// BTHFields is the decoded form of a BTH.
type BTHFields struct {
	Opcode Opcode
	SE     bool // solicited event
	MigReq bool
	PadCnt uint8 // 0-3
	TVer   uint8 // 0 for this version of the transport
	PKey   uint16
	FECN   bool
	BECN   bool
	DestQP QPN
	AckReq bool
	PSN    PSN
}

// Fields decodes b.
func (b BTH) Fields() BTHFields {
	return BTHFields{
		Opcode: b.Opcode(), SE: b.SE(), MigReq: b.MigReq(), PadCnt: uint8(b.PadCnt()),
		TVer: b.TVer(), PKey: b.PKey(), FECN: b.FECN(), BECN: b.BECN(),
		DestQP: b.DestQP(), AckReq: b.AckReq(), PSN: b.PSN(),
	}
}

// Encode writes f into b, which must hold BTHLen bytes. It refuses a PSN or
// QPN of 2^24 or more, a pad count above 3 and a TVer above 15.
func (f *BTHFields) Encode(b BTH) error {
	if !f.PSN.Valid() || !f.DestQP.Valid() || f.PadCnt > 3 || f.TVer > 15 {
		return errAt(LayerBTH, KindOutOfRange)
	}
	b[bthOpcode] = byte(f.Opcode)
	b[bthFlags] = b2u(f.SE)<<7 | b2u(f.MigReq)<<6 | f.PadCnt<<4 | f.TVer
	binary.BigEndian.PutUint16(b[bthPKey:], f.PKey)
	b[bthFB] = b2u(f.FECN)<<7 | b2u(f.BECN)<<6
	put24(b[bthDestQP:], uint32(f.DestQP))
	b[bthAck] = b2u(f.AckReq) << 7
	put24(b[bthPSN:], uint32(f.PSN))
	return nil
}

// RETH is the 16-byte RDMA Extended Transport Header.
//
//	+---------------------------------------------------------------+
//	|                    Virtual Address (64 bits)                  |
//	+---------------------------------------------------------------+
//	|                          R_Key                                |
//	+---------------------------------------------------------------+
//	|                        DMA Length                             |
//	+---------------------------------------------------------------+
type RETH []byte

const (
	rethVA     = 0
	rethRKey   = 8
	rethDMALen = 12
)

// VA returns the virtual address.
func (b RETH) VA() uint64 { return binary.BigEndian.Uint64(b[rethVA:]) }

// RKey returns the remote key.
func (b RETH) RKey() uint32 { return binary.BigEndian.Uint32(b[rethRKey:]) }

// DMALen returns the length of the whole RDMA operation.
func (b RETH) DMALen() uint32 { return binary.BigEndian.Uint32(b[rethDMALen:]) }

// RETHFields is the decoded form of a RETH.
type RETHFields struct {
	VA     uint64
	RKey   uint32
	DMALen uint32
}

// Fields decodes b.
func (b RETH) Fields() RETHFields { return RETHFields{b.VA(), b.RKey(), b.DMALen()} }

// Encode writes f into b (RETHLen bytes).
func (f *RETHFields) Encode(b RETH) {
	binary.BigEndian.PutUint64(b[rethVA:], f.VA)
	binary.BigEndian.PutUint32(b[rethRKey:], f.RKey)
	binary.BigEndian.PutUint32(b[rethDMALen:], f.DMALen)
}

// AETH is the 4-byte ACK Extended Transport Header.
//
//	+---------------+-----------------------------------------------+
//	|   Syndrome    |        Message Sequence Number (24 bits)      |
//	+---------------+-----------------------------------------------+
type AETH []byte

const (
	aethSyndrome = 0
	aethMSN      = 1
)

// Syndrome returns the raw syndrome byte.
func (b AETH) Syndrome() Syndrome { return Syndrome(b[aethSyndrome]) }

// MSN returns the message sequence number.
func (b AETH) MSN() MSN { return MSN(get24(b[aethMSN:])) }

// AETHFields is the decoded form of an AETH.
type AETHFields struct {
	Syndrome Syndrome
	MSN      MSN
}

// Fields decodes b.
func (b AETH) Fields() AETHFields { return AETHFields{b.Syndrome(), b.MSN()} }

// Encode writes f into b (AETHLen bytes); it refuses an MSN of 2^24 or more.
func (f *AETHFields) Encode(b AETH) error {
	if !f.MSN.Valid() {
		return errAt(LayerExt, KindOutOfRange)
	}
	b[aethSyndrome] = byte(f.Syndrome)
	put24(b[aethMSN:], uint32(f.MSN))
	return nil
}

// AtomicETH is the 28-byte Atomic Extended Transport Header.
//
//	+---------------------------------------------------------------+
//	|                    Virtual Address (64 bits)                  |
//	+---------------------------------------------------------------+
//	|                          R_Key                                |
//	+---------------------------------------------------------------+
//	|                 Swap (or Add) Data (64 bits)                  |
//	+---------------------------------------------------------------+
//	|                   Compare Data (64 bits)                      |
//	+---------------------------------------------------------------+
type AtomicETH []byte

const (
	atomicVA      = 0
	atomicRKey    = 8
	atomicSwapAdd = 12
	atomicCompare = 20
)

// VA returns the virtual address.
func (b AtomicETH) VA() uint64 { return binary.BigEndian.Uint64(b[atomicVA:]) }

// RKey returns the remote key.
func (b AtomicETH) RKey() uint32 { return binary.BigEndian.Uint32(b[atomicRKey:]) }

// SwapAdd returns the swap value (COMPARE_SWAP) or the addend (FETCH_ADD).
func (b AtomicETH) SwapAdd() uint64 { return binary.BigEndian.Uint64(b[atomicSwapAdd:]) }

// Compare returns the compare value (COMPARE_SWAP only).
func (b AtomicETH) Compare() uint64 { return binary.BigEndian.Uint64(b[atomicCompare:]) }

// AtomicETHFields is the decoded form of an AtomicETH.
type AtomicETHFields struct {
	VA      uint64
	RKey    uint32
	SwapAdd uint64
	Compare uint64
}

// Fields decodes b.
func (b AtomicETH) Fields() AtomicETHFields {
	return AtomicETHFields{b.VA(), b.RKey(), b.SwapAdd(), b.Compare()}
}

// Encode writes f into b (AtomicETHLen bytes).
func (f *AtomicETHFields) Encode(b AtomicETH) {
	binary.BigEndian.PutUint64(b[atomicVA:], f.VA)
	binary.BigEndian.PutUint32(b[atomicRKey:], f.RKey)
	binary.BigEndian.PutUint64(b[atomicSwapAdd:], f.SwapAdd)
	binary.BigEndian.PutUint64(b[atomicCompare:], f.Compare)
}

// AtomicAckETH is the 8-byte Atomic ACK Extended Transport Header: the
// original value of the remote word.
type AtomicAckETH []byte

// OrigRemDt returns the original remote data.
func (b AtomicAckETH) OrigRemDt() uint64 { return binary.BigEndian.Uint64(b) }

// SetOrigRemDt sets the original remote data.
func (b AtomicAckETH) SetOrigRemDt(v uint64) { binary.BigEndian.PutUint64(b, v) }

// ImmDt is the 4-byte Immediate Data header. The value is opaque; it is
// returned in network byte order as the 32-bit big-endian number on the wire.
type ImmDt []byte

// Value returns the immediate data.
func (b ImmDt) Value() uint32 { return binary.BigEndian.Uint32(b) }

// SetValue sets the immediate data.
func (b ImmDt) SetValue(v uint32) { binary.BigEndian.PutUint32(b, v) }

// IETH is the 4-byte Invalidate Extended Transport Header: the R_Key to
// invalidate.
type IETH []byte

// RKey returns the R_Key to invalidate.
func (b IETH) RKey() uint32 { return binary.BigEndian.Uint32(b) }

// SetRKey sets the R_Key to invalidate.
func (b IETH) SetRKey(v uint32) { binary.BigEndian.PutUint32(b, v) }

// DETH is the 8-byte Datagram Extended Transport Header.
//
//	+---------------------------------------------------------------+
//	|                          Q_Key                                |
//	+---------------+-----------------------------------------------+
//	|   Reserved    |            Source QP (24 bits)                |
//	+---------------+-----------------------------------------------+
type DETH []byte

const (
	dethQKey  = 0
	dethResv  = 4
	dethSrcQP = 5
)

// QKey returns the queue key.
func (b DETH) QKey() uint32 { return binary.BigEndian.Uint32(b[dethQKey:]) }

// SrcQP returns the source QP number.
func (b DETH) SrcQP() QPN { return QPN(get24(b[dethSrcQP:])) }

// DETHFields is the decoded form of a DETH.
type DETHFields struct {
	QKey  uint32
	SrcQP QPN
}

// Fields decodes b.
func (b DETH) Fields() DETHFields { return DETHFields{b.QKey(), b.SrcQP()} }

// Encode writes f into b (DETHLen bytes); it refuses a QPN of 2^24 or more.
func (f *DETHFields) Encode(b DETH) error {
	if !f.SrcQP.Valid() {
		return errAt(LayerExt, KindOutOfRange)
	}
	binary.BigEndian.PutUint32(b[dethQKey:], f.QKey)
	b[dethResv] = 0
	put24(b[dethSrcQP:], uint32(f.SrcQP))
	return nil
}

// FETH is the 4-byte Flush Extended Transport Header of a FLUSH request.
// Bits 5:4 hold the selectivity level, bits 3:0 the placement type.
type FETH []byte

// SelectivityLevel returns the selectivity level (0: region range, 1: whole region).
func (b FETH) SelectivityLevel() uint8 { return uint8(binary.BigEndian.Uint32(b)>>4) & 3 }

// PlacementType returns the placement type bits (1: global visibility, 2: persistence).
func (b FETH) PlacementType() uint8 { return uint8(binary.BigEndian.Uint32(b)) & 0xf }

// FETHFields is the decoded form of a FETH.
type FETHFields struct {
	SelectivityLevel uint8
	PlacementType    uint8
}

// Fields decodes b.
func (b FETH) Fields() FETHFields { return FETHFields{b.SelectivityLevel(), b.PlacementType()} }

// Encode writes f into b (FETHLen bytes).
func (f *FETHFields) Encode(b FETH) error {
	if f.SelectivityLevel > 3 || f.PlacementType > 15 {
		return errAt(LayerExt, KindOutOfRange)
	}
	binary.BigEndian.PutUint32(b, uint32(f.SelectivityLevel)<<4|uint32(f.PlacementType))
	return nil
}

// XRCETH is the 4-byte XRC Extended Transport Header that follows the BTH
// of every XRC request: the number of the XRC SRQ at the responder whose
// receive requests (and protection domain) the message uses.
//
//	 0               1               2               3
//	 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7
//	+---------------+-----------------------------------------------+
//	|   Reserved    |              XRC SRQ number                   |
//	+---------------+-----------------------------------------------+
type XRCETH []byte

const (
	xrcethResv = 0
	xrcethSRQ  = 1
)

// SRQN returns the XRC SRQ number.
func (b XRCETH) SRQN() uint32 { return get24(b[xrcethSRQ:]) }

// XRCETHFields is the decoded form of an XRCETH.
type XRCETHFields struct {
	SRQN uint32 // 24 bits
}

// Fields decodes b.
func (b XRCETH) Fields() XRCETHFields { return XRCETHFields{b.SRQN()} }

// Encode writes f into b (XRCETHLen bytes); it refuses an SRQ number of
// 2^24 or more.
func (f *XRCETHFields) Encode(b XRCETH) error {
	if f.SRQN > PSNMask {
		return errAt(LayerExt, KindOutOfRange)
	}
	b[xrcethResv] = 0
	put24(b[xrcethSRQ:], f.SRQN)
	return nil
}
