// Package rtnl is a small client for the kernel's routing netlink
// (NETLINK_ROUTE), written on golang.org/x/sys/unix. It is what package netif
// uses to read links, addresses, neighbours and routes and to follow link
// changes, and what package nsutil uses to create veth pairs and configure
// addresses in test namespaces.
//
// A Conn is a netlink socket. Like every socket it belongs to the network
// namespace of the thread that created it and keeps talking to that
// namespace whichever goroutine uses it later: Dial uses the calling
// thread's namespace, DialNetns the namespace behind a file descriptor.
//
// Messages are built with Encoder (a fixed header followed by attributes,
// nested attributes included) and read with ParseAttrs. Requests are
// serialized on a Conn; replies are matched by sequence number and port ID,
// so a late reply to an abandoned request is dropped rather than mistaken
// for the answer to the next one. The socket is non-blocking and registered
// with the Go runtime's poller, so Close and read deadlines interrupt a
// blocked Receive.
package rtnl

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ErrDumpInterrupted is returned when a dump was still inconsistent
// (NLM_F_DUMP_INTR: the table changed while it was read) after several
// attempts.
var ErrDumpInterrupted = errors.New("rtnl: dump interrupted by concurrent changes")

// recvBufSize holds any netlink datagram the kernel sends: dump batches
// are at most 32 KiB.
const recvBufSize = 64 << 10

// Message is one netlink message: the header fields that matter and the
// payload after the 16-byte header (the family header, such as ifinfomsg,
// followed by attributes).
type Message struct {
	Type  uint16
	Flags uint16
	Seq   uint32
	Pid   uint32
	Data  []byte
}

// Conn is a NETLINK_ROUTE socket. Request may be called from several
// goroutines (calls are serialized); Receive is for one goroutine
// following multicast groups.
type Conn struct {
	f   *os.File
	rc  syscall.RawConn
	pid uint32

	mu  sync.Mutex // serializes Request
	seq uint32
	buf []byte // owned by Request under mu

	rbuf []byte // owned by the Receive goroutine
}

// Dial opens a routing netlink socket in the calling thread's network
// namespace and joins the given multicast groups (unix.RTNLGRP_* numbers).
func Dial(groups ...uint32) (*Conn, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("rtnl: netlink socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("rtnl: bind netlink socket: %w", err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("rtnl: getsockname: %w", err)
	}
	nl, ok := sa.(*unix.SockaddrNetlink)
	if !ok {
		unix.Close(fd)
		return nil, errors.New("rtnl: netlink socket has a non-netlink address")
	}
	// Error messages from the kernel (extended ACK), and ACKs that do not
	// echo the whole request. Both are best effort: old kernels lack them.
	_ = unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_EXT_ACK, 1)
	_ = unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_CAP_ACK, 1)
	for _, g := range groups {
		if err := unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_ADD_MEMBERSHIP, int(g)); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("rtnl: join netlink group %d: %w", g, err)
		}
	}
	f := os.NewFile(uintptr(fd), "rtnetlink")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("rtnl: %w", err)
	}
	return &Conn{f: f, rc: rc, pid: nl.Pid, seq: uint32(time.Now().UnixNano())}, nil
}

// DialNetns opens a routing netlink socket in the network namespace that
// nsfd refers to (an open /run/netns/NAME or /proc/PID/ns/net); see
// InNetns for how.
func DialNetns(nsfd int, groups ...uint32) (*Conn, error) {
	var c *Conn
	err := InNetns(nsfd, func() (err error) {
		c, err = Dial(groups...)
		return err
	})
	return c, err
}

// InNetns runs fn on a thread in the network namespace nsfd refers to, for
// creating sockets there: sockets stay in the namespace they were created
// in. When nsfd is the calling thread's own namespace fn runs on a helper
// thread without any switch (and without privileges); otherwise the helper
// thread enters the namespace (which needs CAP_SYS_ADMIN) and leaves it
// again afterwards, and is discarded if leaving fails.
func InNetns(nsfd int, fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		same, err := SameNetns(nsfd)
		if err != nil {
			runtime.UnlockOSThread()
			done <- err
			return
		}
		if same {
			err := fn()
			runtime.UnlockOSThread()
			done <- err
			return
		}
		orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("rtnl: open own network namespace: %w", err)
			return
		}
		defer unix.Close(orig)
		if err := unix.Setns(nsfd, unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("rtnl: enter network namespace: %w", err)
			return
		}
		err = fn()
		if unix.Setns(orig, unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		} // else: the goroutine exits locked and the runtime ends the thread.
		done <- err
	}()
	return <-done
}

// SameNetns reports whether nsfd refers to the calling thread's network
// namespace.
func SameNetns(nsfd int) (bool, error) {
	var a, b unix.Stat_t
	if err := unix.Fstat(nsfd, &a); err != nil {
		return false, fmt.Errorf("rtnl: stat namespace: %w", err)
	}
	if err := unix.Stat("/proc/thread-self/ns/net", &b); err != nil {
		return false, fmt.Errorf("rtnl: stat own namespace: %w", err)
	}
	return a.Dev == b.Dev && a.Ino == b.Ino, nil
}

// Close closes the socket. A blocked Receive returns an error.
func (c *Conn) Close() error { return c.f.Close() }

// SetReadDeadline sets the deadline for Receive (and for the replies of
// Request). A zero time means no deadline.
func (c *Conn) SetReadDeadline(t time.Time) error { return c.f.SetReadDeadline(t) }

// Errno is the error the kernel returned for a request, with the extended
// ACK message when the kernel supplied one.
type Errno struct {
	Op    string // the request, e.g. "RTM_NEWLINK"
	Errno unix.Errno
	Msg   string // extended ACK message, may be empty
}

// Error names the request, the errno and the kernel's message.
func (e *Errno) Error() string {
	if e.Msg != "" {
		return fmt.Sprintf("netlink %s: %v (%s)", e.Op, e.Errno, e.Msg)
	}
	return fmt.Sprintf("netlink %s: %v", e.Op, e.Errno)
}

// Unwrap returns the errno, so errors.Is(err, unix.ENOENT) works.
func (e *Errno) Unwrap() error { return e.Errno }

// Request sends one request message (typ, flags and body: the family
// header and attributes) and returns the replies. NLM_F_REQUEST is always
// set. For a dump (flags include NLM_F_DUMP) it returns every message up to
// NLMSG_DONE, retrying the dump a few times if the kernel flags it as
// interrupted; otherwise it asks for an ACK and returns the messages that
// came before it (for a get request, the object; for a change, nothing).
// A kernel error is returned as *Errno.
func (c *Conn) Request(typ, flags uint16, body []byte) ([]Message, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	dump := flags&unix.NLM_F_DUMP == unix.NLM_F_DUMP
	flags |= unix.NLM_F_REQUEST
	if !dump {
		flags |= unix.NLM_F_ACK
	}
	for attempt := 0; ; attempt++ {
		msgs, intr, err := c.roundTrip(typ, flags, body, dump)
		if err != nil || !intr {
			return msgs, err
		}
		if attempt == 4 {
			return nil, ErrDumpInterrupted
		}
	}
}

func (c *Conn) roundTrip(typ, flags uint16, body []byte, dump bool) (msgs []Message, intr bool, err error) {
	c.seq++
	seq := c.seq
	req := make([]byte, unix.SizeofNlMsghdr+len(body))
	binary.NativeEndian.PutUint32(req[0:], uint32(len(req)))
	binary.NativeEndian.PutUint16(req[4:], typ)
	binary.NativeEndian.PutUint16(req[6:], flags)
	binary.NativeEndian.PutUint32(req[8:], seq)
	binary.NativeEndian.PutUint32(req[12:], c.pid)
	copy(req[unix.SizeofNlMsghdr:], body)
	if err := c.send(req); err != nil {
		return nil, false, fmt.Errorf("rtnl: send %s: %w", MsgTypeName(typ), err)
	}
	if c.buf == nil {
		c.buf = make([]byte, recvBufSize)
	}
	for {
		n, err := c.recv(c.buf)
		if err != nil {
			return nil, false, fmt.Errorf("rtnl: receive %s reply: %w", MsgTypeName(typ), err)
		}
		batch, err := ParseMessages(c.buf[:n])
		if err != nil {
			return nil, false, err
		}
		for _, m := range batch {
			if m.Seq != seq || m.Pid != c.pid {
				continue // a late reply to an earlier request, or a notification
			}
			if m.Flags&unix.NLM_F_DUMP_INTR != 0 {
				intr = true
			}
			switch m.Type {
			case unix.NLMSG_DONE:
				if len(m.Data) >= 4 {
					if e := int32(binary.NativeEndian.Uint32(m.Data)); e < 0 {
						return nil, false, &Errno{Op: MsgTypeName(typ), Errno: unix.Errno(-e)}
					}
				}
				return msgs, intr, nil
			case unix.NLMSG_ERROR:
				if e := parseError(typ, m); e != nil {
					return nil, false, e
				}
				if !dump {
					return msgs, false, nil
				}
			case unix.NLMSG_NOOP:
			default:
				m.Data = append([]byte(nil), m.Data...)
				msgs = append(msgs, m)
			}
		}
	}
}

// parseError decodes an NLMSG_ERROR message; nil means an ACK.
func parseError(typ uint16, m Message) error {
	if len(m.Data) < 4 {
		return &Errno{Op: MsgTypeName(typ), Errno: unix.EBADMSG}
	}
	code := int32(binary.NativeEndian.Uint32(m.Data))
	if code == 0 {
		return nil
	}
	e := &Errno{Op: MsgTypeName(typ), Errno: unix.Errno(-code)}
	if m.Flags&unix.NLM_F_ACK_TLVS != 0 && len(m.Data) >= 4+unix.SizeofNlMsghdr {
		// The request header is echoed; with NLM_F_CAPPED only the header.
		off := 4 + unix.SizeofNlMsghdr
		if m.Flags&unix.NLM_F_CAPPED == 0 {
			off = 4 + int(binary.NativeEndian.Uint32(m.Data[4:]))
		}
		if off <= len(m.Data) {
			if attrs, err := ParseAttrs(m.Data[alignUp(off):]); err == nil {
				for _, a := range attrs {
					if a.Type == unix.NLMSGERR_ATTR_MSG {
						e.Msg = cString(a.Data)
					}
				}
			}
		}
	}
	return e
}

// Receive waits for the next datagram (for a Conn that joined multicast
// groups) and returns its messages. The returned Data slices are valid
// until the next Receive. When the socket's receive buffer overflowed the
// error is unix.ENOBUFS: notifications were lost and the caller should
// re-read the state it follows.
func (c *Conn) Receive() ([]Message, error) {
	if c.rbuf == nil {
		c.rbuf = make([]byte, recvBufSize)
	}
	n, err := c.recv(c.rbuf)
	if err != nil {
		return nil, err
	}
	return ParseMessages(c.rbuf[:n])
}

func (c *Conn) send(b []byte) error {
	var serr error
	err := c.rc.Write(func(fd uintptr) bool {
		serr = unix.Sendto(int(fd), b, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
		return serr != unix.EAGAIN
	})
	if err != nil {
		return err
	}
	return serr
}

func (c *Conn) recv(b []byte) (int, error) {
	var (
		n    int
		rerr error
	)
	err := c.rc.Read(func(fd uintptr) bool {
		n, _, rerr = unix.Recvfrom(int(fd), b, unix.MSG_TRUNC)
		return rerr != unix.EAGAIN
	})
	if err != nil {
		return 0, err
	}
	if rerr != nil {
		return 0, rerr
	}
	if n > len(b) {
		return 0, fmt.Errorf("rtnl: netlink datagram of %d bytes truncated to %d", n, len(b))
	}
	return n, nil
}

// ParseMessages splits a netlink datagram into messages. Data slices point
// into b.
func ParseMessages(b []byte) ([]Message, error) {
	var msgs []Message
	for len(b) >= unix.SizeofNlMsghdr {
		l := int(binary.NativeEndian.Uint32(b[0:]))
		if l < unix.SizeofNlMsghdr || l > len(b) {
			return msgs, fmt.Errorf("rtnl: bad netlink message length %d (%d bytes left)", l, len(b))
		}
		msgs = append(msgs, Message{
			Type:  binary.NativeEndian.Uint16(b[4:]),
			Flags: binary.NativeEndian.Uint16(b[6:]),
			Seq:   binary.NativeEndian.Uint32(b[8:]),
			Pid:   binary.NativeEndian.Uint32(b[12:]),
			Data:  b[unix.SizeofNlMsghdr:l],
		})
		l = alignUp(l)
		if l > len(b) {
			break
		}
		b = b[l:]
	}
	return msgs, nil
}

// MsgTypeName names the routing message types this package's users send.
func MsgTypeName(t uint16) string {
	switch t {
	case unix.RTM_NEWLINK:
		return "RTM_NEWLINK"
	case unix.RTM_DELLINK:
		return "RTM_DELLINK"
	case unix.RTM_GETLINK:
		return "RTM_GETLINK"
	case unix.RTM_NEWADDR:
		return "RTM_NEWADDR"
	case unix.RTM_DELADDR:
		return "RTM_DELADDR"
	case unix.RTM_GETADDR:
		return "RTM_GETADDR"
	case unix.RTM_NEWROUTE:
		return "RTM_NEWROUTE"
	case unix.RTM_GETROUTE:
		return "RTM_GETROUTE"
	case unix.RTM_NEWNEIGH:
		return "RTM_NEWNEIGH"
	case unix.RTM_DELNEIGH:
		return "RTM_DELNEIGH"
	case unix.RTM_GETNEIGH:
		return "RTM_GETNEIGH"
	}
	return fmt.Sprintf("message type %d", t)
}

func alignUp(n int) int { return (n + unix.NLMSG_ALIGNTO - 1) &^ (unix.NLMSG_ALIGNTO - 1) }

func cString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}
