package roce

import (
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/verbs"
)

// PD is a protection domain (struct ibv_pd).
type PD struct {
	dev  *Device
	pd   *mr.PD
	nobj int // QPs, SRQs and AHs, under the device lock
	dead bool
}

// AllocPD creates a protection domain (ibv_alloc_pd).
func (d *Device) AllocPD() (*PD, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed.Load() {
		return nil, ErrClosed
	}
	return &PD{dev: d, pd: d.mrt.AllocPD()}, nil
}

// Device returns the device of the PD.
func (pd *PD) Device() *Device { return pd.dev }

// Dealloc destroys the PD (ibv_dealloc_pd). It fails with ErrBusy while
// MRs, QPs, SRQs or AHs use it.
func (pd *PD) Dealloc() error {
	d := pd.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	if pd.dead {
		return ErrDestroyed
	}
	if pd.nobj > 0 {
		return ErrBusy
	}
	if err := pd.pd.Dealloc(); err != nil {
		if err == mr.ErrBusy {
			return ErrBusy
		}
		return err
	}
	pd.dead = true
	return nil
}

// MR is a registered memory region (struct ibv_mr).
type MR struct {
	pd  *PD
	m   *mr.MR
	buf []byte
}

// RegMR registers buf (ibv_reg_mr). Its address for remote access is the
// address of buf[0] (see MR.Addr); access selects what local and remote
// operations may do with it.
func (pd *PD) RegMR(buf []byte, access mr.Access) (*MR, error) {
	return pd.RegMRRegion(mr.Slice(buf), mr.AddrOf(buf), access)
}

// RegMRRegion registers memory given as an mr.Region, such as memory
// shared with another process, with its first byte at virtual address
// iova (ibv_reg_mr_iova).
func (pd *PD) RegMRRegion(r mr.Region, iova uint64, access mr.Access) (*MR, error) {
	m, err := pd.pd.RegMRIOVA(r, iova, access)
	if err != nil {
		return nil, err
	}
	return &MR{pd: pd, m: m, buf: r.Bytes()}, nil
}

// LKey returns the local key.
func (m *MR) LKey() uint32 { return m.m.LKey() }

// RKey returns the remote key.
func (m *MR) RKey() uint32 { return m.m.RKey() }

// Addr returns the virtual address of the first byte of the region.
func (m *MR) Addr() uint64 { return m.m.IOVA() }

// Len returns the length of the region.
func (m *MR) Len() int { return len(m.buf) }

// Buf returns the registered memory.
func (m *MR) Buf() []byte { return m.buf }

// PD returns the protection domain of the region.
func (m *MR) PD() *PD { return m.pd }

// SGE returns the scatter/gather element for n bytes at offset off of the
// region.
func (m *MR) SGE(off, n int) mr.SGE {
	return mr.SGE{Addr: m.m.IOVA() + uint64(off), Length: uint32(n), LKey: m.m.LKey()}
}

// Dereg deregisters the region (ibv_dereg_mr). When it returns no key of
// the region is accepted and its memory is no longer touched. Work
// requests that still name it complete with a protection error; peers
// that still use its rkey get a remote access error. It fails with
// mr.ErrWindowsBound while memory windows are bound to the region.
func (m *MR) Dereg() error {
	return m.m.Dereg()
}

// Rereg re-registers the region (ibv_rereg_mr): flags selects what
// changes, as mr.MR.Rereg says: with mr.ReregChangeTranslation the memory
// becomes r with its first byte at virtual address iova, with
// mr.ReregChangePD the PD becomes pd (of the same device), with
// mr.ReregChangeAccess the access flags become access. The keys stay, as
// with rdma_rxe. When it returns, data movement on the old registration
// has ended, so the old memory may be reused. On failure the region is
// unchanged; errors are those of RegMRRegion, mr.ErrWindowsBound while
// memory windows are bound to the region, and mr.ErrDeregistered after
// Dereg.
func (m *MR) Rereg(flags mr.ReregFlags, pd *PD, r mr.Region, iova uint64, access mr.Access) error {
	var npd *mr.PD
	if flags&mr.ReregChangePD != 0 {
		if pd == nil || pd.dev != m.pd.dev {
			return ErrInvalid
		}
		npd = pd.pd
	}
	n, err := m.m.ReregKeepKey(flags, npd, r, iova, access)
	if err != nil {
		return err
	}
	m.m = n
	if flags&mr.ReregChangePD != 0 {
		m.pd = pd
	}
	if flags&mr.ReregChangeTranslation != 0 {
		m.buf = r.Bytes()
	}
	return nil
}

// AllocMW allocates a memory window of type typ (ibv_alloc_mw). MW.Dealloc
// frees it (ibv_dealloc_mw). A type 1 window is bound with QP.BindMW, a
// type 2 window with a verbs.WROpBindMW work request on a QP of the PD;
// either grants peers access to part of an MR registered with
// mr.AccessMWBind, with the rights of the binding, through the window's
// rkey.
func (pd *PD) AllocMW(typ mr.MWType) (*mr.MW, error) {
	return pd.pd.AllocMW(typ)
}

// AllocMR allocates a fast-registration MR for up to maxLen bytes
// (ib_alloc_mr). FastMR.Map gives it memory, a verbs.WROpRegMR work
// request on a QP of the PD makes it valid with a new key and access flags,
// and verbs.WROpLocalInv or a peer's SEND with invalidate revokes it;
// FastMR.Dealloc frees it.
func (pd *PD) AllocMR(maxLen int) (*mr.FastMR, error) {
	if maxLen <= 0 {
		return nil, ErrInvalid
	}
	return pd.pd.AllocMR(uint64(maxLen))
}

// CreateAH resolves attr into an address handle (ibv_create_ah).
func (pd *PD) CreateAH(attr *verbs.AHAttr) (*verbs.AH, error) {
	ah := new(verbs.AH)
	if err := pd.dev.resolveAH(attr, ah); err != nil {
		return nil, err
	}
	return ah, nil
}

// DestroyAH destroys an address handle (ibv_destroy_ah). Work requests
// already posted keep their own copy of the path, so this releases
// nothing the device still needs.
func (pd *PD) DestroyAH(ah *verbs.AH) error {
	if ah == nil {
		return ErrInvalid
	}
	*ah = verbs.AH{}
	return nil
}
