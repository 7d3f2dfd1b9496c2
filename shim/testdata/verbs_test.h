/*
 * verbs_test.h: what the C verbs test programs share: CHECK (check.h), now,
 * poll_any and poll_one (a completion, bounded) and connect_qp (an RC QP
 * to RTS towards a QP of the same device).
 */
#ifndef SROCE_VERBS_TEST_H
#define SROCE_VERBS_TEST_H

#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"

static inline double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The next completion, whatever its status. */
static inline struct ibv_wc poll_any(struct ibv_cq *cq, const char *what)
{
	struct ibv_wc wc;
	double deadline = now() + 10;
	for (;;) {
		int n = ibv_poll_cq(cq, 1, &wc);
		CHECK(n >= 0, "%s: ibv_poll_cq failed", what);
		if (n == 1)
			return wc;
		CHECK(now() < deadline, "%s: no completion within 10 s", what);
	}
}

static inline struct ibv_wc poll_one(struct ibv_cq *cq, const char *what)
{
	struct ibv_wc wc = poll_any(cq, what);
	CHECK(wc.status == IBV_WC_SUCCESS, "%s: status %s", what, ibv_wc_status_str(wc.status));
	return wc;
}


static inline void connect_qp(struct ibv_qp *qp, uint32_t remote_qpn, union ibv_gid *gid, int gid_idx)
{
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS), "INIT");
	CHECK(qp->state == IBV_QPS_INIT, "qp->state after INIT is %d", qp->state);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = remote_qpn;
	a.rq_psn = 100;
	a.max_dest_rd_atomic = 4;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = *gid;
	a.ah_attr.grh.sgid_index = (uint8_t)gid_idx;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = 1;
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
					     IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
	      "RTR");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = 100;
	a.max_rd_atomic = 4;
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
					     IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC),
	      "RTS");
}

#endif
