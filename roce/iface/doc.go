// Package iface opens a sroce device (roce.Device) on a real network
// interface, the way `rdma link add rxe0 type rxe netdev IF` creates an
// rdma_rxe device on a netdev: the link, the GID table, the MAC and MTU,
// the port state, the device loop, and address handles whose destination
// MAC comes from the kernel's neighbour table.
//
// # Opening a port
//
//	port, err := iface.Open(ctx, "eth0", iface.Options{})
//	if err != nil {
//		return err // one sentence: "no network interface named eth9", ...
//	}
//	defer port.Close()
//	dev := port.Device() // running: AllocPD, RegMR, CreateCQ, CreateQP ...
//
// Open looks the interface up in the network namespace of the calling
// thread (run it inside nsutil.Namespace.Do, or under `ip netns exec`, to
// use another namespace). Everything it creates (the AF_XDP socket or the UDP
// socket, the netlink handle) stays bound to that namespace, so the Port is
// then used from any goroutine.
//
// # Link modes
//
// Options.Mode picks how frames move, one of the kinds of the table in
// kinds.go (Kinds), or auto:
//
//   - "xdp": an AF_XDP socket on queue Options.Queue with sroce's XDP
//     steering program attached (xdp.OpenLink), which takes UDP port 4791
//     and leaves every other frame to the kernel. Needs root (CAP_NET_ADMIN,
//     CAP_NET_RAW and CAP_BPF). LinkMode is "XDP (zero-copy)" when the driver
//     accepted zero-copy, "XDP (copy)" otherwise (always on veth).
//     With several queues (below), one AF_XDP socket per queue under one
//     steering program (xdp.OpenQueues).
//   - "udp": a kernel UDP socket bound to port 4791 on one address of the
//     interface (roce/udplink): the first IPv4 address, else the first
//     global IPv6 address, or Options.Addr. No privileges needed. LinkMode is
//     "UDP". The kernel builds the IP and UDP headers, so a received packet's
//     ICRC can only be checked as far as udplink's documentation says, the
//     UDP source port is the socket's, and only the bound address can be a
//     source GID.
//   - "auto" (or empty): "xdp" when the process has the privileges and the
//     AF_XDP socket opens, otherwise "udp". Port.Reason says which was chosen
//     and why (not root; loopback; the AF_XDP error).
//
// # Several queues
//
// On the XDP link the device uses Options.Queues receive queues of the
// interface, queues 0 to Queues-1, with one engine each (its own loop,
// socket and transmit ring; see roce.OpenLinks). The default is the
// interface's queue count (ethtool channels) capped by the CPUs the
// process may use (GOMAXPROCS), or one queue when Options.Queue names one.
// The steering program redirects a frame to the socket of the queue it
// arrived on (XSKMAP[rx_queue_index]); frames on queues without a socket
// go to the kernel. A QP's packets leave on its engine's queue with a UDP
// source port derived from its QP number, so a NIC's receive-side scaling
// spreads the QPs of a peer over its queues; a frame that arrives on an
// engine that does not own its QP is handed to the owner. The UDP link has
// one engine. Port.Queues tells how many the device has, the device's
// EngineStats what each moved.
//
// # Addressing like rxe
//
// The device's GID table is the interface's, as the kernel builds it for an
// rxe device (package netif): index 0 the default GID from the MAC
// (fe80::/64, modified EUI-64), then the IPv4 addresses as IPv4-mapped GIDs,
// then the IPv6 addresses; all of type RoCE v2. The roce device holds
// roce.GIDTableLen (16) entries; entries at higher indexes are not
// installed. Addresses added to or removed from the interface while the port
// is open update the table at the same indexes the kernel would use.
// The port MTU is rxe's: the interface MTU less 80 bytes, rounded down to
// 256..4096 (1500 gives 1024).
//
// Port.AHAttr builds the address vector of a destination GID: the source GID
// index, hop limit and the next hop's MAC from the kernel's neighbour table,
// resolved (ARP or neighbour discovery) when missing, within a timeout.
// On the UDP link the MAC is not used (the kernel addresses the frame) and is
// left zero.
//
// # Port state
//
// The port follows the interface's link events (netif.Watch): it is ACTIVE
// while the interface is up with carrier, DOWN otherwise, as with rxe. When
// it goes down (ip link set down, or the carrier goes: the other end of the
// cable or veth) the device is told (roce.Device.PortDown): link_downed is
// counted and an EventPortErr asynchronous event is posted; when the link
// comes back, roce.Device.PortUp posts EventPortActive. As on rxe nothing
// else happens: the AF_XDP socket and the steering program stay bound to
// the interface across the fall (they do on veth, whose down and up keep
// both), the QPs keep their state, and what they send meanwhile is lost
// and retransmitted, so a short fall costs a pause, not the connections.
// Address changes update the GID table and post EventGIDChange.
//
// Port.Lost is closed only when the port is gone for good: the interface
// was deleted (or moved to another namespace) or the link failed; Port.Err
// then says what happened. A program that serves the port (the daemon)
// closes it and may open the interface again once it reappears.
//
// # Closing
//
// Close stops the device loops, closes the links (the AF_XDP sockets, their
// UMEMs and the steering program, or the UDP socket), stops the watch
// and releases the netlink handle. Nothing is left attached to the interface.
package iface
