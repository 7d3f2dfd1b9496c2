package daemon

// The request table. Every operation of the protocol (sroce_ctl.h) is
// registered once, by the file of the object kind it serves (pd.go,
// mr.go, cq.go, ...), as a method: the body it takes, the descriptors it
// may carry, whether it needs an opened context or the CM, the kinds
// whose locks its handler holds, and the handler. conn.handle is the one
// path every request takes: find the method, check the descriptors and
// the context, take the locks in kind order, decode the body (and look up
// the object it names), run the handler. It is the shape of the kernel's
// uverbs method tables (uverbs_std_types_*.c): an object type's methods
// declared with their attributes beside its handlers, one dispatcher.
//
// Adding a request: an entry in its kind's register call (op, body and
// object through one of the adapters below, fds, locks) and its handler.

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/sroce/sroce/daemon/ctl"
	"golang.org/x/sys/unix"
)

// kind is a kind of object a connection holds. Each has a lock of its
// own in the connection (kindLock), which guards the connection's table
// of that kind and what other goroutines read of its objects; the
// request goroutine is the only one that adds to or removes from the
// tables (the CM's forwarder adds CM IDs, under the CM's lock), so it
// reads them without a lock. Locks are taken in the order of the kinds,
// which is the order of the constants.
type kind uint8

const (
	kindPD   kind = iota // c.pdMu: pds
	kindXRCD             // c.xrcdMu: xrcds, their uses
	kindChan             // c.chanMu: chans, their refs
	kindCQ               // c.cqMu: cqs, a CQ's memory (resize)
	kindSRQ              // c.srqMu: srqs, an SRQ's memory (resize)
	kindQP               // c.qpMu: qps, what the bridge keeps in a qpObj
	kindAH               // c.ahMu: ahs
	kindMR               // c.mrMu: mrs, mws, regBytes
	kindCM               // c.cmMu: the CM's channels and IDs (c.cm)
	nKinds
)

// kindNames name the kinds in messages.
var kindNames = [nKinds]string{"PD", "XRCD", "completion channel", "CQ", "SRQ", "QP", "AH", "MR", "CM ID"}

func (k kind) String() string { return kindNames[k] }

// kinds is a set of kinds.
type kinds uint16

// locks returns the set of ks.
func locks(ks ...kind) kinds {
	var s kinds
	for _, k := range ks {
		s |= 1 << k
	}
	return s
}

func (s kinds) has(k kind) bool { return s&(1<<k) != 0 }

// kindLock returns kind k's lock in c.
func (c *conn) kindLock(k kind) *sync.RWMutex {
	return [nKinds]*sync.RWMutex{&c.pdMu, &c.xrcdMu, &c.chanMu, &c.cqMu, &c.srqMu, &c.qpMu, &c.ahMu, &c.mrMu, &c.cmMu}[k]
}

// lock takes the locks of s for writing, in kind order.
func (c *conn) lock(s kinds) {
	for k := range nKinds {
		if s.has(k) {
			c.kindLock(k).Lock()
		}
	}
}

// unlock releases the locks of s, in the reverse order.
func (c *conn) unlock(s kinds) {
	for k := nKinds; k > 0; k-- {
		if s.has(k - 1) {
			c.kindLock(k - 1).Unlock()
		}
	}
}

// request is one request as its handler gets it. A handler returns the
// reply body, the descriptors to pass (closed once sent) and an error,
// which classify (errors.go) sorts.
type request struct {
	op   ctl.Op
	body []byte
	fds  []int // closed by the connection after the handler returns
	held kinds // the locks the method holds
}

// method is one operation of the table.
type method struct {
	op    ctl.Op
	fds   int   // descriptors it may carry, at most (more: the client misbehaves)
	open  bool  // only after OPEN (before: the client misbehaves)
	cm    bool  // served by the CM (ENODEV when the daemon runs none)
	locks kinds // held, in kind order, while the handler runs
	run   func(c *conn, r *request) ([]byte, []int, error)
}

// methods is the table, by op.
var methods = map[ctl.Op]*method{}

// register adds methods to the table; an op registered twice is a
// programming error, found when the daemon package loads.
func register(ms ...method) {
	for i := range ms {
		m := ms[i]
		if methods[m.op] != nil {
			panic(fmt.Sprintf("daemon: %s registered twice", m.op))
		}
		methods[m.op] = &m
	}
}

// handle runs one request through its method and returns the reply body
// and the descriptors to pass. fds are closed by the caller after handle
// returns.
func (c *conn) handle(h ctl.Hdr, b []byte, fds []int) ([]byte, []int, error) {
	m := methods[h.Op]
	if m == nil {
		if len(fds) != 0 {
			return nil, nil, misbehaved("passed descriptors with a request that takes none")
		}
		return nil, nil, misbehaved("unknown operation %d", uint16(h.Op))
	}
	switch {
	case len(fds) > m.fds && m.fds == 0:
		return nil, nil, misbehaved("passed descriptors with a request that takes none")
	case len(fds) > m.fds:
		return nil, nil, misbehaved("%s with %d descriptors, it takes at most %d", h.Op, len(fds), m.fds)
	case m.cm && c.s.cm == nil:
		return nil, nil, unix.ENODEV
	case m.open && c.dev == nil:
		return nil, nil, misbehaved("%s before OPEN", h.Op)
	}
	c.lock(m.locks)
	defer c.unlock(m.locks)
	return m.run(c, &request{op: h.Op, body: b, fds: fds, held: m.locks})
}

// body decodes a request body of type T; one too short for it is the
// client's misbehaviour (longer is accepted, as ctl.Get accepts it).
func body[T any](b []byte) (T, error) {
	v, err := ctl.Get[T](b)
	if err != nil {
		var z T
		return v, misbehaved("body of %d bytes, the operation needs %d: %w", len(b), unsafe.Sizeof(z), err)
	}
	return v, nil
}

// table is how the generic path finds a kind's objects in a connection:
// the kind (its lock) and the map of its handles. A handle that is not
// there is notFound (EINVAL as the kernel's uverbs answers an unknown
// handle; ENOENT for CM IDs, as ucma does).
type table[O any] struct {
	kind     kind
	m        func(c *conn) map[uint32]O
	notFound unix.Errno
}

// get looks handle h up: under the kind's lock when the method does not
// hold it (the request goroutine alone removes objects, so what it finds
// stays valid for the request).
func (t table[O]) get(c *conn, r *request, h uint32) (O, error) {
	if !r.held.has(t.kind) {
		mu := c.kindLock(t.kind)
		mu.RLock()
		defer mu.RUnlock()
	}
	o, ok := t.m(c)[h]
	if !ok {
		var z O
		return z, t.notFound
	}
	return o, nil
}

// Adapters: each turns a typed handler into a method's run, doing the
// decoding and the lookup the handler would otherwise repeat.

// plain is a handler that takes no body (one, if sent, is ignored).
func plain(h func(c *conn) ([]byte, []int, error)) func(*conn, *request) ([]byte, []int, error) {
	return func(c *conn, _ *request) ([]byte, []int, error) { return h(c) }
}

// decoded is a handler of a body of type T.
func decoded[T any](h func(c *conn, in *T, r *request) ([]byte, []int, error)) func(*conn, *request) ([]byte, []int, error) {
	return func(c *conn, r *request) ([]byte, []int, error) {
		in, err := body[T](r.body)
		if err != nil {
			return nil, nil, err
		}
		return h(c, &in, r)
	}
}

// on is a handler of a body of type T that names an object of table t
// (key gives its handle): the object is looked up before the handler runs.
func on[T, O any](t table[O], key func(*T) uint32, h func(c *conn, in *T, o O, r *request) ([]byte, []int, error)) func(*conn, *request) ([]byte, []int, error) {
	return func(c *conn, r *request) ([]byte, []int, error) {
		in, err := body[T](r.body)
		if err != nil {
			return nil, nil, err
		}
		o, err := t.get(c, r, key(&in))
		if err != nil {
			return nil, nil, err
		}
		return h(c, &in, o, r)
	}
}

// destroys is the request that frees one object named by a ctl.Handle
// body: free releases it, its kind's lock held (taken here when the
// method does not hold it), and, when it succeeds, the handle is
// forgotten.
func destroys[O any](t table[O], free func(c *conn, h uint32, o O) error) func(*conn, *request) ([]byte, []int, error) {
	return on(t, handleOf, func(c *conn, in *ctl.Handle, o O, r *request) ([]byte, []int, error) {
		if !r.held.has(t.kind) {
			mu := c.kindLock(t.kind)
			mu.Lock()
			defer mu.Unlock()
		}
		if err := free(c, in.Handle, o); err != nil {
			return nil, nil, err
		}
		delete(t.m(c), in.Handle)
		return nil, nil, nil
	})
}

// handleOf is the key of a ctl.Handle body.
func handleOf(in *ctl.Handle) uint32 { return in.Handle }

// handleReply is the reply that gives the client a new handle.
func handleReply(h uint32) ([]byte, []int, error) {
	out := ctl.Handle{Handle: h}
	return ctl.Bytes(&out), nil, nil
}

// einval is what a handle the connection does not have gets.
const einval = unix.EINVAL
