package cm

import "github.com/sroce/sroce/bth"

// FromPacket returns the CM MAD a parsed RoCEv2 packet carries: it must be
// a UD SEND ONLY to QP1 whose DETH has the GSI Q_Key, with a payload that
// ParseMAD accepts. Which P_Key is acceptable is the receiving port's
// business, not checked here.
func FromPacket(p *bth.Packet) (MAD, error) {
	if p.Opcode != bth.UDSendOnly {
		return nil, errAt("packet opcode "+p.Opcode.String(), KindNotGSI)
	}
	if p.BTH().DestQP() != GSIQPN {
		return nil, errAt("packet destination QP", KindNotGSI)
	}
	if p.DETH().QKey() != GSIQKey {
		return nil, errAt("packet Q_Key", KindNotGSI)
	}
	return ParseMAD(p.PayloadBytes())
}
