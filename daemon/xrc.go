package daemon

// XRC domains. ibv_open_xrcd with a file shares one domain between every
// process that opens the same file (its inode), as the kernel's uverbs
// does: the served device keeps the shared domains, each holding a
// descriptor of its file so that the inode is not reused while the domain
// lives; a connection holds one reference per open, and the domain is
// freed with the last close. A connection's XRC SRQs and XRC_RECV QPs keep
// its open of their domain (EBUSY on close while they exist). An open is
// charged an object and, for a file, a descriptor (the domain's, counted
// for each opener).

import (
	"sync/atomic"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/daemon/ctl"
	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/verbs"
	"golang.org/x/sys/unix"
)

var xrcdTable = table[*xrcdObj]{kind: kindXRCD, m: func(c *conn) map[uint32]*xrcdObj { return c.xrcds }, notFound: einval}

func init() {
	register(
		method{op: ctl.OpOpenXRCD, open: true, fds: 1, locks: locks(kindXRCD), run: decoded((*conn).openXRCD)},
		method{op: ctl.OpCloseXRCD, open: true, locks: locks(kindXRCD), run: destroys(xrcdTable, (*conn).closeXRCD)},
		method{op: ctl.OpOpenQP, open: true, locks: locks(kindXRCD, kindQP), run: decoded((*conn).openQP)},
	)
}

// openCost is what one open of a domain is charged.
func openCost(keyed bool) cost {
	if keyed {
		return add(objectCost, one(ResFDs, 1))
	}
	return objectCost
}

// xrcdKey names the file of a shared domain.
type xrcdKey struct{ dev, ino uint64 }

// sharedXRCD is a domain of the device and its openers, under served.mu.
type sharedXRCD struct {
	x     *roce.XRCD
	key   xrcdKey
	keyed bool // opened through a file (else the connection's own)
	fd    int  // keyed: the file, held while the domain lives
	refs  int
	tgts  map[bth.QPN]*tgtQP // its XRC_RECV QPs
}

// tgtQP is an XRC_RECV QP of a shared domain and the number of handles
// the connections hold of it (its creator's and ibv_open_qp's), under
// served.mu: the QP lives until the last is destroyed, as the kernel keeps
// an XRC target QP for its openers.
type tgtQP struct {
	q    *roce.QP
	refs int
}

// addTarget records q, just created in sh, with its creator's handle.
func (sd *served) addTarget(sh *sharedXRCD, q *roce.QP) *tgtQP {
	sd.mu.Lock()
	defer sd.mu.Unlock()
	if sh.tgts == nil {
		sh.tgts = make(map[bth.QPN]*tgtQP)
	}
	t := &tgtQP{q: q, refs: 1}
	sh.tgts[q.QPN()] = t
	return t
}

// lastHandle drops o's handle of its QP and reports whether it was the
// last (always, for a QP that is not an XRC target), in which case the
// caller destroys the QP.
func (c *conn) lastHandle(o *qpObj) bool {
	if o.tgt == nil {
		return true
	}
	sd := c.dev
	sd.mu.Lock()
	defer sd.mu.Unlock()
	if o.tgt.refs--; o.tgt.refs > 0 {
		return false
	}
	if x := c.xrcds[o.xrcd]; x != nil {
		delete(x.sh.tgts, o.qp.QPN())
	}
	return true
}

// openQP gives the connection a handle of an XRC_RECV QP of a domain it
// has open (ibv_open_qp): memory of its own for the QP's state and an
// empty send ring, as CREATE_QP's reply lays it out.
func (c *conn) openQP(in *ctl.OpenQP, _ *request) ([]byte, []int, error) {
	if verbs.QPType(in.QPType) != verbs.QPTypeXRCRecv {
		return nil, nil, unix.EINVAL
	}
	xo := c.xrcds[in.XRCD]
	if xo == nil {
		return nil, nil, unix.EINVAL
	}
	h, err := c.alloc(len(c.qps), c.s.Limits().QPs, "QPs")
	if err != nil {
		return nil, nil, err
	}
	got := verbs.QPCap{MaxSendWR: 1}
	lay := layoutQP(got, true)
	k := add(one(ResQPs, 1), shmCost(lay.size))
	if err := c.charge(k); err != nil {
		return nil, nil, err
	}
	sd := c.dev
	sd.mu.Lock()
	t := xo.sh.tgts[bth.QPN(in.QPN)]
	if t != nil {
		t.refs++
	}
	sd.mu.Unlock()
	if t == nil {
		c.release(k)
		return nil, nil, unix.ENOENT
	}
	o := &qpObj{qp: t.q, typ: verbs.QPTypeXRCRecv, pd: in.XRCD, xrcd: in.XRCD, tgt: t, opened: true, cost: k, handle: h,
		cap: got}
	fail := func(err error) ([]byte, []int, error) {
		if c.lastHandle(o) {
			o.qp.Destroy() // its creator destroyed it meanwhile
		}
		c.release(k)
		return nil, nil, err
	}
	fd, err := o.makeMemory(lay, got, true)
	if err != nil {
		return fail(err)
	}
	if o.t, err = c.br.add(o, nil); err != nil {
		o.mem.close()
		return fail(err)
	}
	atomic.StoreUint32(&o.ctl.State, uint32(t.q.State()))
	c.qps[h] = o
	xo.uses++
	out := ctl.QP{Handle: h, QPN: in.QPN, Cap: ctl.CapOf(got), Bell: o.t.bell, SQOffset: uint64(lay.sqOff), MemSize: uint64(len(o.mem.mem))}
	return ctl.Bytes(&out), []int{fd}, nil
}

// xrcdObj is a connection's open of a domain.
type xrcdObj struct {
	sh   *sharedXRCD
	uses int // the connection's XRC SRQs and XRC_RECV QPs in it, under c.xrcdMu
}

func (c *conn) openXRCD(in *ctl.OpenXRCD, r *request) ([]byte, []int, error) {
	fds := r.fds
	h, err := c.alloc(len(c.xrcds), c.s.Limits().Objects, "XRCDs")
	if err != nil {
		return nil, nil, err
	}
	k := openCost(len(fds) == 1)
	if err := c.charge(k); err != nil {
		return nil, nil, err
	}
	sh, err := c.dev.openXRCD(fds, in.OFlags)
	if err != nil {
		c.release(k)
		return nil, nil, err
	}
	c.xrcds[h] = &xrcdObj{sh: sh}
	return handleReply(h)
}

// openXRCD finds or makes the domain of the file fds holds (none: a new
// domain of its own) under the open flags of ibv_open_xrcd.
func (sd *served) openXRCD(fds []int, oflags uint32) (*sharedXRCD, error) {
	var key xrcdKey
	keyed := len(fds) == 1
	if keyed {
		var st unix.Stat_t
		if err := unix.Fstat(fds[0], &st); err != nil {
			return nil, unix.EBADF
		}
		key = xrcdKey{uint64(st.Dev), st.Ino}
	}
	sd.mu.Lock()
	defer sd.mu.Unlock()
	if keyed {
		if sh := sd.xrcds[key]; sh != nil {
			if oflags&unix.O_CREAT != 0 && oflags&unix.O_EXCL != 0 {
				return nil, unix.EEXIST
			}
			sh.refs++
			return sh, nil
		}
		if oflags&unix.O_CREAT == 0 {
			return nil, unix.ENOENT
		}
	}
	sh := &sharedXRCD{key: key, keyed: keyed, fd: -1, refs: 1}
	if keyed {
		fd, err := dupFD(fds[0])
		if err != nil {
			return nil, err
		}
		sh.fd = fd
	}
	x, err := sd.dev.Device().AllocXRCD()
	if err != nil {
		if sh.fd >= 0 {
			unix.Close(sh.fd)
		}
		return nil, err
	}
	sh.x = x
	if keyed {
		if sd.xrcds == nil {
			sd.xrcds = make(map[xrcdKey]*sharedXRCD)
		}
		sd.xrcds[key] = sh
	}
	return sh, nil
}

// closeXRCD drops one open of sh, freeing the domain with the last.
func (sd *served) closeXRCD(sh *sharedXRCD) error {
	sd.mu.Lock()
	defer sd.mu.Unlock()
	if sh.refs--; sh.refs > 0 {
		return nil
	}
	if sh.keyed {
		delete(sd.xrcds, sh.key)
		unix.Close(sh.fd)
	}
	return sh.x.Dealloc()
}

func (c *conn) closeXRCD(_ uint32, o *xrcdObj) error {
	if o.uses > 0 {
		return unix.EBUSY
	}
	err := c.dev.closeXRCD(o.sh)
	c.release(openCost(o.sh.keyed))
	if err != nil {
		c.s.log.Error("freeing an XRC domain failed", "client", c.id, "err", err)
	}
	return nil
}
