package cm

import (
	"encoding/binary"
	"strconv"
)

// MAD sizes in bytes.
const (
	MADLen       = 256 // a whole MAD as carried by a UD SEND ONLY to QP1
	MADHeaderLen = 24  // the common MAD header
	DataLen      = MADLen - MADHeaderLen
)

// Values of the common MAD header for the CM class, and of the QP1 it
// travels on.
const (
	BaseVersion    = 1          // the only MAD base version
	MgmtClassCM    = 0x07       // communication management class
	ClassVersionCM = 2          // the CM class version Linux and rdma_rxe speak
	GSIQPN         = 1          // QP1, the general services interface QP
	GSIQKey        = 0x80010000 // the well-known Q_Key of QP1
)

// Method is a MAD method. Bit 7 marks a response.
type Method uint8

// MAD methods used by the CM class.
const (
	MethodGet     Method = 0x01 // ClassPortInfo request
	MethodSet     Method = 0x02
	MethodSend    Method = 0x03 // every CM message
	MethodGetResp Method = 0x81 // ClassPortInfo answer
)

// String names the method.
func (m Method) String() string {
	switch m {
	case MethodGet:
		return "Get"
	case MethodSet:
		return "Set"
	case MethodSend:
		return "Send"
	case MethodGetResp:
		return "GetResp"
	}
	return "method 0x" + strconv.FormatUint(uint64(m), 16)
}

// AttrID is a MAD attribute ID: in the CM class, which message a MAD holds.
type AttrID uint16

// CM attribute IDs.
const (
	AttrClassPortInfo AttrID = 0x0001
	AttrREQ           AttrID = 0x0010
	AttrMRA           AttrID = 0x0011
	AttrREJ           AttrID = 0x0012
	AttrREP           AttrID = 0x0013
	AttrRTU           AttrID = 0x0014
	AttrDREQ          AttrID = 0x0015
	AttrDREP          AttrID = 0x0016
	AttrSIDRREQ       AttrID = 0x0017
	AttrSIDRREP       AttrID = 0x0018
	AttrLAP           AttrID = 0x0019
	AttrAPR           AttrID = 0x001a
)

var attrNames = map[AttrID]string{
	AttrClassPortInfo: "ClassPortInfo", AttrREQ: "REQ", AttrMRA: "MRA", AttrREJ: "REJ",
	AttrREP: "REP", AttrRTU: "RTU", AttrDREQ: "DREQ", AttrDREP: "DREP",
	AttrSIDRREQ: "SIDR_REQ", AttrSIDRREP: "SIDR_REP", AttrLAP: "LAP", AttrAPR: "APR",
}

// String names the attribute as the IBTA does ("REQ", "SIDR_REP").
func (a AttrID) String() string {
	if s, ok := attrNames[a]; ok {
		return s
	}
	return "attribute 0x" + strconv.FormatUint(uint64(a), 16)
}

// MAD is a management datagram: accessors over at least MADHeaderLen bytes
// (a whole MAD is MADLen). Accessors do not check lengths; ParseMAD does.
//
//	 0               1               2               3
//	+---------------+---------------+---------------+-+-------------+
//	| BaseVersion   | MgmtClass     | ClassVersion  |R|  Method     |
//	+---------------+---------------+---------------+-+-------------+
//	|            Status             |        ClassSpecific          |
//	+-------------------------------+-------------------------------+
//	|                        TransactionID (64)                     |
//	+-------------------------------+-------------------------------+
//	|          AttributeID          |           Reserved            |
//	+-------------------------------+-------------------------------+
//	|                       AttributeModifier                       |
//	+---------------------------------------------------------------+
//	|                        Data (232 bytes)                       |
type MAD []byte

const (
	madBaseVersion  = 0
	madMgmtClass    = 1
	madClassVersion = 2
	madMethod       = 3
	madStatus       = 4
	madClassSpec    = 6
	madTID          = 8
	madAttrID       = 16
	madAttrMod      = 20
)

// BaseVersion returns the MAD base version.
func (m MAD) BaseVersion() uint8 { return m[madBaseVersion] }

// MgmtClass returns the management class.
func (m MAD) MgmtClass() uint8 { return m[madMgmtClass] }

// ClassVersion returns the class version.
func (m MAD) ClassVersion() uint8 { return m[madClassVersion] }

// Method returns the method (with its response bit).
func (m MAD) Method() Method { return Method(m[madMethod]) }

// Status returns the status field.
func (m MAD) Status() uint16 { return binary.BigEndian.Uint16(m[madStatus:]) }

// ClassSpecific returns the class-specific field.
func (m MAD) ClassSpecific() uint16 { return binary.BigEndian.Uint16(m[madClassSpec:]) }

// TID returns the transaction ID.
func (m MAD) TID() uint64 { return binary.BigEndian.Uint64(m[madTID:]) }

// AttrID returns the attribute ID.
func (m MAD) AttrID() AttrID { return AttrID(binary.BigEndian.Uint16(m[madAttrID:])) }

// AttrMod returns the attribute modifier.
func (m MAD) AttrMod() uint32 { return binary.BigEndian.Uint32(m[madAttrMod:]) }

// Data returns the bytes after the header.
func (m MAD) Data() []byte { return m[MADHeaderLen:] }

// Header is the decoded common MAD header.
type Header struct {
	BaseVersion   uint8
	MgmtClass     uint8
	ClassVersion  uint8
	Method        Method
	Status        uint16
	ClassSpecific uint16
	TID           uint64
	AttrID        AttrID
	AttrMod       uint32
}

// Header decodes m's header.
func (m MAD) Header() Header {
	return Header{
		BaseVersion: m.BaseVersion(), MgmtClass: m.MgmtClass(), ClassVersion: m.ClassVersion(),
		Method: m.Method(), Status: m.Status(), ClassSpecific: m.ClassSpecific(),
		TID: m.TID(), AttrID: m.AttrID(), AttrMod: m.AttrMod(),
	}
}

// CMHeader returns the header of a CM MAD: base version 1, class 0x07,
// class version 2, with the given method, transaction ID and attribute.
func CMHeader(method Method, tid uint64, attr AttrID) Header {
	return Header{
		BaseVersion: BaseVersion, MgmtClass: MgmtClassCM, ClassVersion: ClassVersionCM,
		Method: method, TID: tid, AttrID: attr,
	}
}

// Encode writes h into the first MADHeaderLen bytes of m, the reserved
// field zero.
func (h *Header) Encode(m MAD) error {
	if len(m) < MADHeaderLen {
		return errAt("MAD header", KindTooShort)
	}
	m[madBaseVersion] = h.BaseVersion
	m[madMgmtClass] = h.MgmtClass
	m[madClassVersion] = h.ClassVersion
	m[madMethod] = byte(h.Method)
	binary.BigEndian.PutUint16(m[madStatus:], h.Status)
	binary.BigEndian.PutUint16(m[madClassSpec:], h.ClassSpecific)
	binary.BigEndian.PutUint64(m[madTID:], h.TID)
	binary.BigEndian.PutUint16(m[madAttrID:], uint16(h.AttrID))
	m[madAttrID+2], m[madAttrID+3] = 0, 0
	binary.BigEndian.PutUint32(m[madAttrMod:], h.AttrMod)
	return nil
}

// ParseMAD checks that b is a CM MAD (at least MADLen bytes, base version
// 1, class 0x07, class version 2) and returns its first MADLen bytes.
// Bytes after the MAD (the UD payload may be padded) are ignored.
func ParseMAD(b []byte) (MAD, error) {
	if len(b) < MADLen {
		return nil, errAt("MAD", KindTooShort)
	}
	m := MAD(b[:MADLen])
	if m.BaseVersion() != BaseVersion {
		return nil, errAt("MAD base version", KindBadVersion)
	}
	if m.MgmtClass() != MgmtClassCM {
		return nil, errAt("MAD", KindNotCM)
	}
	if m.ClassVersion() != ClassVersionCM {
		return nil, errAt("MAD class version", KindBadVersion)
	}
	return m, nil
}
