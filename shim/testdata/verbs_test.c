/*
 * verbs_test.c: a verbs program written against the system's
 * <infiniband/verbs.h>, run on sroce's libibverbs against a live daemon by
 * TestVerbsProgram. Two RC QPs of one device connected to each other:
 * SEND with immediate (inline and not), RDMA WRITE with immediate, READ,
 * FETCH_ADD and CMP_SWAP, each checked in memory; completions read with
 * ibv_poll_cq and with the extended CQ API; a completion event through a
 * channel; query_qp; ibv_resize_cq with completions not yet polled,
 * ibv_modify_srq of max_wr with receives posted, ibv_rereg_mr of the
 * translation (a WRITE lands in the new buffer, not the old) and of the
 * access; UD multicast (ibv_attach_mcast, a send to the group that both
 * attached QPs receive, ibv_detach_mcast, the errors); everything
 * destroyed. Prints "ok NAME" per check and exits 1 at
 * the first failure. Usage: verbs_test DEVICE GID_INDEX
 */
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "verbs_test.h"

/* Waits for the completion event of cq on ch and acknowledges it. */
static void wait_event(struct ibv_comp_channel *ch, struct ibv_cq *cq, const char *what)
{
	struct pollfd pfd = {.fd = ch->fd, .events = POLLIN};
	struct ibv_cq *ev_cq;
	void *ev_ctx;
	CHECK(poll(&pfd, 1, 10000) == 1, "%s: no completion event within 10 s", what);
	CHECK(!ibv_get_cq_event(ch, &ev_cq, &ev_ctx) && ev_cq == cq, "%s: ibv_get_cq_event", what);
	ibv_ack_cq_events(ev_cq, 1);
}

/* Posts a signaled RDMA WRITE of len bytes at src to raddr. */
static void post_write(struct ibv_qp *qp, uint64_t wr_id, void *src, uint32_t len, uint32_t lkey, void *raddr,
		       uint32_t rkey)
{
	struct ibv_sge sge = {(uintptr_t)src, len, lkey};
	struct ibv_send_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				 .send_flags = IBV_SEND_SIGNALED}, *bad;
	wr.wr.rdma.remote_addr = (uintptr_t)raddr;
	wr.wr.rdma.rkey = rkey;
	CHECK(!ibv_post_send(qp, &wr, &bad), "post WRITE %lu", (unsigned long)wr_id);
}


int main(int argc, char **argv)
{
	CHECK(argc == 3, "usage: verbs_test DEVICE GID_INDEX");
	int gid_idx = atoi(argv[2]);
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	struct ibv_device *dev = NULL;
	for (int i = 0; list && i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), argv[1]))
			dev = list[i];
	CHECK(dev, "device %s not listed", argv[1]);
	struct ibv_context *ctx = ibv_open_device(dev);
	ibv_free_device_list(list);
	CHECK(ctx, "ibv_open_device");
	printf("ok open\n");

	struct ibv_port_attr pa;
	CHECK(!ibv_query_port(ctx, 1, &pa) && pa.state == IBV_PORT_ACTIVE && pa.link_layer == IBV_LINK_LAYER_ETHERNET,
	      "ibv_query_port");
	/* The exported ibv_query_port (IBVERBS_1.1) writes only the old, shorter struct. */
	struct ibv_port_attr pold;
	memset(&pold, 0xee, sizeof(pold));
	CHECK(!(ibv_query_port)(ctx, 1, (struct _compat_ibv_port_attr *)&pold), "exported ibv_query_port");
	CHECK(pold.port_cap_flags2 == 0xeeee && pold.state == pa.state && pold.gid_tbl_len == pa.gid_tbl_len &&
		      pold.link_layer == pa.link_layer,
	      "exported ibv_query_port wrote %#x into port_cap_flags2", pold.port_cap_flags2);
	union ibv_gid gid;
	CHECK(!ibv_query_gid(ctx, 1, gid_idx, &gid), "ibv_query_gid");
	struct ibv_gid_entry ge;
	CHECK(!ibv_query_gid_ex(ctx, 1, (uint32_t)gid_idx, &ge, 0) && ge.gid_type == IBV_GID_TYPE_ROCE_V2 &&
		      !memcmp(ge.gid.raw, gid.raw, 16),
	      "ibv_query_gid_ex");
	struct ibv_device_attr_ex dx;
	CHECK(!ibv_query_device_ex(ctx, NULL, &dx) && dx.orig_attr.phys_port_cnt == 1, "ibv_query_device_ex");
	printf("ok queries\n");

	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK(pd, "ibv_alloc_pd");
	size_t len = 1 << 16;
	char *a_buf = malloc(len), *b_buf = malloc(len);
	uint64_t *counter = aligned_alloc(8, 64);
	memset(a_buf, 0, len);
	memset(b_buf, 0, len);
	counter[0] = 1000;
	int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |
		  IBV_ACCESS_MW_BIND;
	struct ibv_mr *a_mr = ibv_reg_mr(pd, a_buf, len, acc);
	struct ibv_mr *b_mr = ibv_reg_mr(pd, b_buf, len, acc);
	struct ibv_mr *c_mr = ibv_reg_mr(pd, counter, 64, acc);
	CHECK(a_mr && b_mr && c_mr, "ibv_reg_mr");

	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	CHECK(ch, "ibv_create_comp_channel");
	struct ibv_cq *a_cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	struct ibv_cq_init_attr_ex cx = {.cqe = 64, .channel = ch, .cq_context = (void *)0x1234,
					 .wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM};
	struct ibv_cq_ex *b_cqx = ibv_create_cq_ex(ctx, &cx);
	CHECK(a_cq && b_cqx, "create cq");
	struct ibv_cq *b_cq = ibv_cq_ex_to_cq(b_cqx);
	struct ibv_qp_init_attr qa = {.send_cq = a_cq, .recv_cq = a_cq, .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 32, .max_recv_wr = 32, .max_send_sge = 2,
					      .max_recv_sge = 2, .max_inline_data = 64}};
	struct ibv_qp *a_qp = ibv_create_qp(pd, &qa);
	qa.send_cq = b_cq;
	qa.recv_cq = b_cq;
	struct ibv_qp *b_qp = ibv_create_qp(pd, &qa);
	CHECK(a_qp && b_qp, "ibv_create_qp");
	CHECK(qa.cap.max_inline_data >= 64, "max_inline_data %u", qa.cap.max_inline_data);
	connect_qp(a_qp, b_qp->qp_num, &gid, gid_idx);
	connect_qp(b_qp, a_qp->qp_num, &gid, gid_idx);
	struct ibv_qp_attr qattr;
	struct ibv_qp_init_attr qinit;
	CHECK(!ibv_query_qp(a_qp, &qattr, IBV_QP_STATE | IBV_QP_DEST_QPN, &qinit) && qattr.qp_state == IBV_QPS_RTS &&
		      qattr.dest_qp_num == b_qp->qp_num && qinit.send_cq == a_cq,
	      "ibv_query_qp: state %d dest %u", qattr.qp_state, qattr.dest_qp_num);
	printf("ok connected\n");

	/* SEND with immediate, two SGEs into a receive of two SGEs; a completion event. */
	CHECK(!ibv_req_notify_cq(b_cq, 0), "ibv_req_notify_cq");
	struct ibv_sge rs[2] = {{(uintptr_t)b_buf, 100, b_mr->lkey}, {(uintptr_t)b_buf + 1000, 100, b_mr->lkey}};
	struct ibv_recv_wr rwr = {.wr_id = 7, .sg_list = rs, .num_sge = 2}, *bad_r;
	CHECK(!ibv_post_recv(b_qp, &rwr, &bad_r), "ibv_post_recv");
	strcpy(a_buf, "first part,");
	strcpy(a_buf + 500, "second part");
	struct ibv_sge ss[2] = {{(uintptr_t)a_buf, 11, a_mr->lkey}, {(uintptr_t)a_buf + 500, 12, a_mr->lkey}};
	struct ibv_send_wr swr = {.wr_id = 1, .sg_list = ss, .num_sge = 2, .opcode = IBV_WR_SEND_WITH_IMM,
				  .send_flags = IBV_SEND_SIGNALED, .imm_data = htonl(0xabcdef01)};
	struct ibv_send_wr *bad;
	CHECK(!ibv_post_send(a_qp, &swr, &bad), "ibv_post_send SEND");
	struct ibv_wc wc = poll_one(a_cq, "SEND");
	CHECK(wc.opcode == IBV_WC_SEND && wc.wr_id == 1, "SEND completion opcode %d", wc.opcode);
	struct pollfd pfd = {.fd = ch->fd, .events = POLLIN};
	CHECK(poll(&pfd, 1, 10000) == 1, "no completion event within 10 s");
	struct ibv_cq *ev_cq;
	void *ev_ctx;
	CHECK(!ibv_get_cq_event(ch, &ev_cq, &ev_ctx) && ev_cq == b_cq && ev_ctx == (void *)0x1234, "ibv_get_cq_event");
	ibv_ack_cq_events(ev_cq, 1);
	struct ibv_poll_cq_attr pattr = {0};
	double deadline = now() + 10;
	int ret;
	while ((ret = ibv_start_poll(b_cqx, &pattr)) == ENOENT)
		CHECK(now() < deadline, "no receive completion");
	CHECK(ret == 0, "ibv_start_poll %d", ret);
	CHECK(b_cqx->status == IBV_WC_SUCCESS && b_cqx->wr_id == 7, "recv status %d", b_cqx->status);
	CHECK(ibv_wc_read_opcode(b_cqx) == IBV_WC_RECV, "recv opcode");
	CHECK(ibv_wc_read_byte_len(b_cqx) == 23, "byte_len %u", ibv_wc_read_byte_len(b_cqx));
	CHECK((ibv_wc_read_wc_flags(b_cqx) & IBV_WC_WITH_IMM) && ntohl(ibv_wc_read_imm_data(b_cqx)) == 0xabcdef01,
	      "immediate %x", ntohl(ibv_wc_read_imm_data(b_cqx)));
	CHECK(ibv_wc_read_qp_num(b_cqx) == b_qp->qp_num, "qp_num");
	ibv_end_poll(b_cqx);
	CHECK(!memcmp(b_buf, "first part,second part", 22) || (!memcmp(b_buf, "first part,", 11) && !memcmp(b_buf + 11, "second part", 11)),
	      "received %.23s", b_buf);
	printf("ok send with immediate, event, extended poll\n");

	/* Inline SEND. */
	CHECK(!ibv_post_recv(b_qp, &rwr, &bad_r), "ibv_post_recv");
	char inl[40] = "inline payload";
	struct ibv_sge is = {(uintptr_t)inl, 40, 0};
	struct ibv_send_wr iwr = {.wr_id = 2, .sg_list = &is, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE};
	CHECK(!ibv_post_send(a_qp, &iwr, &bad), "inline SEND");
	memset(inl, 0, sizeof(inl)); /* inline data was copied at post time */
	poll_one(a_cq, "inline SEND");
	struct ibv_wc rwc = poll_one(b_cq, "inline recv");
	CHECK(rwc.byte_len == 40 && !strcmp(b_buf, "inline payload"), "inline data %s", b_buf);
	printf("ok inline send\n");

	/* RDMA WRITE with immediate: 64 KiB, beyond the path MTU. */
	for (size_t i = 0; i < len; i++)
		a_buf[i] = (char)(i * 7);
	CHECK(!ibv_post_recv(b_qp, &rwr, &bad_r), "ibv_post_recv");
	struct ibv_sge ws = {(uintptr_t)a_buf, (uint32_t)len, a_mr->lkey};
	struct ibv_send_wr wwr = {.wr_id = 3, .sg_list = &ws, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
				  .send_flags = IBV_SEND_SIGNALED, .imm_data = htonl(42)};
	wwr.wr.rdma.remote_addr = (uintptr_t)b_buf;
	wwr.wr.rdma.rkey = b_mr->rkey;
	CHECK(!ibv_post_send(a_qp, &wwr, &bad), "WRITE");
	poll_one(a_cq, "WRITE");
	rwc = poll_one(b_cq, "WRITE imm");
	CHECK(rwc.opcode == IBV_WC_RECV_RDMA_WITH_IMM && ntohl(rwc.imm_data) == 42, "write imm opcode %d imm %u", rwc.opcode,
	      ntohl(rwc.imm_data));
	CHECK(!memcmp(a_buf, b_buf, len), "WRITE data differs");
	printf("ok rdma write with immediate\n");

	/* RDMA READ back into a zeroed buffer. */
	memset(a_buf, 0, len);
	struct ibv_send_wr rdwr = {.wr_id = 4, .sg_list = &ws, .num_sge = 1, .opcode = IBV_WR_RDMA_READ,
				   .send_flags = IBV_SEND_SIGNALED};
	rdwr.wr.rdma.remote_addr = (uintptr_t)b_buf;
	rdwr.wr.rdma.rkey = b_mr->rkey;
	CHECK(!ibv_post_send(a_qp, &rdwr, &bad), "READ");
	wc = poll_one(a_cq, "READ");
	CHECK(wc.opcode == IBV_WC_RDMA_READ && wc.byte_len == len, "READ completion");
	CHECK(!memcmp(a_buf, b_buf, len), "READ data differs");
	printf("ok rdma read\n");

	/* Atomics on the counter. */
	struct ibv_sge as = {(uintptr_t)a_buf, 8, a_mr->lkey};
	struct ibv_send_wr fa = {.wr_id = 5, .sg_list = &as, .num_sge = 1, .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD,
				 .send_flags = IBV_SEND_SIGNALED};
	fa.wr.atomic.remote_addr = (uintptr_t)counter;
	fa.wr.atomic.rkey = c_mr->rkey;
	fa.wr.atomic.compare_add = 55;
	/* A misaligned atomic or one of 4 bytes is refused at post, as rxe refuses it. */
	struct ibv_send_wr bad_fa = fa;
	bad_fa.wr.atomic.remote_addr += 4;
	CHECK(ibv_post_send(a_qp, &bad_fa, &bad) == EINVAL && bad == &bad_fa, "a misaligned FETCH_ADD was posted");
	struct ibv_sge as4 = as;
	as4.length = 4;
	bad_fa = fa;
	bad_fa.sg_list = &as4;
	CHECK(ibv_post_send(a_qp, &bad_fa, &bad) == EINVAL, "a 4-byte FETCH_ADD was posted");
	CHECK(!ibv_post_send(a_qp, &fa, &bad), "FETCH_ADD");
	poll_one(a_cq, "FETCH_ADD");
	CHECK(*(uint64_t *)a_buf == 1000 && counter[0] == 1055, "fetch_add: old %lu new %lu",
	      (unsigned long)*(uint64_t *)a_buf, (unsigned long)counter[0]);
	struct ibv_send_wr cs = fa;
	cs.wr_id = 6;
	cs.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
	cs.wr.atomic.compare_add = 1055;
	cs.wr.atomic.swap = 7;
	CHECK(!ibv_post_send(a_qp, &cs, &bad), "CMP_SWP");
	poll_one(a_cq, "CMP_SWP");
	CHECK(*(uint64_t *)a_buf == 1055 && counter[0] == 7, "cmp_swp");
	printf("ok atomics\n");

	/* A type 2 window bound by a work request on B's QP, written through by A. */
	struct ibv_mw *mw2 = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
	CHECK(mw2, "ibv_alloc_mw type 2");
	uint32_t rkey2 = ibv_inc_rkey(mw2->rkey);
	struct ibv_send_wr bw = {.wr_id = 8, .opcode = IBV_WR_BIND_MW, .send_flags = IBV_SEND_SIGNALED};
	bw.bind_mw.mw = mw2;
	bw.bind_mw.rkey = rkey2;
	bw.bind_mw.bind_info.mr = b_mr;
	bw.bind_mw.bind_info.addr = (uintptr_t)b_buf + 4096;
	bw.bind_mw.bind_info.length = 4096;
	bw.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	CHECK(!ibv_post_send(b_qp, &bw, &bad), "BIND_MW post");
	wc = poll_one(b_cq, "BIND_MW");
	CHECK(wc.opcode == IBV_WC_BIND_MW, "bind opcode %d", wc.opcode);
	memset(a_buf, 'W', 64);
	struct ibv_sge mws = {(uintptr_t)a_buf, 64, a_mr->lkey};
	struct ibv_send_wr mww = {.wr_id = 9, .sg_list = &mws, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				  .send_flags = IBV_SEND_SIGNALED};
	mww.wr.rdma.remote_addr = (uintptr_t)b_buf + 4096;
	mww.wr.rdma.rkey = rkey2;
	CHECK(!ibv_post_send(a_qp, &mww, &bad), "WRITE through the window");
	poll_one(a_cq, "WRITE through the window");
	CHECK(b_buf[4096] == 'W' && b_buf[4096 + 63] == 'W', "the window's WRITE did not land");
	/* A type 1 window bound with ibv_bind_mw, read through by A. */
	struct ibv_mw *mw1 = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
	CHECK(mw1, "ibv_alloc_mw type 1");
	struct ibv_mw_bind mb = {.wr_id = 10, .send_flags = IBV_SEND_SIGNALED};
	mb.bind_info.mr = b_mr;
	mb.bind_info.addr = (uintptr_t)b_buf + 4096;
	mb.bind_info.length = 128;
	mb.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_READ;
	CHECK(!ibv_bind_mw(b_qp, mw1, &mb), "ibv_bind_mw");
	poll_one(b_cq, "ibv_bind_mw");
	memset(a_buf, 0, 64);
	mww.wr_id = 11;
	mww.opcode = IBV_WR_RDMA_READ;
	mww.wr.rdma.rkey = mw1->rkey;
	CHECK(!ibv_post_send(a_qp, &mww, &bad), "READ through the window");
	poll_one(a_cq, "READ through the window");
	CHECK(a_buf[0] == 'W' && a_buf[63] == 'W', "the window's READ brought nothing");
	CHECK(!ibv_dealloc_mw(mw1) && !ibv_dealloc_mw(mw2), "ibv_dealloc_mw");
	printf("ok memory windows\n");

	/* Extended QPs: work requests built with ibv_wr_*, two per batch. */
	struct ibv_qp_init_attr_ex xa = {.send_cq = a_cq, .recv_cq = a_cq, .qp_type = IBV_QPT_RC,
					 .cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 2,
						 .max_recv_sge = 2, .max_inline_data = 64},
					 .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
					 .pd = pd,
					 .send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_SEND_WITH_IMM |
							   IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD};
	struct ibv_qp *c_qp = ibv_create_qp_ex(ctx, &xa);
	xa.send_cq = b_cq;
	xa.recv_cq = b_cq;
	struct ibv_qp *d_qp = ibv_create_qp_ex(ctx, &xa);
	CHECK(c_qp && d_qp, "ibv_create_qp_ex with send_ops_flags");
	CHECK(ibv_qp_to_qp_ex(a_qp) == NULL, "ibv_qp_to_qp_ex of a plain QP");
	struct ibv_qp_ex *cx_qp = ibv_qp_to_qp_ex(c_qp);
	CHECK(cx_qp, "ibv_qp_to_qp_ex");
	connect_qp(c_qp, d_qp->qp_num, &gid, gid_idx);
	connect_qp(d_qp, c_qp->qp_num, &gid, gid_idx);
	struct ibv_sge xrs = {(uintptr_t)b_buf, 256, b_mr->lkey};
	struct ibv_recv_wr xrwr = {.wr_id = 20, .sg_list = &xrs, .num_sge = 1};
	CHECK(!ibv_post_recv(d_qp, &xrwr, &bad_r), "post_recv on the extended QP");
	memset(b_buf + 8192, 0, 128);
	memset(a_buf, 'x', 128);
	counter[0] = 5;
	ibv_wr_start(cx_qp);
	cx_qp->wr_id = 21;
	cx_qp->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(cx_qp, b_mr->rkey, (uintptr_t)b_buf + 8192);
	ibv_wr_set_sge(cx_qp, a_mr->lkey, (uintptr_t)a_buf, 128);
	cx_qp->wr_id = 22;
	ibv_wr_send_imm(cx_qp, htonl(77));
	ibv_wr_set_inline_data(cx_qp, "built with ibv_wr", 18);
	cx_qp->wr_id = 23;
	ibv_wr_atomic_fetch_add(cx_qp, c_mr->rkey, (uintptr_t)counter, 10);
	ibv_wr_set_sge(cx_qp, a_mr->lkey, (uintptr_t)a_buf + 1024, 8);
	CHECK(!ibv_wr_complete(cx_qp), "ibv_wr_complete");
	wc = poll_one(a_cq, "wr write");
	CHECK(wc.wr_id == 21 && wc.opcode == IBV_WC_RDMA_WRITE, "wr write completion %lu", (unsigned long)wc.wr_id);
	wc = poll_one(a_cq, "wr send");
	CHECK(wc.wr_id == 22, "wr send completion");
	wc = poll_one(a_cq, "wr fetch_add");
	CHECK(wc.wr_id == 23 && *(uint64_t *)(a_buf + 1024) == 5 && counter[0] == 15, "wr fetch_add");
	rwc = poll_one(b_cq, "wr recv");
	CHECK(rwc.wr_id == 20 && ntohl(rwc.imm_data) == 77 && !strcmp(b_buf, "built with ibv_wr"), "wr recv");
	CHECK(b_buf[8192] == 'x' && b_buf[8192 + 127] == 'x', "wr write data");
	/* An opcode the QP was not created for: nothing is posted. */
	ibv_wr_start(cx_qp);
	cx_qp->wr_id = 24;
	ibv_wr_rdma_read(cx_qp, b_mr->rkey, (uintptr_t)b_buf);
	ibv_wr_set_sge(cx_qp, a_mr->lkey, (uintptr_t)a_buf, 8);
	CHECK(ibv_wr_complete(cx_qp) != 0, "a READ on a QP without IBV_QP_EX_WITH_RDMA_READ was accepted");
	ibv_wr_start(cx_qp);
	ibv_wr_abort(cx_qp);
	CHECK(!ibv_destroy_qp(c_qp) && !ibv_destroy_qp(d_qp), "destroy the extended QPs");
	printf("ok ibv_wr_* on extended QPs\n");

	/* ibv_resize_cq with completions not yet polled: each of B's WRITEs is
	 * seen through its completion event, none polled. */
	for (int i = 0; i < 6; i++) {
		CHECK(!ibv_req_notify_cq(b_cq, 0), "arm for WRITE %d", i);
		post_write(b_qp, 100 + i, b_buf, 64, b_mr->lkey, a_buf, a_mr->rkey);
		wait_event(ch, b_cq, "a WRITE before the resize");
	}
	CHECK(ibv_resize_cq(b_cq, 5) == EINVAL, "resize below the 6 completions waiting");
	CHECK(ibv_resize_cq(b_cq, dx.orig_attr.max_cqe + 1) == EINVAL, "resize above max_cqe");
	CHECK(!ibv_resize_cq(b_cq, 6) && b_cq->cqe == 6, "resize to the 6 waiting: cqe %d", b_cq->cqe);
	CHECK(!ibv_resize_cq(b_cq, 16) && b_cq->cqe == 16, "resize to 16: cqe %d", b_cq->cqe);
	/* Two more on their way while it grows again. */
	post_write(b_qp, 106, b_buf, 64, b_mr->lkey, a_buf, a_mr->rkey);
	post_write(b_qp, 107, b_buf, 64, b_mr->lkey, a_buf, a_mr->rkey);
	CHECK(!ibv_resize_cq(b_cq, 32) && b_cq->cqe == 32, "resize to 32 under traffic: cqe %d", b_cq->cqe);
	for (int i = 0; i < 8; i++) {
		wc = poll_one(b_cq, "a WRITE after the resizes");
		CHECK(wc.wr_id == (uint64_t)(100 + i), "completion %d is WRITE %lu", i, (unsigned long)wc.wr_id);
	}
	CHECK(ibv_poll_cq(b_cq, 1, &wc) == 0, "a completion more than was posted");
	printf("ok ibv_resize_cq\n");

	/* ibv_modify_srq of max_wr with receives posted, which then take
	 * SENDs in the order they were posted. */
	struct ibv_srq_init_attr sa = {.attr = {.max_wr = 4, .max_sge = 1}};
	struct ibv_srq *srq = ibv_create_srq(pd, &sa);
	struct ibv_cq *s_cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	CHECK(srq && s_cq, "ibv_create_srq");
	qa.send_cq = a_cq;
	qa.recv_cq = a_cq;
	struct ibv_qp *s_qp = ibv_create_qp(pd, &qa);
	qa.send_cq = s_cq;
	qa.recv_cq = s_cq;
	qa.srq = srq;
	struct ibv_qp *r_qp = ibv_create_qp(pd, &qa);
	CHECK(s_qp && r_qp, "QPs around the SRQ");
	connect_qp(s_qp, r_qp->qp_num, &gid, gid_idx);
	connect_qp(r_qp, s_qp->qp_num, &gid, gid_idx);
	struct ibv_sge srs = {0, 64, b_mr->lkey};
	struct ibv_recv_wr srwr = {.sg_list = &srs, .num_sge = 1};
	for (int i = 0; i < 16; i++) {
		if (i == 4) {
			struct ibv_srq_attr m = {.max_wr = 2};
			CHECK(ibv_modify_srq(srq, &m, IBV_SRQ_MAX_WR) == EINVAL, "max_wr below the 4 posted");
			m.max_wr = dx.orig_attr.max_srq_wr + 1;
			CHECK(ibv_modify_srq(srq, &m, IBV_SRQ_MAX_WR) == EINVAL, "max_wr above max_srq_wr");
			m.max_wr = 16;
			CHECK(!ibv_modify_srq(srq, &m, IBV_SRQ_MAX_WR), "ibv_modify_srq max_wr 16");
			CHECK(!ibv_query_srq(srq, &m) && m.max_wr == 16, "max_wr %u after the resize", m.max_wr);
		}
		srwr.wr_id = 200 + i;
		srs.addr = (uintptr_t)b_buf + 64 * i;
		CHECK(!ibv_post_srq_recv(srq, &srwr, &bad_r), "ibv_post_srq_recv %d", i);
	}
	for (int i = 0; i < 16; i++) {
		char msg[8];
		snprintf(msg, sizeof(msg), "srq %02d", i);
		struct ibv_sge ms = {(uintptr_t)msg, 7, 0};
		struct ibv_send_wr mw = {.wr_id = 300 + i, .sg_list = &ms, .num_sge = 1, .opcode = IBV_WR_SEND,
					 .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE};
		CHECK(!ibv_post_send(s_qp, &mw, &bad), "SEND %d to the SRQ", i);
		poll_one(a_cq, "SEND to the SRQ");
		rwc = poll_one(s_cq, "receive from the SRQ");
		CHECK(rwc.wr_id == (uint64_t)(200 + i) && !memcmp(b_buf + 64 * i, msg, 7),
		      "receive %d: wr_id %lu, %.7s", i, (unsigned long)rwc.wr_id, b_buf + 64 * i);
	}
	CHECK(!ibv_destroy_qp(s_qp) && !ibv_destroy_qp(r_qp) && !ibv_destroy_srq(srq) && !ibv_destroy_cq(s_cq),
	      "destroy the SRQ's QPs, the SRQ and its CQ");
	printf("ok ibv_modify_srq max_wr\n");

	/* ibv_rereg_mr: refusals, then B's MR moved to a new buffer (same
	 * keys, as with rxe) that A's WRITE reaches, the old buffer left
	 * alone; then B's MR without remote write, which A's WRITE meets. */
	char stack_buf[64];
	CHECK(ibv_rereg_mr(b_mr, 1 << 4, NULL, NULL, 0, 0) == IBV_REREG_MR_ERR_INPUT && errno == EINVAL,
	      "an unknown rereg flag");
	CHECK(ibv_rereg_mr(b_mr, IBV_REREG_MR_CHANGE_PD, pd, NULL, 0, IBV_ACCESS_LOCAL_WRITE) == IBV_REREG_MR_ERR_INPUT,
	      "access without IBV_REREG_MR_CHANGE_ACCESS");
	CHECK(ibv_rereg_mr(b_mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, NULL, 64, 0) == IBV_REREG_MR_ERR_INPUT,
	      "a translation without an address");
	CHECK(ibv_rereg_mr(b_mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, stack_buf, sizeof(stack_buf), 0) ==
			      IBV_REREG_MR_ERR_DONT_FORK_NEW && errno == EINVAL,
	      "a translation onto the stack");
	struct ibv_pd *pd2 = ibv_alloc_pd(ctx);
	CHECK(pd2 && !ibv_rereg_mr(b_mr, IBV_REREG_MR_CHANGE_PD, pd2, NULL, 0, 0) && b_mr->pd == pd2 &&
		      ibv_dealloc_pd(pd2) == EBUSY && !ibv_rereg_mr(b_mr, IBV_REREG_MR_CHANGE_PD, pd, NULL, 0, 0) &&
		      !ibv_dealloc_pd(pd2),
	      "rereg to another PD and back");
	uint32_t b_lkey = b_mr->lkey, b_rkey = b_mr->rkey;
	char *n_buf = malloc(8192);
	CHECK(n_buf, "malloc");
	memset(n_buf, 0, 8192);
	memset(b_buf, 'o', 256);
	CHECK(!ibv_rereg_mr(b_mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, n_buf, 8192, 0), "rereg onto a new buffer");
	CHECK(b_mr->addr == n_buf && b_mr->length == 8192 && b_mr->lkey == b_lkey && b_mr->rkey == b_rkey,
	      "after rereg: addr %p length %zu keys %#x/%#x", b_mr->addr, b_mr->length, b_mr->lkey, b_mr->rkey);
	memset(a_buf, 'N', 64);
	post_write(a_qp, 400, a_buf, 64, a_mr->lkey, n_buf + 128, b_mr->rkey);
	poll_one(a_cq, "WRITE into the new translation");
	CHECK(n_buf[128] == 'N' && n_buf[191] == 'N' && n_buf[127] == 0 && n_buf[192] == 0,
	      "the WRITE did not land in the new buffer");
	for (int i = 0; i < 256; i++)
		CHECK(b_buf[i] == 'o', "the old buffer changed at %d", i);
	CHECK(!ibv_rereg_mr(b_mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, IBV_ACCESS_LOCAL_WRITE),
	      "rereg without remote access");
	post_write(a_qp, 401, a_buf, 64, a_mr->lkey, n_buf, b_mr->rkey);
	wc = poll_any(a_cq, "WRITE after remote write was taken away");
	CHECK(wc.wr_id == 401 && wc.status == IBV_WC_REM_ACCESS_ERR, "WRITE without access: status %s",
	      ibv_wc_status_str(wc.status));
	printf("ok ibv_rereg_mr\n");

	/* UD multicast: two UD QPs attached to the group 239.1.1.7 (its
	 * IPv4-mapped GID); one sends to it (QPN 0xffffff) and both receive,
	 * the sender its own message through the loopback; then rxe's
	 * errors: EINVAL for an RC QP, a unicast GID or a group not attached,
	 * EBUSY for destroying an attached QP. */
	{
		const uint32_t qkey = 0x01234567;
		struct ibv_cq *m_cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
		CHECK(m_cq, "ibv_create_cq for multicast");
		struct ibv_qp_init_attr ua = {.send_cq = m_cq, .recv_cq = m_cq, .qp_type = IBV_QPT_UD,
					      .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
		struct ibv_qp *u[2];
		for (int i = 0; i < 2; i++) {
			u[i] = ibv_create_qp(pd, &ua);
			CHECK(u[i], "ibv_create_qp UD");
			struct ibv_qp_attr at = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = qkey};
			CHECK(!ibv_modify_qp(u[i], &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY),
			      "UD to INIT");
			at.qp_state = IBV_QPS_RTR;
			CHECK(!ibv_modify_qp(u[i], &at, IBV_QP_STATE), "UD to RTR");
			at.qp_state = IBV_QPS_RTS;
			CHECK(!ibv_modify_qp(u[i], &at, IBV_QP_STATE | IBV_QP_SQ_PSN), "UD to RTS");
		}
		union ibv_gid mgid;
		memset(&mgid, 0, sizeof(mgid));
		mgid.raw[10] = mgid.raw[11] = 0xff;
		mgid.raw[12] = 239, mgid.raw[13] = 1, mgid.raw[14] = 1, mgid.raw[15] = 7;
		CHECK(ibv_attach_mcast(a_qp, &mgid, 0) == EINVAL, "attach of an RC QP");
		CHECK(ibv_attach_mcast(u[0], &gid, 0) == EINVAL, "attach to a unicast GID");
		CHECK(ibv_detach_mcast(u[0], &mgid, 0) == EINVAL, "detach from a group not attached");
		for (int i = 0; i < 2; i++)
			CHECK(!ibv_attach_mcast(u[i], &mgid, 0), "ibv_attach_mcast");
		CHECK(!ibv_attach_mcast(u[0], &mgid, 0), "attaching twice");
		CHECK(ibv_destroy_qp(u[0]) == EBUSY, "destroying an attached QP");
		char *m_buf = calloc(1, 4096);
		struct ibv_mr *m_mr = ibv_reg_mr(pd, m_buf, 4096, IBV_ACCESS_LOCAL_WRITE);
		CHECK(m_buf && m_mr, "ibv_reg_mr for multicast");
		for (int i = 0; i < 2; i++) {
			struct ibv_sge rsge = {(uintptr_t)m_buf + 1024 * i, 1024, m_mr->lkey};
			struct ibv_recv_wr rwr = {.wr_id = 600 + i, .sg_list = &rsge, .num_sge = 1}, *rbad;
			CHECK(!ibv_post_recv(u[i], &rwr, &rbad), "ibv_post_recv UD");
		}
		strcpy(m_buf + 3072, "to the group");
		struct ibv_ah_attr aha = {.is_global = 1, .port_num = 1,
					  .grh = {.dgid = mgid, .sgid_index = gid_idx, .hop_limit = 64}};
		struct ibv_ah *ah = ibv_create_ah(pd, &aha);
		CHECK(ah, "ibv_create_ah to the group");
		struct ibv_sge ssge = {(uintptr_t)m_buf + 3072, 13, m_mr->lkey};
		struct ibv_send_wr swr = {.wr_id = 500, .sg_list = &ssge, .num_sge = 1, .opcode = IBV_WR_SEND,
					  .send_flags = IBV_SEND_SIGNALED}, *sbad;
		swr.wr.ud.ah = ah;
		swr.wr.ud.remote_qpn = 0xffffff;
		swr.wr.ud.remote_qkey = qkey;
		CHECK(!ibv_post_send(u[0], &swr, &sbad), "ibv_post_send to the group");
		int got[2] = {0, 0}, sent = 0;
		while (!sent || got[0] + got[1] < 2) {
			wc = poll_one(m_cq, "multicast");
			if (wc.opcode == IBV_WC_SEND) {
				sent++;
				continue;
			}
			int i = wc.qp_num == u[1]->qp_num;
			CHECK(wc.opcode == IBV_WC_RECV && wc.qp_num == u[i]->qp_num && wc.byte_len == 40 + 13 &&
				      (wc.wc_flags & IBV_WC_GRH) && wc.src_qp == u[0]->qp_num &&
				      !strcmp(m_buf + 1024 * i + 40, "to the group"),
			      "multicast receive on QP %u: opcode %d length %u src %u", wc.qp_num, wc.opcode,
			      wc.byte_len, wc.src_qp);
			got[i]++;
		}
		CHECK(got[0] == 1 && got[1] == 1, "receivers %d and %d", got[0], got[1]);
		for (int i = 0; i < 2; i++)
			CHECK(!ibv_detach_mcast(u[i], &mgid, 0), "ibv_detach_mcast");
		CHECK(ibv_detach_mcast(u[0], &mgid, 0) == EINVAL, "detaching twice");
		CHECK(!ibv_destroy_ah(ah) && !ibv_destroy_qp(u[0]) && !ibv_destroy_qp(u[1]) && !ibv_destroy_cq(m_cq) &&
			      !ibv_dereg_mr(m_mr),
		      "destroying the multicast objects");
		free(m_buf);
		printf("ok multicast\n");
	}

	/* A parent domain holds its PD and thread domain; a CQ and a QP made in
	 * it hold it: each is EBUSY to free until what holds it is gone. */
	{
		struct ibv_td_init_attr ta = {0};
		struct ibv_td *td = ibv_alloc_td(ctx, &ta);
		CHECK(td, "ibv_alloc_td: %s", strerror(errno));
		struct ibv_pd *base = ibv_alloc_pd(ctx);
		CHECK(base, "ibv_alloc_pd");
		struct ibv_parent_domain_init_attr pa = {.pd = base, .td = td};
		struct ibv_pd *par = ibv_alloc_parent_domain(ctx, &pa);
		CHECK(par, "ibv_alloc_parent_domain: %s", strerror(errno));
		struct ibv_cq_init_attr_ex ca = {.cqe = 4, .comp_mask = IBV_CQ_INIT_ATTR_MASK_PD,
						 .parent_domain = par};
		struct ibv_cq_ex *pcq = ibv_create_cq_ex(ctx, &ca);
		CHECK(pcq, "ibv_create_cq_ex in a parent domain: %s", strerror(errno));
		ca.parent_domain = base;
		CHECK(!ibv_create_cq_ex(ctx, &ca) && errno == EINVAL, "a CQ in a plain PD was made");
		struct ibv_qp_init_attr qa = {.send_cq = ibv_cq_ex_to_cq(pcq), .recv_cq = ibv_cq_ex_to_cq(pcq),
					      .cap = {.max_send_wr = 2, .max_recv_wr = 2, .max_send_sge = 1, .max_recv_sge = 1},
					      .qp_type = IBV_QPT_RC};
		struct ibv_qp *pqp = ibv_create_qp(par, &qa);
		CHECK(pqp, "ibv_create_qp in a parent domain: %s", strerror(errno));
		CHECK(ibv_dealloc_pd(base) == EBUSY, "a PD held by a parent domain was freed");
		CHECK(ibv_dealloc_td(td) == EBUSY, "a thread domain held by a parent domain was freed");
		CHECK(ibv_dealloc_pd(par) == EBUSY, "a parent domain with a QP and a CQ was freed");
		CHECK(!ibv_destroy_qp(pqp), "ibv_destroy_qp");
		CHECK(ibv_dealloc_pd(par) == EBUSY, "a parent domain with a CQ was freed");
		CHECK(!ibv_destroy_cq(ibv_cq_ex_to_cq(pcq)), "ibv_destroy_cq");
		CHECK(!ibv_dealloc_pd(par) && !ibv_dealloc_pd(base) && !ibv_dealloc_td(td),
		      "freeing a parent domain, its PD and thread domain");
		printf("ok parent and thread domains\n");
	}

	/* ibv_resize_cq counts the completions of the datagram sends posted
	 * just before it (a kernel provider completes them within
	 * ibv_post_send): shrinking the CQ below them is EINVAL. */
	{
		struct ibv_cq *rcq = ibv_create_cq(ctx, 128, NULL, NULL, 0);
		CHECK(rcq, "ibv_create_cq");
		struct ibv_qp_init_attr ua = {.send_cq = rcq, .recv_cq = rcq, .qp_type = IBV_QPT_UD,
					      .cap = {.max_send_wr = 64, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1}};
		struct ibv_qp *uq = ibv_create_qp(pd, &ua);
		CHECK(uq, "ibv_create_qp UD");
		struct ibv_qp_attr qa = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = 0x11111111};
		CHECK(!ibv_modify_qp(uq, &qa, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY), "UD to INIT");
		qa.qp_state = IBV_QPS_RTR;
		CHECK(!ibv_modify_qp(uq, &qa, IBV_QP_STATE), "UD to RTR");
		qa.qp_state = IBV_QPS_RTS;
		CHECK(!ibv_modify_qp(uq, &qa, IBV_QP_STATE | IBV_QP_SQ_PSN), "UD to RTS");
		struct ibv_ah_attr aa = {.is_global = 1, .port_num = 1, .grh = {.dgid = gid, .sgid_index = (uint8_t)gid_idx, .hop_limit = 64}};
		struct ibv_ah *ah = ibv_create_ah(pd, &aa);
		CHECK(ah, "ibv_create_ah");
		struct ibv_sge sge = {.addr = (uintptr_t)a_buf, .length = 16, .lkey = a_mr->lkey};
		for (int i = 0; i < 64; i++) {
			struct ibv_send_wr wr = {.wr_id = (uint64_t)i, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
						 .send_flags = IBV_SEND_SIGNALED}, *bad;
			wr.wr.ud.ah = ah;
			wr.wr.ud.remote_qpn = uq->qp_num;
			wr.wr.ud.remote_qkey = 0x11111111;
			CHECK(!ibv_post_send(uq, &wr, &bad), "ibv_post_send UD %d", i);
		}
		CHECK(ibv_resize_cq(rcq, 1) == EINVAL, "a CQ with 64 sends' completions was resized to 1");
		struct ibv_wc wc[64];
		int got = 0;
		double t0 = now();
		while (got < 64 && now() - t0 < 10) {
			int n = ibv_poll_cq(rcq, 64 - got, wc + got);
			CHECK(n >= 0, "ibv_poll_cq");
			got += n;
		}
		CHECK(got == 64, "%d of 64 UD sends completed in 10 s", got);
		for (int i = 0; i < 64; i++)
			CHECK(wc[i].status == IBV_WC_SUCCESS, "UD send %d: %s", i, ibv_wc_status_str(wc[i].status));
		CHECK(!ibv_destroy_ah(ah) && !ibv_destroy_qp(uq) && !ibv_destroy_cq(rcq), "destroying the UD QP");
		printf("ok resize counts the sends just posted\n");
	}

	CHECK(!ibv_destroy_qp(a_qp) && !ibv_destroy_qp(b_qp), "ibv_destroy_qp");
	CHECK(!ibv_destroy_cq(a_cq) && !ibv_destroy_cq(b_cq), "ibv_destroy_cq");
	CHECK(!ibv_destroy_comp_channel(ch), "ibv_destroy_comp_channel");
	CHECK(!ibv_dereg_mr(a_mr) && !ibv_dereg_mr(b_mr) && !ibv_dereg_mr(c_mr), "ibv_dereg_mr");
	CHECK(!ibv_dealloc_pd(pd), "ibv_dealloc_pd");
	CHECK(!ibv_close_device(ctx), "ibv_close_device");
	printf("ok destroyed\n");
	return 0;
}
