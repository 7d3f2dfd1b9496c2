// Package netif gives the sroce engine its addressing from a Linux network
// interface the way rdma_rxe gets it from the netdev it is bound to: the GID
// table from the interface's addresses, source MAC and IP from the
// interface, the path MTU from the interface MTU, the peer's MAC from the
// kernel's neighbour table, and link up/down events for the port state.
//
// Everything is read through routing netlink (github.com/vishvananda/netlink)
// in one network namespace: a Handle is bound to the namespace it was opened
// in (NewHandle: the calling thread's; NewHandleAt: a namespace file such as
// /run/netns/NAME) and keeps working there whichever goroutine calls it. The
// package-level functions (Lookup, ResolveNeighbor, Watch, SourceFor) open a
// short-lived Handle in the calling thread's namespace.
//
// # The GID table
//
// The kernel's RoCE GID cache (drivers/infiniband/core/cache.c and
// roce_gid_mgmt.c) fills a port's table like this, and sroce does the same:
//
//   - Index 0 is reserved for the default GID, made from the MAC address
//     alone: fe80::/64 with the modified EUI-64 interface identifier (MAC
//     bytes 0-2 with the universal/local bit flipped, ff:fe, MAC bytes 3-5).
//     It exists even when the interface has no IPv6 address. A device that
//     supports RoCE v1 and v2 reserves one default entry per type (index 0
//     v1, index 1 v2); rxe registers only RoCE v2
//     (RDMA_CORE_PORT_IBA_ROCE_UDP_ENCAP), so it has exactly one, and so
//     does sroce. Every entry here is of type RoCE v2.
//   - When the device is created, the interface's IPv4 addresses are added
//     in the kernel's list order (primary addresses, then secondaries, as
//     `ip addr` shows them), each as an IPv4-mapped GID ::ffff:a.b.c.d,
//     then its IPv6 addresses in the kernel's list order (global before
//     link-local; among equals the newest first). An address whose GID is
//     already present is skipped: the usual EUI-64 link-local address is the
//     default GID, so it does not appear twice. A link-local address made
//     another way (addr_gen_mode stable-privacy or random) gets an entry of
//     its own after the global ones.
//   - Later, an added address takes the lowest free index and a removed one
//     frees its index without moving the others (GIDTable does this from
//     Watch events). Taking the interface down removes its IPv6 addresses
//     (unless keep_addr_on_down is set) and so their GIDs; IPv4 addresses
//     and the default GID stay.
//
// For an interface with MAC 52:54:00:12:34:56, 192.0.2.1/24 and
// 2001:db8::1/64, `ibv_devinfo -v` on rxe shows (format and ordering rules
// checked against rxe on Debian bookworm: kernel 6.1, rdma-core 44):
//
//	GID[  0]:    fe80::5054:ff:fe12:3456, RoCE v2
//	GID[  1]:    ::ffff:192.0.2.1, RoCE v2
//	GID[  2]:    2001:db8::1, RoCE v2
//
// so `-g 1` / `-x 1` selects the IPv4 address and `-g 0` the link-local one,
// on rxe and on sroce alike. Lookup returns this table in Interface.GIDs.
// Not modelled: GIDs of VLAN or bonding upper devices (the kernel adds the
// addresses of a VLAN interface on top of the netdev to the same table) and
// a nonzero netdev dev_id (which replaces ff:fe in the default GID).
//
// # Path MTU
//
// rxe derives the port's active MTU from the netdev MTU minus 80 bytes of
// headroom (RXE_MAX_HDR_LENGTH), rounded down to an InfiniBand MTU between
// 256 and 4096: 1500 gives 1024, 9000 gives 4096, 1100 gives 512, and
// anything under 592 gives 256. Its max_mtu is always 4096. verbs.PortMTU
// computes the same (the one home of that rule and of the MTU enum, 256 = 1
// ... 4096 = 5, that ibv_devinfo prints as "active_mtu: 1024 (3)");
// Interface.PathMTU gives it in bytes.
//
// # Port state
//
// rxe's port is ACTIVE when the netdev is up and has carrier
// (netif_running && netif_carrier_ok) and DOWN otherwise, and it counts
// every transition to DOWN in the link_downed counter. Interface.Active and
// LinkEvent.Active give the same condition; Watch delivers the transitions.
package netif
