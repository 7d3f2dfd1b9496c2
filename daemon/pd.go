package daemon

// Protection domains: ALLOC_PD, DEALLOC_PD.

import (
	"github.com/sroce/sroce/daemon/ctl"
	"github.com/sroce/sroce/roce"
)

// pdTable is the connection's PDs for the generic path.
var pdTable = table[*roce.PD]{kind: kindPD, m: func(c *conn) map[uint32]*roce.PD { return c.pds }, notFound: einval}

func init() {
	register(
		method{op: ctl.OpAllocPD, open: true, locks: locks(kindPD), run: plain((*conn).allocPD)},
		method{op: ctl.OpDeallocPD, open: true, locks: locks(kindPD), run: destroys(pdTable, (*conn).deallocPD)},
	)
}

func (c *conn) allocPD() ([]byte, []int, error) {
	h, err := c.alloc(len(c.pds), c.s.Limits().Objects, "PDs")
	if err != nil {
		return nil, nil, err
	}
	if err := c.charge(objectCost); err != nil {
		return nil, nil, err
	}
	pd, err := c.dev.dev.Device().AllocPD()
	if err != nil {
		c.release(objectCost)
		return nil, nil, err
	}
	c.pds[h] = pd
	return handleReply(h)
}

// objectCost is what a PD or an AH is charged: a nominal size of its
// state in the daemon, against the queue memory budget (the per-connection
// limit on objects alone lets a uid's many connections hold gigabytes).
var objectCost = one(ResQueueBytes, 512)

func (c *conn) deallocPD(_ uint32, pd *roce.PD) error {
	if err := pd.Dealloc(); err != nil {
		return err
	}
	c.release(objectCost)
	return nil
}
