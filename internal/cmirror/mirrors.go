package cmirror

// initialisms are the words of C names that Go spells in capitals (or
// otherwise than capitalized): the verbs vocabulary's abbreviations.
var initialisms = map[string]string{
	"abi": "ABI", "ah": "AH", "ca": "CA", "cm": "CM", "cq": "CQ", "cqe": "CQE", "dgid": "DGID",
	"dlid": "DLID", "dmac": "DMAC", "ee": "EE", "fd": "FD", "fds": "FDs", "fmr": "FMR", "fw": "FW",
	"gid": "GID", "guid": "GUID", "hw": "HW", "id": "ID", "ifindex": "IfIndex", "ifname": "IfName",
	"iova": "IOVA", "ipv6": "IPv6", "lid": "LID", "lkey": "LKey", "lmc": "LMC", "ms": "MS",
	"mr": "MR", "mtu": "MTU", "mw": "MW", "ndevices": "NDevices", "nfds": "NFDs", "oflags": "OFlags",
	"optname": "OptName", "pd": "PD", "pkey": "PKey", "pkeys": "PKeys", "ps": "PS", "psn": "PSN",
	"qkey": "QKey", "qp": "QP", "qpn": "QPN", "rdd": "RDD", "rkey": "RKey", "rnr": "RNR", "rq": "RQ",
	"sge": "SGE", "sgid": "SGID", "sl": "SL", "slid": "SLID", "sm": "SM", "sq": "SQ", "sqd": "SQD",
	"srq": "SRQ", "ud": "UD", "uid": "UID", "vl": "VL", "wqe": "WQE", "wr": "WR", "xrcd": "XRCD",
}

// Mirrors are the headers the generator knows, by name.
var Mirrors = map[string]Mirror{"ctl": Ctl, "ring": Ring}

// Ctl is the control protocol, daemon/ctl/sroce_ctl.h, as package ctl.
var Ctl = Mirror{
	Name: "ctl", Dir: "daemon/ctl", Header: "sroce_ctl.h", Package: "ctl",
	Out: "header_gen.go", TestOut: "header_gen_test.go",
	Prefixes: []string{"sroce_ctl_", "sroce_", "SROCE_CTL_", "SROCE_"},
	Names: map[string]string{
		"SROCE_CTL_NAME": "NameLen",
	},
	Types: map[string]string{
		"sroce_ctl_hdr.op":         "Op",
		"sroce_ctl_res_query.kind": "ResKind",
	},
	Enums: map[string]Enum{
		"sroce_ctl_op": {Type: "Op", Underlying: "uint16", CPrefix: "SROCE_OP_", GoPrefix: "Op",
			GroupDoc: "The operations.", NamesVar: "opNames"},
		"sroce_ctl_res_kind": {Type: "ResKind", Underlying: "uint32", CPrefix: "SROCE_RES_", GoPrefix: "ResKind",
			GroupDoc: "The kinds."},
	},
	Docs: map[string]string{
		"defines":                       "Protocol constants (SROCE_CTL_*).",
		"enum sroce_ctl_op":             "Op is a request's operation (enum sroce_ctl_op).",
		"enum sroce_ctl_res_kind":       "ResKind is the kind of object QUERY_RES lists (enum sroce_ctl_res_kind).",
		"struct sroce_ctl_hdr":          "Hdr starts every datagram (struct sroce_ctl_hdr).",
		"struct sroce_ctl_hello":        "Hello is HELLO's request and reply (struct sroce_ctl_hello).",
		"struct sroce_ctl_devices":      "Devices starts LIST_DEVICES' reply; Count Device entries follow\n(struct sroce_ctl_devices).",
		"struct sroce_ctl_device":       "Device describes one device the daemon serves (struct sroce_ctl_device).",
		"struct sroce_ctl_open":         "Open is OPEN's request (struct sroce_ctl_open).",
		"struct sroce_ctl_res_query":    "ResQuery is QUERY_RES' request (struct sroce_ctl_res_query): the objects\nof Kind after the cursor {AfterCtx, AfterHandle}, in the order of their\ncontext's number, then their handle; a zero cursor starts at the first.",
		"struct sroce_ctx_page":         "CtxPage is the context page a connection shares with the daemon\n(struct sroce_ctx_page).",
		"struct sroce_ctl_device_attr":  "DeviceAttr is QUERY_DEVICE's reply (struct sroce_ctl_device_attr).",
		"struct sroce_ctl_port":         "Port is the request of QUERY_PORT, QUERY_GID and QUERY_PKEY (struct\nsroce_ctl_port).",
		"struct sroce_ctl_port_attr":    "PortAttr is QUERY_PORT's reply (struct sroce_ctl_port_attr).",
		"struct sroce_ctl_gid":          "GID is QUERY_GID's reply (struct sroce_ctl_gid).",
		"struct sroce_ctl_pkey":         "PKey is QUERY_PKEY's reply (struct sroce_ctl_pkey).",
		"struct sroce_ctl_handle":       "Handle is a request or reply that holds one handle (struct\nsroce_ctl_handle).",
		"struct sroce_ctl_mcast":        "Mcast is the request of ATTACH_MCAST and DETACH_MCAST (struct\nsroce_ctl_mcast): a QP's handle and a multicast group.",
		"struct sroce_ctl_reg_mr":       "RegMR is REG_MR's request (struct sroce_ctl_reg_mr). With a descriptor\n(a sealed memfd) the range is at FDOffset of it; without, it is the\nrange at Addr of the client process's shared file mappings.",
		"struct sroce_ctl_rereg_mr":     "ReregMR is REREG_MR's request (struct sroce_ctl_rereg_mr): Flags (enum\nibv_rereg_mr_flags) select the fields of Reg that count.",
		"struct sroce_ctl_mr":           "MR is REG_MR's and REREG_MR's reply (struct sroce_ctl_mr).",
		"struct sroce_ctl_mw":           "MW is ALLOC_MW's request {PD, type} and reply {handle, rkey} (struct\nsroce_ctl_mw).",
		"struct sroce_ctl_create_cq":    "CreateCQ is CREATE_CQ's request (struct sroce_ctl_create_cq).",
		"struct sroce_ctl_resize_cq":    "ResizeCQ is RESIZE_CQ's request (struct sroce_ctl_resize_cq).",
		"struct sroce_ctl_cq":           "CQ is CREATE_CQ's and RESIZE_CQ's reply (struct sroce_ctl_cq).",
		"struct sroce_cq_ctl":           "CQCtl is a CQ's control block (struct sroce_cq_ctl).",
		"struct sroce_ctl_cq_event":     "CQEvent is a completion channel's datagram (struct sroce_ctl_cq_event).",
		"struct sroce_ctl_async_event":  "AsyncEvent is an asynchronous event's datagram (struct\nsroce_ctl_async_event).",
		"struct sroce_ctl_qp_cap":       "QPCap is the sizes of a QP's queues (struct sroce_ctl_qp_cap).",
		"struct sroce_ctl_create_qp":    "CreateQP is CREATE_QP's request (struct sroce_ctl_create_qp).",
		"struct sroce_ctl_qp":           "QP is CREATE_QP's reply (struct sroce_ctl_qp).",
		"struct sroce_qp_ctl":           "QPCtl is a QP's control block (struct sroce_qp_ctl).",
		"struct sroce_ctl_ah_attr":      "AHAttr is an address handle's attributes with its GRH (struct\nsroce_ctl_ah_attr).",
		"struct sroce_ctl_qp_attr":      "QPAttr is the QP attributes RoCE uses (struct sroce_ctl_qp_attr).",
		"struct sroce_ctl_modify_qp":    "ModifyQP is MODIFY_QP's request and QUERY_QP's request and reply\n(struct sroce_ctl_modify_qp).",
		"struct sroce_ctl_srq":          "SRQ is the request of CREATE_SRQ, MODIFY_SRQ and the reply of QUERY_SRQ\n(struct sroce_ctl_srq).",
		"struct sroce_ctl_open_qp":      "OpenQP is OPEN_QP's request (struct sroce_ctl_open_qp).",
		"struct sroce_ctl_open_xrcd":    "OpenXRCD is OPEN_XRCD's request (struct sroce_ctl_open_xrcd).",
		"struct sroce_ctl_srq_created":  "SRQCreated is CREATE_SRQ's reply, and MODIFY_SRQ's with IBV_SRQ_MAX_WR\n(struct sroce_ctl_srq_created).",
		"struct sroce_srq_ctl":          "SRQCtl is an SRQ's control block (struct sroce_srq_ctl).",
		"struct sroce_ctl_ah":           "AH is CREATE_AH's request and reply (struct sroce_ctl_ah).",
		"struct sroce_ctl_cm_addr":      "CMAddr is a socket address as the CM takes and gives it (struct\nsroce_ctl_cm_addr): family AF_INET or AF_INET6 (0: none), the port in\nhost order, and the address (IPv4 in the first 4 bytes).",
		"struct sroce_ctl_cm_create_id": "CMCreateID is CM_CREATE_ID's request (struct sroce_ctl_cm_create_id).",
		"struct sroce_ctl_cm_id_arg":    "CMIDArg is an ID and one number (struct sroce_ctl_cm_id_arg): the\nrequest of DESTROY_ID, RESOLVE_ROUTE, QUERY, LISTEN, DISCONNECT,\nINIT_QP_ATTR, NOTIFY and MIGRATE_ID.",
		"struct sroce_ctl_cm_addr_req":  "CMAddrReq is BIND's and RESOLVE_ADDR's request (struct\nsroce_ctl_cm_addr_req).",
		"struct sroce_ctl_cm_id_info":   "CMIDInfo is what an ID is bound to and connected with (struct\nsroce_ctl_cm_id_info).",
		"struct sroce_ctl_cm_conn":      "CMConn is CONNECT's, ACCEPT's and REJECT's request and an event's\nparameters (struct sroce_ctl_cm_conn).",
		"struct sroce_ctl_cm_option":    "CMOption is SET_OPTION's request (struct sroce_ctl_cm_option).",
		"struct sroce_ctl_cm_mcast":     "CMMcast is JOIN_MCAST's and LEAVE_MCAST's request (struct\nsroce_ctl_cm_mcast).",
		"struct sroce_ctl_cm_event":     "CMEvent is one event on a CM channel's socket (struct\nsroce_ctl_cm_event).",
	},
}

// Ring is the shared rings' layout, ring/sroce_ring.h, as package ring.
var Ring = Mirror{
	Name: "ring", Dir: "ring", Header: "sroce_ring.h", Package: "ring",
	Out: "header_gen.go", TestOut: "header_gen_test.go",
	Prefixes: []string{"SROCE_RING_", "SROCE_", "sroce_"},
	Names: map[string]string{
		"struct sroce_ring_hdr":     "Header",
		"SROCE_RING_HDR_SIZE":       "HeaderSize",
		"sroce_cqe.wc_flags":        "Flags",
		"sroce_send_wqe.send_flags": "Flags",
	},
	Types: map[string]string{
		"sroce_ring_hdr.kind": "Kind",
		"sroce_ring_hdr.prod": "atomic.Uint32",
		"sroce_ring_hdr.cons": "atomic.Uint32",
	},
	Comments: map[string]string{
		"sroce_cqe.status":          "verbs.WCStatus",
		"sroce_cqe.opcode":          "verbs.WCOpcode",
		"sroce_cqe.imm":             "immediate data as a number (imm_data before htonl)",
		"sroce_cqe.wc_flags":        "verbs.WCFlags",
		"sroce_send_wqe.opcode":     "verbs.WROpcode",
		"sroce_send_wqe.send_flags": "verbs.SendFlags",
		"sroce_send_wqe.length":     "payload bytes, summed at post time",
		"sroce_recv_wqe.length":     "bytes the SGL can take, summed at post time",
	},
	Enums: map[string]Enum{
		"sroce_ring_kind": {Type: "Kind", Underlying: "uint16", CPrefix: "SROCE_RING_", GoPrefix: "Kind",
			GroupDoc: "Ring kinds."},
	},
	External: map[string]string{"sroce_sge": "mr.SGE"},
	Imports:  map[string]string{"atomic": "sync/atomic", "mr": "github.com/sroce/sroce/mr"},
	Docs: map[string]string{
		"defines":               "Constants of the rings' layout: Magic identifies ring memory (\"SRNG\"\nlittle-endian), Version is the layout version of the header and the\nentries, HeaderSize the size of the ring header (slot 0 starts there),\nCacheLine the alignment of the header's index lines and of ring memory.",
		"enum sroce_ring_kind":  "Kind says which entries a ring holds (enum sroce_ring_kind).",
		"struct sroce_ring_hdr": "Header is the start of ring memory (struct sroce_ring_hdr). Prod and\nCons are atomics: the other side of the ring reads them.",
		"struct sroce_cqe":      "CQE is a completion queue entry (struct sroce_cqe): the fields of\nverbs.WC, which are the fields a struct ibv_wc needs.",
		"struct sroce_ud_addr":  "UDAddr is the destination of a UD send as plain values (struct\nsroce_ud_addr): the address handle's attributes, the remote QPN and\nQ_Key.",
		"struct sroce_send_wqe": "SendWQE is the fixed part of a send queue slot (struct\nsroce_send_wqe). The slot's tail holds NumSGE SGEs (mr.SGE, struct\nsroce_sge), or with the inline flag InlineLen bytes of payload; a QP's\nstride leaves room for its max_send_sge SGEs or its max_inline_data\nbytes, whichever is more.",
		"struct sroce_recv_wqe": "RecvWQE is the fixed part of a receive queue slot (struct\nsroce_recv_wqe); the slot's tail holds NumSGE SGEs (mr.SGE, struct\nsroce_sge).",
	},
}
