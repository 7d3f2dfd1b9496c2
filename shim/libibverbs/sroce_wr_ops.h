/*
 * sroce_wr_ops.h: the table of work-request opcodes the library's post checks read.
 * Generated from verbs/wrops.go by shim/wrops_test.go; do not edit. To
 * regenerate: go test ./shim -run TestWROpsHeader -update-wrops
 */
#ifndef SROCE_WR_OPS_H
#define SROCE_WR_OPS_H

#include <stdint.h>

#include "sroce_verbs.h"

/* What a request does (verbs.WRClass). */
enum {
	SROCE_WR_CLASS_SEND = 1,
	SROCE_WR_CLASS_WRITE = 2,
	SROCE_WR_CLASS_READ = 3,
	SROCE_WR_CLASS_ATOMIC = 4,
	SROCE_WR_CLASS_ATOMIC_WRITE = 5,
	SROCE_WR_CLASS_LOCAL = 6,
};

/* What data it carries (verbs.PayloadRule). */
enum {
	SROCE_WR_PAYLOAD_MESSAGE = 1,
	SROCE_WR_PAYLOAD_ATOMIC8 = 2,
	SROCE_WR_PAYLOAD_NONE = 3,
};

/* Flags of a row. */
enum {
	SROCE_WR_INLINE = 1 << 0,    /* IBV_SEND_INLINE applies */
	SROCE_WR_IMM = 1 << 1,       /* carries imm_data */
	SROCE_WR_INV = 1 << 2,       /* carries an R_Key to invalidate at the peer */
	SROCE_WR_RD_ATOMIC = 1 << 3, /* takes a max_rd_atomic credit */
};

struct sroce_wr_op {
	const char *name;   /* NULL: the library does not offer the opcode */
	uint16_t qp_types;  /* 1 << enum ibv_qp_type for each type that may post it */
	uint8_t cls;        /* SROCE_WR_CLASS_* */
	uint8_t payload;    /* SROCE_WR_PAYLOAD_* */
	uint8_t flags;      /* SROCE_WR_* */
	uint8_t wc_opcode;  /* enum ibv_wc_opcode of its completion */
	uint64_t ex_flag;   /* its IBV_QP_EX_WITH_* bit (the ibv_wr_* API) */
};

#define SROCE_NUM_WR_OPS 16

static const struct sroce_wr_op sroce_wr_ops[SROCE_NUM_WR_OPS] = {
	[IBV_WR_RDMA_WRITE] = {"RDMA_WRITE", 0x020c, SROCE_WR_CLASS_WRITE, SROCE_WR_PAYLOAD_MESSAGE,
			SROCE_WR_INLINE, 1, IBV_QP_EX_WITH_RDMA_WRITE},
	[IBV_WR_RDMA_WRITE_WITH_IMM] = {"RDMA_WRITE_WITH_IMM", 0x020c, SROCE_WR_CLASS_WRITE, SROCE_WR_PAYLOAD_MESSAGE,
			SROCE_WR_INLINE | SROCE_WR_IMM, 1, IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM},
	[IBV_WR_SEND] = {"SEND", 0x021e, SROCE_WR_CLASS_SEND, SROCE_WR_PAYLOAD_MESSAGE,
			SROCE_WR_INLINE, 0, IBV_QP_EX_WITH_SEND},
	[IBV_WR_SEND_WITH_IMM] = {"SEND_WITH_IMM", 0x021e, SROCE_WR_CLASS_SEND, SROCE_WR_PAYLOAD_MESSAGE,
			SROCE_WR_INLINE | SROCE_WR_IMM, 0, IBV_QP_EX_WITH_SEND_WITH_IMM},
	[IBV_WR_RDMA_READ] = {"RDMA_READ", 0x0204, SROCE_WR_CLASS_READ, SROCE_WR_PAYLOAD_MESSAGE,
			SROCE_WR_RD_ATOMIC, 2, IBV_QP_EX_WITH_RDMA_READ},
	[IBV_WR_ATOMIC_CMP_AND_SWP] = {"ATOMIC_CMP_AND_SWP", 0x0204, SROCE_WR_CLASS_ATOMIC, SROCE_WR_PAYLOAD_ATOMIC8,
			SROCE_WR_RD_ATOMIC, 3, IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP},
	[IBV_WR_ATOMIC_FETCH_AND_ADD] = {"ATOMIC_FETCH_AND_ADD", 0x0204, SROCE_WR_CLASS_ATOMIC, SROCE_WR_PAYLOAD_ATOMIC8,
			SROCE_WR_RD_ATOMIC, 4, IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD},
	[IBV_WR_LOCAL_INV] = {"LOCAL_INV", 0x0204, SROCE_WR_CLASS_LOCAL, SROCE_WR_PAYLOAD_NONE,
			0, 6, IBV_QP_EX_WITH_LOCAL_INV},
	[IBV_WR_BIND_MW] = {"BIND_MW", 0x020c, SROCE_WR_CLASS_LOCAL, SROCE_WR_PAYLOAD_NONE,
			0, 5, IBV_QP_EX_WITH_BIND_MW},
	[IBV_WR_SEND_WITH_INV] = {"SEND_WITH_INV", 0x0204, SROCE_WR_CLASS_SEND, SROCE_WR_PAYLOAD_MESSAGE,
			SROCE_WR_INLINE | SROCE_WR_INV, 0, IBV_QP_EX_WITH_SEND_WITH_INV},
	[IBV_WR_ATOMIC_WRITE] = {"ATOMIC_WRITE", 0x0004, SROCE_WR_CLASS_ATOMIC_WRITE, SROCE_WR_PAYLOAD_ATOMIC8,
			SROCE_WR_INLINE | SROCE_WR_RD_ATOMIC, 9, IBV_QP_EX_WITH_ATOMIC_WRITE},
};

/* Every IBV_QP_EX_WITH_* bit of the table: what ibv_create_qp_ex accepts in send_ops_flags. */
#define SROCE_SEND_OPS (IBV_QP_EX_WITH_RDMA_WRITE | \
			IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | \
			IBV_QP_EX_WITH_SEND | \
			IBV_QP_EX_WITH_SEND_WITH_IMM | \
			IBV_QP_EX_WITH_RDMA_READ | \
			IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | \
			IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | \
			IBV_QP_EX_WITH_LOCAL_INV | \
			IBV_QP_EX_WITH_BIND_MW | \
			IBV_QP_EX_WITH_SEND_WITH_INV | \
			IBV_QP_EX_WITH_ATOMIC_WRITE)

/* The row of opcode op, or NULL when the library does not offer it. */
static inline const struct sroce_wr_op *sroce_wr_op(int op)
{
	if (op < 0 || op >= SROCE_NUM_WR_OPS || !sroce_wr_ops[op].name)
		return NULL;
	return &sroce_wr_ops[op];
}

#endif
