package rtnl

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"golang.org/x/sys/unix"
)

// Operational states (IF_OPER_*, RFC 2863) carried in IFLA_OPERSTATE.
const (
	OperUnknown        = 0
	OperNotPresent     = 1
	OperDown           = 2
	OperLowerLayerDown = 3
	OperTesting        = 4
	OperDormant        = 5
	OperUp             = 6
)

const (
	// vethInfoPeer is VETH_INFO_PEER from linux/veth.h.
	vethInfoPeer = 1
	// rtextFilterSkipStats is RTEXT_FILTER_SKIP_STATS from
	// linux/rtnetlink.h: leave the counters out of link replies.
	rtextFilterSkipStats = 1 << 3
)

// Link is a network interface as an RTM_NEWLINK message describes it.
type Link struct {
	Index     int
	Name      string
	Flags     uint32 // IFF_* from ifinfomsg, including IFF_LOWER_UP (carrier)
	MTU       int
	MAC       net.HardwareAddr
	OperState uint8  // IF_OPER_* (OperUp, OperDown, ...)
	Kind      string // IFLA_INFO_KIND, e.g. "veth"; empty for physical NICs
	RxQueues  int    // IFLA_NUM_RX_QUEUES (0 if not reported)
	TxQueues  int    // IFLA_NUM_TX_QUEUES (0 if not reported)
}

// ParseLink decodes an RTM_NEWLINK or RTM_DELLINK message.
func ParseLink(m Message) (Link, error) {
	h, attrs, err := ParseIfInfomsg(m.Data)
	if err != nil {
		return Link{}, err
	}
	l := Link{Index: int(h.Index), Flags: h.Flags}
	for _, a := range attrs {
		switch a.Type {
		case unix.IFLA_IFNAME:
			l.Name = a.String()
		case unix.IFLA_MTU:
			l.MTU = int(a.Uint32())
		case unix.IFLA_ADDRESS:
			l.MAC = append(net.HardwareAddr(nil), a.Data...)
		case unix.IFLA_OPERSTATE:
			l.OperState = a.Uint8()
		case unix.IFLA_NUM_RX_QUEUES:
			l.RxQueues = int(a.Uint32())
		case unix.IFLA_NUM_TX_QUEUES:
			l.TxQueues = int(a.Uint32())
		case unix.IFLA_LINKINFO:
			if info, err := ParseAttrs(a.Data); err == nil {
				for _, i := range info {
					if i.Type == unix.IFLA_INFO_KIND {
						l.Kind = i.String()
					}
				}
			}
		}
	}
	return l, nil
}

// ErrNoLink is returned (wrapped) when the requested interface does not
// exist in the socket's namespace.
var ErrNoLink = errors.New("no such network interface")

// LinkByName returns the interface named name.
func (c *Conn) LinkByName(name string) (Link, error) {
	var e Encoder
	e.Header(IfInfomsg{Family: unix.AF_UNSPEC}.Encode())
	e.String(unix.IFLA_IFNAME, name)
	e.Uint32(unix.IFLA_EXT_MASK, rtextFilterSkipStats)
	return c.getLink(e.Encode(), name)
}

// LinkByIndex returns the interface with index i.
func (c *Conn) LinkByIndex(i int) (Link, error) {
	var e Encoder
	e.Header(IfInfomsg{Family: unix.AF_UNSPEC, Index: int32(i)}.Encode())
	e.Uint32(unix.IFLA_EXT_MASK, rtextFilterSkipStats)
	return c.getLink(e.Encode(), fmt.Sprintf("index %d", i))
}

func (c *Conn) getLink(body []byte, what string) (Link, error) {
	msgs, err := c.Request(unix.RTM_GETLINK, 0, body)
	if errors.Is(err, unix.ENODEV) {
		return Link{}, fmt.Errorf("%w: %s", ErrNoLink, what)
	}
	if err != nil {
		return Link{}, err
	}
	for _, m := range msgs {
		if m.Type == unix.RTM_NEWLINK {
			return ParseLink(m)
		}
	}
	return Link{}, fmt.Errorf("%w: %s", ErrNoLink, what)
}

// Links returns every interface of the namespace.
func (c *Conn) Links() ([]Link, error) {
	msgs, err := c.Request(unix.RTM_GETLINK, unix.NLM_F_DUMP, IfInfomsg{Family: unix.AF_UNSPEC}.Encode())
	if err != nil {
		return nil, err
	}
	var links []Link
	for _, m := range msgs {
		if m.Type != unix.RTM_NEWLINK {
			continue
		}
		l, err := ParseLink(m)
		if err != nil {
			return nil, err
		}
		links = append(links, l)
	}
	return links, nil
}

// Address is an interface address as an RTM_NEWADDR message describes it.
type Address struct {
	Index  int
	Prefix netip.Prefix // the local address and prefix length
	Scope  uint8        // RT_SCOPE_* (0 universe/global, 253 link, 254 host)
	Flags  uint32       // IFA_F_* (secondary, tentative, nodad, permanent, ...)
}

// ParseAddress decodes an RTM_NEWADDR or RTM_DELADDR message. For IPv4 the
// address is IFA_LOCAL (the interface's own address; IFA_ADDRESS is the
// peer on point-to-point links); for IPv6 it is IFA_ADDRESS.
func ParseAddress(m Message) (Address, error) {
	h, attrs, err := ParseIfAddrmsg(m.Data)
	if err != nil {
		return Address{}, err
	}
	a := Address{Index: int(h.Index), Scope: h.Scope, Flags: uint32(h.Flags)}
	var local, addr netip.Addr
	for _, at := range attrs {
		switch at.Type {
		case unix.IFA_LOCAL:
			local = at.Addr()
		case unix.IFA_ADDRESS:
			addr = at.Addr()
		case unix.IFA_FLAGS:
			a.Flags = at.Uint32()
		}
	}
	ip := addr
	if h.Family == unix.AF_INET && local.IsValid() {
		ip = local
	}
	if !ip.IsValid() {
		ip = local
	}
	if !ip.IsValid() {
		return Address{}, errors.New("rtnl: address message without an address")
	}
	a.Prefix = netip.PrefixFrom(ip, int(h.PrefixLen))
	return a, nil
}

// Addrs returns the addresses of family (unix.AF_INET or unix.AF_INET6) on
// the interface with the given index (0: every interface), in the order of
// the kernel's address list, which is the order `ip addr` shows.
func (c *Conn) Addrs(family uint8, index int) ([]Address, error) {
	msgs, err := c.Request(unix.RTM_GETADDR, unix.NLM_F_DUMP, IfAddrmsg{Family: family}.Encode())
	if err != nil {
		return nil, err
	}
	var addrs []Address
	for _, m := range msgs {
		if m.Type != unix.RTM_NEWADDR {
			continue
		}
		a, err := ParseAddress(m)
		if err != nil {
			return nil, err
		}
		if index != 0 && a.Index != index {
			continue
		}
		addrs = append(addrs, a)
	}
	return addrs, nil
}

// SetLinkUp sets or clears IFF_UP on the interface (ip link set up/down).
func (c *Conn) SetLinkUp(index int, up bool) error {
	h := IfInfomsg{Family: unix.AF_UNSPEC, Index: int32(index), Change: unix.IFF_UP}
	if up {
		h.Flags = unix.IFF_UP
	}
	_, err := c.Request(unix.RTM_NEWLINK, 0, h.Encode())
	return err
}

// SetMTU sets the interface MTU.
func (c *Conn) SetMTU(index, mtu int) error {
	var e Encoder
	e.Header(IfInfomsg{Family: unix.AF_UNSPEC, Index: int32(index)}.Encode())
	e.Uint32(unix.IFLA_MTU, uint32(mtu))
	_, err := c.Request(unix.RTM_NEWLINK, 0, e.Encode())
	return err
}

// AddAddr adds an address to the interface. flags are IFA_F_* bits, e.g.
// unix.IFA_F_NODAD to skip IPv6 duplicate address detection.
func (c *Conn) AddAddr(index int, p netip.Prefix, flags uint32) error {
	return c.addr(unix.RTM_NEWADDR, unix.NLM_F_CREATE|unix.NLM_F_EXCL, index, p, flags)
}

// DelAddr removes an address from the interface.
func (c *Conn) DelAddr(index int, p netip.Prefix) error {
	return c.addr(unix.RTM_DELADDR, 0, index, p, 0)
}

func (c *Conn) addr(typ, reqFlags uint16, index int, p netip.Prefix, flags uint32) error {
	ip := p.Addr().Unmap()
	fam := uint8(unix.AF_INET6)
	if ip.Is4() {
		fam = unix.AF_INET
	}
	var e Encoder
	e.Header(IfAddrmsg{Family: fam, PrefixLen: uint8(p.Bits()), Flags: uint8(flags), Index: uint32(index)}.Encode())
	e.Addr(unix.IFA_LOCAL, ip)
	e.Addr(unix.IFA_ADDRESS, ip)
	if flags > 0xff {
		e.Uint32(unix.IFA_FLAGS, flags)
	}
	_, err := c.Request(typ, reqFlags, e.Encode())
	return err
}

// DelLink deletes the interface (for a veth, both ends).
func (c *Conn) DelLink(index int) error {
	_, err := c.Request(unix.RTM_DELLINK, 0, IfInfomsg{Family: unix.AF_UNSPEC, Index: int32(index)}.Encode())
	return err
}

// VethEnd describes one end of a veth pair.
type VethEnd struct {
	Name   string
	MTU    int              // 0: kernel default (1500)
	MAC    net.HardwareAddr // nil: random
	Queues int              // rx and tx queues; 0: one each
	// NetnsFD is an open network namespace file to create this end in;
	// -1 (or any negative value) for the namespace of the socket.
	NetnsFD int
}

func (v VethEnd) encode(e *Encoder) {
	e.String(unix.IFLA_IFNAME, v.Name)
	if v.MTU > 0 {
		e.Uint32(unix.IFLA_MTU, uint32(v.MTU))
	}
	if len(v.MAC) > 0 {
		e.Bytes(unix.IFLA_ADDRESS, v.MAC)
	}
	if v.Queues > 0 {
		e.Uint32(unix.IFLA_NUM_TX_QUEUES, uint32(v.Queues))
		e.Uint32(unix.IFLA_NUM_RX_QUEUES, uint32(v.Queues))
	}
	if v.NetnsFD >= 0 {
		e.Uint32(unix.IFLA_NET_NS_FD, uint32(v.NetnsFD))
	}
}

// AddVeth creates a veth pair (ip link add NAME type veth peer name PEER).
// Both ends start down.
func (c *Conn) AddVeth(end, peer VethEnd) error {
	var e Encoder
	e.Header(IfInfomsg{Family: unix.AF_UNSPEC}.Encode())
	end.encode(&e)
	e.Nested(unix.IFLA_LINKINFO, func(e *Encoder) {
		e.String(unix.IFLA_INFO_KIND, "veth")
		e.Nested(unix.IFLA_INFO_DATA, func(e *Encoder) {
			e.Nested(vethInfoPeer, func(e *Encoder) {
				e.Header(IfInfomsg{Family: unix.AF_UNSPEC}.Encode())
				peer.encode(e)
			})
		})
	})
	_, err := c.Request(unix.RTM_NEWLINK, unix.NLM_F_CREATE|unix.NLM_F_EXCL, e.Encode())
	return err
}
