package roce

import (
	"context"
	"sync"

	"github.com/sroce/sroce/verbs"
)

// AsyncEvent is an asynchronous event (struct ibv_async_event): CQ
// overflow, SRQ limit reached, send queue drained.
type AsyncEvent struct {
	Type verbs.EventType
	QP   *QP
	CQ   *CQ
	SRQ  *SRQ
}

// maxEvents bounds the queue of unread asynchronous events; older events
// are dropped first.
const maxEvents = 1024

type eventQueue struct {
	mu     sync.Mutex
	q      []AsyncEvent
	wake   chan struct{}
	closed bool
}

func (e *eventQueue) init() { e.wake = make(chan struct{}, 1) }

func (e *eventQueue) post(ev AsyncEvent) {
	e.mu.Lock()
	if len(e.q) == maxEvents {
		copy(e.q, e.q[1:])
		e.q = e.q[:maxEvents-1]
	}
	e.q = append(e.q, ev)
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

func (e *eventQueue) close() {
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// PollAsyncEvent returns the oldest unread asynchronous event, if any.
func (d *Device) PollAsyncEvent() (AsyncEvent, bool) {
	e := &d.events
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.q) == 0 {
		return AsyncEvent{}, false
	}
	ev := e.q[0]
	e.q = e.q[1:]
	return ev, true
}

// GetAsyncEvent waits for the next asynchronous event
// (ibv_get_async_event).
func (d *Device) GetAsyncEvent(ctx context.Context) (AsyncEvent, error) {
	e := &d.events
	for {
		if ev, ok := d.PollAsyncEvent(); ok {
			return ev, nil
		}
		e.mu.Lock()
		closed := e.closed
		e.mu.Unlock()
		if closed {
			return AsyncEvent{}, ErrClosed
		}
		select {
		case <-e.wake:
		case <-ctx.Done():
			return AsyncEvent{}, ctx.Err()
		}
	}
}
