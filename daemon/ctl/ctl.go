// Package ctl is the control protocol between the sroce daemon and its
// clients: the messages of sroce_ctl.h (in this directory), field for field,
// and the framing of one message as a SOCK_SEQPACKET datagram. The C
// header is the source: the drop-in libibverbs of shim/ compiles against
// it, and the structs, constants and ops of header_gen.go are generated
// from it (go generate; the tests fail when they are stale and compare
// every offset and size with the C compiler's).
//
// Messages are fixed-layout structs in the host's (little-endian) byte
// order, copied to and from the datagram as they lie in memory, so every
// struct here holds plain values only, with explicit padding.
package ctl

import (
	"errors"
	"fmt"
	"unsafe"
)

// IsCM says whether the op is one of the connection manager's (CM_*),
// which a connection may send before OPEN.
func (o Op) IsCM() bool { return o >= OpCMCreateChannel && o <= OpCMLeaveMcast }

// String returns the op's name ("CREATE_QP"), or "op N" for an unknown one.
func (o Op) String() string {
	if s, ok := opNames[o]; ok {
		return s
	}
	return fmt.Sprintf("op %d", uint16(o))
}

// HdrSize is the size of Hdr on the wire.
const HdrSize = int(unsafe.Sizeof(Hdr{}))

// CtxPageSize is the size of the context page's memfd.
const CtxPageSize = 4096

// ErrShort reports a body shorter than its op's struct.
var ErrShort = errors.New("message body shorter than its operation's struct")

// Bytes returns v's memory as a byte slice (it aliases v).
func Bytes[T any](v *T) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(v)), unsafe.Sizeof(*v))
}

// Get copies the first sizeof(T) bytes of b into a T.
func Get[T any](b []byte) (T, error) {
	var v T
	n := copy(Bytes(&v), b)
	if n < int(unsafe.Sizeof(v)) {
		return v, ErrShort
	}
	return v, nil
}

// SetName stores s, NUL-terminated and truncated to fit, in a name buffer.
func SetName(dst []byte, s string) {
	clear(dst)
	copy(dst[:len(dst)-1], s)
}

// Name returns the NUL-terminated string of a name buffer.
func Name(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// Append appends a message (header and body parts) to buf and returns it;
// the header's Len is set from the parts.
func Append(buf []byte, h Hdr, parts ...[]byte) []byte {
	n := HdrSize
	for _, p := range parts {
		n += len(p)
	}
	h.Magic, h.Version, h.Len = Magic, Version, uint32(n)
	buf = append(buf, Bytes(&h)...)
	for _, p := range parts {
		buf = append(buf, p...)
	}
	return buf
}

// Parse checks a datagram's header and returns it with the body.
func Parse(b []byte) (Hdr, []byte, error) {
	if len(b) < HdrSize {
		return Hdr{}, nil, fmt.Errorf("datagram of %d bytes is shorter than the %d-byte header", len(b), HdrSize)
	}
	h, _ := Get[Hdr](b)
	switch {
	case h.Magic != Magic:
		return h, nil, fmt.Errorf("bad magic %#x (want %#x)", h.Magic, Magic)
	case h.Version != Version:
		return h, nil, fmt.Errorf("protocol version %d, this daemon speaks %d", h.Version, Version)
	case int(h.Len) != len(b):
		return h, nil, fmt.Errorf("header says %d bytes, datagram has %d", h.Len, len(b))
	case h.NFDs > MaxFDs:
		return h, nil, fmt.Errorf("header announces %d descriptors, at most %d", h.NFDs, MaxFDs)
	}
	return h, b[HdrSize:], nil
}

// Stats is QUERY_STATS' reply, as JSON: what "sroce stat" shows of a
// device the daemon serves.
type Stats struct {
	Device    string    `json:"device"`
	Interface string    `json:"interface"`
	LinkMode  string    `json:"link_mode"`
	Reason    string    `json:"link_mode_reason"`
	PortState string    `json:"port_state"`
	ActiveMTU int       `json:"active_mtu"`
	Seconds   float64   `json:"seconds_open"`
	Clients   int       `json:"clients"`
	Engine    []Counter `json:"counters"`
	Link      []Counter `json:"link_counters"`
	CM        []Counter `json:"cm_counters,omitempty"` // the RDMA CM's QP1 agent on the device
	PortErr   string    `json:"port_error,omitempty"`
}

// Counter is one named counter of Stats.
type Counter struct {
	Name  string `json:"name"`
	Value uint64 `json:"value"`
}
