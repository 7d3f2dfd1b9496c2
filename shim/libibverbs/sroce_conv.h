/*
 * sroce_conv.h: the protocol's QP attributes (sroce_ctl.h) as libibverbs'
 * structs, for both libraries: libibverbs' ibv_query_qp and librdmacm's
 * rdma_init_qp_attr read the same reply struct.
 */
#ifndef SROCE_CONV_H
#define SROCE_CONV_H

#include <string.h>

#include "sroce_ctl.h"
#include "sroce_verbs.h"

static inline void sroce_ah_from_ctl(struct ibv_ah_attr *o, const struct sroce_ctl_ah_attr *a)
{
	memset(o, 0, sizeof(*o));
	memcpy(o->grh.dgid.raw, a->dgid, 16);
	o->grh.flow_label = a->flow_label;
	o->grh.sgid_index = a->sgid_index;
	o->grh.hop_limit = a->hop_limit;
	o->grh.traffic_class = a->traffic_class;
	o->dlid = a->dlid;
	o->sl = a->sl;
	o->src_path_bits = a->src_path_bits;
	o->static_rate = a->static_rate;
	o->is_global = a->is_global;
	o->port_num = a->port_num;
}

static inline void sroce_qp_attr_from_ctl(struct ibv_qp_attr *a, const struct sroce_ctl_qp_attr *r)
{
	memset(a, 0, sizeof(*a));
	a->qp_state = (int)r->qp_state;
	a->cur_qp_state = (int)r->cur_qp_state;
	a->path_mtu = (int)r->path_mtu;
	a->path_mig_state = (int)r->path_mig_state;
	a->qkey = r->qkey;
	a->rq_psn = r->rq_psn;
	a->sq_psn = r->sq_psn;
	a->dest_qp_num = r->dest_qp_num;
	a->qp_access_flags = r->qp_access_flags;
	a->cap.max_send_wr = r->cap.max_send_wr;
	a->cap.max_recv_wr = r->cap.max_recv_wr;
	a->cap.max_send_sge = r->cap.max_send_sge;
	a->cap.max_recv_sge = r->cap.max_recv_sge;
	a->cap.max_inline_data = r->cap.max_inline_data;
	sroce_ah_from_ctl(&a->ah_attr, &r->ah_attr);
	a->pkey_index = r->pkey_index;
	a->en_sqd_async_notify = r->en_sqd_async_notify;
	a->sq_draining = r->sq_draining;
	a->max_rd_atomic = r->max_rd_atomic;
	a->max_dest_rd_atomic = r->max_dest_rd_atomic;
	a->min_rnr_timer = r->min_rnr_timer;
	a->port_num = r->port_num;
	a->timeout = r->timeout;
	a->retry_cnt = r->retry_cnt;
	a->rnr_retry = r->rnr_retry;
}

#endif /* SROCE_CONV_H */
