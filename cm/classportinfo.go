package cm

import "github.com/sroce/sroce/bth"

// ClassPortInfo is the class's port information (attribute 0x0001), the
// answer (GetResp) to a Get: the class version spoken, capabilities, the
// response time and where requests and traps are redirected. Its
// ClassPortInfoLen bytes start the MAD data; the rest of the data is zero.
type ClassPortInfo struct {
	BaseVersion     uint8
	ClassVersion    uint8
	CapabilityMask  uint16
	CapabilityMask2 uint32 // 27 bits
	RespTimeValue   uint8  // 5 bits: 4.096 µs × 2^value
	RedirectGID     bth.GID
	RedirectTC      uint8
	RedirectSL      uint8  // 4 bits
	RedirectFL      uint32 // 20 bits
	RedirectLID     uint16
	RedirectPKey    uint16
	RedirectQP      bth.QPN // 24 bits
	RedirectQKey    uint32
	TrapGID         bth.GID
	TrapTC          uint8
	TrapSL          uint8  // 4 bits
	TrapFL          uint32 // 20 bits
	TrapLID         uint16
	TrapPKey        uint16
	TrapHL          uint8
	TrapQP          bth.QPN // 24 bits
	TrapQKey        uint32
}

var (
	cpiBase    = u8(0)
	cpiClass   = u8(1)
	cpiCap     = u16(2)
	cpiCap2    = loc{4, 4, 5, 27}
	cpiResp    = loc{4, 4, 0, 5}
	cpiRTC     = u8(24)
	cpiRSL     = loc{25, 1, 4, 4}
	cpiRFL     = loc{24, 4, 0, 20}
	cpiRLID    = u16(28)
	cpiRPKey   = u16(30)
	cpiRQP     = loc{32, 4, 0, 24}
	cpiRQKey   = u32(36)
	cpiTTC     = u8(56)
	cpiTSL     = loc{57, 1, 4, 4}
	cpiTFL     = loc{56, 4, 0, 20}
	cpiTLID    = u16(60)
	cpiTPKey   = u16(62)
	cpiTHL     = u8(64)
	cpiTQP     = loc{64, 4, 0, 24}
	cpiTQKey   = u32(68)
	cpiRGIDOff = 8
	cpiTGIDOff = 40
)

// Attr returns AttrClassPortInfo.
func (*ClassPortInfo) Attr() AttrID { return AttrClassPortInfo }

// Encode writes c into data, zeroing the whole MAD data after it when data
// holds DataLen bytes or more.
func (c *ClassPortInfo) Encode(data []byte) error {
	if len(data) < ClassPortInfoLen {
		return errAt("ClassPortInfo", KindTooShort)
	}
	e, _ := start(data, min(len(data), DataLen), "ClassPortInfo")
	e.put(cpiBase, uint64(c.BaseVersion), "base version")
	e.put(cpiClass, uint64(c.ClassVersion), "class version")
	e.put(cpiCap, uint64(c.CapabilityMask), "capability mask")
	e.put(cpiCap2, uint64(c.CapabilityMask2), "capability mask 2")
	e.put(cpiResp, uint64(c.RespTimeValue), "response time value")
	copy(data[cpiRGIDOff:], c.RedirectGID[:])
	e.put(cpiRTC, uint64(c.RedirectTC), "redirect TC")
	e.put(cpiRSL, uint64(c.RedirectSL), "redirect SL")
	e.put(cpiRFL, uint64(c.RedirectFL), "redirect FL")
	e.put(cpiRLID, uint64(c.RedirectLID), "redirect LID")
	e.put(cpiRPKey, uint64(c.RedirectPKey), "redirect P_Key")
	e.put(cpiRQP, uint64(c.RedirectQP), "redirect QP")
	e.put(cpiRQKey, uint64(c.RedirectQKey), "redirect Q_Key")
	copy(data[cpiTGIDOff:], c.TrapGID[:])
	e.put(cpiTTC, uint64(c.TrapTC), "trap TC")
	e.put(cpiTSL, uint64(c.TrapSL), "trap SL")
	e.put(cpiTFL, uint64(c.TrapFL), "trap FL")
	e.put(cpiTLID, uint64(c.TrapLID), "trap LID")
	e.put(cpiTPKey, uint64(c.TrapPKey), "trap P_Key")
	e.put(cpiTHL, uint64(c.TrapHL), "trap hop limit")
	e.put(cpiTQP, uint64(c.TrapQP), "trap QP")
	e.put(cpiTQKey, uint64(c.TrapQKey), "trap Q_Key")
	return e.err
}

// Decode reads c from data.
func (c *ClassPortInfo) Decode(data []byte) error {
	if err := check(data, ClassPortInfoLen, "ClassPortInfo"); err != nil {
		return err
	}
	d := data
	*c = ClassPortInfo{
		BaseVersion: uint8(get(d, cpiBase)), ClassVersion: uint8(get(d, cpiClass)),
		CapabilityMask: uint16(get(d, cpiCap)), CapabilityMask2: uint32(get(d, cpiCap2)),
		RespTimeValue: uint8(get(d, cpiResp)),
		RedirectTC:    uint8(get(d, cpiRTC)), RedirectSL: uint8(get(d, cpiRSL)),
		RedirectFL: uint32(get(d, cpiRFL)), RedirectLID: uint16(get(d, cpiRLID)),
		RedirectPKey: uint16(get(d, cpiRPKey)), RedirectQP: bth.QPN(get(d, cpiRQP)),
		RedirectQKey: uint32(get(d, cpiRQKey)),
		TrapTC:       uint8(get(d, cpiTTC)), TrapSL: uint8(get(d, cpiTSL)),
		TrapFL: uint32(get(d, cpiTFL)), TrapLID: uint16(get(d, cpiTLID)),
		TrapPKey: uint16(get(d, cpiTPKey)), TrapHL: uint8(get(d, cpiTHL)),
		TrapQP: bth.QPN(get(d, cpiTQP)), TrapQKey: uint32(get(d, cpiTQKey)),
	}
	copy(c.RedirectGID[:], d[cpiRGIDOff:])
	copy(c.TrapGID[:], d[cpiTGIDOff:])
	return nil
}
