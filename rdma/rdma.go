// Package rdma is the verbs for Go programs that do not care where the
// engine runs: one set of interfaces over a device in the program's own
// process (package roce) or a device of the sroce daemon (package client).
// A program picks with one call:
//
//	dev, err := rdma.Open("sroce_eth0") // the daemon's device if a daemon serves it, else in process
//	dev := rdma.InProcess(port.Device()) // a roce device the program opened
//	dev, err := rdma.Daemon(socket, "sroce_eth0")
//
// and then uses the same calls either way: AllocPD, Alloc (memory that can
// be registered wherever the engine runs), RegMR, CreateCQ, CreateQP,
// CreateAH, Connect, PostSend, PostRecv, Poll.
package rdma

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/client"
	"github.com/sroce/sroce/internal/sockpath"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/roce/iface"
	"github.com/sroce/sroce/verbs"
	"golang.org/x/sys/unix"
)

// Device is an open RDMA device.
type Device interface {
	// Name returns the device's name ("sroce_eth0").
	Name() string
	// QueryGID returns entry index of the GID table.
	QueryGID(index int) (bth.GID, error)
	// AllocPD allocates a protection domain.
	AllocPD() (PD, error)
	// CreateCQ creates a completion queue of cqe entries.
	CreateCQ(cqe int) (CQ, error)
	// CreateEventCQ creates a completion queue of cqe entries with a
	// completion channel of its own: its WaitTimeout arms the CQ and
	// sleeps until the channel reports a completion (ibv_req_notify_cq,
	// ibv_get_cq_event, ibv_ack_cq_events), as a program run with
	// perftest's -e does.
	CreateEventCQ(cqe int) (CQ, error)
	// Alloc returns n bytes of memory that PD.RegMR can register (for
	// the daemon, memory it shares with the program).
	Alloc(n int) ([]byte, error)
	// Close releases the device (in process: the device itself only when
	// Open opened it).
	Close() error
}

// PD is a protection domain.
type PD interface {
	// RegMR registers buf, which Device.Alloc returned (or a part of it).
	RegMR(buf []byte, access mr.Access) (MR, error)
	CreateQP(attr *QPInitAttr) (QP, error)
	// CreateAH creates an address handle for UD sends (wr.AH).
	CreateAH(attr *verbs.AHAttr) (*verbs.AH, error)
	DestroyAH(ah *verbs.AH) error
	Dealloc() error
}

// MR is a registered memory region.
type MR interface {
	LKey() uint32
	RKey() uint32
	// Addr is the address of the region's first byte, for SGEs and peers.
	Addr() uint64
	// SGE returns the scatter/gather element for n bytes at offset off
	// of the region.
	SGE(off, n int) mr.SGE
	Dereg() error
}

// CQ is a completion queue.
type CQ interface {
	// Poll takes up to len(wcs) completions without waiting.
	Poll(wcs []verbs.WC) int
	// WaitTimeout waits at most timeout for a completion. When none came,
	// the error satisfies errors.Is(err, context.DeadlineExceeded).
	WaitTimeout(wcs []verbs.WC, timeout time.Duration) (int, error)
	Destroy() error
}

// QP is a queue pair.
type QP interface {
	QPN() bth.QPN
	Type() verbs.QPType
	State() verbs.QPState
	Modify(attr *verbs.QPAttr, mask verbs.QPAttrMask) error
	// Query returns the QP's attributes (ibv_query_qp).
	Query() (verbs.QPAttr, error)
	// Connect moves the QP through INIT, RTR and RTS (roce.QP.Connect).
	Connect(c *roce.ConnectAttr) error
	PostSend(wr *verbs.SendWR) error
	// PostSendList posts wrs in order and returns how many were posted;
	// on error, wrs[n] is the request that was refused.
	PostSendList(wrs []verbs.SendWR) (int, error)
	PostRecv(wr *verbs.RecvWR) error
	// AttachMcast and DetachMcast attach a UD QP to a multicast group and
	// detach it (ibv_attach_mcast, ibv_detach_mcast).
	AttachMcast(gid bth.GID, lid uint16) error
	DetachMcast(gid bth.GID, lid uint16) error
	Destroy() error
}

// QPInitAttr describes a QP to create.
type QPInitAttr struct {
	Type           verbs.QPType
	SendCQ, RecvCQ CQ
	Cap            verbs.QPCap
	SigAll         bool
}

// ErrForeignCQ reports a CQ of another device.
var ErrForeignCQ = errors.New("rdma: the CQ belongs to another device")

// Open opens device name ("sroce_eth0", or the interface name "eth0"):
// the sroce daemon's device when a daemon at its usual socket
// (SROCE_SOCKET) serves it, else a device of this process on the
// interface, opened as the sroce tools open theirs.
//
// A daemon that serves the device but refuses the program (a limit,
// another protocol version) is an error: a device of this process could
// not open where the daemon holds the link.
func Open(name string) (Device, error) {
	name = "sroce_" + strings.TrimPrefix(name, "sroce_")
	x, err := DaemonServes(sockpath.Find(), name)
	if err != nil {
		return nil, err
	}
	if x != nil {
		return DaemonContext(x), nil
	}
	p, err := iface.Open(context.Background(), strings.TrimPrefix(name, "sroce_"), iface.Options{})
	if err != nil {
		return nil, fmt.Errorf("rdma: no daemon serves %s, and opening it in process: %w", name, err)
	}
	return &local{dev: p.Device(), closer: p.Close}, nil
}

// InProcess returns dev, a device of this process, as a Device. Closing
// the Device leaves dev open.
func InProcess(dev *roce.Device) Device { return &local{dev: dev} }

// Daemon opens device name of the sroce daemon at socket.
func Daemon(socket, name string) (Device, error) {
	x, err := client.Open(socket, name)
	if err != nil {
		return nil, err
	}
	return &remote{x: x}, nil
}

// DaemonServes opens device name of the sroce daemon at socket when the
// daemon serves it. It returns nil and no error when no daemon listens
// there or the daemon has no such device (the program may open one in
// process), and an error when the daemon serves the device but refused
// the program.
func DaemonServes(socket, name string) (*client.Context, error) {
	x, err := client.Open(socket, name)
	var ce *client.Error
	switch {
	case err == nil:
		return x, nil
	case errors.As(err, &ce) && ce.Errno != unix.ENODEV:
		return nil, fmt.Errorf("rdma: the sroce daemon at %s serves %s but refused this program: %w", socket, name, err)
	}
	return nil, nil
}

// DaemonContext returns x, a device context of the daemon the program
// opened with package client, as a Device. Closing the Device closes x.
func DaemonContext(x *client.Context) Device { return &remote{x: x} }

// --- in process ----------------------------------------------------------

type local struct {
	dev    *roce.Device
	closer func() error
}

type localPD struct{ *roce.PD }
type localCQ struct{ *roce.CQ }
type localMR struct{ *roce.MR }
type localQP struct{ *roce.QP }

// Query returns the QP's attributes; an in-process QP always has them.
func (q localQP) Query() (verbs.QPAttr, error) {
	a, _ := q.QP.Query()
	return a, nil
}

func (l *local) Name() string                    { return l.dev.Name() }
func (l *local) QueryGID(i int) (bth.GID, error) { return l.dev.QueryGID(i) }
func (l *local) Alloc(n int) ([]byte, error)     { return make([]byte, n), nil }
func (l *local) AllocPD() (PD, error)            { pd, err := l.dev.AllocPD(); return wrapPD(pd, err) }
func (l *local) CreateCQ(cqe int) (CQ, error) {
	c, err := l.dev.CreateCQ(cqe, nil)
	return wrapCQ(c, err)
}

func (l *local) CreateEventCQ(cqe int) (CQ, error) {
	ch := l.dev.CreateCompChannel()
	c, err := l.dev.CreateCQ(cqe, ch)
	if err != nil {
		return nil, err
	}
	return &localEventCQ{localCQ: localCQ{c}, ch: ch}, nil
}

// localEventCQ is an in-process CQ whose waits sleep on its completion
// channel.
type localEventCQ struct {
	localCQ
	ch     *roce.CompChannel
	unacks int // events taken and not yet acknowledged
}

func (c *localEventCQ) WaitTimeout(wcs []verbs.WC, timeout time.Duration) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for {
		if n := c.Poll(wcs); n > 0 {
			return n, nil
		}
		if err := c.CQ.ReqNotify(false); err != nil {
			return 0, err
		}
		// A completion that came before the CQ was armed raises no event.
		if n := c.Poll(wcs); n > 0 {
			return n, nil
		}
		if _, err := c.ch.GetEvent(ctx); err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				return 0, fmt.Errorf("no completion event within %v: %w", timeout, context.DeadlineExceeded)
			}
			return 0, fmt.Errorf("waiting %v for a completion event: %w", timeout, err)
		}
		if c.unacks++; c.unacks >= 64 {
			c.ch.AckEvents(c.CQ, c.unacks)
			c.unacks = 0
		}
	}
}

func (c *localEventCQ) Destroy() error {
	if c.unacks > 0 {
		c.ch.AckEvents(c.CQ, c.unacks)
		c.unacks = 0
	}
	return c.CQ.Destroy()
}

// roceCQ returns the in-process CQ behind a CQ of this package.
func roceCQ(c CQ) (*roce.CQ, bool) {
	switch c := c.(type) {
	case localCQ:
		return c.CQ, true
	case *localEventCQ:
		return c.CQ, true
	}
	return nil, false
}

func (p localPD) Dealloc() error { return p.PD.Dealloc() }
func (p localPD) RegMR(b []byte, a mr.Access) (MR, error) {
	m, err := p.PD.RegMR(b, a)
	if err != nil {
		return nil, err
	}
	return localMR{m}, nil
}

func (l *local) Close() error {
	if l.closer != nil {
		return l.closer()
	}
	return nil
}

func wrapPD(pd *roce.PD, err error) (PD, error) {
	if err != nil {
		return nil, err
	}
	return localPD{pd}, nil
}

func wrapCQ(c *roce.CQ, err error) (CQ, error) {
	if err != nil {
		return nil, err
	}
	return localCQ{c}, nil
}

func (p localPD) CreateQP(a *QPInitAttr) (QP, error) {
	s, ok1 := roceCQ(a.SendCQ)
	r, ok2 := roceCQ(a.RecvCQ)
	if !ok1 || !ok2 {
		return nil, ErrForeignCQ
	}
	q, err := p.PD.CreateQP(&roce.QPInitAttr{Type: a.Type, SendCQ: s, RecvCQ: r, Cap: a.Cap, SigAll: a.SigAll})
	if err != nil {
		return nil, err
	}
	return localQP{q}, nil
}

// --- through the daemon --------------------------------------------------

type remote struct {
	x    *client.Context
	mu   sync.Mutex
	bufs []*client.Buffer
}

type remotePD struct {
	*client.PD
	r *remote
}
type remoteCQ struct{ *client.CQ }

func (r *remote) Name() string                    { return r.x.Info.Name }
func (r *remote) QueryGID(i int) (bth.GID, error) { return r.x.QueryGID(i) }
func (r *remote) Close() error                    { return r.x.Close() }

func (r *remote) AllocPD() (PD, error) {
	pd, err := r.x.AllocPD()
	if err != nil {
		return nil, err
	}
	return remotePD{pd, r}, nil
}

func (r *remote) CreateCQ(cqe int) (CQ, error) {
	c, err := r.x.CreateCQ(cqe, true)
	if err != nil {
		return nil, err
	}
	return remoteCQ{c}, nil
}

// CreateEventCQ is CreateCQ: a daemon's CQ always has its own completion
// channel, on which Wait sleeps.
func (r *remote) CreateEventCQ(cqe int) (CQ, error) { return r.CreateCQ(cqe) }

func (r *remote) Alloc(n int) ([]byte, error) {
	b, err := r.x.Alloc(n)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.bufs = append(r.bufs, b)
	r.mu.Unlock()
	return b.Buf, nil
}

// buffer finds the shared buffer that holds buf, and buf's offset in it.
func (r *remote) buffer(buf []byte) (*client.Buffer, int, bool) {
	if len(buf) == 0 {
		return nil, 0, false
	}
	p := uintptr(unsafe.Pointer(&buf[0]))
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, b := range r.bufs {
		base := uintptr(unsafe.Pointer(&b.Buf[0]))
		if p >= base && p+uintptr(len(buf)) <= base+uintptr(len(b.Buf)) {
			return b, int(p - base), true
		}
	}
	return nil, 0, false
}

func (c remoteCQ) WaitTimeout(wcs []verbs.WC, timeout time.Duration) (int, error) {
	return c.CQ.Wait(wcs, timeout)
}

func (p remotePD) RegMR(buf []byte, access mr.Access) (MR, error) {
	b, off, ok := p.r.buffer(buf)
	if !ok {
		return nil, errors.New("rdma: a daemon's device registers only memory from Device.Alloc")
	}
	return p.PD.RegMR(b, off, len(buf), access)
}

func (p remotePD) CreateQP(a *QPInitAttr) (QP, error) {
	s, ok1 := a.SendCQ.(remoteCQ)
	r, ok2 := a.RecvCQ.(remoteCQ)
	if !ok1 || !ok2 {
		return nil, ErrForeignCQ
	}
	q, err := p.PD.CreateQP(&client.QPInitAttr{Type: a.Type, SendCQ: s.CQ, RecvCQ: r.CQ, Cap: a.Cap, SigAll: a.SigAll})
	if err != nil {
		return nil, err
	}
	return q, nil
}
