package netns

// Minimal RoCEv2 frame checks, independent of the bth package: Ethernet,
// IPv4 without options or IPv6, UDP port 4791, the BTH opcode byte and the
// ICRC (CRC-32 over the masked headers, see FACTS.md section 1).

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

const roceUDPPort = 4791

// opcodeNames names the BTH opcodes rxe sends (IBTA vol. 1, table 38).
var opcodeNames = map[byte]string{
	0x00: "send_first",
	0x01: "send_middle",
	0x02: "send_last",
	0x03: "send_last_with_immediate",
	0x04: "send_only",
	0x05: "send_only_with_immediate",
	0x06: "rdma_write_first",
	0x07: "rdma_write_middle",
	0x08: "rdma_write_last",
	0x09: "rdma_write_last_with_immediate",
	0x0a: "rdma_write_only",
	0x0b: "rdma_write_only_with_immediate",
	0x0c: "rdma_read_request",
	0x0d: "rdma_read_response_first",
	0x0e: "rdma_read_response_middle",
	0x0f: "rdma_read_response_last",
	0x10: "rdma_read_response_only",
	0x11: "acknowledge",
	0x12: "atomic_acknowledge",
	0x13: "compare_swap",
	0x14: "fetch_add",
	0x16: "send_last_with_invalidate",
	0x17: "send_only_with_invalidate",
	0x64: "ud_send_only",
	0x65: "ud_send_only_with_immediate",
}

func opcodeName(op byte) string {
	if n, ok := opcodeNames[op]; ok {
		return n
	}
	return fmt.Sprintf("opcode_%#02x", op)
}

// roceFrame is what parseRoCE finds in a frame.
type roceFrame struct {
	opcode  byte
	bthOff  int // offset of the BTH in the frame
	ipv6    bool
	udpSrc  uint16
	destQP  uint32
	psn     uint32
	icrcOK  bool
	payload int // bytes after the BTH, ICRC included
}

// parseRoCE checks that frame is a whole RoCEv2 packet (lengths agree with
// the frame size) and returns its BTH opcode and ICRC status.
func parseRoCE(frame []byte) (roceFrame, error) {
	var r roceFrame
	if len(frame) < 14 {
		return r, fmt.Errorf("short Ethernet header")
	}
	var ipHdr []byte
	var l4 int
	switch et := binary.BigEndian.Uint16(frame[12:]); et {
	case 0x0800:
		if len(frame) < 14+20 {
			return r, fmt.Errorf("short IPv4 header")
		}
		ihl := int(frame[14]&0x0f) * 4
		if frame[14]>>4 != 4 || ihl < 20 || len(frame) < 14+ihl {
			return r, fmt.Errorf("bad IPv4 header")
		}
		if tot := int(binary.BigEndian.Uint16(frame[16:])); tot != len(frame)-14 {
			return r, fmt.Errorf("IPv4 total length %d, frame carries %d", tot, len(frame)-14)
		}
		if frame[23] != 17 {
			return r, fmt.Errorf("IPv4 protocol %d is not UDP", frame[23])
		}
		ipHdr = frame[14 : 14+ihl]
		l4 = 14 + ihl
	case 0x86dd:
		if len(frame) < 14+40 {
			return r, fmt.Errorf("short IPv6 header")
		}
		if pl := int(binary.BigEndian.Uint16(frame[18:])); pl != len(frame)-54 {
			return r, fmt.Errorf("IPv6 payload length %d, frame carries %d", pl, len(frame)-54)
		}
		if frame[20] != 17 {
			return r, fmt.Errorf("IPv6 next header %d is not UDP", frame[20])
		}
		ipHdr = frame[14:54]
		l4 = 54
		r.ipv6 = true
	default:
		return r, fmt.Errorf("ethertype %#04x is not IP", et)
	}
	if len(frame) < l4+8+12+4 {
		return r, fmt.Errorf("too short for UDP+BTH+ICRC")
	}
	udp := frame[l4:]
	if dst := binary.BigEndian.Uint16(udp[2:]); dst != roceUDPPort {
		return r, fmt.Errorf("UDP destination port %d", dst)
	}
	if ul := int(binary.BigEndian.Uint16(udp[4:])); ul != len(frame)-l4 {
		return r, fmt.Errorf("UDP length %d, frame carries %d", ul, len(frame)-l4)
	}
	r.udpSrc = binary.BigEndian.Uint16(udp)
	r.bthOff = l4 + 8
	bth := frame[r.bthOff:]
	r.opcode = bth[0]
	r.destQP = binary.BigEndian.Uint32(bth[4:]) & 0xffffff
	r.psn = binary.BigEndian.Uint32(bth[8:]) & 0xffffff
	r.payload = len(frame) - r.bthOff - 12

	// ICRC: 8 bytes of ones, then IP, UDP, BTH... with variant fields
	// masked to ones; written little-endian after the payload.
	in := make([]byte, 0, 8+len(frame)-14)
	in = append(in, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)
	ipStart := len(in)
	in = append(in, ipHdr...)
	if r.ipv6 {
		in[ipStart] |= 0x0f
		in[ipStart+1], in[ipStart+2], in[ipStart+3] = 0xff, 0xff, 0xff
		in[ipStart+7] = 0xff
	} else {
		in[ipStart+1] = 0xff
		in[ipStart+8] = 0xff
		in[ipStart+10], in[ipStart+11] = 0xff, 0xff
	}
	udpStart := len(in)
	in = append(in, frame[l4:len(frame)-4]...)
	in[udpStart+6], in[udpStart+7] = 0xff, 0xff
	in[udpStart+8+4] = 0xff
	want := binary.LittleEndian.Uint32(frame[len(frame)-4:])
	r.icrcOK = crc32.ChecksumIEEE(in) == want
	return r, nil
}
