/*
 * sroce_ring.h: the memory sroce's engine shares with its clients: the
 * single-producer single-consumer rings of work queue and completion
 * queue entries. This file is the source: package ring's Go mirror
 * (ring/header_gen.go) is generated from it by `go generate ./ring`, and
 * ring's tests fail when the mirror is stale and compare every offset and
 * size with the C compiler's. Pad explicitly (reserved members): the
 * generator refuses implicit padding.
 *
 * A ring is a struct sroce_ring_hdr followed by hdr.size slots of
 * hdr.stride bytes. Indices are free-running 32-bit counters; slot i is at
 * (i & (size - 1)). At most hdr.limit slots are in use at once.
 *
 * Producer: if (prod - cons) < limit, fill slot prod, then store prod + 1
 * with release ordering. Consumer: load prod with acquire ordering; while
 * cons != prod read slot cons, then store cons + 1 with release ordering.
 * Each side may keep a private copy of the other's index and reload it
 * only when the copy says full (producer) or empty (consumer).
 */
#ifndef SROCE_RING_H
#define SROCE_RING_H

#include <stddef.h>
#include <stdint.h>

#define SROCE_RING_MAGIC   0x474e5253u /* "SRNG" */
#define SROCE_RING_VERSION 1
#define SROCE_CACHE_LINE   64

enum sroce_ring_kind {
	SROCE_RING_CQ   = 1, /* struct sroce_cqe, written by the device */
	SROCE_RING_SEND = 2, /* struct sroce_send_wqe, written by the client */
	SROCE_RING_RECV = 3, /* struct sroce_recv_wqe, written by the client */
};

struct sroce_ring_hdr {
	uint32_t magic;   /* SROCE_RING_MAGIC, written last by the creator */
	uint16_t version; /* SROCE_RING_VERSION */
	uint16_t kind;    /* enum sroce_ring_kind */
	uint32_t size;    /* slots, a power of two */
	uint32_t limit;   /* most slots in use at once, <= size */
	uint32_t stride;  /* bytes per slot, a multiple of 16 */
	uint8_t  reserved0[SROCE_CACHE_LINE - 20];
	uint32_t prod;    /* next slot the producer fills (its own cache line) */
	uint8_t  reserved1[SROCE_CACHE_LINE - 4];
	uint32_t cons;    /* oldest slot not yet released (its own cache line) */
	uint8_t  reserved2[SROCE_CACHE_LINE - 4];
};

#define SROCE_RING_HDR_SIZE 192

/* A scatter/gather element; the layout of struct ibv_sge. */
struct sroce_sge {
	uint64_t addr;
	uint32_t length;
	uint32_t lkey;
};

/*
 * A completion: the fields of struct ibv_wc. status and opcode hold enum
 * ibv_wc_status and enum ibv_wc_opcode values; imm is the immediate data
 * as a number (ibv_wc.imm_data is htonl(imm)); wc_flags holds
 * IBV_WC_GRH, IBV_WC_WITH_IMM, IBV_WC_WITH_INV, ...
 */
struct sroce_cqe {
	uint64_t wr_id;
	uint8_t  status;
	uint8_t  opcode;
	uint16_t reserved0;
	uint32_t vendor_err;
	uint32_t byte_len;
	uint32_t imm;
	uint32_t invalidated_rkey;
	uint32_t qp_num;
	uint32_t src_qp;
	uint32_t wc_flags;
	uint16_t pkey_index;
	uint16_t slid;
	uint8_t  sl;
	uint8_t  dlid_path_bits;
	uint16_t reserved1;
};

/* The destination of a UD send: the address handle's attributes. */
struct sroce_ud_addr {
	uint8_t  dgid[16];
	uint32_t flow_label;
	uint32_t remote_qpn;
	uint32_t remote_qkey;
	uint8_t  sgid_index;
	uint8_t  hop_limit;
	uint8_t  traffic_class;
	uint8_t  port_num;
	uint8_t  dmac[6];
	uint8_t  reserved0[2];
};

/*
 * A send work request. opcode and send_flags hold enum ibv_wr_opcode and
 * enum ibv_send_flags values. The slot continues with num_sge struct
 * sroce_sge, or with IBV_SEND_INLINE with inline_len bytes of payload.
 */
struct sroce_send_wqe {
	uint64_t wr_id;
	uint8_t  opcode;
	uint8_t  num_sge;
	uint16_t inline_len;
	uint32_t send_flags;
	uint32_t imm;
	uint32_t invalidate_rkey;
	uint64_t remote_addr;
	uint32_t rkey;
	uint32_t length;          /* payload bytes */
	uint64_t compare_add;
	uint64_t swap;
	uint64_t bind_addr;       /* IBV_WR_BIND_MW: the window's binding */
	uint64_t bind_length;
	uint32_t bind_lkey;
	uint32_t bind_access;
	uint32_t reg_access;      /* REG_MR */
	uint32_t ah;              /* UD on a daemon's ring: the AH's handle */
	struct sroce_ud_addr ud;  /* UD only; XRC_SEND: ud.remote_qpn is the remote XRC SRQ number */
	/* struct sroce_sge sge[num_sge] or uint8_t inline_data[inline_len] */
};

/* A receive work request; the slot continues with num_sge sroce_sge. */
struct sroce_recv_wqe {
	uint64_t wr_id;
	uint32_t num_sge;
	uint32_t length; /* bytes the SGL can take */
	/* struct sroce_sge sge[num_sge] */
};

/* The slot of index i. */
static inline void *sroce_ring_slot(struct sroce_ring_hdr *h, uint32_t i)
{
	return (uint8_t *)h + SROCE_RING_HDR_SIZE + (size_t)(i & (h->size - 1)) * h->stride;
}

/* The SGEs (or inline data) that follow an entry of type T in its slot. */
#define SROCE_SLOT_TAIL(entry) ((void *)((entry) + 1))

/* Producer: the slot to fill, or NULL if the ring is full. */
static inline void *sroce_ring_next(struct sroce_ring_hdr *h)
{
	uint32_t prod = h->prod; /* only the producer writes prod */
	uint32_t cons = __atomic_load_n(&h->cons, __ATOMIC_ACQUIRE);
	if (prod - cons >= h->limit)
		return NULL;
	return sroce_ring_slot(h, prod);
}

/* Producer: publish the slot sroce_ring_next returned. */
static inline void sroce_ring_publish(struct sroce_ring_hdr *h)
{
	__atomic_store_n(&h->prod, h->prod + 1, __ATOMIC_RELEASE);
}

/* Consumer: the oldest published slot, or NULL if there is none. */
static inline void *sroce_ring_front(struct sroce_ring_hdr *h)
{
	uint32_t cons = h->cons; /* only the consumer writes cons */
	if (__atomic_load_n(&h->prod, __ATOMIC_ACQUIRE) == cons)
		return NULL;
	return sroce_ring_slot(h, cons);
}

/* Consumer: give the slot sroce_ring_front returned back. */
static inline void sroce_ring_release(struct sroce_ring_hdr *h)
{
	__atomic_store_n(&h->cons, h->cons + 1, __ATOMIC_RELEASE);
}

#endif /* SROCE_RING_H */
