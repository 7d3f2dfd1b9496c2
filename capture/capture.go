// Package capture reads and writes capture files. Open reads classic pcap
// and pcapng (either optionally gzip-compressed) as a stream of frames,
// LinkAdapter presents frames of the common link types as Ethernet frames
// for bth.Packet.Parse, and Writer writes classic pcap through gopacket's
// pcapgo.
//
// Memory stays bounded whatever the input: the file is read through fixed
// buffers (gzip decompresses into a 64 KiB window as it is read), one frame
// at a time into one reused buffer, a frame longer than MaxRecordLen is a
// damaged capture, and blocks that are not packets are skipped without
// being held.
//
// The reader is written here rather than taken from gopacket's pcapgo
// (v1.7.7), because pcapgo accepts a record as long as the file header's
// snap length, which the file itself sets (up to 4 GiB), and reads the whole
// record into memory: measured, a pcap file with snap length 0xffffffff and
// one 64 MiB record of zeros (64 KiB gzip-compressed) makes
// pcapgo.Reader.ZeroCopyReadPacketData return the record after allocating
// 256 MiB, and the allocation grows with the record, where this reader
// stops at MaxRecordLen with an error. pcapgo's NgReader likewise reads a
// packet block of any captured length whole (readLarge).
package capture

import (
	"bufio"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
	"github.com/sroce/sroce/bth"
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
	pcapRecordHdrLen   = 16
	pcapngMinSHBLen    = 28
	gzipMagic0         = 0x1f
	gzipMagic1         = 0x8b
	captureReadBufSize = 1 << 16
)

// MaxRecordLen is the longest frame a capture may hold: libpcap's and
// Wireshark's largest snap length (262144). A record claiming more is
// damaged (or built to make the reader allocate), whatever the file
// header's snap length says.
const MaxRecordLen = 256 << 10

// pcapng block types.
const (
	ngBlockIDB = 0x00000001 // interface description
	ngBlockPB  = 0x00000002 // packet (obsolete)
	ngBlockSPB = 0x00000003 // simple packet
	ngBlockEPB = 0x00000006 // enhanced packet
)

// Link types beyond those gopacket names: BSD's DLT_RAW values, which some
// systems write into pcap files instead of LINKTYPE_RAW.
const (
	linkTypeRawBSD     layers.LinkType = 12
	linkTypeRawOpenBSD layers.LinkType = 14
)

// InputError is a capture that cannot be read at all: no such file, not a
// capture, a damaged header. Its message is one sentence for the user.
type InputError struct{ msg string }

// Error returns the one-sentence message.
func (e *InputError) Error() string { return e.msg }

// Reader yields the frames of a capture one at a time.
type Reader interface {
	// Next returns the next frame's captured bytes (valid until the next
	// call), its link type and its length on the wire. At the end of the
	// capture it returns io.EOF; a capture that ends inside a record or
	// block returns io.ErrUnexpectedEOF.
	Next() (data []byte, link layers.LinkType, wireLen int, err error)
}

// Timestamper is implemented by the Readers that Open returns: Timestamp
// is the capture time of the frame that Next returned last (the zero Time
// before the first frame).
type Timestamper interface {
	Timestamp() time.Time
}

// frameBuf returns buf resized to n bytes (n <= MaxRecordLen), reusing
// its storage when it is large enough.
func frameBuf(buf []byte, n int) []byte {
	if cap(buf) < n {
		buf = make([]byte, n, max(n, 2048))
	}
	return buf[:n]
}

// readFull is io.ReadFull, with a clean end of input inside the read
// reported as io.ErrUnexpectedEOF.
func readFull(r io.Reader, b []byte) error {
	_, err := io.ReadFull(r, b)
	if err == io.EOF && len(b) > 0 {
		return io.ErrUnexpectedEOF
	}
	return err
}

// skip discards n bytes of r without holding them.
func skip(r *bufio.Reader, n int64) error {
	for n > 0 {
		k := int(min(n, 1<<30))
		d, err := r.Discard(k)
		n -= int64(d)
		if err != nil {
			if err == io.EOF {
				return io.ErrUnexpectedEOF
			}
			return err
		}
	}
	return nil
}

// pcapFrames reads a classic pcap file.
type pcapFrames struct {
	r    *bufio.Reader
	bo   binary.ByteOrder
	link layers.LinkType
	nano bool // timestamps in nanoseconds (else microseconds)
	hdr  [pcapRecordHdrLen]byte
	buf  []byte
	ts   time.Time
}

// Timestamp returns the capture time of the last frame Next returned.
func (p *pcapFrames) Timestamp() time.Time { return p.ts }

// newPcapFrames reads the 24-byte file header of a classic pcap file.
func newPcapFrames(r *bufio.Reader) (*pcapFrames, error) {
	var h [pcapFileHeaderLen]byte
	if err := readFull(r, h[:]); err != nil {
		return nil, err
	}
	p := &pcapFrames{r: r, bo: binary.LittleEndian}
	switch binary.LittleEndian.Uint32(h[:]) {
	case magicPcapMicroBE, magicPcapNanoBE:
		p.bo = binary.BigEndian
	}
	switch binary.LittleEndian.Uint32(h[:]) {
	case magicPcapNano, magicPcapNanoBE:
		p.nano = true
	}
	if major, minor := p.bo.Uint16(h[4:]), p.bo.Uint16(h[6:]); major != 2 {
		return nil, fmt.Errorf("version %d.%d, where 2.4 was expected", major, minor)
	}
	// The link type is the low 16 bits; the FCS flags above them are
	// ignored, as by libpcap.
	p.link = layers.LinkType(p.bo.Uint32(h[20:]) & 0xffff)
	return p, nil
}

func (p *pcapFrames) Next() ([]byte, layers.LinkType, int, error) {
	if _, err := io.ReadFull(p.r, p.hdr[:]); err != nil {
		if err == io.EOF {
			return nil, 0, 0, io.EOF // the capture ends between records
		}
		return nil, 0, 0, err
	}
	caplen, wireLen := p.bo.Uint32(p.hdr[8:]), p.bo.Uint32(p.hdr[12:])
	if caplen > MaxRecordLen {
		return nil, 0, 0, fmt.Errorf("the record claims %d captured bytes, more than any capture holds (%d)", caplen, MaxRecordLen)
	}
	if caplen > wireLen {
		return nil, 0, 0, fmt.Errorf("the record claims %d captured bytes of a %d-byte packet", caplen, wireLen)
	}
	p.buf = frameBuf(p.buf, int(caplen))
	if err := readFull(p.r, p.buf); err != nil {
		return nil, 0, 0, err
	}
	sec, frac := int64(p.bo.Uint32(p.hdr[0:])), int64(p.bo.Uint32(p.hdr[4:]))
	if !p.nano {
		frac *= 1000
	}
	p.ts = time.Unix(sec, frac).UTC()
	return p.buf, p.link, int(wireLen), nil
}

// ngFrames reads a pcapng file, section by section. Interfaces may differ
// in link type, so each frame carries its interface's; frame numbers count
// every packet block, as Wireshark's frame.number does. Blocks other than
// section headers, interface descriptions and packets are skipped.
type ngFrames struct {
	r        *bufio.Reader
	bo       binary.ByteOrder
	links    []layers.LinkType // per interface of the current section
	snaplens []uint32
	tsresol  []uint8 // if_tsresol per interface (6, microseconds, by default)
	hdr      [20]byte
	buf      []byte
	ts       time.Time
}

// Timestamp returns the capture time of the last frame Next returned (the
// zero Time for a simple packet block, which has none).
func (p *ngFrames) Timestamp() time.Time { return p.ts }

// optTSResol is the pcapng interface option if_tsresol.
const optTSResol = 9

// readIDBOptions reads the options of an interface description block (n
// bytes of them) and returns its if_tsresol (6 when absent).
func (p *ngFrames) readIDBOptions(n int64) (uint8, error) {
	res := uint8(6)
	var o [4]byte
	for n >= 4 {
		if err := readFull(p.r, o[:]); err != nil {
			return 0, err
		}
		n -= 4
		code, l := p.bo.Uint16(o[0:]), int64(p.bo.Uint16(o[2:]))
		if code == 0 {
			break
		}
		padded := (l + 3) &^ 3
		if padded > n {
			return 0, errors.New("an interface option runs past its block")
		}
		if code == optTSResol && l >= 1 {
			if err := readFull(p.r, o[:1]); err != nil {
				return 0, err
			}
			res = o[0]
			padded--
		}
		if err := skip(p.r, padded); err != nil {
			return 0, err
		}
		n -= (l + 3) &^ 3
	}
	return res, skip(p.r, n)
}

// ngTime converts a pcapng timestamp in units of resolution res (if_tsresol)
// to a time.
func ngTime(ts uint64, res uint8) time.Time {
	if res&0x80 == 0 { // a power of ten
		e := res & 0x7f
		if e > 9 {
			for ; e > 9; e-- {
				ts /= 10
			}
			return time.Unix(0, int64(ts)).UTC()
		}
		unit := uint64(1)
		for ; e < 9; e++ {
			unit *= 10
		}
		return time.Unix(0, int64(ts*unit)).UTC()
	}
	e := res & 0x7f // a power of two
	if e > 63 {
		return time.Time{}
	}
	sec := ts >> e
	frac := ts & (1<<e - 1)
	return time.Unix(int64(sec), int64(frac*1e9>>e)).UTC()
}

// maxInterfaces bounds the interfaces of one pcapng section (each costs a
// few bytes; a capture has a handful).
const maxInterfaces = 1 << 16

// readSHB reads a section header block whose 4-byte type was read: it
// takes the section's byte order and forgets the previous section's
// interfaces.
func (p *ngFrames) readSHB() error {
	var h [12]byte // length, byte-order magic, major and minor version
	if err := readFull(p.r, h[:]); err != nil {
		return err
	}
	switch {
	case binary.BigEndian.Uint32(h[4:]) == pcapngByteOrder:
		p.bo = binary.BigEndian
	case binary.LittleEndian.Uint32(h[4:]) == pcapngByteOrder:
		p.bo = binary.LittleEndian
	default:
		return errors.New("a section header has a bad byte-order magic")
	}
	n := p.bo.Uint32(h[0:])
	if n < pcapngMinSHBLen || n%4 != 0 {
		return fmt.Errorf("a section header has a bad length (%d)", n)
	}
	if major := p.bo.Uint16(h[8:]); major != 1 {
		return fmt.Errorf("section version %d.%d, where 1.0 was expected", major, p.bo.Uint16(h[10:]))
	}
	p.links, p.snaplens, p.tsresol = p.links[:0], p.snaplens[:0], p.tsresol[:0]
	return skip(p.r, int64(n)-16)
}

func (p *ngFrames) Next() ([]byte, layers.LinkType, int, error) {
	for {
		var typ [4]byte
		if _, err := io.ReadFull(p.r, typ[:]); err != nil {
			if err == io.EOF {
				return nil, 0, 0, io.EOF // the capture ends between blocks
			}
			return nil, 0, 0, err
		}
		if binary.LittleEndian.Uint32(typ[:]) == magicPcapngSHB {
			if err := p.readSHB(); err != nil {
				return nil, 0, 0, err
			}
			continue
		}
		if err := readFull(p.r, p.hdr[:4]); err != nil {
			return nil, 0, 0, err
		}
		t, n := p.bo.Uint32(typ[:]), int64(p.bo.Uint32(p.hdr[:4]))
		if n < 12 || n%4 != 0 {
			return nil, 0, 0, fmt.Errorf("a block of type %#x has a bad length (%d)", t, n)
		}
		body := n - 12 // without type, length and the trailing length
		switch t {
		case ngBlockIDB:
			if body < 8 {
				return nil, 0, 0, fmt.Errorf("an interface description block is too short (%d bytes)", n)
			}
			if len(p.links) >= maxInterfaces {
				return nil, 0, 0, fmt.Errorf("a section describes more than %d interfaces", maxInterfaces)
			}
			if err := readFull(p.r, p.hdr[:8]); err != nil {
				return nil, 0, 0, err
			}
			p.links = append(p.links, layers.LinkType(p.bo.Uint16(p.hdr[0:])))
			p.snaplens = append(p.snaplens, p.bo.Uint32(p.hdr[4:]))
			res, err := p.readIDBOptions(body - 8)
			if err != nil {
				return nil, 0, 0, err
			}
			p.tsresol = append(p.tsresol, res)
			if err := skip(p.r, 4); err != nil {
				return nil, 0, 0, err
			}
		case ngBlockEPB, ngBlockPB:
			if body < 20 {
				return nil, 0, 0, fmt.Errorf("a packet block is too short (%d bytes)", n)
			}
			if err := readFull(p.r, p.hdr[:20]); err != nil {
				return nil, 0, 0, err
			}
			var ifc uint32
			if t == ngBlockEPB {
				ifc = p.bo.Uint32(p.hdr[0:])
			} else {
				ifc = uint32(p.bo.Uint16(p.hdr[0:]))
			}
			p.ts = time.Time{}
			if int(ifc) < len(p.tsresol) {
				ts := uint64(p.bo.Uint32(p.hdr[4:]))<<32 | uint64(p.bo.Uint32(p.hdr[8:]))
				p.ts = ngTime(ts, p.tsresol[ifc])
			}
			caplen, wireLen := int64(p.bo.Uint32(p.hdr[12:])), p.bo.Uint32(p.hdr[16:])
			return p.packet(ifc, caplen, wireLen, body-20)
		case ngBlockSPB:
			if body < 4 {
				return nil, 0, 0, fmt.Errorf("a simple packet block is too short (%d bytes)", n)
			}
			if err := readFull(p.r, p.hdr[:4]); err != nil {
				return nil, 0, 0, err
			}
			wireLen := p.bo.Uint32(p.hdr[0:])
			p.ts = time.Time{}
			caplen := min(int64(wireLen), body-4)
			if len(p.snaplens) > 0 && p.snaplens[0] > 0 {
				caplen = min(caplen, int64(p.snaplens[0]))
			}
			return p.packet(0, caplen, wireLen, body-4)
		default:
			if err := skip(p.r, body+4); err != nil {
				return nil, 0, 0, err
			}
		}
	}
}

// packet reads the captured bytes of a packet block from interface ifc,
// then skips the rest of the block (rest bytes of it remain before the
// trailing length).
func (p *ngFrames) packet(ifc uint32, caplen int64, wireLen uint32, rest int64) ([]byte, layers.LinkType, int, error) {
	if int(ifc) >= len(p.links) {
		return nil, 0, 0, fmt.Errorf("a packet names interface %d, which the section does not describe", ifc)
	}
	if caplen > MaxRecordLen {
		return nil, 0, 0, fmt.Errorf("the packet block claims %d captured bytes, more than any capture holds (%d)", caplen, MaxRecordLen)
	}
	if padded := (caplen + 3) &^ 3; padded > rest {
		return nil, 0, 0, fmt.Errorf("the packet block is too short for its %d captured bytes", caplen)
	}
	p.buf = frameBuf(p.buf, int(caplen))
	if err := readFull(p.r, p.buf); err != nil {
		return nil, 0, 0, err
	}
	if err := skip(p.r, rest-caplen+4); err != nil {
		return nil, 0, 0, err
	}
	return p.buf, p.links[ifc], int(wireLen), nil
}

// Open recognises a pcap or pcapng stream (gzip-compressed or not)
// by its magic number and returns a reader of its frames. name is used in
// error messages. Errors are *InputError.
func Open(r io.Reader, name string) (Reader, error) {
	br := bufio.NewReaderSize(r, captureReadBufSize)
	head, err := br.Peek(4)
	if len(head) >= 2 && head[0] == gzipMagic0 && head[1] == gzipMagic1 {
		zr, zerr := gzip.NewReader(br)
		if zerr != nil {
			return nil, &InputError{fmt.Sprintf("%s looks gzip-compressed but cannot be decompressed: %v", name, zerr)}
		}
		br = bufio.NewReaderSize(zr, captureReadBufSize)
		head, err = br.Peek(4)
	}
	if len(head) == 0 {
		if err != nil && err != io.EOF {
			return nil, &InputError{fmt.Sprintf("cannot read %s: %s", name, errText(err))}
		}
		return nil, &InputError{fmt.Sprintf("%s is empty, not a pcap or pcapng capture", name)}
	}
	if len(head) < 4 {
		return nil, &InputError{fmt.Sprintf("%s is too short to be a pcap or pcapng capture (%d bytes)", name, len(head))}
	}
	switch binary.LittleEndian.Uint32(head) {
	case magicPcapMicro, magicPcapNano, magicPcapMicroBE, magicPcapNanoBE:
		if h, _ := br.Peek(pcapFileHeaderLen); len(h) < pcapFileHeaderLen {
			return nil, &InputError{fmt.Sprintf("%s: the pcap file header is truncated (%d of %d bytes)",
				name, len(h), pcapFileHeaderLen)}
		}
		pr, err := newPcapFrames(br)
		if err != nil {
			return nil, &InputError{fmt.Sprintf("%s: unusable pcap file header: %s", name, errText(err))}
		}
		return pr, nil
	case magicPcapngSHB:
		h, _ := br.Peek(12)
		if len(h) < 12 {
			return nil, &InputError{fmt.Sprintf("%s: the pcapng section header is truncated (%d bytes)", name, len(h))}
		}
		var bo binary.ByteOrder = binary.LittleEndian
		if binary.BigEndian.Uint32(h[8:]) == pcapngByteOrder {
			bo = binary.BigEndian
		} else if binary.LittleEndian.Uint32(h[8:]) != pcapngByteOrder {
			return nil, &InputError{fmt.Sprintf("%s: the pcapng section header has a bad byte-order magic", name)}
		}
		n := int(bo.Uint32(h[4:]))
		if n < pcapngMinSHBLen {
			return nil, &InputError{fmt.Sprintf("%s: the pcapng section header has a bad length (%d)", name, n)}
		}
		if h, _ := br.Peek(min(n, captureReadBufSize)); len(h) < min(n, captureReadBufSize) {
			return nil, &InputError{fmt.Sprintf("%s: the pcapng section header is truncated (%d of %d bytes)",
				name, len(h), n)}
		}
		nr := &ngFrames{r: br}
		br.Discard(4) // the block type
		if err := nr.readSHB(); err != nil {
			return nil, &InputError{fmt.Sprintf("%s: unusable pcapng section header: %s", name, errText(err))}
		}
		return nr, nil
	}
	return nil, &InputError{fmt.Sprintf("%s is not a pcap or pcapng capture (it starts with % x)", name, head)}
}

// LinkAdapter presents frames of any supported link type as Ethernet frames,
// which is what bth.Packet.Parse reads. It owns a scratch buffer for the
// link types that need one.
type LinkAdapter struct {
	scratch []byte
}

// Ethernet returns data as an Ethernet frame, or ok=false when its link type
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
func (a *LinkAdapter) Ethernet(data []byte, link layers.LinkType) (frame []byte, ok bool) {
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
func (a *LinkAdapter) wrapIP(ip []byte) []byte {
	n := bth.EthernetLen + len(ip)
	if cap(a.scratch) < n {
		a.scratch = make([]byte, n, max(n, 2048))
	}
	f := a.scratch[:n]
	var eth bth.EthernetFields
	switch bth.IPVersion(ip) {
	case 4:
		eth.EtherType = bth.EtherTypeIPv4
	case 6:
		eth.EtherType = bth.EtherTypeIPv6
	}
	eth.Encode(bth.Ethernet(f))
	copy(f[bth.EthernetLen:], ip)
	return f
}

// errText returns err's message without the "op path:" prefix of an
// fs.PathError, whose path the caller's sentence already names.
func errText(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// Writer writes a classic pcap file (little-endian, microsecond
// timestamps) through gopacket's pcapgo.
type Writer struct {
	w *pcapgo.Writer
}

// NewWriter writes the pcap file header for link type link and snap length
// snaplen (MaxRecordLen when 0) to w and returns a writer of its records.
func NewWriter(w io.Writer, link layers.LinkType, snaplen uint32) (*Writer, error) {
	if snaplen == 0 {
		snaplen = MaxRecordLen
	}
	pw := pcapgo.NewWriter(w)
	if err := pw.WriteFileHeader(snaplen, link); err != nil {
		return nil, err
	}
	return &Writer{w: pw}, nil
}

// WriteFrame writes one record: data, captured at t, of a frame that was
// wireLen bytes long on the wire (len(data) when wireLen is smaller).
func (w *Writer) WriteFrame(t time.Time, data []byte, wireLen int) error {
	if len(data) > MaxRecordLen {
		return fmt.Errorf("a %d-byte record is longer than a capture holds (%d)", len(data), MaxRecordLen)
	}
	return w.w.WritePacket(gopacket.CaptureInfo{
		Timestamp:     t,
		CaptureLength: len(data),
		Length:        max(wireLen, len(data)),
	}, data)
}
