package bth

import (
	"math/bits"
	"strconv"
)

// Opcode is the BTH OpCode: the top three bits select the transport service
// (RC, UC, RD, UD, CNP) and the low five bits the operation.
type Opcode uint8

// RC opcodes.
const (
	RCSendFirst          Opcode = 0x00
	RCSendMiddle         Opcode = 0x01
	RCSendLast           Opcode = 0x02
	RCSendLastImm        Opcode = 0x03
	RCSendOnly           Opcode = 0x04
	RCSendOnlyImm        Opcode = 0x05
	RCWriteFirst         Opcode = 0x06
	RCWriteMiddle        Opcode = 0x07
	RCWriteLast          Opcode = 0x08
	RCWriteLastImm       Opcode = 0x09
	RCWriteOnly          Opcode = 0x0a
	RCWriteOnlyImm       Opcode = 0x0b
	RCReadRequest        Opcode = 0x0c
	RCReadResponseFirst  Opcode = 0x0d
	RCReadResponseMiddle Opcode = 0x0e
	RCReadResponseLast   Opcode = 0x0f
	RCReadResponseOnly   Opcode = 0x10
	RCAcknowledge        Opcode = 0x11
	RCAtomicAcknowledge  Opcode = 0x12
	RCCompareSwap        Opcode = 0x13
	RCFetchAdd           Opcode = 0x14
	RCSendLastInvalidate Opcode = 0x16
	RCSendOnlyInvalidate Opcode = 0x17
	RCFlush              Opcode = 0x1c
	RCAtomicWrite        Opcode = 0x1d
	UCSendFirst          Opcode = 0x20
	UCSendMiddle         Opcode = 0x21
	UCSendLast           Opcode = 0x22
	UCSendLastImm        Opcode = 0x23
	UCSendOnly           Opcode = 0x24
	UCSendOnlyImm        Opcode = 0x25
	UCWriteFirst         Opcode = 0x26
	UCWriteMiddle        Opcode = 0x27
	UCWriteLast          Opcode = 0x28
	UCWriteLastImm       Opcode = 0x29
	UCWriteOnly          Opcode = 0x2a
	UCWriteOnlyImm       Opcode = 0x2b
	UDSendOnly           Opcode = 0x64
	UDSendOnlyImm        Opcode = 0x65
	CNP                  Opcode = 0x81
)

const (
	serviceRC             Opcode = 0x00
	serviceUC             Opcode = 0x20
	serviceXRC            Opcode = 0xa0
	atomicWritePayloadLen        = 8
)

// Service is a transport service type.
type Service uint8

// Transport services.
const (
	ServiceRC Service = iota + 1
	ServiceUC
	ServiceUD
	ServiceCNP
	ServiceXRC
)

func (s Service) String() string {
	switch s {
	case ServiceRC:
		return "RC"
	case ServiceUC:
		return "UC"
	case ServiceUD:
		return "UD"
	case ServiceCNP:
		return "CNP"
	case ServiceXRC:
		return "XRC"
	}
	return "?"
}

// Hdr is a set of extended transport headers.
type Hdr uint16

// Extended header kinds.
const (
	HdrRETH Hdr = 1 << iota
	HdrAETH
	HdrAtomicETH
	HdrAtomicAckETH
	HdrImmDt
	HdrIETH
	HdrDETH
	HdrFETH
	HdrCNPResv // the 16 reserved bytes of a CNP
	HdrXRCETH
	numHdr = 10
)

var hdrLen = [numHdr]int{RETHLen, AETHLen, AtomicETHLen, AtomicAckETHLen, ImmDtLen, IETHLen, DETHLen, FETHLen, CNPResvLen, XRCETHLen}
var hdrName = [numHdr]string{"RETH", "AETH", "AtomicETH", "AtomicAckETH", "ImmDt", "IETH", "DETH", "FETH", "CNPResv", "XRCETH"}

// hdrIndex returns the bit number of a single-header set.
func hdrIndex(h Hdr) int { return bits.TrailingZeros16(uint16(h)) }

// String lists the headers in h.
func (h Hdr) String() string {
	s := ""
	for i := 0; i < numHdr; i++ {
		if h&(1<<i) != 0 {
			if s != "" {
				s += "+"
			}
			s += hdrName[i]
		}
	}
	if s == "" {
		return "none"
	}
	return s
}

// Position says where a packet sits in a message.
type Position uint8

// Message positions.
const (
	PosOnly Position = iota + 1
	PosFirst
	PosMiddle
	PosLast
)

func (p Position) String() string {
	switch p {
	case PosOnly:
		return "only"
	case PosFirst:
		return "first"
	case PosMiddle:
		return "middle"
	case PosLast:
		return "last"
	}
	return "?"
}

// OpInfo describes one opcode.
type OpInfo struct {
	Name     string   // IBTA name, e.g. RC_RDMA_WRITE_FIRST
	Op       Op       // what the packet does
	Service  Service  // RC, UC, UD or CNP
	Headers  Hdr      // extended headers present
	Order    []Hdr    // the extended headers in wire order after the BTH
	Payload  bool     // whether the packet may carry payload
	Position Position // where it sits in a message
	Request  bool     // sent by a requester (false: a response or ACK)
	ExtLen   int      // total length of the extended headers
	// FixedPayload, when non-negative, is the only payload length allowed
	// (8 for ATOMIC_WRITE); -1 means any length up to the path MTU.
	FixedPayload int
	valid        bool
	off          [numHdr]uint8 // offset of each header after the BTH
}

// Op is what an opcode does, whatever its transport and its position in a
// message: the one classification of opcodes that the transport uses.
type Op uint8

// Operations.
const (
	OpSend         Op = iota + 1 // SEND, with or without immediate or invalidate
	OpWrite                      // RDMA WRITE, with or without immediate
	OpReadRequest                // RDMA READ request
	OpReadResponse               // RDMA READ response
	OpAck                        // ACKNOWLEDGE (ACK, RNR NAK, NAK)
	OpAtomicAck                  // ATOMIC ACKNOWLEDGE
	OpCompareSwap                // COMPARE_SWAP
	OpFetchAdd                   // FETCH_ADD
	OpFlush                      // FLUSH
	OpAtomicWrite                // ATOMIC_WRITE
	OpCNP                        // congestion notification
)

// Atomic reports whether o is COMPARE_SWAP or FETCH_ADD.
func (o Op) Atomic() bool { return o == OpCompareSwap || o == OpFetchAdd }

// Valid reports whether the table knows this opcode.
func (o Opcode) Valid() bool { return opTable[o].valid }

// Info returns the table entry for o; Valid reports whether there is one.
func (o Opcode) Info() *OpInfo { return &opTable[o] }

// String returns the IBTA name, or a hex number for unknown opcodes.
func (o Opcode) String() string {
	if opTable[o].valid {
		return opTable[o].Name
	}
	return "UNKNOWN_0x" + strconv.FormatUint(uint64(o), 16)
}

// Offset returns the offset of extended header h after the BTH, and whether
// the opcode carries it.
func (i *OpInfo) Offset(h Hdr) (int, bool) {
	if i.Headers&h == 0 {
		return 0, false
	}
	return int(i.off[hdrIndex(h)]), true
}

var opTable [256]OpInfo

func def(op Opcode, name string, what Op, svc Service, pos Position, req, payload bool, hdrs ...Hdr) {
	info := OpInfo{Name: name, Op: what, Service: svc, Position: pos, Request: req, Payload: payload, Order: hdrs, FixedPayload: -1, valid: true}
	if !payload {
		info.FixedPayload = 0
	}
	for _, h := range hdrs {
		info.off[hdrIndex(h)] = uint8(info.ExtLen)
		info.Headers |= h
		info.ExtLen += hdrLen[hdrIndex(h)]
	}
	opTable[op] = info
}

func init() {
	// Operations shared by RC and UC, by the low five bits.
	for _, svc := range []struct {
		base Opcode
		s    Service
		p    string
	}{{serviceRC, ServiceRC, "RC_"}, {serviceUC, ServiceUC, "UC_"}} {
		b, s, p := svc.base, svc.s, svc.p
		def(b|0x00, p+"SEND_FIRST", OpSend, s, PosFirst, true, true)
		def(b|0x01, p+"SEND_MIDDLE", OpSend, s, PosMiddle, true, true)
		def(b|0x02, p+"SEND_LAST", OpSend, s, PosLast, true, true)
		def(b|0x03, p+"SEND_LAST_WITH_IMMEDIATE", OpSend, s, PosLast, true, true, HdrImmDt)
		def(b|0x04, p+"SEND_ONLY", OpSend, s, PosOnly, true, true)
		def(b|0x05, p+"SEND_ONLY_WITH_IMMEDIATE", OpSend, s, PosOnly, true, true, HdrImmDt)
		def(b|0x06, p+"RDMA_WRITE_FIRST", OpWrite, s, PosFirst, true, true, HdrRETH)
		def(b|0x07, p+"RDMA_WRITE_MIDDLE", OpWrite, s, PosMiddle, true, true)
		def(b|0x08, p+"RDMA_WRITE_LAST", OpWrite, s, PosLast, true, true)
		def(b|0x09, p+"RDMA_WRITE_LAST_WITH_IMMEDIATE", OpWrite, s, PosLast, true, true, HdrImmDt)
		def(b|0x0a, p+"RDMA_WRITE_ONLY", OpWrite, s, PosOnly, true, true, HdrRETH)
		def(b|0x0b, p+"RDMA_WRITE_ONLY_WITH_IMMEDIATE", OpWrite, s, PosOnly, true, true, HdrRETH, HdrImmDt)
	}
	def(RCReadRequest, "RC_RDMA_READ_REQUEST", OpReadRequest, ServiceRC, PosOnly, true, false, HdrRETH)
	def(RCReadResponseFirst, "RC_RDMA_READ_RESPONSE_FIRST", OpReadResponse, ServiceRC, PosFirst, false, true, HdrAETH)
	def(RCReadResponseMiddle, "RC_RDMA_READ_RESPONSE_MIDDLE", OpReadResponse, ServiceRC, PosMiddle, false, true)
	def(RCReadResponseLast, "RC_RDMA_READ_RESPONSE_LAST", OpReadResponse, ServiceRC, PosLast, false, true, HdrAETH)
	def(RCReadResponseOnly, "RC_RDMA_READ_RESPONSE_ONLY", OpReadResponse, ServiceRC, PosOnly, false, true, HdrAETH)
	def(RCAcknowledge, "RC_ACKNOWLEDGE", OpAck, ServiceRC, PosOnly, false, false, HdrAETH)
	def(RCAtomicAcknowledge, "RC_ATOMIC_ACKNOWLEDGE", OpAtomicAck, ServiceRC, PosOnly, false, false, HdrAETH, HdrAtomicAckETH)
	def(RCCompareSwap, "RC_COMPARE_SWAP", OpCompareSwap, ServiceRC, PosOnly, true, false, HdrAtomicETH)
	def(RCFetchAdd, "RC_FETCH_ADD", OpFetchAdd, ServiceRC, PosOnly, true, false, HdrAtomicETH)
	def(RCSendLastInvalidate, "RC_SEND_LAST_WITH_INVALIDATE", OpSend, ServiceRC, PosLast, true, true, HdrIETH)
	def(RCSendOnlyInvalidate, "RC_SEND_ONLY_WITH_INVALIDATE", OpSend, ServiceRC, PosOnly, true, true, HdrIETH)
	def(RCFlush, "RC_FLUSH", OpFlush, ServiceRC, PosOnly, true, false, HdrFETH, HdrRETH)
	def(RCAtomicWrite, "RC_ATOMIC_WRITE", OpAtomicWrite, ServiceRC, PosOnly, true, true, HdrRETH)
	opTable[RCAtomicWrite].FixedPayload = atomicWritePayloadLen
	def(UDSendOnly, "UD_SEND_ONLY", OpSend, ServiceUD, PosOnly, true, true, HdrDETH)
	def(UDSendOnlyImm, "UD_SEND_ONLY_WITH_IMMEDIATE", OpSend, ServiceUD, PosOnly, true, true, HdrDETH, HdrImmDt)
	def(CNP, "CNP", OpCNP, ServiceCNP, PosOnly, false, false, HdrCNPResv)

	// XRC: the RC operations SEND to FETCH_ADD and the SENDs with
	// invalidate (not FLUSH and ATOMIC_WRITE, which IBTA 1.5 defines for
	// RC only) under the XRC service bits; requests carry an XRCETH right
	// after the BTH, responses do not.
	for rc := RCSendFirst; rc <= RCSendOnlyInvalidate; rc++ {
		i := opTable[rc]
		if !i.valid {
			continue
		}
		hdrs := i.Order
		if i.Request {
			hdrs = append([]Hdr{HdrXRCETH}, hdrs...)
		}
		def(serviceXRC|rc, "XRC_"+i.Name[len("RC_"):], i.Op, ServiceXRC, i.Position, i.Request, i.Payload, hdrs...)
	}
}

// XRC opcodes the engine names.
const (
	XRCSendFirst          Opcode = 0xa0
	XRCSendOnly           Opcode = 0xa4
	XRCReadRequest        Opcode = 0xac
	XRCReadResponseOnly   Opcode = 0xb0
	XRCAcknowledge        Opcode = 0xb1
	XRCAtomicAcknowledge  Opcode = 0xb2
	XRCSendOnlyInvalidate Opcode = 0xb7
)

// RCEquivalent returns the RC opcode of the same operation as an XRC
// opcode (o itself for any other).
func (o Opcode) RCEquivalent() Opcode {
	if opTable[o].Service == ServiceXRC {
		return o &^ serviceXRC
	}
	return o
}

// Syndrome is the AETH syndrome byte: bits 7:5 give the kind (ACK, RNR NAK,
// NAK), bits 4:0 the credit count, RNR timer or NAK code.
type Syndrome uint8

// Syndrome kinds (bits 7:5).
const (
	SyndromeACK      = 0x00
	SyndromeRNR      = 0x20
	SyndromeReserved = 0x40
	SyndromeNAK      = 0x60
	syndromeKindMask = 0x60
	syndromeValue    = 0x1f
	// SyndromeACKUnlimited is an ACK with the "credits unlimited" code, as
	// rdma_rxe sends it.
	SyndromeACKUnlimited Syndrome = 0x1f
)

// NAK codes (syndrome 0x60 | code).
const (
	NAKPSNSeqError       = 0
	NAKInvalidRequest    = 1
	NAKRemoteAccessError = 2
	NAKRemoteOpError     = 3
	NAKInvalidRDRequest  = 4
)

// Kind returns SyndromeACK, SyndromeRNR, SyndromeNAK or SyndromeReserved.
func (s Syndrome) Kind() uint8 {
	if s&0x80 != 0 {
		return SyndromeReserved
	}
	return uint8(s) & syndromeKindMask
}

// IsACK reports whether s is a positive acknowledgement.
func (s Syndrome) IsACK() bool { return s.Kind() == SyndromeACK }

// IsRNR reports whether s is an RNR NAK.
func (s Syndrome) IsRNR() bool { return s.Kind() == SyndromeRNR }

// IsNAK reports whether s is a NAK (not RNR).
func (s Syndrome) IsNAK() bool { return s.Kind() == SyndromeNAK }

// Value returns the low five bits: credits, RNR timer index or NAK code.
func (s Syndrome) Value() uint8 { return uint8(s) & syndromeValue }

// RNRSyndrome returns the RNR NAK syndrome with timer index t (0-31).
func RNRSyndrome(t uint8) Syndrome { return Syndrome(SyndromeRNR | t&syndromeValue) }

// NAKSyndrome returns the NAK syndrome with the given code.
func NAKSyndrome(code uint8) Syndrome { return Syndrome(SyndromeNAK | code&syndromeValue) }

var nakText = [...]string{
	NAKPSNSeqError:       "PSN sequence error",
	NAKInvalidRequest:    "invalid request",
	NAKRemoteAccessError: "remote access error",
	NAKRemoteOpError:     "remote operational error",
	NAKInvalidRDRequest:  "invalid RD request",
}

// String decodes the syndrome: "ACK credits=31", "RNR NAK timer=12 (640us)",
// "NAK remote access error".
func (s Syndrome) String() string {
	v := s.Value()
	switch s.Kind() {
	case SyndromeACK:
		return "ACK credits=" + strconv.Itoa(int(v))
	case SyndromeRNR:
		return "RNR NAK timer=" + strconv.Itoa(int(v)) + " (" + strconv.Itoa(RNRTimerMicros(v)) + "us)"
	case SyndromeNAK:
		if int(v) < len(nakText) {
			return "NAK " + nakText[v]
		}
		return "NAK code=" + strconv.Itoa(int(v))
	}
	return "reserved syndrome 0x" + strconv.FormatUint(uint64(s), 16)
}

var rnrMicros = [32]int{
	655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920,
	2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122880,
	163840, 245760, 327680, 491520,
}

// RNRTimerMicros returns the RNR NAK timer for index t (0-31) in
// microseconds, from the IBTA table (index 0 is 655.36 ms).
func RNRTimerMicros(t uint8) int { return rnrMicros[t&31] }
