/*
 * sroce_ctl.h: the control protocol between the sroce daemon and its
 * clients (the drop-in libibverbs in shim/, and the Go client). This file
 * is the source: package daemon/ctl's Go mirror (header_gen.go) is
 * generated from it by `go generate ./daemon/ctl`, and its tests fail when
 * the mirror is stale and compare every offset and size with the C
 * compiler's. Pad explicitly (reserved members): the generator refuses
 * implicit padding.
 *
 * Transport: a unix SOCK_SEQPACKET socket, found by the rule of
 * internal/sockpath (SROCE_SOCKET; else the user's own daemon if one
 * listens; else the system daemon at /run/sroce/sroce.sock). One
 * connection is one device context (struct ibv_context): everything it
 * creates belongs to it and is destroyed when it closes, as when a process
 * closes its uverbs file. A connection that has not sent SROCE_OP_OPEN may
 * only send HELLO and LIST_DEVICES.
 *
 * Every message, either way, is one datagram: a struct sroce_ctl_hdr, then
 * the body of its op. The client sends a request and reads its reply before
 * sending the next (the reply echoes op and seq). File descriptors travel
 * as SCM_RIGHTS with the message; hdr.nfds says how many. All integers are
 * little-endian (the host order of every platform sroce runs on). A
 * request the daemon cannot parse (bad magic, version, length, op, fds)
 * ends the connection, with the reason in the daemon's log.
 *
 * Handles (pd, mr, cq, qp, ...) are numbers the daemon gives out, private
 * to the connection, never 0.
 *
 * Shared memory: queues live in memfds the daemon creates and passes with
 * the reply that creates them. Each starts with a 64-byte control block
 * (struct sroce_cq_ctl, struct sroce_qp_ctl, struct sroce_srq_ctl) and
 * holds rings (sroce_ring.h) at the offsets the reply gives. Memory a client
 * registers travels the other way: the client passes a memfd that backs the
 * registered range (the shim remaps the pages of ibv_reg_mr onto one), and
 * the daemon maps it.
 *
 * Doorbell: every QP and SRQ has a doorbell number (bell in the CREATE_QP,
 * OPEN_QP and CREATE_SRQ replies, 1 to SROCE_CTX_BELLS - 1). After
 * publishing send or receive WQEs on its rings, the client sets bit
 * (bell % 64) of ctx_page->bells[bell / 64] with an atomic OR (struct
 * sroce_ctx_page, the memfd of the OPEN reply), then, after a full fence,
 * reads ctx_page->need_wakeup; if it is not 0 it writes the 8-byte value
 * 1 to the doorbell eventfd of the OPEN reply. The daemon exchanges each
 * nonzero word with 0 and serves the rings of the objects named, and only
 * those: a post whose bit is not set is not seen until the next one that
 * sets it. While the daemon polls it keeps need_wakeup 0 and no system
 * call is needed. A bit that names no object of the connection is
 * ignored (and counted). Arming a CQ writes the eventfd without a bit.
 *
 * The connection manager (the drop-in librdmacm): the CM_* operations are
 * allowed on any connection, before OPEN too, and are the kernel's ucma
 * commands as librdmacm uses them. A CM ID belongs to the connection that
 * created it and is tied to a device by BIND or RESOLVE_ADDR (its
 * sroce_ctl_cm_id_info names the device, which the client OPENs on a
 * connection of its own for verbs). Events come on the socket of the ID's
 * event channel (CM_CREATE_CHANNEL's reply fd, SOCK_SEQPACKET, datagrams of
 * struct sroce_ctl_cm_event): the client polls and reads it itself. When
 * the connection closes, its IDs are destroyed: connected ones are
 * disconnected (a DREQ to the peer), listeners released.
 */
#ifndef SROCE_CTL_H
#define SROCE_CTL_H

#include <stdint.h>

#define SROCE_CTL_MAGIC   0x4c435253u /* "SRCL" */
#define SROCE_CTL_VERSION 7 /* 2: the CM operations; 3: RESIZE_CQ, REREG_MR, MODIFY_SRQ of max_wr; 4: ATTACH_MCAST, DETACH_MCAST; 5: CM_JOIN_MCAST, CM_LEAVE_MCAST; 6: XRC (OPEN_XRCD, CLOSE_XRCD, OPEN_QP, CREATE_SRQ of a domain); 7: doorbells name their QP or SRQ (ctx_page bells) */
#define SROCE_CTL_MAX_MSG 8192 /* the largest datagram either way */
#define SROCE_CTL_MAX_FDS 4    /* descriptors one datagram may carry */
#define SROCE_CTL_NAME    64   /* device name buffer, NUL-terminated */

enum sroce_ctl_op {
	SROCE_OP_HELLO        = 1,
	SROCE_OP_LIST_DEVICES = 2,
	SROCE_OP_OPEN         = 3,  /* binds the connection to a device */
	SROCE_OP_QUERY_DEVICE = 4,
	SROCE_OP_QUERY_PORT   = 5,
	SROCE_OP_QUERY_GID    = 6,
	SROCE_OP_QUERY_PKEY   = 7,
	SROCE_OP_QUERY_STATS  = 8,  /* request {name}: the context's device or empty; EINVAL before OPEN; reply: JSON text */
	SROCE_OP_QUERY_RES    = 9,  /* request struct sroce_ctl_res_query, before or after OPEN; reply: JSON text (sroce resource) */

	SROCE_OP_ALLOC_PD     = 10,
	SROCE_OP_DEALLOC_PD   = 11,
	SROCE_OP_REG_MR       = 12, /* fds: the memfd backing the range */
	SROCE_OP_DEREG_MR     = 13,
	SROCE_OP_ALLOC_MW     = 14,
	SROCE_OP_DEALLOC_MW   = 15,
	SROCE_OP_REREG_MR     = 16, /* fds: the memfd backing the new range, with IBV_REREG_MR_CHANGE_TRANSLATION */

	SROCE_OP_CREATE_COMP_CHANNEL  = 20, /* reply fds: the channel's socket */
	SROCE_OP_DESTROY_COMP_CHANNEL = 21,
	SROCE_OP_CREATE_CQ    = 22, /* reply fds: the CQ's memfd */
	SROCE_OP_DESTROY_CQ   = 23,
	SROCE_OP_RESIZE_CQ    = 24, /* reply fds: the CQ's new memfd */

	SROCE_OP_CREATE_QP    = 30, /* reply fds: the QP's memfd */
	SROCE_OP_MODIFY_QP    = 31,
	SROCE_OP_QUERY_QP     = 32,
	SROCE_OP_DESTROY_QP   = 33,
	SROCE_OP_ATTACH_MCAST = 34, /* (mcast) */
	SROCE_OP_DETACH_MCAST = 35, /* (mcast) */
	SROCE_OP_OPEN_QP      = 36, /* (open_qp) reply as CREATE_QP's: another handle of an XRC_RECV QP */

	SROCE_OP_CREATE_SRQ   = 40, /* reply fds: the SRQ's memfd */
	SROCE_OP_MODIFY_SRQ   = 41,
	SROCE_OP_QUERY_SRQ    = 42,
	SROCE_OP_DESTROY_SRQ  = 43,
	SROCE_OP_OPEN_XRCD    = 44, /* (open_xrcd), fds: the file naming a shared domain, or none; reply {handle} */
	SROCE_OP_CLOSE_XRCD   = 45, /* (handle) EBUSY while the connection's XRC SRQs or QPs use it */

	SROCE_OP_CREATE_AH    = 50,
	SROCE_OP_DESTROY_AH   = 51,

	/* The CM (version 2). Request bodies in parentheses. */
	SROCE_OP_CM_CREATE_CHANNEL  = 60, /* (none) reply {handle}, fds: the event socket */
	SROCE_OP_CM_DESTROY_CHANNEL = 61, /* (handle) EBUSY while IDs use it */
	SROCE_OP_CM_CREATE_ID       = 62, /* (cm_create_id) reply {handle} */
	SROCE_OP_CM_DESTROY_ID      = 63, /* (cm_id_arg) */
	SROCE_OP_CM_BIND            = 64, /* (cm_addr_req: src) reply cm_id_info */
	SROCE_OP_CM_RESOLVE_ADDR    = 65, /* (cm_addr_req) event ADDR_RESOLVED or ADDR_ERROR */
	SROCE_OP_CM_RESOLVE_ROUTE   = 66, /* (cm_id_arg: timeout ms) event ROUTE_RESOLVED or ROUTE_ERROR */
	SROCE_OP_CM_QUERY           = 67, /* (cm_id_arg) reply cm_id_info */
	SROCE_OP_CM_LISTEN          = 68, /* (cm_id_arg: backlog) */
	SROCE_OP_CM_CONNECT         = 69, /* (cm_conn) */
	SROCE_OP_CM_ACCEPT          = 70, /* (cm_conn) passive: sends REP; active, after CONNECT_RESPONSE: RTU */
	SROCE_OP_CM_REJECT          = 71, /* (cm_conn: private data) */
	SROCE_OP_CM_DISCONNECT      = 72, /* (cm_id_arg) */
	SROCE_OP_CM_INIT_QP_ATTR    = 73, /* (cm_id_arg: qp state) reply modify_qp {id, mask, attr} */
	SROCE_OP_CM_NOTIFY          = 74, /* (cm_id_arg: enum ibv_event_type) */
	SROCE_OP_CM_SET_OPTION      = 75, /* (cm_option) */
	SROCE_OP_CM_MIGRATE_ID      = 76, /* (cm_id_arg: the new channel) */
	SROCE_OP_CM_JOIN_MCAST      = 77, /* (cm_mcast) event MULTICAST_JOIN (version 5) */
	SROCE_OP_CM_LEAVE_MCAST     = 78, /* (cm_mcast: id, addr) */
};

struct sroce_ctl_hdr {
	uint32_t magic;   /* SROCE_CTL_MAGIC */
	uint16_t version; /* SROCE_CTL_VERSION */
	uint16_t op;      /* enum sroce_ctl_op */
	uint32_t len;     /* bytes of the datagram, this header included */
	uint32_t seq;     /* the client's request number, echoed in the reply */
	int32_t  err;     /* reply: 0 or a positive errno value (then no body) */
	uint32_t nfds;    /* descriptors passed with this datagram */
};

/* HELLO: request and reply. */
struct sroce_ctl_hello {
	uint32_t abi;        /* request: SROCE_CTL_VERSION; reply: the daemon's */
	uint32_t ndevices;   /* reply: devices the daemon serves */
	char     version[32]; /* reply: the daemon's version string */
};

/* LIST_DEVICES reply: a count, then count entries. */
struct sroce_ctl_devices {
	uint32_t count;
	uint32_t reserved;
	/* struct sroce_ctl_device dev[count]; */
};

struct sroce_ctl_device {
	char     name[SROCE_CTL_NAME]; /* "sroce_eth0" */
	char     ifname[16];           /* "eth0" */
	uint64_t node_guid;            /* as ibv_get_device_guid returns it (network order bytes as a number) */
	uint32_t ifindex;
	uint32_t reserved;
};

/* OPEN: request {name}; reply {the device} with fds: [0] the async event
 * socket (SOCK_SEQPACKET, datagrams of struct sroce_ctl_async_event), [1]
 * the doorbell eventfd, [2] the context page memfd (struct
 * sroce_ctx_page, 4096 bytes). */
struct sroce_ctl_open {
	char name[SROCE_CTL_NAME];
};

/* QUERY_RES: one page of the daemon's objects of one kind (enum
 * sroce_ctl_res_kind), those after the cursor {after_ctx, after_handle}
 * (zero: from the first); the reply's JSON gives the next cursor. */
enum sroce_ctl_res_kind {
	SROCE_RES_CLIENTS = 1,
	SROCE_RES_PD      = 2,
	SROCE_RES_MR      = 3,
	SROCE_RES_CQ      = 4,
	SROCE_RES_QP      = 5,
	SROCE_RES_SRQ     = 6,
	SROCE_RES_CM_ID   = 7,
};

struct sroce_ctl_res_query {
	uint32_t kind;
	uint32_t after_handle;
	uint64_t after_ctx;
};

#define SROCE_CTX_BELL_WORDS 504 /* the rest of the 4096-byte page */
#define SROCE_CTX_BELLS (SROCE_CTX_BELL_WORDS * 64)

struct sroce_ctx_page {
	uint32_t need_wakeup; /* written by the daemon */
	uint32_t reserved[15];
	uint64_t bells[SROCE_CTX_BELL_WORDS]; /* set by the client (atomic OR), cleared by the daemon */
};

/* QUERY_DEVICE reply: struct ibv_device_attr's fields. */
struct sroce_ctl_device_attr {
	char     fw_ver[64];
	uint64_t node_guid;
	uint64_t sys_image_guid;
	uint64_t max_mr_size;
	uint64_t page_size_cap;
	uint32_t vendor_id;
	uint32_t vendor_part_id;
	uint32_t hw_ver;
	uint32_t max_qp;
	uint32_t max_qp_wr;
	uint32_t device_cap_flags;
	uint32_t max_sge;
	uint32_t max_sge_rd;
	uint32_t max_cq;
	uint32_t max_cqe;
	uint32_t max_mr;
	uint32_t max_pd;
	uint32_t max_qp_rd_atom;
	uint32_t max_ee_rd_atom;
	uint32_t max_res_rd_atom;
	uint32_t max_qp_init_rd_atom;
	uint32_t max_ee_init_rd_atom;
	uint32_t atomic_cap;       /* enum ibv_atomic_cap */
	uint32_t max_ee;
	uint32_t max_rdd;
	uint32_t max_mw;
	uint32_t max_raw_ipv6_qp;
	uint32_t max_raw_ethy_qp;
	uint32_t max_mcast_grp;
	uint32_t max_mcast_qp_attach;
	uint32_t max_total_mcast_qp_attach;
	uint32_t max_ah;
	uint32_t max_fmr;
	uint32_t max_map_per_fmr;
	uint32_t max_srq;
	uint32_t max_srq_wr;
	uint32_t max_srq_sge;
	uint16_t max_pkeys;
	uint8_t  local_ca_ack_delay;
	uint8_t  phys_port_cnt;
	uint32_t max_inline_data;  /* what create_qp grants at most */
};

/* QUERY_PORT: request {port}; reply: struct ibv_port_attr's fields. */
struct sroce_ctl_port {
	uint32_t port_num;
	uint32_t index;            /* QUERY_GID, QUERY_PKEY: the table index */
};

struct sroce_ctl_port_attr {
	uint32_t state;            /* enum ibv_port_state */
	uint32_t max_mtu;          /* enum ibv_mtu */
	uint32_t active_mtu;
	int32_t  gid_tbl_len;
	uint32_t port_cap_flags;
	uint32_t max_msg_sz;
	uint32_t bad_pkey_cntr;
	uint32_t qkey_viol_cntr;
	uint16_t pkey_tbl_len;
	uint16_t lid;
	uint16_t sm_lid;
	uint8_t  lmc;
	uint8_t  max_vl_num;
	uint8_t  sm_sl;
	uint8_t  subnet_timeout;
	uint8_t  init_type_reply;
	uint8_t  active_width;
	uint8_t  active_speed;
	uint8_t  phys_state;
	uint8_t  link_layer;       /* IBV_LINK_LAYER_ETHERNET */
	uint8_t  flags;
	uint32_t port_cap_flags2;
	uint32_t active_speed_ex;
	uint32_t link_mtu;         /* the interface's MTU (sroce's addition) */
};

/* QUERY_GID reply (err ENODATA: the entry is empty). */
struct sroce_ctl_gid {
	uint8_t  gid[16];
	uint32_t gid_type;         /* enum ibv_gid_type_sysfs: 0 IB/RoCE v1, 1 RoCE v2 */
	uint32_t ndev_ifindex;
};

/* QUERY_PKEY reply. */
struct sroce_ctl_pkey {
	uint16_t pkey;             /* host order */
	uint16_t reserved0;
	uint32_t reserved1;
};

/* A handle alone: DEALLOC_PD, DEREG_MR, DEALLOC_MW, DESTROY_*; the reply
 * of ALLOC_PD and CREATE_COMP_CHANNEL (fds: [0] the channel's socket,
 * SOCK_SEQPACKET, datagrams of struct sroce_ctl_cq_event). */
struct sroce_ctl_handle {
	uint32_t handle;
	uint32_t reserved;
};

/* ATTACH_MCAST and DETACH_MCAST request: a UD QP and a multicast group
 * (ibv_attach_mcast, ibv_detach_mcast). */
struct sroce_ctl_mcast {
	uint32_t qp;
	uint16_t lid;
	uint16_t reserved;
	uint8_t  gid[16];
};

/* REG_MR request, with fds [0]: a memfd whose bytes from fd_offset on are
 * the registered range [addr, addr + length). The daemon maps the pages
 * that cover it. */
struct sroce_ctl_reg_mr {
	uint32_t pd;
	uint32_t access;           /* enum ibv_access_flags */
	uint64_t addr;             /* the range's address in the client */
	uint64_t length;
	uint64_t iova;             /* the address remote peers use (= addr for ibv_reg_mr) */
	uint64_t fd_offset;        /* where addr is in the memfd */
};
/*
 * REG_MR (and REREG_MR of the translation) carries one descriptor, a memfd
 * sealed against shrinking that holds the range at fd_offset, or none: the
 * daemon then maps [addr, addr + length) of the connected process's own
 * mappings, which must all be shared mappings of files (fd_offset unused).
 */

/*
 * REREG_MR request (ibv_rereg_mr): flags (enum ibv_rereg_mr_flags) select
 * what changes; the fields of reg are read only when their flag is set:
 * pd with IBV_REREG_MR_CHANGE_PD, access with IBV_REREG_MR_CHANGE_ACCESS,
 * addr, length, iova and fd_offset with IBV_REREG_MR_CHANGE_TRANSLATION,
 * which passes fds [0] as REG_MR does (no fds otherwise). The MR keeps
 * its handle and, as with rdma_rxe, its keys; the reply is struct
 * sroce_ctl_mr. When the reply comes, the daemon no longer touches the
 * old range.
 */
struct sroce_ctl_rereg_mr {
	uint32_t handle;
	uint32_t flags;
	struct sroce_ctl_reg_mr reg;
};

/* REG_MR and REREG_MR reply. */
struct sroce_ctl_mr {
	uint32_t handle;
	uint32_t lkey;
	uint32_t rkey;
	uint32_t reserved;
};

/* ALLOC_MW request {pd, type}; reply {handle, rkey}. */
struct sroce_ctl_mw {
	uint32_t pd_or_handle;     /* request: the PD; reply: the MW */
	uint32_t type_or_rkey;     /* request: IBV_MW_TYPE_1 or 2; reply: its rkey */
};

/* CREATE_CQ request; reply {handle, cqe, ring} and fds [0] the memfd:
 * struct sroce_cq_ctl at 0, the CQE ring (SROCE_RING_CQ) at ring_offset. */
struct sroce_ctl_create_cq {
	uint32_t cqe;
	uint32_t channel;          /* 0: no completion channel */
	uint32_t comp_vector;
	uint32_t reserved;
};

/*
 * RESIZE_CQ request (ibv_resize_cq); the reply is struct sroce_ctl_cq
 * with fds [0] the CQ's new memfd, laid out as CREATE_CQ's. The daemon
 * moves the completions from the old ring's cons to its prod onto the new
 * ring, from its slot 0 on, and arms the new control block as the old one
 * was; the client must not poll or arm the CQ from the request until it
 * has mapped the new memfd, then polls the new ring only. cqe below the
 * number of completions waiting: EINVAL.
 */
struct sroce_ctl_resize_cq {
	uint32_t handle;
	uint32_t cqe;
};

/* CREATE_CQ and RESIZE_CQ reply. */
struct sroce_ctl_cq {
	uint32_t handle;
	uint32_t cqe;              /* what the CQ holds (>= requested) */
	uint64_t ring_offset;
	uint64_t mem_size;         /* bytes of the memfd */
};

/* The CQ's control block. arm: the client stores 1 (next completion) or 2
 * (next solicited) with release ordering to request a notification
 * (ibv_req_notify_cq); the daemon sets it back to 0 when it sends the
 * event on the channel socket (struct sroce_ctl_cq_event). overflow: set
 * by the daemon when a completion was lost. */
struct sroce_cq_ctl {
	uint32_t arm;              /* 1: next completion, 2: next solicited; the daemon clears it */
	uint32_t overflow;
	uint32_t reserved[14];
};

struct sroce_ctl_cq_event {
	uint32_t cq;               /* the CQ's handle */
	uint32_t reserved;
};

/* An asynchronous event (ibv_get_async_event). */
struct sroce_ctl_async_event {
	uint32_t event_type;       /* enum ibv_event_type */
	uint32_t handle;           /* the QP, CQ or SRQ handle, or the port number */
};

/* The sizes of a QP's queues (struct ibv_qp_cap). */
struct sroce_ctl_qp_cap {
	uint32_t max_send_wr;
	uint32_t max_recv_wr;
	uint32_t max_send_sge;
	uint32_t max_recv_sge;
	uint32_t max_inline_data;
};

/* CREATE_QP request. */
struct sroce_ctl_create_qp {
	uint32_t pd;               /* XRC_RECV: the XRC domain's handle */
	uint32_t send_cq;
	uint32_t recv_cq;
	uint32_t srq;              /* 0: none */
	uint8_t  qp_type;          /* enum ibv_qp_type: 2 RC, 3 UC, 4 UD, 9 XRC_SEND, 10 XRC_RECV */
	uint8_t  sq_sig_all;
	uint16_t reserved0;
	struct sroce_ctl_qp_cap cap;
};

/* CREATE_QP reply, fds [0] the memfd: struct sroce_qp_ctl at 0, the send
 * ring (SROCE_RING_SEND) at sq_offset, the receive ring (SROCE_RING_RECV)
 * at rq_offset (0 when the QP uses an SRQ). */
struct sroce_ctl_qp {
	uint32_t handle;
	uint32_t qpn;
	struct sroce_ctl_qp_cap cap; /* what the QP got (>= requested) */
	uint32_t bell;               /* the QP's doorbell number */
	uint64_t sq_offset;
	uint64_t rq_offset;
	uint64_t mem_size;
};

struct sroce_qp_ctl {
	uint32_t state;            /* enum ibv_qp_state, kept current by the daemon */
	uint32_t reserved[15];
};

/* struct ibv_ah_attr with its GRH, as RoCE uses it. */
struct sroce_ctl_ah_attr {
	uint8_t  dgid[16];
	uint32_t flow_label;
	uint8_t  sgid_index;
	uint8_t  hop_limit;
	uint8_t  traffic_class;
	uint8_t  sl;
	uint8_t  is_global;
	uint8_t  port_num;
	uint8_t  static_rate;
	uint8_t  src_path_bits;
	uint16_t dlid;
	uint8_t  dmac[6];          /* CREATE_AH reply and QUERY_QP: resolved */
};

/* struct ibv_qp_attr's fields that RoCE uses. */
struct sroce_ctl_qp_attr {
	uint32_t qp_state;
	uint32_t cur_qp_state;
	uint32_t path_mtu;
	uint32_t path_mig_state;
	uint32_t qkey;
	uint32_t rq_psn;
	uint32_t sq_psn;
	uint32_t dest_qp_num;
	uint32_t qp_access_flags;
	struct sroce_ctl_qp_cap cap;
	struct sroce_ctl_ah_attr ah_attr;
	uint16_t pkey_index;
	uint8_t  en_sqd_async_notify;
	uint8_t  sq_draining;
	uint8_t  max_rd_atomic;
	uint8_t  max_dest_rd_atomic;
	uint8_t  min_rnr_timer;
	uint8_t  port_num;
	uint8_t  timeout;
	uint8_t  retry_cnt;
	uint8_t  rnr_retry;
	uint8_t  sq_sig_all;       /* QUERY_QP reply */
	uint32_t qp_type;          /* QUERY_QP reply */
};

/* MODIFY_QP request; QUERY_QP request {handle, attr_mask} and reply
 * {handle, attr_mask, attr}. */
struct sroce_ctl_modify_qp {
	uint32_t handle;
	uint32_t attr_mask;        /* enum ibv_qp_attr_mask */
	struct sroce_ctl_qp_attr attr;
};

/* CREATE_SRQ request {pd, max_wr, max_sge, srq_limit}; MODIFY_SRQ
 * {handle, attr_mask, max_wr, srq_limit}; QUERY_SRQ reply {handle, 0,
 * max_wr, max_sge, srq_limit}. MODIFY_SRQ with IBV_SRQ_MAX_WR replies
 * struct sroce_ctl_srq_created with fds [0] the SRQ's new memfd: the
 * daemon moves the receives not yet taken from the old ring onto the new
 * one, from its slot 0 on; the client must not post to the SRQ from the
 * request until it has mapped the new memfd, then posts to the new ring
 * only. Without IBV_SRQ_MAX_WR the reply has no body. */
struct sroce_ctl_srq {
	uint32_t pd_or_handle;
	uint32_t attr_mask;        /* MODIFY_SRQ: enum ibv_srq_attr_mask */
	uint32_t max_wr;
	uint32_t max_sge;
	uint32_t srq_limit;
	uint32_t xrcd;             /* CREATE_SRQ: an XRC SRQ's domain (0: an SRQ of QPs) */
	uint32_t cq;               /* CREATE_SRQ: an XRC SRQ's CQ */
	uint32_t reserved;
};

/* OPEN_QP request (ibv_open_qp): the XRC_RECV QP qpn of the domain xrcd
 * names, which another process of the domain may have created; the QP
 * lives until its last handle is destroyed. */
struct sroce_ctl_open_qp {
	uint32_t xrcd;
	uint32_t qpn;
	uint8_t  qp_type;          /* IBV_QPT_XRC_RECV, the only type opened */
	uint8_t  reserved[7];
};

/* OPEN_XRCD request (ibv_open_xrcd): with one fd, the domain shared by
 * every opener of that file (its inode), created with O_CREAT if none,
 * EEXIST with O_CREAT|O_EXCL if one exists, ENOENT without O_CREAT if none;
 * without an fd a domain of its own. */
struct sroce_ctl_open_xrcd {
	uint32_t oflags;
	uint32_t reserved;
};

/* CREATE_SRQ reply (and MODIFY_SRQ's with IBV_SRQ_MAX_WR), fds [0] the
 * memfd: struct sroce_srq_ctl at 0, the receive ring at ring_offset. */
struct sroce_ctl_srq_created {
	uint32_t handle;
	uint32_t max_wr;
	uint32_t max_sge;
	uint32_t srq_num;          /* an XRC SRQ's number (ibv_get_srq_num) */
	uint64_t ring_offset;
	uint64_t mem_size;
	uint32_t bell;             /* the SRQ's doorbell number */
	uint32_t reserved;
};

struct sroce_srq_ctl {
	uint32_t reserved[16];
};

/* CREATE_AH request {pd, attr}; reply {handle, attr with dmac}. A UD
 * send WQE names its AH by handle (sroce_send_wqe.ah) and carries its
 * attributes too. */
struct sroce_ctl_ah {
	uint32_t pd_or_handle;
	uint32_t reserved;
	struct sroce_ctl_ah_attr attr;
};

/* The CM. */

#define SROCE_CTL_CM_PRIVATE 224 /* private data bytes a message carries at most */

/* A socket address as the CM takes and gives it. */
struct sroce_ctl_cm_addr {
	uint16_t family;           /* AF_INET, AF_INET6, or 0: none */
	uint16_t port;             /* host order */
	uint32_t scope_id;         /* IPv6 */
	uint8_t  addr[16];         /* AF_INET: the first 4 bytes */
};

/* CM_CREATE_ID request. */
struct sroce_ctl_cm_create_id {
	uint32_t channel;
	uint16_t ps;               /* enum rdma_port_space: RDMA_PS_TCP, RDMA_PS_UDP, RDMA_PS_IB */
	uint8_t  qp_type;          /* IBV_QPT_RC or IBV_QPT_UD */
	uint8_t  reserved0;
};

/* An ID and one number: DESTROY_ID, RESOLVE_ROUTE (timeout), QUERY,
 * LISTEN (backlog), DISCONNECT, INIT_QP_ATTR (state), NOTIFY (event),
 * MIGRATE_ID (channel). */
struct sroce_ctl_cm_id_arg {
	uint32_t id;
	uint32_t arg;
};

/* BIND (src) and RESOLVE_ADDR (src, optional, and dst). */
struct sroce_ctl_cm_addr_req {
	uint32_t id;
	uint32_t timeout_ms;
	struct sroce_ctl_cm_addr src;
	struct sroce_ctl_cm_addr dst;
};

/* What an ID is bound to and connected with (struct rdma_route's
 * contents): QUERY's and BIND's reply, and part of every event. */
struct sroce_ctl_cm_id_info {
	uint32_t handle;
	uint32_t path_mtu;         /* enum ibv_mtu, once the route is resolved */
	struct sroce_ctl_cm_addr src;
	struct sroce_ctl_cm_addr dst;
	uint8_t  sgid[16];
	uint8_t  dgid[16];
	uint16_t pkey;             /* host order */
	uint8_t  port_num;         /* 0: not bound to a device */
	uint8_t  num_paths;        /* 1 once the route is resolved */
	uint8_t  hop_limit;
	uint8_t  traffic_class;
	uint8_t  sgid_index;
	uint8_t  reserved0;
	char     device[SROCE_CTL_NAME]; /* "" until bound */
};

/* CONNECT, ACCEPT, REJECT (private data only); an event's parameters. */
struct sroce_ctl_cm_conn {
	uint32_t id;
	uint32_t qp_num;
	uint32_t qkey;             /* UD */
	uint8_t  private_data_len;
	uint8_t  responder_resources;
	uint8_t  initiator_depth;
	uint8_t  flow_control;
	uint8_t  retry_count;
	uint8_t  rnr_retry_count;
	uint8_t  srq;
	uint8_t  reserved0;
	uint8_t  private_data[SROCE_CTL_CM_PRIVATE];
};

/* SET_OPTION: RDMA_OPTION_ID with TOS, REUSEADDR, AFONLY, ACK_TIMEOUT. */
struct sroce_ctl_cm_option {
	uint32_t id;
	uint32_t level;
	uint32_t optname;
	uint32_t reserved0;
	uint64_t value;
};

/* JOIN_MCAST and LEAVE_MCAST: the ID, the client's name for the join
 * (echoed in its events' mcast_uid), join_flags (enum
 * rdma_cm_join_mc_flags: 0 full member, 1 send-only) and the group. The
 * join completes at once: MULTICAST_JOIN follows with the group's QPN
 * 0xFFFFFF, Q_Key and ah_attr; the client attaches its QP itself. A leave
 * forgets the earliest join of addr (ENOENT for none) and does not read
 * uid: the daemon's joins attach no QP, so which of two joins of a group
 * it forgets changes nothing the client sees. */
struct sroce_ctl_cm_mcast {
	uint32_t id;
	uint32_t uid;              /* JOIN: the client's name for the join, echoed in its events (LEAVE: not read) */
	uint32_t join_flags;       /* 0: full member, 1: send-only full member */
	uint32_t reserved0;
	struct sroce_ctl_cm_addr addr;
};

/* One event on a CM channel's socket. info is the ID as it is now (for
 * CONNECT_REQUEST a new ID the daemon created on the listener's channel);
 * listen_id names the listener, mcast_uid the join of MULTICAST_JOIN and
 * MULTICAST_ERROR. status: 0, a negative errno value, or for REJECTED the
 * REJ reason. conn holds the peer's private data and parameters; for UD
 * IDs also its QPN, Q_Key and ah_attr (the group's for MULTICAST_JOIN). */
struct sroce_ctl_cm_event {
	uint32_t event;            /* enum rdma_cm_event_type */
	int32_t  status;
	uint32_t listen_id;
	uint32_t mcast_uid;        /* MULTICAST_JOIN, MULTICAST_ERROR: the join's uid */
	struct sroce_ctl_cm_id_info info;
	struct sroce_ctl_cm_conn conn;
	struct sroce_ctl_ah_attr ah_attr;
};

#endif /* SROCE_CTL_H */
