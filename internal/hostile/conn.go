// Package hostile is a hostile client of the sroce daemon, for tests: it
// speaks the control protocol (package daemon/ctl) and writes the shared
// rings (package ring) directly, to do what an unprivileged local user
// bent on harm would do: race the daemon's reads of shared memory, exhaust
// its descriptors, mappings and memory, and scribble on everything it is
// given. Product code never imports it; tests run its command
// (cmd/sroce-hostile) as an unprivileged user against a real daemon.
package hostile

import (
	"errors"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sroce/sroce/daemon/ctl"
	"golang.org/x/sys/unix"
)

// callTimeout bounds one request's round trip.
const callTimeout = 10 * time.Second

// Refused is a request the daemon answered with an errno.
type Refused struct {
	Op    ctl.Op
	Errno unix.Errno
}

func (e *Refused) Error() string { return fmt.Sprintf("%s refused: %v", e.Op, e.Errno) }

// Conn is one connection to the daemon, spoken to message by message.
type Conn struct {
	uc  *net.UnixConn
	seq uint32
	buf []byte
	oob []byte
}

// ErrGone says the daemon's socket no longer accepts connections: the
// daemon is gone.
var ErrGone = errors.New("the daemon's socket does not answer")

// Dial connects to the daemon at socket and says HELLO. A daemon whose
// socket is gone or refuses connections gives an error wrapping ErrGone; a
// connection the daemon closes at once (over a connection cap) gives
// another error.
func Dial(socket string) (*Conn, error) {
	uc, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: socket, Net: "unixpacket"})
	if err != nil {
		if errors.Is(err, unix.ECONNREFUSED) || errors.Is(err, unix.ENOENT) {
			return nil, fmt.Errorf("%w: %w", ErrGone, err)
		}
		return nil, err
	}
	c := &Conn{uc: uc, buf: make([]byte, ctl.MaxMsg+1), oob: make([]byte, unix.CmsgSpace(ctl.MaxFDs*4))}
	hello := ctl.Hello{ABI: ctl.Version}
	if _, _, err := c.Call(ctl.OpHello, ctl.Bytes(&hello), nil); err != nil {
		uc.Close()
		return nil, err
	}
	return c, nil
}

// Close closes the connection.
func (c *Conn) Close() error { return c.uc.Close() }

// Send sends one raw datagram with descriptors, for requests a
// well-behaved client would never make.
func (c *Conn) Send(msg []byte, fds []int) error {
	var rights []byte
	if len(fds) > 0 {
		rights = unix.UnixRights(fds...)
	}
	c.uc.SetWriteDeadline(time.Now().Add(callTimeout))
	_, _, err := c.uc.WriteMsgUnix(msg, rights, nil)
	return err
}

// Recv reads one reply and returns its header, body and descriptors.
func (c *Conn) Recv() (ctl.Hdr, []byte, []int, error) {
	c.uc.SetReadDeadline(time.Now().Add(callTimeout))
	n, oobn, _, _, err := c.uc.ReadMsgUnix(c.buf, c.oob)
	if err != nil {
		return ctl.Hdr{}, nil, nil, err
	}
	if n == 0 {
		return ctl.Hdr{}, nil, nil, fmt.Errorf("the daemon closed the connection")
	}
	var fds []int
	if oobn > 0 {
		msgs, _ := unix.ParseSocketControlMessage(c.oob[:oobn])
		for _, m := range msgs {
			if f, err := unix.ParseUnixRights(&m); err == nil {
				fds = append(fds, f...)
			}
		}
	}
	h, b, err := ctl.Parse(c.buf[:n])
	if err != nil {
		closeAll(fds)
		return h, nil, nil, fmt.Errorf("unreadable reply: %w", err)
	}
	return h, append([]byte(nil), b...), fds, nil
}

// Call sends a request and returns the reply's body and descriptors; a
// refusal is a *Refused, anything else means the connection broke.
func (c *Conn) Call(op ctl.Op, body []byte, fds []int) ([]byte, []int, error) {
	c.seq++
	if err := c.Send(ctl.Append(nil, ctl.Hdr{Op: op, Seq: c.seq, NFDs: uint32(len(fds))}, body), fds); err != nil {
		return nil, nil, fmt.Errorf("sending %s: %w", op, err)
	}
	h, b, rfds, err := c.Recv()
	if err != nil {
		return nil, nil, fmt.Errorf("waiting for the reply to %s: %w", op, err)
	}
	if h.Err != 0 {
		closeAll(rfds)
		return nil, nil, &Refused{Op: op, Errno: unix.Errno(h.Err)}
	}
	return b, rfds, nil
}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// get decodes a reply body.
func get[T any](b []byte, op ctl.Op) (T, error) {
	v, err := ctl.Get[T](b)
	if err != nil {
		return v, fmt.Errorf("short reply to %s", op)
	}
	return v, nil
}

// Opened is what OPEN gives a client: the async socket, the doorbell
// eventfd and the context page's memfd.
type Opened struct {
	Async, Doorbell, Page int
}

// Close closes the client's copies.
func (o Opened) Close() { closeAll([]int{o.Async, o.Doorbell, o.Page}) }

// Open opens device dev on the connection.
func (c *Conn) Open(dev string) (Opened, error) {
	var in ctl.Open
	ctl.SetName(in.Name[:], dev)
	_, fds, err := c.Call(ctl.OpOpen, ctl.Bytes(&in), nil)
	if err != nil {
		return Opened{}, err
	}
	if len(fds) != 3 {
		closeAll(fds)
		return Opened{}, fmt.Errorf("OPEN passed %d descriptors, want 3", len(fds))
	}
	return Opened{fds[0], fds[1], fds[2]}, nil
}

// handleOf calls op and returns the handle its reply starts with, with
// the descriptors passed.
func (c *Conn) handleOf(op ctl.Op, body []byte) (uint32, []int, error) {
	b, fds, err := c.Call(op, body, nil)
	if err != nil {
		return 0, nil, err
	}
	h, err := get[ctl.Handle](b, op)
	if err != nil {
		closeAll(fds)
	}
	return h.Handle, fds, err
}

// AllocPD allocates a PD.
func (c *Conn) AllocPD() (uint32, error) {
	h, fds, err := c.handleOf(ctl.OpAllocPD, nil)
	closeAll(fds)
	return h, err
}

// CreateCompChannel creates a completion channel and returns its handle
// and the client's end of its socket.
func (c *Conn) CreateCompChannel() (uint32, []int, error) {
	return c.handleOf(ctl.OpCreateCompChannel, nil)
}

// CreateCQ creates a CQ of cqe entries on channel (0: none) and returns
// its reply and the memfd of its memory.
func (c *Conn) CreateCQ(cqe, channel uint32) (ctl.CQ, []int, error) {
	in := ctl.CreateCQ{CQE: cqe, Channel: channel}
	b, fds, err := c.Call(ctl.OpCreateCQ, ctl.Bytes(&in), nil)
	if err != nil {
		return ctl.CQ{}, nil, err
	}
	r, err := get[ctl.CQ](b, ctl.OpCreateCQ)
	return r, fds, err
}

// CreateQP creates a QP and returns its reply and the memfd of its rings.
func (c *Conn) CreateQP(in ctl.CreateQP) (ctl.QP, []int, error) {
	b, fds, err := c.Call(ctl.OpCreateQP, ctl.Bytes(&in), nil)
	if err != nil {
		return ctl.QP{}, nil, err
	}
	r, err := get[ctl.QP](b, ctl.OpCreateQP)
	return r, fds, err
}

// CreateSRQ creates an SRQ of maxWR receives in pd and returns its reply
// and the memfd of its ring.
func (c *Conn) CreateSRQ(pd, maxWR, maxSGE uint32) (ctl.SRQCreated, []int, error) {
	in := ctl.SRQ{PDOrHandle: pd, MaxWR: maxWR, MaxSGE: maxSGE}
	b, fds, err := c.Call(ctl.OpCreateSRQ, ctl.Bytes(&in), nil)
	if err != nil {
		return ctl.SRQCreated{}, nil, err
	}
	r, err := get[ctl.SRQCreated](b, ctl.OpCreateSRQ)
	return r, fds, err
}

// RegMR registers length bytes at off of memfd in pd.
func (c *Conn) RegMR(pd uint32, memfd int, addr, off, length uint64) (ctl.MR, error) {
	in := ctl.RegMR{PD: pd, Access: 1, Addr: addr, Length: length, IOVA: addr, FDOffset: off}
	b, fds, err := c.Call(ctl.OpRegMR, ctl.Bytes(&in), []int{memfd})
	closeAll(fds)
	if err != nil {
		return ctl.MR{}, err
	}
	return get[ctl.MR](b, ctl.OpRegMR)
}

// Alive reports whether the daemon at socket answers a new connection:
// LIST_DEVICES, or a refusal of the connection (over this uid's budget,
// which the connections an attack just closed may still hold while the
// daemon frees them) is an answer.
func Alive(socket string) error {
	c, err := Dial(socket)
	var r *Refused
	if errors.As(err, &r) {
		return nil
	}
	if err != nil {
		return err
	}
	defer c.Close()
	_, fds, err := c.Call(ctl.OpListDevices, nil, nil)
	closeAll(fds)
	if errors.As(err, &r) {
		return nil
	}
	return err
}

// SealedMemfd returns a memfd of size bytes sealed against shrinking and
// growing, as the drop-in library makes them for registration.
func SealedMemfd(size int64) (int, error) {
	fd, err := unix.MemfdCreate("sroce-mr", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return -1, fmt.Errorf("memfd_create: %w", err)
	}
	if err := unix.Ftruncate(fd, size); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("sizing the memfd: %w", err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("sealing the memfd: %w", err)
	}
	return fd, nil
}

// Tally counts what an attack achieved and what it was refused, safe for
// concurrent use.
type Tally struct {
	mu       sync.Mutex
	achieved map[string]int
	refused  map[string]int
	broken   map[string]int
}

// NewTally returns an empty tally.
func NewTally() *Tally {
	return &Tally{achieved: map[string]int{}, refused: map[string]int{}, broken: map[string]int{}}
}

// Got counts n of what was achieved.
func (t *Tally) Got(what string, n int) {
	t.mu.Lock()
	t.achieved[what] += n
	t.mu.Unlock()
}

// Err counts the outcome of a failed request: a refusal by errno, or a
// connection the daemon closed (or that broke otherwise) by what was
// being done.
func (t *Tally) Err(what string, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var r *Refused
	if errors.As(err, &r) {
		t.refused[fmt.Sprintf("%s %s", r.Op, errnoName(r.Errno))]++
		return
	}
	t.broken[what]++
}

// errnoName returns an errno's symbol ("ENOMEM").
func errnoName(e unix.Errno) string {
	if s := unix.ErrnoName(e); s != "" {
		return s
	}
	return fmt.Sprintf("errno %d", int(e))
}

// Refusals returns how many requests the daemon refused.
func (t *Tally) Refusals() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, v := range t.refused {
		n += v
	}
	return n
}

// Disconnects returns how many times a connection broke.
func (t *Tally) Disconnects() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, v := range t.broken {
		n += v
	}
	return n
}

// String lists the counts, one per line, sorted.
func (t *Tally) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var lines []string
	for k, v := range t.achieved {
		lines = append(lines, fmt.Sprintf("achieved %s: %d", k, v))
	}
	for k, v := range t.refused {
		lines = append(lines, fmt.Sprintf("refused %s: %d", k, v))
	}
	for k, v := range t.broken {
		lines = append(lines, fmt.Sprintf("disconnected during %s: %d", k, v))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}
