package netif

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// WaitActive waits until an interface named ifname exists in the handle's
// namespace and is up with carrier, and returns it (WaitInterface with
// Interface.Active).
func (h *Handle) WaitActive(ctx context.Context, ifname string) (*Interface, error) {
	return h.WaitInterface(ctx, ifname, (*Interface).Active)
}

// WaitInterface waits until an interface named ifname exists in the
// handle's namespace and, if ok is not nil, ok holds for it, and returns
// it: what a program serving an interface that was deleted waits for
// before it opens it again. It follows the kernel's link and address
// notifications, so it returns as soon as the interface is there, whatever
// its index now; it returns ctx's error when ctx ends first, and an error
// when the notifications cannot be read.
func (h *Handle) WaitInterface(ctx context.Context, ifname string, ok func(*Interface) bool) (*Interface, error) {
	// Subscribe first, then look, so no change falls in between.
	sub, err := h.subscribe()
	if err != nil {
		return nil, fmt.Errorf("netif: waiting for %s: %w", ifname, err)
	}
	defer sub.Close()
	stop := context.AfterFunc(ctx, sub.Close)
	defer stop()
	for {
		ifc, err := h.Lookup(ifname)
		switch {
		case err == nil && (ok == nil || ok(ifc)):
			return ifc, nil
		case err != nil && !errors.Is(err, ErrNoInterface):
			return nil, fmt.Errorf("netif: waiting for %s: %w", ifname, err)
		}
		// Any notification may be the one: look again after each batch.
		_, _, err = sub.Receive()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if err != nil && !errors.Is(err, unix.ENOBUFS) {
			return nil, fmt.Errorf("netif: waiting for %s: %w", ifname, err)
		}
	}
}
