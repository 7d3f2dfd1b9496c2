package oob

// The exchange of rdma-core's ibv_rc_pingpong and ibv_ud_pingpong
// (libibverbs/examples, rdma-core 44.0 as Debian bookworm ships it in
// ibverbs-utils 44.0-2). On TCP port 18515:
//
//	client                                  server
//	connect ------------------------------> accept (one client)
//	"LLLL:QQQQQQ:PPPPPP:<32 hex GID>\0" ---> (52 bytes)
//	                                        moves its QP to RTR/RTS
//	                                        (RC) or creates its AH (UD)
//	(52 bytes) <--------------------------- its own address message
//	"done\0" -----------------------------> (5 bytes)
//	close                                   close
//
// LLLL is the LID ("%04x"), QQQQQQ the QPN and PPPPPP the initial PSN
// ("%06x"), then the GID as 32 hex digits (see WireGID). The real client
// sends "done" right after reading the reply and connects its QP
// afterwards; PingpongClient lets the caller connect first (the server
// only waits a little longer for "done").

import (
	"bytes"
	"context"
	"fmt"
	"github.com/sroce/sroce/bth"
	"net"
	"strconv"
)

// DestMsgSize is the size of a pingpong address message: 51 characters
// and the terminating NUL.
const DestMsgSize = 52

// doneMsg is what the client sends after reading the server's address.
var doneMsg = []byte("done\x00")

// Dest is one side's address in the pingpong exchange (rdma-core's struct
// pingpong_dest).
type Dest struct {
	LID uint16  // 0 on RoCE
	QPN uint32  // 24 bits
	PSN uint32  // initial packet sequence number, 24 bits
	GID bth.GID // zero when the tool runs without -g
}

// Marshal returns the 52-byte address message, "%04x:%06x:%06x:%s" and a
// NUL. QPN and PSN must fit in 24 bits: a longer field would shift the
// message, which the reference tools would misread.
func (d Dest) Marshal() ([]byte, error) {
	if d.QPN > 0xffffff {
		return nil, fmt.Errorf("QPN %#x does not fit in 24 bits", d.QPN)
	}
	if d.PSN > 0xffffff {
		return nil, fmt.Errorf("PSN %#x does not fit in 24 bits", d.PSN)
	}
	b := make([]byte, 0, DestMsgSize)
	b = append(b, pad0(strconv.FormatUint(uint64(d.LID), 16), 4)...)
	b = append(b, ':')
	b = append(b, pad0(strconv.FormatUint(uint64(d.QPN), 16), 6)...)
	b = append(b, ':')
	b = append(b, pad0(strconv.FormatUint(uint64(d.PSN), 16), 6)...)
	b = append(b, ':')
	b = append(b, WireGID(d.GID)...)
	b = append(b, 0)
	return b, nil
}

// ParseDest parses a 52-byte address message. It is strict about the
// layout the tools produce (fixed-width hex fields, colons, the NUL),
// accepting either case of hex digits.
func ParseDest(b []byte) (Dest, error) {
	const step = "address message"
	var d Dest
	if len(b) != DestMsgSize {
		return d, malformed(step, "%d bytes instead of %d", len(b), DestMsgSize)
	}
	if b[DestMsgSize-1] != 0 {
		return d, malformed(step, "%q does not end in a NUL byte", b)
	}
	text := b[:DestMsgSize-1]
	if i := bytes.IndexByte(text, 0); i >= 0 {
		return d, malformed(step, "%q ends after %d characters", text[:i], i)
	}
	if text[4] != ':' || text[11] != ':' || text[18] != ':' {
		return d, malformed(step, "%q is not LID:QPN:PSN:GID", text)
	}
	lid, err := parseHexField(text[0:4])
	if err != nil {
		return d, malformed(step, "%q: LID %v", text, err)
	}
	qpn, err := parseHexField(text[5:11])
	if err != nil {
		return d, malformed(step, "%q: QPN %v", text, err)
	}
	psn, err := parseHexField(text[12:18])
	if err != nil {
		return d, malformed(step, "%q: PSN %v", text, err)
	}
	gid, err := ParseWireGID(string(text[19:]))
	if err != nil {
		return d, malformed(step, "%q: %v", text, err)
	}
	return Dest{LID: uint16(lid), QPN: uint32(qpn), PSN: uint32(psn), GID: gid}, nil
}

// parseHexField parses a fixed-width field of hex digits.
func parseHexField(f []byte) (uint64, error) {
	var v uint64
	for _, c := range f {
		var x byte
		switch {
		case c >= '0' && c <= '9':
			x = c - '0'
		case c >= 'a' && c <= 'f':
			x = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			x = c - 'A' + 10
		default:
			return 0, fmt.Errorf("%q is not hex", f)
		}
		v = v<<4 | uint64(x)
	}
	return v, nil
}

// PingpongClient runs the client side over nc: it sends local, reads the
// server's address, calls ready (if not nil) with it, and then sends
// "done". ready is where the caller moves its QP to RTR/RTS or creates its
// address handle; if it fails, "done" is not sent and the server reports
// the short exchange. nc is closed on return, as the tools do.
func PingpongClient(ctx context.Context, nc net.Conn, t Timeouts, local Dest, ready func(remote Dest) error) (Dest, error) {
	defer nc.Close()
	msg, err := local.Marshal()
	if err != nil {
		return Dest{}, err
	}
	s := &stepper{nc: nc, t: t}
	in := make([]byte, DestMsgSize)
	if err := s.swap(ctx, "address message", t.step(), true, msg, in); err != nil {
		return Dest{}, err
	}
	remote, err := ParseDest(in)
	if err != nil {
		return Dest{}, err
	}
	if ready != nil {
		if err := ready(remote); err != nil {
			return remote, err
		}
	}
	err = s.do(ctx, "done message", t.step(), func() error { return s.write(doneMsg) })
	return remote, err
}

// PingpongServer runs the server side over an accepted nc: it reads the
// client's address, calls connect (if not nil) so the caller can move its
// QP to RTR/RTS (RC) or create its address handle (UD) before answering,
// replies with local and waits for the client's "done". nc is closed on
// return.
func PingpongServer(ctx context.Context, nc net.Conn, t Timeouts, local Dest, connect func(remote Dest) error) (Dest, error) {
	defer nc.Close()
	msg, err := local.Marshal()
	if err != nil {
		return Dest{}, err
	}
	s := &stepper{nc: nc, t: t}
	in := make([]byte, DestMsgSize)
	if err := s.do(ctx, "address message", t.step(), func() error { return s.read(in) }); err != nil {
		return Dest{}, err
	}
	remote, err := ParseDest(in)
	if err != nil {
		return Dest{}, err
	}
	if connect != nil {
		if err := connect(remote); err != nil {
			return remote, err
		}
	}
	done := make([]byte, len(doneMsg))
	err = s.do(ctx, "done message", t.step(), func() error {
		if err := s.write(msg); err != nil {
			return err
		}
		return s.read(done)
	})
	if err != nil {
		return remote, err
	}
	if !bytes.Equal(done, doneMsg) {
		return remote, malformed("done message", "got %q instead of \"done\\0\"", done)
	}
	return remote, nil
}

// DialPingpong connects to a pingpong server at addr ("host:port", port
// 18515 by default in the tools) and runs PingpongClient.
func DialPingpong(ctx context.Context, addr string, t Timeouts, local Dest, ready func(remote Dest) error) (Dest, error) {
	nc, err := Dial(ctx, addr, t.connect())
	if err != nil {
		return Dest{}, err
	}
	return PingpongClient(ctx, nc, t, local, ready)
}

// ServePingpong waits on ln for one client (until ctx is done, or up to
// t.Accept), closes ln and runs PingpongServer.
func ServePingpong(ctx context.Context, ln net.Listener, t Timeouts, local Dest, connect func(remote Dest) error) (Dest, error) {
	actx, cancel := t.acceptContext(ctx)
	nc, err := AcceptOne(actx, ln)
	cancel()
	if err != nil {
		return Dest{}, err
	}
	return PingpongServer(ctx, nc, t, local, connect)
}
