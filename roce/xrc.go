// XRC domains and XRC SRQs: the device's side of eXtended Reliable
// Connected transport. An XRC_SEND QP is made by PD.CreateQP; an XRC_RECV
// QP belongs to a domain (XRCD.CreateQP) and delivers each message to the
// XRC SRQ of that domain the message names. All the XRC_RECV QPs and XRC
// SRQs of a domain run on one engine, the only consumer of those SRQs.

package roce

import (
	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/qp"
)

// XRCD is an XRC domain (struct ibv_xrcd).
type XRCD struct {
	dev  *Device
	eng  *engine
	pd   *PD // the PD of its XRC_RECV QPs (their memory checks use each SRQ's)
	x    *qp.XRCD
	nobj int  // XRC_RECV QPs and XRC SRQs, under the device lock
	dead bool // under the device lock
	// Context is free for the application.
	Context any
}

// AllocXRCD opens a new XRC domain (ibv_open_xrcd; sharing one domain
// between processes is the daemon's business).
func (d *Device) AllocXRCD() (*XRCD, error) {
	pd, err := d.AllocPD()
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	x := &XRCD{dev: d, eng: d.eng[d.nxrcd%len(d.eng)], pd: pd, x: &qp.XRCD{}}
	d.nxrcd++
	x.x.Context = x
	return x, nil
}

// Dealloc closes the domain (ibv_close_xrcd); ErrBusy while it has QPs or
// SRQs.
func (x *XRCD) Dealloc() error {
	d := x.dev
	d.mu.Lock()
	if x.dead {
		d.mu.Unlock()
		return ErrDestroyed
	}
	if x.nobj > 0 {
		d.mu.Unlock()
		return ErrBusy
	}
	x.dead = true
	d.mu.Unlock()
	return x.pd.Dealloc()
}

// CreateQP creates an XRC_RECV QP of the domain (ibv_create_qp_ex with
// IBV_QPT_XRC_RECV): attr.Type must be verbs.QPTypeXRCRecv, with no CQs
// and no SRQ.
func (x *XRCD) CreateQP(attr *QPInitAttr) (*QP, error) {
	a := *attr
	a.XRCD = x
	return x.pd.CreateQP(&a)
}

// CreateXRCSRQ creates an XRC SRQ of domain x (ibv_create_srq_ex with
// IBV_SRQT_XRC): messages of the domain's XRC_RECV QPs that name its
// number (SRQ.Num) take its receive requests, have their memory
// operations checked against pd and complete on cq.
func (pd *PD) CreateXRCSRQ(x *XRCD, cq *CQ, maxWR, maxSGE, limit uint32) (*SRQ, error) {
	d := pd.dev
	if x == nil || cq == nil || x.dev != d || cq.dev != d || maxWR == 0 || maxWR > MaxSRQWR || maxSGE > MaxSGE || limit > maxWR {
		return nil, ErrInvalid
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed.Load() {
		return nil, ErrClosed
	}
	if pd.dead || x.dead || cq.dead {
		return nil, ErrDestroyed
	}
	// Numbers are 24 bits, handed out cyclically from 1.
	var n uint32
	for range bth.PSNMask {
		d.nextSRQN = d.nextSRQN%bth.PSNMask + 1
		if _, used := d.xrcSRQs.Load(d.nextSRQN); !used {
			n = d.nextSRQN
			break
		}
	}
	if n == 0 {
		return nil, ErrNoResources
	}
	s := &SRQ{dev: d, eng: x.eng, pd: pd, xrcd: x, cq: cq,
		srq: qp.NewXRCSRQ(maxWR, maxSGE, x.x, n, pd.pd.ForQP(), (*cqSink)(cq))}
	s.srq.Context = s
	s.srq.Arm(limit)
	d.xrcSRQs.Store(n, s)
	pd.nobj++
	x.nobj++
	cq.nqp++
	return s, nil
}

// Num returns an XRC SRQ's number (ibv_get_srq_num); 0 for an SRQ of QPs.
func (s *SRQ) Num() uint32 { return s.srq.Num() }

// findXRCSRQ is the engines' lookup of an XRC SRQ by number.
func (d *Device) findXRCSRQ(n uint32) *qp.SRQ {
	if v, ok := d.xrcSRQs.Load(n); ok {
		return v.(*SRQ).srq
	}
	return nil
}
