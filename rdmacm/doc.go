// Package rdmacm is the RDMA connection manager for Go programs, in
// librdmacm's model: event channels, CM IDs bound to IP addresses, address
// and route resolution, listen/accept/reject, connect, disconnect, and
// QPs moved through INIT, RTR and RTS from what the connection agreed.
//
// # Devices and agents
//
// New starts a CM on a set of ports (Port: a running roce.Device with its
// address resolution; *iface.Port is one, StaticPort serves in-memory
// links). For each device an agent owns QP1, the GSI QP: it keeps receive
// buffers posted (the 40-byte GRH space and a 256-byte MAD each), hands
// what arrives to the device's cm.Manager, answers ClassPortInfo, sends
// the Manager's MADs as UD SENDs to the peer's QP1 (Q_Key 0x80010000, the
// address handle from the peer's GID and the neighbour table), and ticks
// the Manager's timers from the device clock, all on one goroutine. Stats
// returns what each agent counted: MADs sent and received, drops by
// reason (malformed MADs, wrong class versions, unknown connections),
// resends, duplicates answered, REJs each way, connections established,
// half-open connections and timeouts.
//
// An ID bound or resolved to an address uses the device whose GID table
// holds it; ResolveAddr without a source asks each port for the source
// its route picks (the kernel's choice) and takes the first device that
// reaches the destination. The sroce daemon hosts one CM for all its
// devices (AddPort adds one opened later), gives each client its own
// event channel, and when a client goes away destroys the IDs on that
// channel with DestroyIDs, as closing a process's rdma_cm file does.
//
// # The calls
//
//	rdma_create_event_channel  NewEventChannel      rdma_get_cm_event   EventChannel.Get, GetTimeout, Wait
//	rdma_create_id             CM.CreateID          rdma_destroy_id     ID.Destroy
//	rdma_bind_addr             ID.BindAddr          rdma_listen         ID.Listen
//	rdma_resolve_addr          ID.ResolveAddr       rdma_resolve_route  ID.ResolveRoute
//	rdma_connect               ID.Connect           rdma_accept         ID.Accept
//	rdma_reject                ID.Reject            rdma_disconnect     ID.Disconnect
//	rdma_create_qp             ID.CreateQP          rdma_destroy_qp     ID.DestroyQP
//	rdma_init_qp_attr          ID.InitQPAttr        rdma_event_str      EventType.String
//	rdma_set_option TOS        ID.SetTOS            ACK_TIMEOUT         ID.SetACKTimeout
//	rdma_join_multicast        ID.JoinMulticast     rdma_leave_multicast ID.LeaveMulticast
//
// Events are librdmacm's (EventType numbers are rdma_cm_event_type's),
// with the status librdmacm reports: 0, a negative errno (UNREACHABLE
// after the CM's retries is -ETIMEDOUT), or for REJECTED the IBTA reject
// reason (8 when nobody listens on the port, 28 for rdma_reject). A
// CONNECT_REQUEST carries a new ID, created on the listener's channel, and
// the listener (ListenID); Param holds the peer's private data (the IP CM
// header removed), depths, retries, SRQ flag and QP number.
//
// # QP states as librdmacm moves them
//
// CreateQP moves an RC QP to INIT (a UD QP on to RTS with the port space's
// Q_Key). The passive side's Accept moves the QP to RTR and RTS before the
// REP leaves; on the active side the REP moves it to RTR and RTS and then
// the RTU is sent, and ESTABLISHED is posted; an active ID without a QP
// gets CONNECT_RESPONSE instead and answers with Accept (the RTU). A peer's
// DREQ, and Disconnect, move the QP to the error state. InitQPAttr gives
// the same attributes for a QP the application (or a C librdmacm over the
// daemon) moves itself.
//
// # UD services
//
// In the UDP port space (cm.PortSpaceUDP) Connect resolves the service
// with a SIDR_REQ and Accept answers with a SIDR_REP naming the QP and the
// Q_Key 0x01234567 (RDMA_UDP_QKEY); the active side's ESTABLISHED carries
// the peer's QP, Q_Key and address vector in Event.UD, and a service
// nobody listens on gives UNREACHABLE with the SIDR_REP's status.
//
// # Multicast
//
// A UDP ID bound or resolved to an address joins IPv4 multicast groups
// with JoinMulticast, as Linux's rdma_cm does on RoCEv2: no subnet
// administrator is asked, MULTICAST_JOIN follows at once with the group's
// address vector (GID ::ffff:a.b.c.d, the group's Ethernet address), QPN
// 0xFFFFFF and the Q_Key 0x01234567, and the ID's QP is attached to the
// group. LeaveMulticast detaches it; Destroy leaves every group.
//
// # On the wire
//
// REQs are built as Linux's rdma_cm and ib_cm build them on RoCEv2: the
// service ID of the port space and port, the IP CM header before the
// private data, a random starting PSN, CM response timeouts of 20, 15 CM
// retries, P_Key 0xffff, the path MTU of the port, permissive LIDs
// (0xffff) on a routed path, the GIDs, hop limit, traffic class and flow
// label rdma_cm derives from the two ports, and the local ACK timeout ib_cm derives from the
// packet lifetime (18) and rdma_rxe's CA ACK delay (15). REPs carry the
// target ACK delay 15 and the node GUID.
package rdmacm
