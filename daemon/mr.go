package daemon

// Memory regions and windows: REG_MR, REREG_MR, DEREG_MR, ALLOC_MW,
// DEALLOC_MW. A registration maps the client's pages into the daemon
// (shm.go's mapClientMem for a memfd, procmem.go's mapProcMem for an
// address); c.mrMu is held while it does, which no data path takes.

import (
	"errors"
	"fmt"

	"github.com/sroce/sroce/daemon/ctl"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/roce"
	"golang.org/x/sys/unix"
)

var (
	mrTable = table[*mrObj]{kind: kindMR, m: func(c *conn) map[uint32]*mrObj { return c.mrs }, notFound: einval}
	mwTable = table[*mr.MW]{kind: kindMR, m: func(c *conn) map[uint32]*mr.MW { return c.mws }, notFound: einval}
)

func init() {
	register(
		method{op: ctl.OpRegMR, open: true, fds: 1, locks: locks(kindMR), run: decoded((*conn).regMR)},
		// Its descriptors are checked against its flags before the MR is
		// looked up.
		method{op: ctl.OpReregMR, open: true, fds: 1, locks: locks(kindMR), run: decoded((*conn).reregMR)},
		method{op: ctl.OpDeregMR, open: true, locks: locks(kindMR), run: destroys(mrTable, (*conn).deregMR)},
		method{op: ctl.OpAllocMW, open: true, locks: locks(kindMR), run: decoded((*conn).allocMW)},
		method{op: ctl.OpDeallocMW, open: true, locks: locks(kindMR), run: destroys(mwTable, (*conn).deallocMW)},
	)
}

type mrObj struct {
	mr     *roce.MR
	mem    *clientMem
	cost   cost
	access uint32 // as registered, or as REREG_MR last changed it
}

func (c *conn) regMR(in *ctl.RegMR, r *request) ([]byte, []int, error) {
	pd, ok := c.pds[in.PD]
	if !ok {
		return nil, nil, unix.EINVAL
	}
	if err := c.checkRegBytes(in.Length, 0); err != nil {
		return nil, nil, err
	}
	h, err := c.alloc(len(c.mrs)+len(c.mws), c.s.Limits().MRs, "MRs")
	if err != nil {
		return nil, nil, err
	}
	mem, k, err := c.clientRange("REG_MR", r.fds, *in, 1)
	if err != nil {
		return nil, nil, err
	}
	m, err := pd.RegMRRegion(mem, in.IOVA, mr.Access(in.Access))
	if err != nil {
		mem.unmap()
		c.release(k)
		return nil, nil, err
	}
	c.mrs[h] = &mrObj{mr: m, mem: mem, cost: k, access: in.Access}
	c.regBytes += in.Length
	out := ctl.MR{Handle: h, LKey: m.LKey(), RKey: m.RKey()}
	return ctl.Bytes(&out), nil, nil
}

// clientRange maps the memory of a registration and charges it: with a
// descriptor, a range of the client's memfd (mapClientMem); without, the
// range at in.Addr of the client's address space (mapProcMem), one
// mapping per VMA it spans. It charges mrs MRs, the mappings and the
// bytes. c.mrMu is held.
func (c *conn) clientRange(op string, fds []int, in ctl.RegMR, mrs uint64) (*clientMem, cost, error) {
	k := mrCost(in.Length)
	k[ResMRs] = mrs
	if len(fds) == 1 {
		if err := c.charge(k); err != nil {
			return nil, k, err
		}
		mem, err := mapClientMem(fds[0], in.FDOffset, in.Length)
		if err != nil {
			c.release(k)
			return nil, k, clientMemErr(op, err)
		}
		return mem, k, nil
	}
	// The VMAs are not known before the maps are read: charge the most a
	// registration may hold, and the descriptors it opens on the way,
	// then give back what it does not keep.
	k[ResMaps], k[ResFDs] = maxMRPieces, maxMRPieces
	if err := c.charge(k); err != nil {
		return nil, k, err
	}
	write := mr.Access(in.Access)&(mr.AccessLocalWrite|mr.AccessRemoteWrite|mr.AccessRemoteAtomic) != 0
	mem, n, err := c.mapProcMem(in.Addr, in.Length, write)
	if err != nil {
		c.release(k)
		c.s.log.Debug("registration by address refused", "client", c.id, "op", op, "err", err)
		return nil, k, procMemErrno(err)
	}
	var back cost
	back[ResMaps], back[ResFDs] = maxMRPieces-n, maxMRPieces
	c.release(back)
	k[ResMaps], k[ResFDs] = n, 0
	return mem, k, nil
}

// procMemErrno is the errno a registration by address fails with: the
// errno of the failure, EFAULT when there is none.
func procMemErrno(err error) error {
	var e unix.Errno
	if errors.As(err, &e) {
		return e
	}
	return unix.EFAULT
}

// mrCost is what an MR of length bytes holds: one MR, one mapping, its
// bytes.
func mrCost(length uint64) cost {
	var k cost
	k[ResMRs], k[ResMaps], k[ResRegBytes] = 1, 1, length
	return k
}

// clientMemErr is the error of a request whose client memory could not
// be mapped: the client's fault (not a memfd, not sealed, a range outside
// it) ends the connection; the daemon's shortage (mmap's ENOMEM at
// vm.max_map_count) is the errno the client gets, connected.
func clientMemErr(op string, err error) error {
	var f *memFault
	if errors.As(err, &f) {
		return misbehaved("%s: %w", op, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}

// checkRegBytes checks a registration of length bytes that replaces one
// of old bytes against the range a registration may have and the
// client's limit on registered bytes; c.mrMu is held.
func (c *conn) checkRegBytes(length, old uint64) error {
	if length == 0 || length > 1<<40 {
		return unix.EINVAL
	}
	if c.regBytes-old+length > c.s.Limits().RegBytes {
		c.s.budget.warn(c.uid, "client limit reached", "client", c.id, "what", "registered bytes", "limit", c.s.Limits().RegBytes)
		return unix.ENOMEM
	}
	return nil
}

// reregMR re-registers an MR (ibv_rereg_mr) with the checks of REG_MR:
// a new translation is a memfd range mapped as REG_MR maps it, within the
// client's limit on registered bytes (less what the old range held).
func (c *conn) reregMR(in *ctl.ReregMR, r *request) ([]byte, []int, error) {
	fds := r.fds
	flags := mr.ReregFlags(in.Flags)
	translate := flags&mr.ReregChangeTranslation != 0
	if len(fds) > 1 || (len(fds) == 1 && !translate) {
		return nil, nil, misbehaved("REREG_MR with %d descriptors, its flags %#x take at most %d", len(fds), in.Flags, min(in.Flags&uint32(mr.ReregChangeTranslation), 1))
	}
	o, err := mrTable.get(c, r, in.Handle)
	if err != nil {
		return nil, nil, err
	}
	// As the kernel's rereg: no flag, or an unknown one, is EINVAL.
	if flags == 0 || flags&^(mr.ReregChangeTranslation|mr.ReregChangePD|mr.ReregChangeAccess) != 0 {
		return nil, nil, unix.EINVAL
	}
	var pd *roce.PD
	if flags&mr.ReregChangePD != 0 {
		var ok bool
		if pd, ok = c.pds[in.Reg.PD]; !ok {
			return nil, nil, unix.EINVAL
		}
	}
	var mem *clientMem
	var region mr.Region
	var k cost // the new range's mapping and bytes
	old := uint64(len(o.mem.bytes))
	if translate {
		if err := c.checkRegBytes(in.Reg.Length, old); err != nil {
			return nil, nil, err
		}
		// The new range is mapped beside the old until Rereg is done.
		reg := in.Reg
		if flags&mr.ReregChangeAccess == 0 {
			reg.Access = o.access
		}
		if mem, k, err = c.clientRange("REREG_MR", fds, reg, 0); err != nil {
			return nil, nil, err
		}
		region = mem
	}
	if err := o.mr.Rereg(flags, pd, region, in.Reg.IOVA, mr.Access(in.Reg.Access)); err != nil {
		mem.unmap()
		c.release(k)
		return nil, nil, err
	}
	if flags&mr.ReregChangeAccess != 0 {
		o.access = in.Reg.Access
	}
	if translate {
		// The engine no longer touches the old range: Rereg waited.
		o.mem.unmap()
		o.mem = mem
		c.regBytes = c.regBytes - old + in.Reg.Length
		// The MR stays; the old range's mappings and bytes go.
		gone := o.cost
		gone[ResMRs] = 0
		c.release(gone)
		k[ResMRs] = o.cost[ResMRs]
		o.cost = k
	}
	out := ctl.MR{Handle: in.Handle, LKey: o.mr.LKey(), RKey: o.mr.RKey()}
	return ctl.Bytes(&out), nil, nil
}

func (c *conn) deregMR(_ uint32, o *mrObj) error {
	if err := o.mr.Dereg(); err != nil {
		return err
	}
	c.regBytes -= uint64(len(o.mem.bytes))
	o.mem.unmap()
	c.release(o.cost)
	return nil
}

func (c *conn) allocMW(in *ctl.MW, _ *request) ([]byte, []int, error) {
	pd, ok := c.pds[in.PDOrHandle]
	if !ok || (in.TypeOrRKey != 1 && in.TypeOrRKey != 2) {
		return nil, nil, unix.EINVAL
	}
	h, err := c.alloc(len(c.mrs)+len(c.mws), c.s.Limits().MRs, "MWs")
	if err != nil {
		return nil, nil, err
	}
	if err := c.charge(one(ResMRs, 1)); err != nil {
		return nil, nil, err
	}
	w, err := pd.AllocMW(mr.MWType(in.TypeOrRKey))
	if err != nil {
		c.release(one(ResMRs, 1))
		return nil, nil, err
	}
	c.mws[h] = w
	out := ctl.MW{PDOrHandle: h, TypeOrRKey: w.RKey()}
	return ctl.Bytes(&out), nil, nil
}

func (c *conn) deallocMW(_ uint32, w *mr.MW) error {
	if err := w.Dealloc(); err != nil {
		return err
	}
	c.release(one(ResMRs, 1))
	return nil
}
