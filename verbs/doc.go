// Package verbs is the vocabulary every part of sroce shares: the names and
// values a verbs program knows from libibverbs. It holds QP types and
// states, path MTUs and rdma_rxe's port MTU rule, the attribute structs and
// the attribute mask of ibv_modify_qp, work requests and work completions
// with their opcodes, flags and statuses, asynchronous event types, the
// port and device attributes, and the catalogue of the engine's counters.
//
// The numeric values are those of libibverbs' enums (enum ibv_qp_type,
// ibv_qp_state, ibv_mtu, ibv_qp_attr_mask, ibv_wr_opcode, ibv_send_flags,
// ibv_wc_status, ibv_wc_opcode, ibv_wc_flags, ibv_event_type,
// ibv_port_state), so a value can cross into C or onto perftest's wire
// unchanged; the few values libibverbs lacks (the GSI QP type, REG_MR)
// are the kernel's. String methods print what the libibverbs helpers
// print (ibv_wc_status_str, ibv_event_type_str) or the verbs spelling.
//
// The package is a leaf: it holds no behaviour beyond the vocabulary
// itself, and imports only the wire types of package bth (GID, PSN, QPN,
// the encapsulation of an address handle) and the memory types of package
// mr that work requests carry (SGE, access flags, window bindings). The
// transport state machines (package qp), the device and its API (package
// roce), the tools and the command line all use these types directly.
package verbs
