package iface

// The kinds of link a Port runs on, as a table: each kind has a name (its
// Mode), a line for help texts, what it needs, and an opener that gives
// the Port its links. Open, ParseMode, auto mode and the command line's
// link flags all read the table; adding a kind is an entry here and the
// code of the new link (see docs/design.md, "Adding a link kind").

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/roce/linkcap"
	"github.com/sroce/sroce/roce/netif"
	"github.com/sroce/sroce/roce/udplink"
	"github.com/sroce/sroce/xdp"
)

// LinkKind is one kind of link a Port can run on (an entry of Kinds).
type LinkKind struct {
	// Mode names the kind in Options.Mode, ParseMode and the link flags
	// of the command line.
	Mode Mode
	// Title names the kind in sentences: "AF_XDP", "the UDP link".
	Title string
	// Description says in a few words what the kind is, for help texts.
	Description string
	// Permitted, if set, says what this process lacks to open the kind
	// (nil: nothing). Open then fails with ErrNotPermitted when the kind
	// was asked for; auto mode passes to the next kind.
	Permitted func() error
	// AutoSkip, if set, says why auto mode does not try the kind on the
	// interface ("": it does).
	AutoSkip func(ifc *netif.Interface) string
	// MultiQueue: the kind runs a device on several receive queues
	// (Options.Queues above 1).
	MultiQueue bool
	// Open opens the kind's links on the interface, one per queue, in
	// the network namespace of the calling thread.
	Open func(ifc *netif.Interface, opts *Options) (*Links, error)
	// Stats, if set, lists the counters of one of the kind's links
	// (Port.LinkStats), the same names for each.
	Stats func(l roce.Link) []Stat
}

// Links is what a LinkKind's Open gives the Port.
type Links struct {
	// Links are the device's links, one per queue (roce.OpenLinks).
	Links []roce.Link
	// Mode is what Port.LinkMode reports: LinkXDPCopy, LinkUDP, ...
	Mode string
	// Local is the address the links are bound to (Port.LocalAddr),
	// whose GID the table gets, or invalid.
	Local netip.Addr
	// Attach says how a steering program is attached (Port.XDPAttach),
	// or "".
	Attach string
	// Close, if set, releases what the links share (the steering program
	// of several queues) once the links are closed.
	Close func() error
}

// kinds is the table of link kinds, in the order auto mode tries them.
var kinds = []LinkKind{
	{
		Mode:        ModeXDP,
		Title:       "AF_XDP",
		Description: "AF_XDP, needs root",
		Permitted:   xdpPrivileges,
		AutoSkip: func(ifc *netif.Interface) string {
			if isLoopback(ifc) {
				return "AF_XDP is not used on a loopback interface"
			}
			return ""
		},
		MultiQueue: true,
		Open:       openXDP,
		Stats:      xdpStats,
	},
	{
		Mode:        ModeUDP,
		Title:       "the UDP link",
		Description: "a UDP socket on port 4791, no privileges",
		Open:        openUDP,
		Stats:       udpStats,
	},
}

// Kinds returns the table of link kinds, in the order auto mode tries
// them.
func Kinds() []LinkKind { return append([]LinkKind(nil), kinds...) }

// kindOf returns the kind named mode, or nil.
func kindOf(mode Mode) *LinkKind {
	for i := range kinds {
		if kinds[i].Mode == mode {
			return &kinds[i]
		}
	}
	return nil
}

// ModeChoices lists the modes ParseMode takes, "auto" first, joined by
// sep; with sep ", " the last two are joined by " or ": "auto, xdp or
// udp".
func ModeChoices(sep string) string {
	names := []string{string(ModeAuto)}
	for _, k := range kinds {
		names = append(names, string(k.Mode))
	}
	if sep == ", " {
		return strings.Join(names[:len(names)-1], sep) + " or " + names[len(names)-1]
	}
	return strings.Join(names, sep)
}

// ModeSentence describes the modes for a help text: "xdp (AF_XDP,
// needs root), udp (a UDP socket on port 4791, no privileges) or auto
// (the first of these that works)".
func ModeSentence() string {
	var parts []string
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%s (%s)", k.Mode, k.Description))
	}
	return strings.Join(parts, ", ") + " or auto (the first of these that works)"
}

// openLinks opens the links of mode (a kind, or auto) on ifc and sets
// p's links, link mode and reason.
func (p *Port) openLinks(ifc *netif.Interface, mode Mode, opts *Options) error {
	if mode != ModeAuto {
		k := kindOf(mode)
		if k.Permitted != nil {
			if err := k.Permitted(); err != nil {
				return errorf(ErrNotPermitted, err, "%s on %s needs root (%v); %s", k.Title, ifc.Name, err, unprivileged())
			}
		}
		l, err := k.Open(ifc, opts)
		if err != nil {
			return err
		}
		p.use(k, l, k.Title+" was asked for")
		return nil
	}
	var why []string // why the kinds before were passed over
	var failed error
	for i := range kinds {
		k := &kinds[i]
		if k.AutoSkip != nil {
			if r := k.AutoSkip(ifc); r != "" {
				why = append(why, r)
				continue
			}
		}
		if k.Permitted != nil {
			if err := k.Permitted(); err != nil {
				why = append(why, fmt.Sprintf("not root: %s needs %v", k.Title, err))
				continue
			}
		}
		l, err := k.Open(ifc, opts)
		if err == nil {
			reason := strings.Join(why, "; ")
			if reason == "" {
				reason = fmt.Sprintf("%s works on %s", k.Title, ifc.Name)
				if k.Permitted != nil {
					reason = "root, and " + reason
				}
			}
			p.use(k, l, reason)
			return nil
		}
		if failed != nil {
			return fmt.Errorf("%w; and %s failed too: %w", failed, k.Title, err)
		}
		if opts.StrictAuto && !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.EACCES) && i < len(kinds)-1 {
			next := kinds[i+1]
			return fmt.Errorf("%w (with --link auto %s is used only when %s is not permitted; --link %s asks for it)", err, next.Title, k.Title, next.Mode)
		}
		failed = err
		why = append(why, err.Error())
	}
	if failed != nil {
		return failed
	}
	return fmt.Errorf("no link kind can serve %s: %s", ifc.Name, strings.Join(why, "; "))
}

// unprivileged names the kinds that need no privileges, for a sentence.
func unprivileged() string {
	var names []string
	for _, k := range kinds {
		if k.Permitted == nil {
			names = append(names, k.Title)
		}
	}
	if len(names) == 0 {
		return "no link works without"
	}
	return strings.Join(names, " or ") + " works without"
}

// deliversToSelf reports whether the port's link delivers frames to the
// device's own addresses itself (linkcap.DeliversToSelf).
func (p *Port) deliversToSelf() bool {
	return p.links[0].Caps()&linkcap.DeliversToSelf != 0
}

// use makes l the port's links.
func (p *Port) use(k *LinkKind, l *Links, reason string) {
	p.kind = k
	p.links = l.Links
	p.linkMode = l.Mode
	p.local = l.Local
	p.attach = l.Attach
	p.closeShared = l.Close
	p.reason = reason
	if l.Local.IsValid() {
		p.gidt.Add(l.Local)
	}
}

// openXDP opens the AF_XDP link, or one per queue.
func openXDP(ifc *netif.Interface, opts *Options) (*Links, error) {
	xo := opts.XDP
	if opts.Engine.Spins() && xo.BusyPoll == 0 {
		// A polling engine drives the queue itself (see xdp.Options).
		xo.BusyPoll = DefaultBusyPoll
	}
	var xsks []*xdp.Link
	out := &Links{}
	n := queueCount(ifc.Name, opts)
	if n == 1 {
		l, err := xdp.OpenLink(ifc.Name, opts.Queue, xo)
		if err != nil {
			return nil, errorf(ErrXDP, err, "AF_XDP on %s queue %d failed: %v", ifc.Name, opts.Queue, err)
		}
		xsks = []*xdp.Link{l}
		out.Attach = l.Socket().AttachMode().String()
	} else {
		g, err := xdp.OpenQueues(ifc.Name, n, xo)
		if err != nil {
			return nil, errorf(ErrXDP, err, "AF_XDP on %s queues 0-%d failed: %v", ifc.Name, n-1, err)
		}
		for _, s := range g.Sockets {
			l, err := xdp.NewLink(s)
			if err != nil {
				g.Close()
				return nil, errorf(ErrXDP, err, "AF_XDP on %s: %v", ifc.Name, err)
			}
			xsks = append(xsks, l)
		}
		out.Attach = g.AttachMode().String()
		out.Close = g.Close
	}
	for _, l := range xsks {
		out.Links = append(out.Links, l)
	}
	out.Mode = LinkXDPCopy
	if xsks[0].Socket().Mode() == xdp.ModeZeroCopy {
		out.Mode = LinkXDPZeroCopy
	}
	return out, nil
}

// openUDP opens the UDP link on the chosen address.
func openUDP(ifc *netif.Interface, opts *Options) (*Links, error) {
	a, err := udpAddr(ifc, opts.Addr)
	if err != nil {
		return nil, err
	}
	l, err := udplink.Open(a, 0, ifc.MTU)
	if err != nil {
		return nil, fmt.Errorf("cannot open the UDP link on %s (%v port 4791): %w", ifc.Name, a, err)
	}
	return &Links{Links: []roce.Link{l}, Mode: LinkUDP, Local: a}, nil
}
