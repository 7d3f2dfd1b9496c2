package netif

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/sroce/sroce/bth"
)

var testMAC = net.HardwareAddr{0x52, 0x54, 0x00, 0x12, 0x34, 0x56}

func addrs(ss ...string) []netip.Addr {
	var as []netip.Addr
	for _, s := range ss {
		as = append(as, netip.MustParseAddr(s))
	}
	return as
}

// table renders entries as "index=ibv_devinfo form" lines.
func table(es []GIDEntry) string {
	var b strings.Builder
	for _, e := range es {
		fmt.Fprintf(&b, "%d=%s ", e.Index, FormatGID(e.GID))
	}
	return strings.TrimSpace(b.String())
}

func TestDefaultGID(t *testing.T) {
	g, ok := DefaultGID(testMAC)
	if !ok {
		t.Fatal("no default GID")
	}
	if got, want := FormatGID(g), "fe80::5054:ff:fe12:3456"; got != want {
		t.Errorf("DefaultGID = %s, want %s", got, want)
	}
	if got, want := g.String(), "fe80:0000:0000:0000:5054:00ff:fe12:3456"; got != want {
		t.Errorf("sysfs form %s, want %s", got, want)
	}
	// The universal/local bit flips both ways.
	g2, _ := DefaultGID(net.HardwareAddr{0x02, 0, 0, 0, 0, 1})
	if got, want := FormatGID(g2), "fe80::ff:fe00:1"; got != want {
		t.Errorf("DefaultGID(02:..) = %s, want %s", got, want)
	}
	if _, ok := DefaultGID(nil); ok {
		t.Error("DefaultGID(nil) ok")
	}
}

// TestGIDTableAtCreation reproduces the table rxe built in the guest
// (kernel 6.1) for eth0 with 192.0.2.1/24 (primary), 198.51.100.1/24
// (primary, other subnet), 192.0.2.7/24 (secondary), 2001:db8::2 and
// 2001:db8::1 (the newer first, as the kernel lists them) and the EUI-64
// link-local address:
//
//	GID[  0]:  fe80::5054:ff:fe12:3456, RoCE v2
//	GID[  1]:  ::ffff:192.0.2.1, RoCE v2
//	GID[  2]:  ::ffff:198.51.100.1, RoCE v2
//	GID[  3]:  ::ffff:192.0.2.7, RoCE v2
//	GID[  4]:  2001:db8::2, RoCE v2
//	GID[  5]:  2001:db8::1, RoCE v2
func TestGIDTableAtCreation(t *testing.T) {
	tab := NewGIDTable(testMAC, addrs("192.0.2.1", "198.51.100.1", "192.0.2.7",
		"2001:db8::2", "2001:db8::1", "fe80::5054:ff:fe12:3456"))
	want := "0=fe80::5054:ff:fe12:3456 1=::ffff:192.0.2.1 2=::ffff:198.51.100.1 3=::ffff:192.0.2.7 4=2001:db8::2 5=2001:db8::1"
	if got := table(tab.Entries()); got != want {
		t.Errorf("table\n got %s\nwant %s", got, want)
	}
	es := tab.Entries()
	if !es[0].Default || es[1].Default || es[1].Type != GIDTypeRoCEv2 {
		t.Errorf("flags: %+v", es[:2])
	}
	if got := es[1].String(); got != "GID[  1]: ::ffff:192.0.2.1, RoCE v2" {
		t.Errorf("String = %q", got)
	}
	if !es[1].GID.IsIPv4() || es[1].GID.Addr() != netip.MustParseAddr("192.0.2.1") {
		t.Errorf("GID 1 = %v", es[1].GID)
	}
}

// TestGIDTableChanges follows the guest's table through the changes made
// there: delete 192.0.2.7 (index 3 freed), add 203.0.113.5 (takes index 3),
// add 2001:db8::3 (index 6), link down (IPv6 addresses go: 4, 5, 6 freed),
// and, with stable-privacy addressing, a link-local address of its own.
func TestGIDTableChanges(t *testing.T) {
	tab := NewGIDTable(testMAC, addrs("192.0.2.1", "198.51.100.1", "192.0.2.7",
		"2001:db8::2", "2001:db8::1", "fe80::5054:ff:fe12:3456"))
	if i, ok := tab.Remove(netip.MustParseAddr("192.0.2.7")); !ok || i != 3 {
		t.Fatalf("Remove = %d, %v", i, ok)
	}
	if i, ok := tab.Add(netip.MustParseAddr("203.0.113.5")); !ok || i != 3 {
		t.Fatalf("Add into the hole = %d, %v", i, ok)
	}
	if i, ok := tab.Add(netip.MustParseAddr("2001:db8::3")); !ok || i != 6 {
		t.Fatalf("Add = %d, %v", i, ok)
	}
	want := "0=fe80::5054:ff:fe12:3456 1=::ffff:192.0.2.1 2=::ffff:198.51.100.1 3=::ffff:203.0.113.5 4=2001:db8::2 5=2001:db8::1 6=2001:db8::3"
	if got := table(tab.Entries()); got != want {
		t.Errorf("after changes\n got %s\nwant %s", got, want)
	}
	// Link down: every IPv6 address is removed, the link-local one too;
	// the default GID stays.
	for _, a := range addrs("2001:db8::2", "2001:db8::1", "2001:db8::3", "fe80::5054:ff:fe12:3456") {
		tab.Remove(a)
	}
	want = "0=fe80::5054:ff:fe12:3456 1=::ffff:192.0.2.1 2=::ffff:198.51.100.1 3=::ffff:203.0.113.5"
	if got := table(tab.Entries()); got != want {
		t.Errorf("after link down\n got %s\nwant %s", got, want)
	}
	if tab.Len() != 4 {
		t.Errorf("Len = %d, want 4", tab.Len())
	}
	// Link up: the EUI-64 link-local address returns and is the default.
	if i, ok := tab.Add(netip.MustParseAddr("fe80::5054:ff:fe12:3456")); !ok || i != 0 {
		t.Errorf("re-adding the EUI-64 link-local = %d, %v; want index 0", i, ok)
	}
	if tab.Len() != 4 {
		t.Errorf("Len = %d, want 4", tab.Len())
	}

	// Stable-privacy link-local address: its own entry after the others.
	tab = NewGIDTable(testMAC, addrs("192.0.2.1", "198.51.100.1", "203.0.113.5", "fe80::a86:3595:5cfc:aaa3"))
	want = "0=fe80::5054:ff:fe12:3456 1=::ffff:192.0.2.1 2=::ffff:198.51.100.1 3=::ffff:203.0.113.5 4=fe80::a86:3595:5cfc:aaa3"
	if got := table(tab.Entries()); got != want {
		t.Errorf("stable privacy\n got %s\nwant %s", got, want)
	}
}

func TestGIDTableEdges(t *testing.T) {
	tab := NewGIDTable(nil, addrs("10.0.0.1", "::", "0.0.0.0", "10.0.0.1", "::ffff:10.0.0.2"))
	// No MAC: index 0 stays reserved and empty.
	if got, want := table(tab.Entries()), "1=::ffff:10.0.0.1 2=::ffff:10.0.0.2"; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
	if _, ok := tab.Get(0); ok {
		t.Error("Get(0) without MAC ok")
	}
	if e, ok := tab.Get(2); !ok || e.GID.Addr() != netip.MustParseAddr("10.0.0.2") {
		t.Errorf("Get(2) = %v, %v", e, ok)
	}
	if i, ok := tab.Find(bth.GIDFromAddr(netip.MustParseAddr("10.0.0.2"))); !ok || i != 2 {
		t.Errorf("Find = %d, %v", i, ok)
	}
	if _, ok := tab.Find(bth.GID{}); ok {
		t.Error("Find(zero) ok")
	}
	if _, ok := tab.Remove(netip.MustParseAddr("10.9.9.9")); ok {
		t.Error("Remove of an absent address ok")
	}
	if _, ok := tab.Add(netip.Addr{}); ok {
		t.Error("Add(invalid) ok")
	}
	// Removing the default GID's address leaves index 0 alone.
	tab = NewGIDTable(testMAC, nil)
	if _, ok := tab.Remove(netip.MustParseAddr("fe80::5054:ff:fe12:3456")); ok {
		t.Error("the default GID was removed")
	}
	// Full table.
	for i := 1; i < GIDTableLen; i++ {
		a := netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)})
		if _, ok := tab.Add(a); !ok {
			t.Fatalf("Add #%d failed", i)
		}
	}
	if _, ok := tab.Add(netip.MustParseAddr("10.2.0.1")); ok {
		t.Error("Add to a full table ok")
	}
	if tab.Len() != GIDTableLen {
		t.Errorf("Len = %d", tab.Len())
	}
}

func TestGIDTableApply(t *testing.T) {
	tab := NewGIDTable(testMAC, addrs("10.0.0.1"))
	add := LinkEvent{Kind: EventAddrAdded, Addr: Addr{Prefix: netip.MustParsePrefix("2001:db8::9/64")}}
	if !tab.Apply(add) {
		t.Error("Apply(add) reported no change")
	}
	if tab.Apply(add) {
		t.Error("Apply(same add) reported a change")
	}
	if _, ok := tab.Find(bth.GIDFromAddr(netip.MustParseAddr("2001:db8::9"))); !ok {
		t.Error("added GID missing")
	}
	del := LinkEvent{Kind: EventAddrRemoved, Addr: add.Addr}
	if !tab.Apply(del) || tab.Apply(del) {
		t.Error("Apply(remove) change reports wrong")
	}
	if tab.Apply(LinkEvent{Kind: EventLink}) {
		t.Error("Apply(link event) reported a change")
	}
}

func TestInterfaceGID(t *testing.T) {
	ifc := &Interface{Name: "veth0", MAC: testMAC, Addrs: []Addr{
		{Prefix: netip.MustParsePrefix("192.0.2.1/24")},
		{Prefix: netip.MustParsePrefix("2001:db8::1/64")},
		{Prefix: netip.MustParsePrefix("fe80::5054:ff:fe12:3456/64")},
	}}
	ifc.GIDs = ifc.GIDTable().Entries()
	// The case from the package documentation: one IPv4, one global IPv6.
	if got, want := table(ifc.GIDs), "0=fe80::5054:ff:fe12:3456 1=::ffff:192.0.2.1 2=2001:db8::1"; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
	g, err := ifc.GID(1)
	if err != nil || g.Addr() != netip.MustParseAddr("192.0.2.1") {
		t.Errorf("GID(1) = %v, %v", g, err)
	}
	if _, err := ifc.GID(7); err == nil || !strings.Contains(err.Error(), "veth0 has no GID at index 7 (it has 0..2)") {
		t.Errorf("GID(7) error = %v", err)
	}
	if i, ok := ifc.GIDIndex(g); !ok || i != 1 {
		t.Errorf("GIDIndex = %d, %v", i, ok)
	}
	if ifc.IPv4() != netip.MustParseAddr("192.0.2.1") {
		t.Errorf("IPv4 = %v", ifc.IPv4())
	}
}
