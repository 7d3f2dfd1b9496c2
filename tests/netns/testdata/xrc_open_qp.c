/*
 * xrc_open_qp.c: ibv_open_qp as the kernel keeps an XRC target QP. One
 * process makes an XRC domain, an XRC SRQ and an XRC_RECV QP, opens a
 * second handle of that QP with ibv_open_qp and destroys the first: the
 * QP lives on, is connected through the second handle to an XRC_SEND QP of
 * the same device, and a SEND through it lands in the SRQ, data checked.
 * Then ibv_close_xrcd is EBUSY while the handle is open, ibv_open_qp of a
 * QP that no longer exists and of another type fail, and everything is
 * freed. Prints "ok NAME" per check and exits 1 at the first failure.
 * Usage: xrc_open_qp DEVICE FILE
 */
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CHECK(cond, ...)                                        \
	do {                                                    \
		if (!(cond)) {                                  \
			printf("FAIL line %d: ", __LINE__);     \
			printf(__VA_ARGS__);                    \
			printf("\n");                           \
			exit(1);                                \
		}                                               \
	} while (0)

static struct ibv_wc wait_wc(struct ibv_cq *cq, const char *what)
{
	struct ibv_wc wc;
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		int n = ibv_poll_cq(cq, 1, &wc);
		CHECK(n >= 0, "ibv_poll_cq: %d", n);
		if (n == 1) {
			CHECK(wc.status == IBV_WC_SUCCESS, "%s completed with status %d", what, wc.status);
			return wc;
		}
		clock_gettime(CLOCK_MONOTONIC, &t);
		CHECK(t.tv_sec - t0.tv_sec < 10, "no completion of %s within 10 s", what);
	}
}

static void modify(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask, const char *what)
{
	int err = ibv_modify_qp(qp, a, mask);
	CHECK(err == 0, "ibv_modify_qp %s: %s", what, strerror(err));
}

int main(int argc, char **argv)
{
	CHECK(argc == 3, "usage: xrc_open_qp DEVICE FILE");
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	struct ibv_context *ctx = NULL;
	for (int i = 0; list && i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), argv[1]))
			ctx = ibv_open_device(list[i]);
	CHECK(ctx, "no device %s", argv[1]);
	int gidx = -1;
	union ibv_gid gid;
	for (int i = 0; i < 16 && gidx < 0; i++) {
		static const uint8_t v4[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
		if (!ibv_query_gid(ctx, 1, i, &gid) && !memcmp(gid.raw, v4, 12))
			gidx = i;
	}
	CHECK(gidx >= 0, "no IPv4 GID");

	int fd = open(argv[2], O_RDONLY | O_CREAT, 0600);
	CHECK(fd >= 0, "open %s: %s", argv[2], strerror(errno));
	struct ibv_xrcd_init_attr xa = {.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS,
					.fd = fd, .oflags = O_CREAT};
	struct ibv_xrcd *xrcd = ibv_open_xrcd(ctx, &xa);
	CHECK(xrcd, "ibv_open_xrcd: %s", strerror(errno));
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *scq = ibv_create_cq(ctx, 8, NULL, NULL, 0), *rcq = ibv_create_cq(ctx, 8, NULL, NULL, 0);
	CHECK(pd && scq && rcq, "PD and CQs");
	struct ibv_srq_init_attr_ex sa = {.attr = {.max_wr = 4, .max_sge = 1},
					  .comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD |
						       IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ,
					  .srq_type = IBV_SRQT_XRC, .pd = pd, .xrcd = xrcd, .cq = rcq};
	struct ibv_srq *srq = ibv_create_srq_ex(ctx, &sa);
	CHECK(srq, "ibv_create_srq_ex: %s", strerror(errno));
	uint32_t srqn;
	CHECK(ibv_get_srq_num(srq, &srqn) == 0, "ibv_get_srq_num");

	struct ibv_qp_init_attr_ex ra = {.qp_type = IBV_QPT_XRC_RECV, .comp_mask = IBV_QP_INIT_ATTR_XRCD, .xrcd = xrcd};
	struct ibv_qp *tgt = ibv_create_qp_ex(ctx, &ra);
	CHECK(tgt, "ibv_create_qp_ex XRC_RECV: %s", strerror(errno));
	uint32_t tqpn = tgt->qp_num;
	struct ibv_qp_open_attr oa = {.comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE,
				      .qp_num = tqpn, .xrcd = xrcd, .qp_type = IBV_QPT_XRC_RECV};
	struct ibv_qp *opened = ibv_open_qp(ctx, &oa);
	CHECK(opened && opened->qp_num == tqpn, "ibv_open_qp: %s", strerror(errno));
	CHECK(ibv_destroy_qp(tgt) == 0, "destroying the creator's handle");
	printf("ok ibv_open_qp gives a second handle; the first destroyed\n");

	struct ibv_qp_init_attr_ex ia = {.qp_type = IBV_QPT_XRC_SEND, .send_cq = scq, .sq_sig_all = 1,
					 .cap = {.max_send_wr = 4, .max_send_sge = 1},
					 .comp_mask = IBV_QP_INIT_ATTR_PD, .pd = pd};
	struct ibv_qp *ini = ibv_create_qp_ex(ctx, &ia);
	CHECK(ini, "ibv_create_qp_ex XRC_SEND: %s", strerror(errno));
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1,
				.qp_access_flags = IBV_ACCESS_REMOTE_WRITE};
	modify(opened, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, "target INIT");
	a.qp_access_flags = 0;
	modify(ini, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, "initiator INIT");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = gid;
	a.ah_attr.grh.sgid_index = gidx;
	a.ah_attr.grh.hop_limit = 1;
	a.ah_attr.port_num = 1;
	a.dest_qp_num = ini->qp_num;
	a.rq_psn = 1;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	modify(opened, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				   IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER, "target RTR");
	a.dest_qp_num = tqpn;
	modify(ini, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN, "initiator RTR");
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = 1;
	a.max_rd_atomic = 1;
	modify(ini, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_SQ_PSN | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				IBV_QP_MAX_QP_RD_ATOMIC, "initiator RTS");

	enum { SIZE = 2500 };
	char *buf = calloc(1, 2 * SIZE);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 2 * SIZE, IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr, "ibv_reg_mr: %s", strerror(errno));
	for (int i = 0; i < SIZE; i++)
		buf[i] = (char)(i * 13 + 5);
	struct ibv_sge rs = {.addr = (uintptr_t)buf + SIZE, .length = SIZE, .lkey = mr->lkey};
	struct ibv_recv_wr rw = {.wr_id = 7, .sg_list = &rs, .num_sge = 1}, *bad;
	CHECK(ibv_post_srq_recv(srq, &rw, &bad) == 0, "ibv_post_srq_recv");
	struct ibv_sge ss = {.addr = (uintptr_t)buf, .length = SIZE, .lkey = mr->lkey};
	struct ibv_send_wr sw = {.wr_id = 8, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND}, *sbad;
	sw.qp_type.xrc.remote_srqn = srqn;
	CHECK(ibv_post_send(ini, &sw, &sbad) == 0, "ibv_post_send");
	wait_wc(scq, "the SEND");
	struct ibv_wc wc = wait_wc(rcq, "the receive");
	CHECK(wc.wr_id == 7 && wc.byte_len == SIZE && wc.qp_num == tqpn, "receive wr_id %llu byte_len %u qp_num %u",
	      (unsigned long long)wc.wr_id, wc.byte_len, wc.qp_num);
	CHECK(!memcmp(buf, buf + SIZE, SIZE), "the received bytes differ");
	printf("ok a SEND through the opened target QP, data checked\n");

	CHECK(ibv_close_xrcd(xrcd) == EBUSY, "ibv_close_xrcd with an open QP and SRQ");
	oa.qp_type = IBV_QPT_RC;
	errno = 0;
	CHECK(!ibv_open_qp(ctx, &oa) && errno == EINVAL, "ibv_open_qp of type RC: errno %d", errno);
	oa.qp_type = IBV_QPT_XRC_RECV;
	CHECK(ibv_destroy_qp(opened) == 0, "destroying the last handle");
	errno = 0;
	CHECK(!ibv_open_qp(ctx, &oa) && errno == ENOENT, "ibv_open_qp of a destroyed QP: errno %d", errno);
	printf("ok EBUSY, EINVAL and ENOENT as the kernel gives them\n");

	CHECK(ibv_destroy_qp(ini) == 0, "destroy the initiator");
	CHECK(ibv_destroy_srq(srq) == 0, "destroy the SRQ");
	CHECK(ibv_close_xrcd(xrcd) == 0, "ibv_close_xrcd");
	CHECK(ibv_dereg_mr(mr) == 0 && ibv_destroy_cq(scq) == 0 && ibv_destroy_cq(rcq) == 0 &&
	      ibv_dealloc_pd(pd) == 0, "teardown");
	close(fd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	printf("ok all\n");
	return 0;
}
