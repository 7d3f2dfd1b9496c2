package oob

// Message formats of perftest's TCP exchange (without -R/-z), as perftest
// 4.5-0.17 implements it (src/perftest_communication.c at tag v4.5-0.17,
// which Debian bookworm ships as perftest 4.5+0.17-1; its binaries report
// version "6.06"). Every message is exchanged symmetrically: the client
// writes its copy and then reads the server's, the server reads first and
// then writes. In order:
//
//	version      16 bytes  version string, NUL-padded ("6.06\0...")
//	cycle buffer  4 bytes  page size, big-endian int32 (4096)
//	cache line    4 bytes  cache line size, big-endian int32 (64)
//	MTU           2 bytes  ibv_mtu enum as a decimal digit and NUL ("3\0")
//	keys        108 bytes  one KeyMsg per QP, repeated as the test's flow
//	                       needs (see Flow); 59 bytes without a GID
//	reports    5 x 8 bytes BW tests: size, iterations (big-endian uint64),
//	                       peak, average BW and message rate (big-endian
//	                       IEEE doubles), each its own exchange
//	"done"        5 bytes  both sides, after the last key exchange; nobody
//	                       reads it
//
// The values seen in a capture between two rxe guests are in
// testdata/real-*.txt.

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/verbs"
	"math"
	"strconv"
	"strings"
)

// Sizes of the perftest messages.
const (
	VersionMsgSize = 16  // perftest's MAX_VERSION
	KeyMsgSize     = 59  // key message without a GID
	KeyMsgSizeGID  = 108 // key message with a GID (always on RoCE)
	// CMKeyMsgSize is the key message of an exchange over RDMA CM (-R,
	// -z): struct pingpong_dest itself, in network byte order.
	CMKeyMsgSize   = 56
	MTUMsgSize     = 2 // ibv_mtu enum digit and NUL (peers from 5.31 on)
	ReportItemSize = 8 // each field of a BW report
)

// PerftestVersion is the version string perftest 4.5-0.17 sends (its
// configure.ac says 6.06); sroce sends the same so that a real peer takes
// the same code paths as with its own kind.
const PerftestVersion = "6.06"

// The range of peer versions known to run exactly this exchange. Checked
// against the perftest tags: every release from v4.4-0.32 (5.94) to
// 23.10.0-0.29 (6.17) has the same message formats and the same order of
// exchanges in all eight tools (6.17 no longer sends "done", which sroce
// does not need). 6.20 and later add handshakes (ib_write_lat ends with
// two more), 6.28 adds a parameter negotiation; peers below 5.70 are
// refused by perftest itself.
const (
	MinPeerVersion = 5.94 // perftest v4.4-0.32
	MaxPeerVersion = 6.17 // perftest 23.10.0-0.29
)

// CheckPeerVersion is the default version policy: it accepts versions
// between MinPeerVersion and MaxPeerVersion, compared as numbers the way
// perftest compares them (atof).
func CheckPeerVersion(v string) error {
	f, ok := versionNumber(v)
	if !ok || f < MinPeerVersion || f > MaxPeerVersion {
		return &ExchangeError{Kind: ErrVersion, Detail: fmt.Sprintf(
			"got version %q, but this side speaks perftest 4.5's exchange (version %q; compatible: %.2f to %.2f)",
			v, PerftestVersion, MinPeerVersion, MaxPeerVersion)}
	}
	return nil
}

// versionNumber parses a version like perftest's atof: the leading decimal
// number. ok is false if there is none.
func versionNumber(v string) (float64, bool) {
	end := 0
	dot := false
	for end < len(v) {
		c := v[end]
		if c >= '0' && c <= '9' {
			end++
			continue
		}
		if c == '.' && !dot {
			dot = true
			end++
			continue
		}
		break
	}
	if end == 0 || v[:end] == "." {
		return 0, false
	}
	f, err := strconv.ParseFloat(v[:end], 64)
	return f, err == nil
}

// MarshalVersion returns the 16-byte version message for v.
func MarshalVersion(v string) ([]byte, error) {
	if len(v) >= VersionMsgSize {
		return nil, fmt.Errorf("version %q is longer than %d characters", v, VersionMsgSize-1)
	}
	b := make([]byte, VersionMsgSize)
	copy(b, v)
	return b, nil
}

// ParseVersion returns the version string in a 16-byte version message:
// the bytes before the first NUL. Bytes that are not printable ASCII make
// it malformed (a peer that is not perftest at all).
func ParseVersion(b []byte) (string, error) {
	if len(b) != VersionMsgSize {
		return "", malformed("version message", "%d bytes instead of %d", len(b), VersionMsgSize)
	}
	s := b
	if i := bytes.IndexByte(b, 0); i >= 0 {
		s = b[:i]
	}
	for _, c := range s {
		if c < 0x20 || c > 0x7e {
			return "", &ExchangeError{Kind: ErrVersion, Detail: fmt.Sprintf(
				"its first 16 bytes %q are not a perftest version string", b)}
		}
	}
	return string(s), nil
}

// SysData is what perftest's check_sys_data exchanges: both sides then use
// the larger of each value.
type SysData struct {
	CycleBuffer   int32 // buffer alignment, the page size (4096)
	CacheLineSize int32 // 64 on x86
}

// Max returns the field-wise maximum of s and o, the values both sides use
// afterwards.
func (s SysData) Max(o SysData) SysData {
	return SysData{CycleBuffer: max(s.CycleBuffer, o.CycleBuffer), CacheLineSize: max(s.CacheLineSize, o.CacheLineSize)}
}

// Limits on the sizes and counts a peer's messages carry. Whoever connects
// first is the peer, so nothing it sends may make this side allocate or
// loop beyond what its own command line could ask for.
const (
	// MaxPeerCycleBuffer bounds the peer's cycle buffer: a page size (the
	// largest base page Linux has is 256 KiB). Both sides size every QP's
	// two buffer areas by the larger of it and -s.
	MaxPeerCycleBuffer = 1 << 20
	// MaxPeerCacheLine bounds the peer's cache line size, which rounds
	// every area and address step (no CPU has lines above 256 bytes).
	MaxPeerCacheLine = 4096
	// MaxMessageSize is the largest -s perftest accepts (UINT_MAX / 2),
	// the bound of a report's message size.
	MaxMessageSize = math.MaxUint32 / 2
	// MaxReportIters bounds a report's iteration count: the most
	// iterations (-n) times the most QPs (-q) perftest accepts.
	MaxReportIters = maxIter * maxQP
)

// CheckPeer reports whether s, as a peer sent it, is within
// MaxPeerCycleBuffer and MaxPeerCacheLine (an ErrLimit naming the field
// and the limit if not).
func (s SysData) CheckPeer() error {
	if s.CycleBuffer > MaxPeerCycleBuffer {
		return overLimit("cycle buffer size", "a page size of", uint64(s.CycleBuffer), MaxPeerCycleBuffer,
			" bytes", "no page is larger")
	}
	if s.CacheLineSize > MaxPeerCacheLine {
		return overLimit("cache line size", "a cache line of", uint64(s.CacheLineSize), MaxPeerCacheLine,
			" bytes", "no CPU has longer lines")
	}
	return nil
}

// CheckPeer reports whether r, as a peer sent it, is within
// MaxMessageSize and MaxReportIters (an ErrLimit naming the field and
// the limit if not).
func (r BWReport) CheckPeer() error {
	if r.Size > MaxMessageSize {
		return overLimit("result report", "a message size of", r.Size, MaxMessageSize,
			" bytes", "the largest -s perftest takes")
	}
	if r.Iters > MaxReportIters {
		return overLimit("result report", "an iteration count of", r.Iters, MaxReportIters,
			"", "the largest -n times the largest -q perftest takes")
	}
	return nil
}

// marshalInt32 encodes v big-endian (perftest's hton_int).
func marshalInt32(v int32) []byte { return binary.BigEndian.AppendUint32(nil, uint32(v)) }

// negotiateMTU returns the MTU both sides use after perftest's MTU
// exchange: the remote value if it is valid and smaller than the local
// one.
func negotiateMTU(local, remote verbs.MTU) verbs.MTU {
	if remote.Valid() && local > remote {
		return remote
	}
	return local
}

// MarshalMTU returns the 2-byte MTU message: "%d" of the ibv_mtu enum and
// a NUL.
func MarshalMTU(m verbs.MTU) ([]byte, error) {
	if m > 9 {
		return nil, fmt.Errorf("MTU enum %d does not fit the 2-byte message", m)
	}
	return []byte{byte('0' + m), 0}, nil
}

// ParseMTU parses a 2-byte MTU message. Perftest takes strtol of it; a
// value outside 1..5 is returned as is and ignored when the two sides
// settle on the smaller MTU.
func ParseMTU(b []byte) (verbs.MTU, error) {
	if len(b) != MTUMsgSize || b[0] < '0' || b[0] > '9' || b[1] != 0 {
		return 0, malformed("MTU message", "%q is not a digit and a NUL", b)
	}
	return verbs.MTU(b[0] - '0'), nil
}

// KeyMsg is one QP's entry of perftest's key exchange (struct
// pingpong_dest): everything the peer needs to connect to the QP and to
// address its buffer. How perftest uses the fields, which a sroce tool
// should mirror: RTR takes dest_qp_num and rq_psn from the peer's QPN and
// PSN, max_dest_rd_atomic from its own OutReads and min_rnr_timer 12; RTS
// takes sq_psn from its own PSN, max_rd_atomic from the peer's OutReads,
// timeout from -u (14), retry_cnt 7 and rnr_retry 7; the GRH carries the
// peer's GID with hop limit 255 and --tclass. VAddr points into the
// second half of the side's buffer: buffer start + (number of QPs + QP
// index) * the larger of the message size and the negotiated cycle
// buffer; RKey is that buffer's.
type KeyMsg struct {
	LID      uint16
	OutReads uint16  // outstanding RDMA READ/atomic limit ("%04x"); 1 for send/write tests
	QPN      uint32  // 24 bits
	PSN      uint32  // 24 bits
	RKey     uint32  // of the buffer the peer may access
	VAddr    uint64  // where the peer reads or writes
	GID      bth.GID // only in the 108-byte format
	SRQN     uint32  // XRC/DC shared receive queue number; 0 otherwise
	// GIDIndex is the sender's GID index, carried only by the binary
	// (RDMA CM) form.
	GIDIndex uint32
}

// MarshalCM encodes k as the binary struct pingpong_dest perftest sends
// over an RDMA CM exchange (-R, -z), CMKeyMsgSize bytes:
//
//	lid, out_reads, qpn, psn, rkey (5 × 32 bits), 4 bytes of padding,
//	vaddr (64 bits), gid (16 bytes), srqn, gid_index (2 × 32 bits)
//
// all in network byte order.
func (k KeyMsg) MarshalCM() []byte {
	b := make([]byte, CMKeyMsgSize)
	for i, v := range []uint32{uint32(k.LID), uint32(k.OutReads), k.QPN, k.PSN, k.RKey} {
		binary.BigEndian.PutUint32(b[4*i:], v)
	}
	binary.BigEndian.PutUint64(b[24:], k.VAddr)
	copy(b[32:48], k.GID[:])
	binary.BigEndian.PutUint32(b[48:], k.SRQN)
	binary.BigEndian.PutUint32(b[52:], k.GIDIndex)
	return b
}

// ParseCMKeyMsg decodes a binary key message. perftest reads the LID,
// out_reads, QPN, PSN, rkey, vaddr and GID of it; so does ParseCMKeyMsg, and
// like ParseKeyMsg it refuses a QPN or PSN beyond 24 bits and out_reads
// beyond 16.
func ParseCMKeyMsg(b []byte) (KeyMsg, error) {
	const step = "key message"
	if len(b) != CMKeyMsgSize {
		return KeyMsg{}, malformed(step, "%d bytes instead of %d", len(b), CMKeyMsgSize)
	}
	u := func(i int) uint32 { return binary.BigEndian.Uint32(b[4*i:]) }
	k := KeyMsg{LID: uint16(u(0)), OutReads: uint16(u(1)), QPN: u(2), PSN: u(3), RKey: u(4),
		VAddr: binary.BigEndian.Uint64(b[24:]), SRQN: u(12), GIDIndex: u(13)}
	copy(k.GID[:], b[32:48])
	if u(0) > 0xffff || u(1) > 0xffff || k.QPN > 0xffffff || k.PSN > 0xffffff {
		return KeyMsg{}, malformed(step, "LID %#x, out_reads %#x, QPN %#x or PSN %#x is out of range", u(0), u(1), k.QPN, k.PSN)
	}
	return k, nil
}

// Marshal encodes k. With withGID (whenever a GID index is in use, which
// is always the case on RoCE: perftest picks index 0 when -x is absent)
// the message is the 108-byte
//
//	"%04x:%04x:%06x:%06x:%08x:%016llx:" + 16 x "%02x:" + "%08x:" + NUL
//
// (LID, out_reads, QPN, PSN, rkey, vaddr, GID bytes, SRQN), otherwise the
// 59-byte "%04x:%04x:%06x:%06x:%08x:%016llx:%08x" + NUL. QPN and PSN must
// fit in 24 bits.
func (k KeyMsg) Marshal(withGID bool) ([]byte, error) {
	if k.QPN > 0xffffff {
		return nil, fmt.Errorf("QPN %#x does not fit in 24 bits", k.QPN)
	}
	if k.PSN > 0xffffff {
		return nil, fmt.Errorf("PSN %#x does not fit in 24 bits", k.PSN)
	}
	size := KeyMsgSize
	if withGID {
		size = KeyMsgSizeGID
	}
	b := make([]byte, 0, size)
	hexf := func(v uint64, w int) { b = append(b, pad0(strconv.FormatUint(v, 16), w)...) }
	hexf(uint64(k.LID), 4)
	b = append(b, ':')
	hexf(uint64(k.OutReads), 4)
	b = append(b, ':')
	hexf(uint64(k.QPN), 6)
	b = append(b, ':')
	hexf(uint64(k.PSN), 6)
	b = append(b, ':')
	hexf(uint64(k.RKey), 8)
	b = append(b, ':')
	hexf(k.VAddr, 16)
	b = append(b, ':')
	if withGID {
		for _, c := range k.GID {
			hexf(uint64(c), 2)
			b = append(b, ':')
		}
		hexf(uint64(k.SRQN), 8)
		b = append(b, ':')
	} else {
		hexf(uint64(k.SRQN), 8)
	}
	b = append(b, 0)
	if len(b) != size {
		panic("oob: key message has the wrong size")
	}
	return b, nil
}

// ParseKeyMsg parses a key message of either format (withGID selects
// which size is expected). It accepts exactly the layout Marshal produces,
// with either case of hex digits.
func ParseKeyMsg(b []byte, withGID bool) (KeyMsg, error) {
	const step = "key message"
	var k KeyMsg
	size := KeyMsgSize
	if withGID {
		size = KeyMsgSizeGID
	}
	if len(b) != size {
		return k, malformed(step, "%d bytes instead of %d", len(b), size)
	}
	if b[size-1] != 0 {
		return k, malformed(step, "%q does not end in a NUL byte", b)
	}
	text := string(b[:size-1])
	if strings.IndexByte(text, 0) >= 0 {
		return k, malformed(step, "%q has a NUL byte inside", text)
	}
	fields := strings.Split(text, ":")
	want := []int{4, 4, 6, 6, 8, 16, 8}
	if withGID {
		want = []int{4, 4, 6, 6, 8, 16}
		for range 16 {
			want = append(want, 2)
		}
		want = append(want, 8, 0) // SRQN, then the empty rest after the final ':'
	}
	if len(fields) != len(want) {
		return k, malformed(step, "%q has %d fields instead of %d", text, len(fields), len(want))
	}
	vals := make([]uint64, len(fields))
	for i, f := range fields {
		if len(f) != want[i] {
			return k, malformed(step, "%q: field %d is %q", text, i+1, f)
		}
		v, err := parseHexField([]byte(f))
		if err != nil {
			return k, malformed(step, "%q: field %d: %v", text, i+1, err)
		}
		vals[i] = v
	}
	k = KeyMsg{LID: uint16(vals[0]), OutReads: uint16(vals[1]), QPN: uint32(vals[2]), PSN: uint32(vals[3]),
		RKey: uint32(vals[4]), VAddr: vals[5]}
	if withGID {
		for i := range 16 {
			k.GID[i] = byte(vals[6+i])
		}
		k.SRQN = uint32(vals[22])
	} else {
		k.SRQN = uint32(vals[6])
	}
	return k, nil
}

// BWReport is what a BW test exchanges at the end (struct
// bw_report_data): one row of the result table.
type BWReport struct {
	Size    uint64  // message size in bytes
	Iters   uint64  // completed iterations (times QPs)
	BWPeak  float64 // MB/s or Gb/s, as the side's report format says
	BWAvg   float64
	MsgRate float64 // Mpps

	// Per-port values, exchanged only with --report-per-port (dual port).
	BWAvgP1, MsgRateP1, BWAvgP2, MsgRateP2 float64
}

// reportItems returns the values of r in exchange order, each as its
// 8-byte big-endian wire form.
func (r BWReport) reportItems(perPort bool) [][]byte {
	u := func(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }
	f := func(v float64) []byte { return u(math.Float64bits(v)) }
	items := [][]byte{u(r.Size), u(r.Iters), f(r.BWPeak), f(r.BWAvg), f(r.MsgRate)}
	if perPort {
		items = append(items, f(r.BWAvgP1), f(r.MsgRateP1), f(r.BWAvgP2), f(r.MsgRateP2))
	}
	return items
}

// reportFromItems decodes the items reportItems produces.
func reportFromItems(items [][]byte) BWReport {
	u := func(i int) uint64 { return binary.BigEndian.Uint64(items[i]) }
	f := func(i int) float64 { return math.Float64frombits(u(i)) }
	r := BWReport{Size: u(0), Iters: u(1), BWPeak: f(2), BWAvg: f(3), MsgRate: f(4)}
	if len(items) > 5 {
		r.BWAvgP1, r.MsgRateP1, r.BWAvgP2, r.MsgRateP2 = f(5), f(6), f(7), f(8)
	}
	return r
}

// Add returns the sum of r and o, as perftest prints a bidirectional
// test's result (the size and iterations are r's).
func (r BWReport) Add(o BWReport) BWReport {
	r.BWPeak += o.BWPeak
	r.BWAvg += o.BWAvg
	r.MsgRate += o.MsgRate
	r.BWAvgP1 += o.BWAvgP1
	r.MsgRateP1 += o.MsgRateP1
	r.BWAvgP2 += o.BWAvgP2
	r.MsgRateP2 += o.MsgRateP2
	return r
}
