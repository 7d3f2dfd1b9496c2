package dissect

// Every header field of a decoded packet, layer by layer, for views that
// show a packet in full (the HTML ladder's hover box).

import (
	"fmt"
	"net"
	"strconv"

	"github.com/sroce/sroce/bth"
)

// Field is one header field of a packet, formatted for people.
type Field struct {
	// Layer names the header the field belongs to: "Ethernet", "802.1Q",
	// "IPv4", "IPv6", "UDP", "BTH", an extended header ("RETH", "AETH",
	// "AtomicETH", "AtomicAckETH", "ImmDt", "IETH", "DETH", "FETH", "XRCETH"),
	// for a management datagram to QP1 "MAD" and its CM message ("CM
	// REQ", "CM SIDR_REP", ...), "Payload" or "ICRC".
	Layer string
	// Name is the field's name within its layer.
	Name string
	// Value is the field's value, with its meaning where it has one
	// ("0x04 RC_SEND_ONLY", "ACK credits=31").
	Value string
}

// AppendFields appends every header field of the decoded RoCEv2 packet p,
// whose ICRC verifies when icrcOK is true, to fs, outermost header first:
// Ethernet (and the 802.1Q tag), IPv4 or IPv6, UDP, BTH, the extended
// headers in wire order, a MAD's header and CM message, the payload's length and the ICRC (carried value,
// and the computed one when they differ).
func AppendFields(fs []Field, p *bth.Packet, icrcOK bool) []Field {
	add := func(layer, name, value string) {
		fs = append(fs, Field{Layer: layer, Name: name, Value: value})
	}
	hex, dec, flag := fieldHex, fieldDec, fieldFlag

	eth := p.Ethernet()
	dst, src := eth.DstMAC(), eth.SrcMAC()
	add("Ethernet", "destination", net.HardwareAddr(dst[:]).String())
	add("Ethernet", "source", net.HardwareAddr(src[:]).String())
	add("Ethernet", "EtherType", hex(uint64(eth.EtherType()), 4))
	if p.HasVLAN {
		tag := p.VLAN()
		add("802.1Q", "priority (PCP)", dec(uint64(tag.PCP())))
		add("802.1Q", "drop eligible (DEI)", flag(tag.DEI()))
		add("802.1Q", "VLAN ID", dec(uint64(tag.VID())))
		add("802.1Q", "EtherType", hex(uint64(tag.EtherType()), 4))
	}
	if p.IPv6 {
		ip := p.IPv6Header()
		tc := ip.TrafficClass()
		add("IPv6", "traffic class", fmt.Sprintf("0x%02x (DSCP %d, ECN %d)", tc, tc>>2, tc&3))
		add("IPv6", "flow label", hex(uint64(ip.FlowLabel()), 5))
		add("IPv6", "payload length", dec(uint64(ip.PayloadLen())))
		add("IPv6", "next header", dec(uint64(ip.NextHeader())))
		add("IPv6", "hop limit", dec(uint64(ip.HopLimit())))
		add("IPv6", "source", ip.Src().String())
		add("IPv6", "destination", ip.Dst().String())
	} else {
		ip := p.IPv4Header()
		tos := ip.TOS()
		add("IPv4", "header length", dec(uint64(ip.HeaderLen())))
		add("IPv4", "TOS", fmt.Sprintf("0x%02x (DSCP %d, ECN %d)", tos, tos>>2, tos&3))
		add("IPv4", "total length", dec(uint64(ip.TotalLen())))
		add("IPv4", "identification", hex(uint64(ip.ID()), 4))
		add("IPv4", "don't fragment", flag(ip.DF()))
		add("IPv4", "more fragments", flag(ip.MF()))
		add("IPv4", "fragment offset", dec(uint64(ip.FragmentOffset())))
		add("IPv4", "TTL", dec(uint64(ip.TTL())))
		add("IPv4", "protocol", dec(uint64(ip.Protocol())))
		sum := hex(uint64(ip.Checksum()), 4)
		if ip.IsChecksumValid() {
			sum += " (ok)"
		} else {
			sum += " (BAD)"
		}
		add("IPv4", "header checksum", sum)
		add("IPv4", "source", ip.Src().String())
		add("IPv4", "destination", ip.Dst().String())
	}
	udp := p.UDP()
	add("UDP", "source port", dec(uint64(udp.SrcPort())))
	add("UDP", "destination port", dec(uint64(udp.DstPort())))
	add("UDP", "length", dec(uint64(udp.Length())))
	add("UDP", "checksum", hex(uint64(udp.Checksum()), 4))

	h := p.BTH()
	add("BTH", "opcode", hex(uint64(p.Opcode), 2)+" "+p.Opcode.String())
	add("BTH", "solicited event", flag(h.SE()))
	add("BTH", "MigReq", flag(h.MigReq()))
	add("BTH", "pad count", dec(uint64(h.PadCnt())))
	add("BTH", "version", dec(uint64(h.TVer())))
	add("BTH", "P_Key", hex(uint64(h.PKey()), 4))
	add("BTH", "FECN", flag(h.FECN()))
	add("BTH", "BECN", flag(h.BECN()))
	add("BTH", "destination QP", hex(uint64(h.DestQP()), 6))
	add("BTH", "AckReq", flag(h.AckReq()))
	add("BTH", "PSN", hex(uint64(h.PSN()), 6))

	for _, x := range p.Info().Order {
		switch x {
		case bth.HdrRETH:
			r := p.RETH()
			add("RETH", "virtual address", hex(r.VA(), 0))
			add("RETH", "R_Key", hex(uint64(r.RKey()), 0))
			add("RETH", "DMA length", dec(uint64(r.DMALen())))
		case bth.HdrAETH:
			a := p.AETH()
			add("AETH", "syndrome", hex(uint64(a.Syndrome()), 2)+" "+syndromeText[a.Syndrome()])
			add("AETH", "MSN", dec(uint64(a.MSN())))
		case bth.HdrAtomicETH:
			a := p.AtomicETH()
			add("AtomicETH", "virtual address", hex(a.VA(), 0))
			add("AtomicETH", "R_Key", hex(uint64(a.RKey()), 0))
			if p.Opcode.RCEquivalent() == bth.RCCompareSwap {
				add("AtomicETH", "swap", dec(a.SwapAdd()))
				add("AtomicETH", "compare", dec(a.Compare()))
			} else {
				add("AtomicETH", "add", dec(a.SwapAdd()))
			}
		case bth.HdrAtomicAckETH:
			add("AtomicAckETH", "original remote data", dec(p.AtomicAckETH().OrigRemDt()))
		case bth.HdrImmDt:
			add("ImmDt", "immediate data", hex(uint64(p.ImmDt().Value()), 8))
		case bth.HdrIETH:
			add("IETH", "R_Key", hex(uint64(p.IETH().RKey()), 0))
		case bth.HdrDETH:
			dt := p.DETH()
			add("DETH", "Q_Key", hex(uint64(dt.QKey()), 0))
			add("DETH", "source QP", hex(uint64(dt.SrcQP()), 6))
		case bth.HdrFETH:
			ft := p.FETH()
			add("FETH", "selectivity level", dec(uint64(ft.SelectivityLevel())))
			add("FETH", "placement type", dec(uint64(ft.PlacementType())))
		case bth.HdrXRCETH:
			add("XRCETH", "XRC SRQ", hex(uint64(p.XRCETH().SRQN()), 6))
		}
	}
	if m, ok := DecodeMAD(p); ok {
		fs = appendMADFields(fs, &m)
	}
	add("Payload", "length", dec(uint64(p.PayLen))+" bytes")
	carried := string(appendWireICRC(nil, p.ICRC()))
	if icrcOK {
		add("ICRC", "value", carried+" (ok)")
	} else {
		add("ICRC", "value", carried+" (BAD)")
		add("ICRC", "computed", string(appendWireICRC(nil, p.ComputeICRC())))
	}
	return fs
}

// fieldHex formats v for a Field: 0x and at least digits hex digits.
func fieldHex(v uint64, digits int) string { return string(appendHex(nil, v, digits)) }

// fieldDec formats v for a Field in decimal.
func fieldDec(v uint64) string { return strconv.FormatUint(v, 10) }

// fieldFlag formats a one-bit field: "1" or "0".
func fieldFlag(v bool) string {
	if v {
		return "1"
	}
	return "0"
}
