package netif

import (
	"fmt"
	"net"
	"net/netip"
	"sync"

	"github.com/sroce/sroce/bth"
)

// GIDTableLen is the size of rxe's GID table (RXE_PORT_GID_TBL_LEN), and
// of sroce's: the highest usable index is GIDTableLen-1.
const GIDTableLen = 1024

// GIDType is the RoCE version a GID table entry is for, as sysfs
// (gid_attrs/types/N) and ibv_devinfo name it.
type GIDType uint8

// GID types. rxe, and sroce, register only RoCE v2.
const (
	GIDTypeRoCEv1 GIDType = 1 // "IB/RoCE v1"
	GIDTypeRoCEv2 GIDType = 2 // "RoCE v2"
)

// String returns the type as sysfs and ibv_devinfo write it.
func (t GIDType) String() string {
	switch t {
	case GIDTypeRoCEv1:
		return "IB/RoCE v1"
	case GIDTypeRoCEv2:
		return "RoCE v2"
	}
	return fmt.Sprintf("GIDType(%d)", uint8(t))
}

// GIDEntry is one valid entry of a GID table.
type GIDEntry struct {
	Index int
	GID   bth.GID
	Type  GIDType
	// Default marks the reserved entry made from the MAC address (index
	// 0); the others come from IP addresses.
	Default bool
}

// String formats the entry as ibv_devinfo -v does, without the leading
// tabs: "GID[  1]: ::ffff:192.0.2.1, RoCE v2".
func (e GIDEntry) String() string {
	return fmt.Sprintf("GID[%3d]: %s, %s", e.Index, FormatGID(e.GID), e.Type)
}

// FormatGID writes a RoCE v2 GID the way ibv_devinfo does (inet_ntop of
// the 16 bytes): "fe80::5054:ff:fe12:3456", "::ffff:192.0.2.1".
// bth.GID.String gives the sysfs form with eight 4-digit groups instead.
func FormatGID(g bth.GID) string { return netip.AddrFrom16(g).String() }

// DefaultGID returns the default GID of an interface with this MAC address:
// fe80::/64 with the modified EUI-64 identifier, as the kernel's
// make_default_gid builds it. ok is false if mac is not a 6-byte Ethernet
// address.
func DefaultGID(mac net.HardwareAddr) (g bth.GID, ok bool) {
	if len(mac) != 6 {
		return g, false
	}
	g[0], g[1] = 0xfe, 0x80
	g[8] = mac[0] ^ 0x02
	g[9], g[10] = mac[1], mac[2]
	g[11], g[12] = 0xff, 0xfe
	g[13], g[14], g[15] = mac[3], mac[4], mac[5]
	return g, true
}

// GIDTable is a port's GID table kept the way the kernel's GID cache keeps
// it: the default GID at index 0, each address at the lowest free index,
// indexes stable while other entries come and go. It is safe for
// concurrent use.
type GIDTable struct {
	mu    sync.RWMutex
	slots []bth.GID // index -> GID; zero = free
}

// NewGIDTable builds the table the kernel builds when an rxe device is
// created on an interface with this MAC and these addresses: the default
// GID, then addrs in order (pass IPv4 addresses first, then IPv6, each in
// the kernel's order, as Interface.Addrs holds them). Duplicates, invalid
// and unspecified addresses are skipped.
func NewGIDTable(mac net.HardwareAddr, addrs []netip.Addr) *GIDTable {
	t := &GIDTable{slots: make([]bth.GID, 1, 1+len(addrs))}
	if g, ok := DefaultGID(mac); ok {
		t.slots[0] = g
	}
	for _, a := range addrs {
		t.add(a)
	}
	return t
}

// Add adds the GID of address a at the lowest free index other than the
// reserved index 0, and returns its index. If the GID is already there its
// current index is returned. ok is false when a is not a usable address or
// the table is full.
func (t *GIDTable) Add(a netip.Addr) (index int, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	index, _, ok = t.add(a)
	return index, ok
}

// add adds a's GID; added is false if it was already present.
func (t *GIDTable) add(a netip.Addr) (index int, added, ok bool) {
	if !a.IsValid() || a.Unmap().IsUnspecified() {
		return 0, false, false
	}
	g := bth.GIDFromAddr(a.Unmap())
	free := -1
	for i, s := range t.slots {
		if s == g {
			return i, false, true
		}
		if i > 0 && s.IsZero() && free < 0 {
			free = i
		}
	}
	if free < 0 {
		if len(t.slots) >= GIDTableLen {
			return 0, false, false
		}
		free = len(t.slots)
		t.slots = append(t.slots, bth.GID{})
	}
	t.slots[free] = g
	return free, true, true
}

// Remove removes the GID of address a and returns the index it had. The
// default GID is never removed (the kernel keeps it when the link-local
// address goes away).
func (t *GIDTable) Remove(a netip.Addr) (index int, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !a.IsValid() {
		return 0, false
	}
	g := bth.GIDFromAddr(a.Unmap())
	for i := 1; i < len(t.slots); i++ {
		if t.slots[i] == g {
			t.slots[i] = bth.GID{}
			for len(t.slots) > 1 && t.slots[len(t.slots)-1].IsZero() {
				t.slots = t.slots[:len(t.slots)-1]
			}
			return i, true
		}
	}
	return 0, false
}

// Apply updates the table from a Watch event (address added or removed)
// and reports whether it changed.
func (t *GIDTable) Apply(ev LinkEvent) bool {
	switch ev.Kind {
	case EventAddrAdded:
		t.mu.Lock()
		defer t.mu.Unlock()
		_, added, _ := t.add(ev.Addr.Prefix.Addr())
		return added
	case EventAddrRemoved:
		_, ok := t.Remove(ev.Addr.Prefix.Addr())
		return ok
	}
	return false
}

// Get returns the entry at index.
func (t *GIDTable) Get(index int) (GIDEntry, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if index < 0 || index >= len(t.slots) || t.slots[index].IsZero() {
		return GIDEntry{}, false
	}
	return GIDEntry{Index: index, GID: t.slots[index], Type: GIDTypeRoCEv2, Default: index == 0}, true
}

// Find returns the index of g.
func (t *GIDTable) Find(g bth.GID) (int, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if g.IsZero() {
		return 0, false
	}
	for i, s := range t.slots {
		if s == g {
			return i, true
		}
	}
	return 0, false
}

// Len returns one more than the highest index in use.
func (t *GIDTable) Len() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.slots)
}

// Entries returns the valid entries in index order. Indexes may have
// gaps after removals.
func (t *GIDTable) Entries() []GIDEntry {
	t.mu.RLock()
	defer t.mu.RUnlock()
	es := make([]GIDEntry, 0, len(t.slots))
	for i, s := range t.slots {
		if !s.IsZero() {
			es = append(es, GIDEntry{Index: i, GID: s, Type: GIDTypeRoCEv2, Default: i == 0})
		}
	}
	return es
}
