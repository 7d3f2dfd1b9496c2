package rdmacm

import (
	"context"
	"fmt"
	"net"
	"net/netip"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/verbs"
)

// Port is a device the CM runs on and the address resolution that goes
// with it. *iface.Port (a device on a network interface) is one; StaticPort
// serves devices on links without a kernel neighbour table (memlink).
type Port interface {
	// Device returns the running device; the CM opens its QP1 on it.
	Device() *roce.Device
	// SourceGIDIndex returns the GID index to send from towards dgid, as
	// the kernel's route would choose it.
	SourceGIDIndex(dgid bth.GID) (int, error)
	// AHAttr returns the address vector from GID sgidIndex to dgid, with
	// the next hop's MAC, resolving it within ctx.
	AHAttr(ctx context.Context, dgid bth.GID, sgidIndex int) (verbs.AHAttr, error)
	// NodeGUID returns the device's node GUID (the CM puts it in REQs and
	// REPs as the local CA GUID).
	NodeGUID() [8]byte
}

// StaticPort is a Port whose neighbours are a fixed table: for devices on
// the in-memory link, or any link whose peers are known in advance.
type StaticPort struct {
	Dev *roce.Device
	// MACs maps peer GIDs to their Ethernet addresses.
	MACs map[bth.GID]net.HardwareAddr
	// GUID is the node GUID; zero gives one made from the device name.
	GUID [8]byte
}

// Device returns p.Dev.
func (p *StaticPort) Device() *roce.Device { return p.Dev }

// NodeGUID returns p.GUID.
func (p *StaticPort) NodeGUID() [8]byte { return p.GUID }

// SourceGIDIndex returns the first GID of dgid's IP version.
func (p *StaticPort) SourceGIDIndex(dgid bth.GID) (int, error) {
	for i := 0; i < roce.GIDTableLen; i++ {
		g, err := p.Dev.QueryGID(i)
		if err == nil && !g.IsZero() && g.IsIPv4() == dgid.IsIPv4() {
			return i, nil
		}
	}
	return 0, fmt.Errorf("rdmacm: %s has no GID of the IP version of %v", p.Dev.Name(), dgid.Addr().Unmap())
}

// AHAttr returns the address vector to dgid with its MAC from p.MACs, or
// the group's Ethernet address for a multicast GID.
func (p *StaticPort) AHAttr(_ context.Context, dgid bth.GID, sgidIndex int) (verbs.AHAttr, error) {
	a := verbs.AHAttr{DGID: dgid, SGIDIndex: uint8(sgidIndex), HopLimit: 64, PortNum: 1}
	if mac, ok := dgid.MulticastMAC(); ok {
		a.DMAC = mac
		return a, nil
	}
	mac, ok := p.MACs[dgid]
	if !ok {
		return verbs.AHAttr{}, fmt.Errorf("rdmacm: %v is not a neighbour of %s", dgid.Addr().Unmap(), p.Dev.Name())
	}
	copy(a.DMAC[:], mac)
	return a, nil
}

// gidIndexOf returns the index of the GID of addr in dev's table.
func gidIndexOf(dev *roce.Device, addr netip.Addr) (int, bool) {
	g := bth.GIDFromAddr(addr)
	for i := 0; i < roce.GIDTableLen; i++ {
		if x, err := dev.QueryGID(i); err == nil && x == g {
			return i, true
		}
	}
	return 0, false
}
