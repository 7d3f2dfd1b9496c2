package daemon

// Address handles: CREATE_AH, DESTROY_AH. The bridge reads the AHs of UD
// sends under c.ahMu.

import (
	"context"
	"time"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/daemon/ctl"
	"github.com/sroce/sroce/verbs"
	"golang.org/x/sys/unix"
)

type ahObj struct {
	ah *verbs.AH
	pd uint32
}

var ahTable = table[*ahObj]{kind: kindAH, m: func(c *conn) map[uint32]*ahObj { return c.ahs }, notFound: einval}

func init() {
	register(
		// Creating one may wait for a neighbour: its handler takes the
		// AHs' lock only to add it.
		method{op: ctl.OpCreateAH, open: true, run: decoded((*conn).createAH)},
		method{op: ctl.OpDestroyAH, open: true, locks: locks(kindAH), run: destroys(ahTable, (*conn).destroyAH)},
	)
}

// resolve fills in the destination MAC of a path, as rdma-core does for
// RoCE when a QP moves to RTR or an AH is created (bounded).
func (c *conn) resolve(a *ctl.AHAttr) (verbs.AHAttr, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got, err := c.dev.dev.AHAttr(ctx, bth.GID(a.DGID), int(a.SGIDIndex))
	if err != nil {
		return verbs.AHAttr{}, err
	}
	got.FlowLabel, got.HopLimit, got.TrafficClass = a.FlowLabel, a.HopLimit, a.TrafficClass
	return got, nil
}

func (c *conn) createAH(in *ctl.AH, _ *request) ([]byte, []int, error) {
	pd := c.pds[in.PDOrHandle]
	if pd == nil {
		return nil, nil, unix.EINVAL
	}
	attr, err := c.resolve(&in.Attr)
	if err != nil {
		return nil, nil, unix.EHOSTUNREACH
	}
	ah, err := pd.CreateAH(&attr)
	if err != nil {
		return nil, nil, err
	}
	c.ahMu.Lock()
	defer c.ahMu.Unlock()
	h, err := c.alloc(len(c.ahs), c.s.Limits().Objects, "AHs")
	if err == nil {
		err = c.charge(objectCost)
	}
	if err != nil {
		pd.DestroyAH(ah)
		return nil, nil, err
	}
	c.ahs[h] = &ahObj{ah: ah, pd: in.PDOrHandle}
	c.br.setAH(h, c.ahs[h])
	out := ctl.AH{PDOrHandle: h, Attr: ctl.AHOf(&attr)}
	out.Attr.SL, out.Attr.StaticRate = in.Attr.SL, in.Attr.StaticRate
	return ctl.Bytes(&out), nil, nil
}

func (c *conn) destroyAH(h uint32, o *ahObj) error {
	c.br.setAH(h, nil)
	if pd := c.pds[o.pd]; pd != nil {
		pd.DestroyAH(o.ah)
	}
	c.release(objectCost)
	return nil
}
