/*
 * teardown_test.c: the orders in which programs destroy their verbs
 * objects, and what the kernel's uverbs answers to each, at once:
 * a CQ still used by a QP or an SRQ, a PD still used by a QP or an MR, a
 * completion channel still used by a CQ and an SRQ still used by a QP are
 * EBUSY and stay usable; a program that acknowledged more completion
 * events than it got (fio does: it acknowledges completions) destroys its
 * CQ without waiting.
 * Each destroy is timed; prints "ok NAME" per check and exits 1 at the
 * first failure. Usage: teardown_test DEVICE
 */
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "verbs_test.h"

/* Runs a destroy call, wants errno value want from it within 2 s. */
#define WANT(call, want)                                                                   \
	do {                                                                               \
		double t0 = now();                                                         \
		int r_ = (call);                                                           \
		double dt_ = now() - t0;                                                   \
		CHECK(r_ == (want), "%s returned %d (%s), want %d", #call, r_,             \
		      strerror(r_), (want));                                               \
		CHECK(dt_ < 2, "%s took %.1f s", #call, dt_);                              \
	} while (0)

static struct ibv_qp *rc_qp(struct ibv_pd *pd, struct ibv_cq *cq, struct ibv_srq *srq)
{
	struct ibv_qp_init_attr a = {.send_cq = cq, .recv_cq = cq, .srq = srq, .qp_type = IBV_QPT_RC,
				     .cap = {.max_send_wr = 4, .max_recv_wr = srq ? 0 : 4,
					     .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qp = ibv_create_qp(pd, &a);
	CHECK(qp, "ibv_create_qp: %s", strerror(errno));
	return qp;
}

int main(int argc, char **argv)
{
	CHECK(argc == 2, "usage: teardown_test DEVICE");
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	struct ibv_device *dev = NULL;
	for (int i = 0; list && i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), argv[1]))
			dev = list[i];
	CHECK(dev, "no device %s", argv[1]);
	struct ibv_context *ctx = ibv_open_device(dev);
	CHECK(ctx, "ibv_open_device: %s", strerror(errno));
	static char buf[4096];

	/* fio's order: completions acknowledged as events, the CQ destroyed
	 * before the QP (EBUSY, ignored), then the QP, then the CQ leaks. */
	{
		struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
		CHECK(ch, "ibv_create_comp_channel: %s", strerror(errno));
		struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, ch, 0);
		CHECK(cq, "ibv_create_cq: %s", strerror(errno));
		struct ibv_pd *pd = ibv_alloc_pd(ctx);
		CHECK(pd, "ibv_alloc_pd: %s", strerror(errno));
		struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
		CHECK(mr, "ibv_reg_mr: %s", strerror(errno));
		struct ibv_qp *qp = rc_qp(pd, cq, NULL);
		ibv_ack_cq_events(cq, 3); /* more than it got */
		WANT(ibv_destroy_cq(cq), EBUSY);
		WANT(ibv_destroy_comp_channel(ch), EBUSY);
		WANT(ibv_dealloc_pd(pd), EBUSY);
		WANT(ibv_destroy_qp(qp), 0);
		WANT(ibv_dealloc_pd(pd), EBUSY); /* the MR */
		WANT(ibv_dereg_mr(mr), 0);
		WANT(ibv_dealloc_pd(pd), 0);
		WANT(ibv_destroy_cq(cq), 0);
		WANT(ibv_destroy_comp_channel(ch), 0);
		printf("ok fio order\n");
	}
	/* A CQ used as only the receive CQ, and an SRQ: each EBUSY while a
	 * QP uses it, in any order. */
	{
		struct ibv_cq *scq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
		struct ibv_cq *rcq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
		CHECK(scq && rcq, "ibv_create_cq: %s", strerror(errno));
		struct ibv_pd *pd = ibv_alloc_pd(ctx);
		CHECK(pd, "ibv_alloc_pd: %s", strerror(errno));
		struct ibv_srq_init_attr sa = {.attr = {.max_wr = 8, .max_sge = 1}};
		struct ibv_srq *srq = ibv_create_srq(pd, &sa);
		CHECK(srq, "ibv_create_srq: %s", strerror(errno));
		struct ibv_qp *qp = rc_qp(pd, scq, srq);
		struct ibv_qp_init_attr a = {.send_cq = scq, .recv_cq = rcq, .qp_type = IBV_QPT_UD,
					     .cap = {.max_send_wr = 1, .max_recv_wr = 1,
						     .max_send_sge = 1, .max_recv_sge = 1}};
		struct ibv_qp *ud = ibv_create_qp(pd, &a);
		CHECK(ud, "ibv_create_qp UD: %s", strerror(errno));
		WANT(ibv_destroy_cq(rcq), EBUSY);
		WANT(ibv_destroy_srq(srq), EBUSY);
		WANT(ibv_dealloc_pd(pd), EBUSY);
		WANT(ibv_destroy_qp(ud), 0);
		WANT(ibv_destroy_cq(rcq), 0);
		WANT(ibv_destroy_cq(scq), EBUSY);
		WANT(ibv_destroy_qp(qp), 0);
		WANT(ibv_dealloc_pd(pd), EBUSY);
		WANT(ibv_destroy_srq(srq), 0);
		WANT(ibv_destroy_cq(scq), 0);
		WANT(ibv_dealloc_pd(pd), 0);
		printf("ok busy objects\n");
	}
	/* The usual order, with events acknowledged as events (none here),
	 * and a CQ whose channel goes after it. */
	{
		struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
		struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, ch, 0);
		struct ibv_pd *pd = ibv_alloc_pd(ctx);
		CHECK(ch && cq && pd, "create: %s", strerror(errno));
		CHECK(ibv_req_notify_cq(cq, 0) == 0, "ibv_req_notify_cq");
		struct ibv_qp *qp = rc_qp(pd, cq, NULL);
		ibv_ack_cq_events(cq, 0);
		WANT(ibv_destroy_qp(qp), 0);
		WANT(ibv_destroy_cq(cq), 0);
		WANT(ibv_destroy_comp_channel(ch), 0);
		WANT(ibv_dealloc_pd(pd), 0);
		printf("ok usual order\n");
	}
	CHECK(ibv_close_device(ctx) == 0, "ibv_close_device");
	ibv_free_device_list(list);
	printf("ok all\n");
	return 0;
}
