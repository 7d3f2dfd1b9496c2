package main

// Reading capture files: classic pcap and pcapng (optionally gzip
// compressed), streamed frame by frame through gopacket's pcapgo, and the
// link-layer adapters that present every frame as Ethernet to bth.Parse.

import (
	"bufio"
	"compress/gzip"
	"encoding/binary"
	"fmt"
	"io"
	"net/netip"

	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// Magic numbers at the start of capture files, read little-endian.
const (
	magicPcapMicro     = 0xa1b2c3d4 // classic pcap, microseconds, little-endian
	magicPcapNano      = 0xa1b23c4d // classic pcap, nanoseconds, little-endian
	magicPcapMicroBE   = 0xd4c3b2a1 // the same, written big-endian
	magicPcapNanoBE    = 0x4d3cb2a1
	magicPcapngSHB     = 0x0a0d0d0a // pcapng section header block type
	pcapngByteOrder    = 0x1a2b3c4d // pcapng byte-order magic
	pcapFileHeaderLen  = 24
	pcapngMinSHBLen    = 28
	gzipMagic0         = 0x1f
	gzipMagic1         = 0x8b
	captureReadBufSize = 1 << 16
)

// Link types beyond those gopacket names: BSD's DLT_RAW values, which some
// systems write into pcap files instead of LINKTYPE_RAW.
const (
	linkTypeRawBSD     layers.LinkType = 12
	linkTypeRawOpenBSD layers.LinkType = 14
)

// inputError is a capture that cannot be read at all: no such file, not a
// capture, a damaged header. Its message is one sentence for the user.
type inputError struct{ msg string }

func (e *inputError) Error() string { return e.msg }

// frameReader yields the frames of a capture one at a time.
type frameReader interface {
	// next returns the next frame's captured bytes (valid until the next
	// call), its link type and its length on the wire. At the end of the
	// capture it returns io.EOF.
	next() (data []byte, link layers.LinkType, wireLen int, err error)
}

// pcapFrames reads a classic pcap file.
type pcapFrames struct{ r *pcapgo.Reader }

func (p pcapFrames) next() ([]byte, layers.LinkType, int, error) {
	data, ci, err := p.r.ZeroCopyReadPacketData()
	return data, p.r.LinkType(), ci.Length, err
}

// ngFrames reads a pcapng file. Interfaces may differ in link type, so the
// reader is asked for each frame's own; frame numbers then count every
// packet block, as Wireshark's frame.number does.
type ngFrames struct{ r *pcapgo.NgReader }

func (p ngFrames) next() ([]byte, layers.LinkType, int, error) {
	data, ci, err := p.r.ZeroCopyReadPacketData()
	if err != nil {
		return nil, 0, 0, err
	}
	link, _ := ci.AncillaryData[0].(layers.LinkType)
	return data, link, ci.Length, nil
}

// openCapture recognises a pcap or pcapng stream (gzip-compressed or not)
// by its magic number and returns a reader of its frames. name is used in
// error messages. Errors are *inputError.
func openCapture(r io.Reader, name string) (frameReader, error) {
	br := bufio.NewReaderSize(r, captureReadBufSize)
	head, err := br.Peek(4)
	if len(head) >= 2 && head[0] == gzipMagic0 && head[1] == gzipMagic1 {
		zr, zerr := gzip.NewReader(br)
		if zerr != nil {
			return nil, &inputError{fmt.Sprintf("%s looks gzip-compressed but cannot be decompressed: %v", name, zerr)}
		}
		br = bufio.NewReaderSize(zr, captureReadBufSize)
		head, err = br.Peek(4)
	}
	if len(head) == 0 {
		if err != nil && err != io.EOF {
			return nil, &inputError{fmt.Sprintf("cannot read %s: %s", name, errText(err))}
		}
		return nil, &inputError{fmt.Sprintf("%s is empty, not a pcap or pcapng capture", name)}
	}
	if len(head) < 4 {
		return nil, &inputError{fmt.Sprintf("%s is too short to be a pcap or pcapng capture (%d bytes)", name, len(head))}
	}
	switch binary.LittleEndian.Uint32(head) {
	case magicPcapMicro, magicPcapNano, magicPcapMicroBE, magicPcapNanoBE:
		if h, _ := br.Peek(pcapFileHeaderLen); len(h) < pcapFileHeaderLen {
			return nil, &inputError{fmt.Sprintf("%s: the pcap file header is truncated (%d of %d bytes)",
				name, len(h), pcapFileHeaderLen)}
		}
		pr, err := pcapgo.NewReader(br)
		if err != nil {
			return nil, &inputError{fmt.Sprintf("%s: unusable pcap file header: %v", name, err)}
		}
		return pcapFrames{pr}, nil
	case magicPcapngSHB:
		h, _ := br.Peek(12)
		if len(h) < 12 {
			return nil, &inputError{fmt.Sprintf("%s: the pcapng section header is truncated (%d bytes)", name, len(h))}
		}
		var bo binary.ByteOrder = binary.LittleEndian
		if binary.BigEndian.Uint32(h[8:]) == pcapngByteOrder {
			bo = binary.BigEndian
		} else if binary.LittleEndian.Uint32(h[8:]) != pcapngByteOrder {
			return nil, &inputError{fmt.Sprintf("%s: the pcapng section header has a bad byte-order magic", name)}
		}
		n := int(bo.Uint32(h[4:]))
		if n < pcapngMinSHBLen {
			return nil, &inputError{fmt.Sprintf("%s: the pcapng section header has a bad length (%d)", name, n)}
		}
		if h, _ := br.Peek(n); len(h) < n {
			return nil, &inputError{fmt.Sprintf("%s: the pcapng section header is truncated (%d of %d bytes)",
				name, len(h), n)}
		}
		nr, err := pcapgo.NewNgReader(br, pcapgo.NgReaderOptions{WantMixedLinkType: true})
		if err != nil {
			return nil, &inputError{fmt.Sprintf("%s: unusable pcapng section header: %v", name, err)}
		}
		return ngFrames{nr}, nil
	}
	return nil, &inputError{fmt.Sprintf("%s is not a pcap or pcapng capture (it starts with % x)", name, head)}
}

// linkAdapter presents frames of any supported link type as Ethernet frames,
// which is what bth.Packet.Parse reads. It owns a scratch buffer for the
// link types that need one.
type linkAdapter struct {
	scratch []byte
}

// ethernet returns data as an Ethernet frame, or ok=false when its link type
// is not supported. The result may alias data (which may be modified) or
// the adapter's scratch buffer; either way it is valid until the next call.
//
//   - Ethernet: as is.
//   - Linux cooked capture v1 (SLL): a 16-byte header whose last two bytes
//     are the EtherType, so the frame starts two bytes in: bytes 12-13 of
//     that view are the EtherType and the IP header follows, as in Ethernet.
//   - Linux cooked capture v2 (SLL2): a 20-byte header with the EtherType in
//     its first two bytes; it is copied to bytes 18-19 and the frame starts
//     six bytes in.
//   - Raw IPv4/IPv6 (LINKTYPE_RAW, IPV4, IPV6, BSD DLT_RAW) and BSD
//     loopback (NULL, LOOP, a 4-byte address family before the IP header):
//     a 14-byte Ethernet header is put in front, in the scratch buffer, with
//     the EtherType taken from the IP version.
func (a *linkAdapter) ethernet(data []byte, link layers.LinkType) (frame []byte, ok bool) {
	switch link {
	case layers.LinkTypeEthernet:
		return data, true
	case layers.LinkTypeLinuxSLL:
		if len(data) < 16 {
			return data, true // too short: Parse reports it
		}
		return data[2:], true
	case layers.LinkTypeLinuxSLL2:
		if len(data) < 20 {
			return data, true
		}
		data[18], data[19] = data[0], data[1]
		return data[6:], true
	case layers.LinkTypeRaw, layers.LinkTypeIPv4, layers.LinkTypeIPv6, linkTypeRawBSD, linkTypeRawOpenBSD:
		return a.wrapIP(data), true
	case layers.LinkTypeNull, layers.LinkTypeLoop:
		if len(data) < 4 {
			return data, true
		}
		return a.wrapIP(data[4:]), true
	}
	return nil, false
}

// wrapIP returns an Ethernet frame around the IP packet ip, built in the
// scratch buffer. A packet that is not IPv4 or IPv6 gets EtherType 0, which
// Parse reports as not RoCE.
func (a *linkAdapter) wrapIP(ip []byte) []byte {
	n := 14 + len(ip)
	if cap(a.scratch) < n {
		a.scratch = make([]byte, n, max(n, 2048))
	}
	f := a.scratch[:n]
	clear(f[:12])
	var et uint16
	if len(ip) > 0 {
		switch ip[0] >> 4 {
		case 4:
			et = 0x0800
		case 6:
			et = 0x86dd
		}
	}
	binary.BigEndian.PutUint16(f[12:], et)
	copy(f[14:], ip)
	return f
}

// udpView describes the UDP datagram that an Ethernet frame visibly
// carries.
type udpView struct {
	src, dst     netip.Addr
	sport, dport uint16
}

// peekUDP finds the UDP header of an Ethernet frame without bth.Parse's
// checks: at most one 802.1Q tag, IPv4 (not a later fragment) or IPv6 with
// UDP as the next header, and enough bytes to read the ports. dissect uses
// it to tell a malformed RoCEv2 packet (UDP to port 4791) from other
// traffic that bth.Parse rejects before it looks at the port, such as a
// fragmented or cut-short datagram of another protocol, and to say where a
// malformed packet came from.
func peekUDP(f []byte) (u udpView, ok bool) {
	if len(f) < 14 {
		return u, false
	}
	l3 := 14
	et := binary.BigEndian.Uint16(f[12:])
	if et == 0x8100 || et == 0x88a8 {
		if len(f) < 18 {
			return u, false
		}
		et, l3 = binary.BigEndian.Uint16(f[16:]), 18
	}
	var l4 int
	switch et {
	case 0x0800:
		if len(f) < l3+20 || f[l3]>>4 != 4 || f[l3+9] != 17 {
			return u, false
		}
		if binary.BigEndian.Uint16(f[l3+6:])&0x1fff != 0 { // a later fragment: no UDP header
			return u, false
		}
		u.src = netip.AddrFrom4([4]byte(f[l3+12 : l3+16]))
		u.dst = netip.AddrFrom4([4]byte(f[l3+16 : l3+20]))
		l4 = l3 + int(f[l3]&0x0f)*4
	case 0x86dd:
		if len(f) < l3+40 || f[l3+6] != 17 {
			return u, false
		}
		u.src = netip.AddrFrom16([16]byte(f[l3+8 : l3+24]))
		u.dst = netip.AddrFrom16([16]byte(f[l3+24 : l3+40]))
		l4 = l3 + 40
	default:
		return u, false
	}
	if len(f) < l4+4 {
		return u, false
	}
	u.sport = binary.BigEndian.Uint16(f[l4:])
	u.dport = binary.BigEndian.Uint16(f[l4+2:])
	return u, true
}
