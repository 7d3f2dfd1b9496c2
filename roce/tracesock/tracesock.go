// Package tracesock serves a device's live trace (roce.Device.Subscribe)
// on a unix socket, so that "sroce trace" can attach to a device that
// lives in another process, and reads it back.
//
// Where: one stream socket per device in the runtime directory (Dir:
// $SROCE_RUNTIME_DIR, else $XDG_RUNTIME_DIR/sroce, else /run/sroce as root
// and $TMPDIR/sroce-UID otherwise), named DEVICE.PID.sock (DEVICE.PID.N.sock
// for the Nth device of that name in one process). The socket is removed
// when the device closes; List skips and removes the sockets of processes
// that are gone.
//
// Who: a socket is its owner's only (mode 0600, set before the socket
// appears, whatever the umask): a trace shows every packet of the device,
// every user's, so the sroce daemon's devices are traced by root, and a
// user's own programs' devices by that user.
//
// Wire format: the server only writes, the client only reads (anything a
// client sends is ignored). The stream is a sequence of records, each a
// 4-byte big-endian length of what follows, then a kind byte and a body;
// all integers are big-endian, times are nanoseconds:
//
//	hello (kind 1), first and once:
//	  version   u8   (1)
//	  pid       u32  the device's process
//	  base      i64  Unix time in ns at device clock 0: an event's wall
//	                 time is base + its time
//	  namelen   u16, name: the device name
//	event (kind 2), one roce.TraceEvent:
//	  kind u8, time i64, qpn u32, wrid u64, wr_opcode u8, wc_opcode u8,
//	  status u8, length u32, timer u8, deadline i64, reason u8, psn u32,
//	  from_state u8, to_state u8, flags u8 (bit 0: dropped), frame_len u32,
//	  lost u64, then the frame's first bytes (the rest of the record)
//	end (kind 3), last: the stream ends for the reason given
//	  reasonlen u16, reason: a sentence ("the device closed")
//
// A record is at most MaxRecord bytes long. Each client has its own
// subscription with a bounded buffer (events the client does not take in
// time are dropped and reported as lost events); a client whose socket
// takes nothing for WriteTimeout is disconnected, and at most MaxClients
// are served at once, so a trace client cannot slow or block the device.
package tracesock

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/internal/sockfile"
	"github.com/sroce/sroce/monotime"
	"github.com/sroce/sroce/qp"
	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/verbs"
)

// Record kinds.
const (
	recHello = 1
	recEvent = 2
	recEnd   = 3
)

// Protocol limits.
const (
	// Version is the wire format's version in the hello record.
	Version = 1
	// MaxRecord bounds a record's length (the 4-byte length's value).
	MaxRecord = eventFixed + roce.MaxTraceSnap + 64
	// MaxClients is how many clients one device serves at once.
	MaxClients = 4
	// WriteTimeout is how long a client's socket may take nothing
	// before the client is disconnected.
	WriteTimeout = 2 * time.Second
	// EndTimeout bounds how long closing the device waits for its
	// clients to get their end record.
	EndTimeout = 200 * time.Millisecond
	// eventFixed is the length of an event record's fixed part, kind
	// byte included.
	eventFixed = 1 + 1 + 8 + 4 + 8 + 1 + 1 + 1 + 4 + 1 + 8 + 1 + 4 + 1 + 1 + 1 + 4 + 8
)

// EnvDir names the environment variable that overrides the runtime
// directory.
const EnvDir = "SROCE_RUNTIME_DIR"

// Dir returns the directory the sockets live in.
func Dir() string {
	if d := os.Getenv(EnvDir); d != "" {
		return d
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "sroce")
	}
	if os.Geteuid() == 0 {
		return "/run/sroce"
	}
	return filepath.Join(os.TempDir(), "sroce-"+strconv.Itoa(os.Geteuid()))
}

// Server serves one device's trace (Serve).
type Server struct {
	dev  *roce.Device
	path string
	ln   *net.UnixListener
	mu   sync.Mutex
	n    int // clients served now
	once sync.Once
	done chan struct{}
	wg   sync.WaitGroup // clients being served
}

// SocketMode is a trace socket's mode: its owner's only (root's, for the
// sroce daemon's devices), since a trace shows every packet of the device,
// whoever's traffic it is. DirMode is the mode of the directories Serve
// creates: the sockets in it carry their own modes, and the directory may
// be the daemon's (/run/sroce), whose socket every user must reach. Both
// are set explicitly, whatever the umask.
const (
	SocketMode = 0o600
	DirMode    = 0o755
)

// Serve serves dev's trace on a socket in Dir until dev closes (or Close).
// The socket has SocketMode from the moment it appears.
func Serve(dev *roce.Device) (*Server, error) {
	dir := Dir()
	if err := sockfile.MkdirAll(dir, DirMode); err != nil {
		return nil, fmt.Errorf("cannot create the trace socket directory: %w", err)
	}
	base := fmt.Sprintf("%s.%d", safeName(dev.Name()), os.Getpid())
	var ln *net.UnixListener
	var path string
	for i := 1; i <= 64; i++ {
		path = filepath.Join(dir, base+".sock")
		if i > 1 {
			path = filepath.Join(dir, fmt.Sprintf("%s.%d.sock", base, i))
		}
		var err error
		ln, err = sockfile.Listen("unix", path, SocketMode, false)
		if err == nil {
			break
		}
		if !errors.Is(err, sockfile.ErrExist) {
			return nil, fmt.Errorf("cannot listen on the trace socket %s: %w", path, err)
		}
		ln = nil
	}
	if ln == nil {
		return nil, fmt.Errorf("cannot find a free trace socket name for %s in %s", base, dir)
	}
	s := &Server{dev: dev, path: path, ln: ln, done: make(chan struct{})}
	go s.accept()
	// Closing the device ends the clients' streams with their end record
	// (waiting at most EndTimeout for them) and removes the socket, so
	// that a process that exits right after closing its device still
	// tells its trace clients why.
	dev.OnClose(func() {
		s.Close()
		ended := make(chan struct{})
		go func() {
			s.wg.Wait()
			close(ended)
		}()
		select {
		case <-ended:
		case <-time.After(EndTimeout):
		}
	})
	return s, nil
}

// safeName keeps a device name usable in a file name.
func safeName(n string) string {
	return strings.Map(func(r rune) rune {
		if r == '/' || r == 0 || r == '.' {
			return '_'
		}
		return r
	}, n)
}

// Path returns the socket's path.
func (s *Server) Path() string { return s.path }

// Close stops serving and removes the socket; clients get their end
// record when the device closes, or lose the connection otherwise.
func (s *Server) Close() error {
	s.once.Do(func() {
		close(s.done)
		s.ln.Close()
		os.Remove(s.path)
	})
	return nil
}

// accept serves clients until the listener closes.
func (s *Server) accept() {
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			return
		}
		s.mu.Lock()
		full := s.n >= MaxClients
		if !full {
			s.n++
			s.wg.Add(1)
		}
		s.mu.Unlock()
		if full {
			go func() {
				c.SetWriteDeadline(time.Now().Add(WriteTimeout))
				w := bufio.NewWriter(c)
				writeEnd(w, fmt.Sprintf("the device already serves %d trace clients", MaxClients))
				w.Flush()
				c.Close()
			}()
			continue
		}
		go func() {
			defer s.wg.Done()
			s.serve(c)
			s.mu.Lock()
			s.n--
			s.mu.Unlock()
		}()
	}
}

// serve streams the trace to one client.
func (s *Server) serve(c *net.UnixConn) {
	defer c.Close()
	sub, err := s.dev.Subscribe(nil)
	w := bufio.NewWriterSize(c, 64<<10)
	if err != nil {
		c.SetWriteDeadline(time.Now().Add(WriteTimeout))
		writeEnd(w, "the device closed")
		w.Flush()
		return
	}
	defer sub.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		// The client sends nothing; a read ends when it goes away.
		var b [256]byte
		for {
			if _, err := c.Read(b[:]); err != nil {
				cancel()
				return
			}
		}
	}()
	go func() {
		select {
		case <-s.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	base := sub.Wall(0).UnixNano()
	writeHello(w, os.Getpid(), base, s.dev.Name())
	var buf []byte
	for {
		c.SetWriteDeadline(time.Now().Add(WriteTimeout))
		if err := w.Flush(); err != nil {
			return
		}
		ev, err := sub.Next(ctx)
		if err != nil {
			if sub.DeviceClosed() {
				// What is still buffered, then the reason.
				for {
					ev, ok := sub.Poll()
					if !ok {
						break
					}
					w.Write(AppendEvent(buf[:0], &ev))
				}
				writeEnd(w, "the device closed")
				c.SetWriteDeadline(time.Now().Add(EndTimeout))
				w.Flush()
			}
			return
		}
		for {
			buf = AppendEvent(buf[:0], &ev)
			if _, err := w.Write(buf); err != nil {
				return
			}
			var ok bool
			if ev, ok = sub.Poll(); !ok {
				break
			}
		}
	}
}

func writeHello(w *bufio.Writer, pid int, base int64, name string) {
	if len(name) > 1024 {
		name = name[:1024]
	}
	b := make([]byte, 4, 32+len(name))
	b = append(b, recHello, Version)
	b = binary.BigEndian.AppendUint32(b, uint32(pid))
	b = binary.BigEndian.AppendUint64(b, uint64(base))
	b = binary.BigEndian.AppendUint16(b, uint16(len(name)))
	b = append(b, name...)
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	w.Write(b)
}

func writeEnd(w *bufio.Writer, reason string) {
	b := make([]byte, 4, 8+len(reason))
	b = append(b, recEnd)
	b = binary.BigEndian.AppendUint16(b, uint16(len(reason)))
	b = append(b, reason...)
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	w.Write(b)
}

// AppendEvent appends ev as one event record, length included.
func AppendEvent(b []byte, ev *roce.TraceEvent) []byte {
	start := len(b)
	b = append(b, 0, 0, 0, 0, recEvent, byte(ev.Kind))
	be := binary.BigEndian
	b = be.AppendUint64(b, uint64(ev.Time))
	b = be.AppendUint32(b, uint32(ev.QPN))
	b = be.AppendUint64(b, ev.WRID)
	b = append(b, byte(ev.WROpcode), byte(ev.WCOpcode), byte(ev.Status))
	b = be.AppendUint32(b, ev.Length)
	b = append(b, byte(ev.Timer))
	b = be.AppendUint64(b, uint64(ev.Deadline))
	b = append(b, byte(ev.Reason))
	b = be.AppendUint32(b, uint32(ev.PSN))
	var flags byte
	if ev.Dropped {
		flags |= 1
	}
	b = append(b, byte(ev.FromState), byte(ev.ToState), flags)
	b = be.AppendUint32(b, uint32(ev.FrameLen))
	b = be.AppendUint64(b, ev.Lost)
	frame := ev.Frame
	if len(frame) > roce.MaxTraceSnap {
		frame = frame[:roce.MaxTraceSnap]
	}
	b = append(b, frame...)
	be.PutUint32(b[start:], uint32(len(b)-start-4))
	return b
}

// ParseEvent decodes an event record's body (after the kind byte). The
// event's Frame refers to body.
func ParseEvent(body []byte) (roce.TraceEvent, error) {
	var ev roce.TraceEvent
	if len(body) < eventFixed-1 {
		return ev, fmt.Errorf("an event record of %d bytes is shorter than the %d of its fixed part", len(body), eventFixed-1)
	}
	be := binary.BigEndian
	ev.Kind = roce.TraceKind(body[0])
	ev.Time = monotime.Time(be.Uint64(body[1:]))
	ev.QPN = bth.QPN(be.Uint32(body[9:]) & bth.PSNMask)
	ev.WRID = be.Uint64(body[13:])
	ev.WROpcode = verbs.WROpcode(body[21])
	ev.WCOpcode = verbs.WCOpcode(body[22])
	ev.Status = verbs.WCStatus(body[23])
	ev.Length = be.Uint32(body[24:])
	ev.Timer = qp.Timer(body[28])
	ev.Deadline = monotime.Time(be.Uint64(body[29:]))
	ev.Reason = qp.RetryReason(body[37])
	ev.PSN = bth.PSN(be.Uint32(body[38:]) & bth.PSNMask)
	ev.FromState = verbs.QPState(body[42])
	ev.ToState = verbs.QPState(body[43])
	ev.Dropped = body[44]&1 != 0
	ev.FrameLen = int(be.Uint32(body[45:]))
	ev.Lost = be.Uint64(body[49:])
	if rest := body[57:]; len(rest) > 0 {
		ev.Frame = rest
	}
	if ev.Kind == 0 || ev.Kind > roce.TraceLost {
		return ev, fmt.Errorf("an event record has the unknown kind %d", body[0])
	}
	if ev.FrameLen < len(ev.Frame) {
		return ev, fmt.Errorf("an event record carries %d frame bytes of a %d-byte frame", len(ev.Frame), ev.FrameLen)
	}
	return ev, nil
}

// Candidate is a device serving its trace.
type Candidate struct {
	Path   string
	Device string
	PID    int
}

// String returns "sroce_lo (pid 1234)".
func (c Candidate) String() string { return fmt.Sprintf("%s (pid %d)", c.Device, c.PID) }

// List returns the devices serving their trace in Dir, sorted by device
// name and pid. Sockets of processes that are gone are removed.
func List() ([]Candidate, error) {
	dir := Dir()
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cannot read the trace socket directory: %w", err)
	}
	var out []Candidate
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".sock")
		if !ok || e.Type()&os.ModeSocket == 0 {
			continue
		}
		parts := strings.Split(name, ".")
		if len(parts) < 2 {
			continue
		}
		pidAt := len(parts) - 1
		if len(parts) >= 3 {
			if _, err := strconv.Atoi(parts[len(parts)-2]); err == nil {
				pidAt = len(parts) - 2
			}
		}
		pid, err := strconv.Atoi(parts[pidAt])
		if err != nil || pid <= 0 {
			continue
		}
		path := filepath.Join(dir, e.Name())
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			os.Remove(path) // its process is gone
			continue
		}
		out = append(out, Candidate{Path: path, Device: strings.Join(parts[:pidAt], "."), PID: pid})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Device != out[j].Device {
			return out[i].Device < out[j].Device
		}
		if out[i].PID != out[j].PID {
			return out[i].PID < out[j].PID
		}
		return out[i].Path < out[j].Path
	})
	return out, nil
}

// Client reads one device's trace.
type Client struct {
	c      net.Conn
	r      *bufio.Reader
	buf    []byte
	pid    int
	base   int64
	device string
}

// EndError is the error Next returns when the server ended the stream,
// with the server's sentence.
type EndError struct{ Reason string }

// Error returns the reason.
func (e *EndError) Error() string { return e.Reason }

// Dial connects to a trace socket and reads its hello within timeout.
func Dial(path string, timeout time.Duration) (*Client, error) {
	c, err := net.DialTimeout("unix", path, timeout)
	if errors.Is(err, syscall.EACCES) {
		owner := "its owner"
		var st syscall.Stat_t
		if syscall.Stat(path, &st) == nil {
			owner = "uid " + strconv.Itoa(int(st.Uid))
			if st.Uid == 0 {
				owner = "root"
			}
		}
		return nil, fmt.Errorf("cannot connect to the trace socket %s: %w (a trace shows every user's packets, so only %s may attach)", path, err, owner)
	}
	if err != nil {
		return nil, fmt.Errorf("cannot connect to the trace socket %s: %w", path, err)
	}
	cl := &Client{c: c, r: bufio.NewReaderSize(c, 64<<10)}
	c.SetReadDeadline(time.Now().Add(timeout))
	kind, body, err := cl.record()
	c.SetReadDeadline(time.Time{})
	if err == nil && kind == recEnd {
		err = endOf(body)
	}
	if err == nil && (kind != recHello || len(body) < 15 || body[0] != Version) {
		err = errors.New("the trace socket did not start with a version 1 hello record")
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	be := binary.BigEndian
	cl.pid = int(be.Uint32(body[1:]))
	cl.base = int64(be.Uint64(body[5:]))
	n := int(be.Uint16(body[13:]))
	if 15+n > len(body) {
		c.Close()
		return nil, errors.New("the trace socket's hello record is cut short")
	}
	cl.device = string(body[15 : 15+n])
	return cl, nil
}

// endOf decodes an end record.
func endOf(body []byte) error {
	if len(body) < 2 || 2+int(binary.BigEndian.Uint16(body)) > len(body) {
		return errors.New("the trace stream ended with a damaged end record")
	}
	return &EndError{Reason: string(body[2 : 2+int(binary.BigEndian.Uint16(body))])}
}

// record reads one record: its kind and body (valid until the next call).
func (cl *Client) record() (byte, []byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(cl.r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n < 1 || n > MaxRecord {
		return 0, nil, fmt.Errorf("the trace stream has a record of %d bytes (at most %d)", n, MaxRecord)
	}
	if cap(cl.buf) < int(n) {
		cl.buf = make([]byte, n)
	}
	b := cl.buf[:n]
	if _, err := io.ReadFull(cl.r, b); err != nil {
		return 0, nil, fmt.Errorf("the trace stream was cut in a record: %w", err)
	}
	return b[0], b[1:], nil
}

// Device returns the device name, PID its process.
func (cl *Client) Device() string { return cl.device }

// PID returns the device's process.
func (cl *Client) PID() int { return cl.pid }

// Wall converts an event's time to wall-clock time.
func (cl *Client) Wall(t monotime.Time) time.Time { return time.Unix(0, cl.base+int64(t)) }

// Next reads the next event; its Frame is valid until the next call. The
// stream's end is an *EndError; a connection lost without one is
// io.ErrUnexpectedEOF. Records of unknown kinds are skipped.
func (cl *Client) Next() (roce.TraceEvent, error) {
	for {
		kind, body, err := cl.record()
		if err == io.EOF {
			return roce.TraceEvent{}, io.ErrUnexpectedEOF
		}
		if err != nil {
			return roce.TraceEvent{}, err
		}
		switch kind {
		case recEvent:
			return ParseEvent(body)
		case recEnd:
			return roce.TraceEvent{}, endOf(body)
		}
	}
}

// Buffered returns how many bytes of the stream are read and not yet
// decoded: zero means Next would wait for the server.
func (cl *Client) Buffered() int { return cl.r.Buffered() }

// SetDeadline bounds the wait of Next.
func (cl *Client) SetDeadline(t time.Time) error { return cl.c.SetReadDeadline(t) }

// Close closes the connection.
func (cl *Client) Close() error { return cl.c.Close() }
