package daemon

// Completion channels: CREATE_COMP_CHANNEL, DESTROY_COMP_CHANNEL. A
// channel is a socket the daemon writes a CQ's events to; the CM's event
// channels (cm.go) are made the same way.

import (
	"fmt"

	"github.com/sroce/sroce/daemon/ctl"
	"golang.org/x/sys/unix"
)

type chanObj struct {
	w    int // the daemon's end of the channel socket
	refs int // CQs using it
}

var chanTable = table[*chanObj]{kind: kindChan, m: func(c *conn) map[uint32]*chanObj { return c.chans }, notFound: einval}

func init() {
	register(
		method{op: ctl.OpCreateCompChannel, open: true, locks: locks(kindChan), run: plain((*conn).createChannel)},
		method{op: ctl.OpDestroyCompChannel, open: true, locks: locks(kindChan), run: destroys(chanTable, (*conn).destroyChannel)},
	)
}

// eventSocket returns the two ends of a socket the daemon sends events
// on: its own end w (nonblocking: a client that does not read loses
// events, it never stalls the daemon) and the client's r.
func eventSocket() (w, r int, err error) {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, -1, fmt.Errorf("socketpair for events: %w", err)
	}
	unix.SetNonblock(pair[0], true)
	return pair[0], pair[1], nil
}

// newChannel allocates a handle from a table of have entries and makes
// its event socket; add records the daemon's end under the handle (the
// caller holds the table's lock). The reply is the handle with the
// client's end.
func (c *conn) newChannel(have int, what string, add func(h uint32, w int)) ([]byte, []int, error) {
	h, err := c.alloc(have, c.s.Limits().Objects, what)
	if err != nil {
		return nil, nil, err
	}
	if err := c.charge(one(ResFDs, 1)); err != nil {
		return nil, nil, err
	}
	w, r, err := eventSocket()
	if err != nil {
		c.release(one(ResFDs, 1))
		return nil, nil, err
	}
	add(h, w)
	out := ctl.Handle{Handle: h}
	return ctl.Bytes(&out), []int{r}, nil
}

func (c *conn) createChannel() ([]byte, []int, error) {
	return c.newChannel(len(c.chans), "completion channels", func(h uint32, w int) { c.chans[h] = &chanObj{w: w} })
}

func (c *conn) destroyChannel(_ uint32, ch *chanObj) error {
	if ch.refs > 0 {
		return unix.EBUSY
	}
	// Closed whatever close says (Linux frees the descriptor even when
	// it reports an error), so released once.
	unix.Close(ch.w)
	c.release(one(ResFDs, 1))
	return nil
}
