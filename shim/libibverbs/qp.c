/*
 * qp.c: queue pairs and shared receive queues. The program's thread writes
 * work requests as struct sroce_send_wqe / sroce_recv_wqe into the QP's
 * rings in shared memory (SGEs or inline data in the slot's tail), then
 * rings the doorbell eventfd only if the daemon asked for it
 * (ctx_page->need_wakeup).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "internal.h"
#include "sroce_conv.h"
#include "sroce_wr_ops.h"

static int ring_ok(void *mem, uint64_t mem_size, uint64_t off, uint16_t kind, size_t entry)
{
	if (off + SROCE_RING_HDR_SIZE > mem_size)
		return 0;
	struct sroce_ring_hdr *r = (struct sroce_ring_hdr *)((char *)mem + off);
	if (r->magic != SROCE_RING_MAGIC || r->kind != kind || r->stride < entry || r->size == 0 ||
	    (r->size & (r->size - 1)) || r->limit > r->size)
		return 0;
	return off + SROCE_RING_HDR_SIZE + (uint64_t)r->size * r->stride <= mem_size;
}

/*
 * Maps the memfd fd of a queue (closing fd) and checks its ring of kind at
 * off: 0 and the mapping in *mem, or an errno (EPROTO for a ring the
 * daemon should not have sent) with nothing mapped.
 */
int sroce_map_queue(int fd, uint64_t mem_size, uint64_t off, uint16_t kind, size_t entry, void **mem)
{
	void *m = mmap(NULL, mem_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	int err = m == MAP_FAILED ? errno : 0;
	close(fd);
	if (err)
		return err;
	if (!ring_ok(m, mem_size, off, kind, entry)) {
		munmap(m, mem_size);
		return EPROTO;
	}
	*mem = m;
	return 0;
}

/*
 * A request that gives a queue new memory (RESIZE_CQ, MODIFY_SRQ of
 * max_wr): sends it, maps the memfd of the reply, whose size and ring
 * offset *mem_size and *off point into reply, and on success unmaps the
 * old memory *mem of *old_size and puts the new one there. The caller
 * holds the queue's lock.
 */
int sroce_call_remap(struct sroce_context *c, uint16_t op, const void *req, size_t reqlen, void *reply,
		     size_t replylen, const uint64_t *mem_size, const uint64_t *off, uint16_t kind,
		     size_t entry, void **mem, size_t old_size)
{
	int fd = -1;
	void *m;
	int err = sroce_call(c, op, req, reqlen, NULL, 0, reply, replylen, &fd, 1);
	if (!err)
		err = sroce_map_queue(fd, *mem_size, *off, kind, entry, &m);
	if (err)
		return err;
	munmap(*mem, old_size);
	*mem = m;
	return 0;
}

/*
 * qp_call asks the daemon for a QP (CREATE_QP, or OPEN_QP for another
 * handle of one), maps the memory of the reply and finds its rings (no
 * receive ring with norq). The QP starts as tmpl with the handle and
 * number the daemon gave; it is in the context's table when returned. NULL
 * with errno set on failure, the daemon's QP destroyed.
 */
static struct sroce_qp *qp_call(struct sroce_context *c, uint16_t op, const void *req, size_t reqlen, int norq,
				const struct ibv_qp *tmpl, struct sroce_ctl_qp *reply)
{
	struct sroce_qp *qp = calloc(1, sizeof(*qp));
	int fd = -1, err;

	if (!qp) {
		errno = ENOMEM;
		return NULL;
	}
	err = sroce_call(c, op, req, reqlen, NULL, 0, reply, sizeof(*reply), &fd, 1);
	if (err) {
		free(qp);
		errno = err;
		return NULL;
	}
	qp->mem = mmap(NULL, reply->mem_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (qp->mem == MAP_FAILED) {
		err = errno;
		goto fail;
	}
	qp->mem_size = reply->mem_size;
	if (!ring_ok(qp->mem, reply->mem_size, reply->sq_offset, SROCE_RING_SEND,
		     sizeof(struct sroce_send_wqe)) ||
	    (!norq && !ring_ok(qp->mem, reply->mem_size, reply->rq_offset, SROCE_RING_RECV,
			       sizeof(struct sroce_recv_wqe)))) {
		err = EPROTO;
		goto fail;
	}
	qp->ctl = qp->mem;
	qp->sq = (struct sroce_ring_hdr *)((char *)qp->mem + reply->sq_offset);
	qp->rq = norq ? NULL : (struct sroce_ring_hdr *)((char *)qp->mem + reply->rq_offset);
	qp->cap = reply->cap;
	pthread_spin_init(&qp->sq_lock, PTHREAD_PROCESS_PRIVATE);
	pthread_spin_init(&qp->rq_lock, PTHREAD_PROCESS_PRIVATE);
	qp->qp = *tmpl;
	qp->qp.handle = reply->handle;
	qp->bell = reply->bell;
	qp->qp.qp_num = reply->qpn;
	pthread_mutex_init(&qp->qp.mutex, NULL);
	pthread_cond_init(&qp->qp.cond, NULL);
	err = sroce_table_put(c, &c->qps, reply->handle, qp);
	if (err)
		goto fail;
	return qp;
fail:
	if (qp->mem && qp->mem != MAP_FAILED)
		munmap(qp->mem, reply->mem_size);
	{
		struct sroce_ctl_handle h = {.handle = reply->handle};
		sroce_call(c, SROCE_OP_DESTROY_QP, &h, sizeof(h), NULL, 0, NULL, 0, NULL, 0);
	}
	free(qp);
	errno = err;
	return NULL;
}

/*
 * create_qp: RC, UC and UD QPs of pd, an XRC_SEND QP of pd (no receive CQ
 * needed), or an XRC_RECV QP of domain xrcd (no PD, CQs or SRQ: its
 * messages go to the XRC SRQs they name).
 */
static struct ibv_qp *create_qp(struct ibv_context *context, struct ibv_pd *pd,
				struct ibv_qp_init_attr *a, struct ibv_xrcd *xrcd)
{
	struct sroce_context *c = to_sctx(context);
	struct sroce_ctl_create_qp req = {0};
	struct sroce_ctl_qp reply;
	struct sroce_qp *qp;
	int xrc = a->qp_type == IBV_QPT_XRC_SEND || a->qp_type == IBV_QPT_XRC_RECV;
	int norq = a->srq || xrc; /* no receive ring of its own */

	switch (a->qp_type) {
	case IBV_QPT_RC:
	case IBV_QPT_UC:
	case IBV_QPT_UD:
		if (!pd || !a->send_cq || !a->recv_cq) {
			errno = EINVAL;
			return NULL;
		}
		break;
	case IBV_QPT_XRC_SEND:
		if (!pd || !a->send_cq || a->srq) {
			errno = EINVAL;
			return NULL;
		}
		break;
	case IBV_QPT_XRC_RECV:
		if (!xrcd || a->srq) {
			errno = EINVAL;
			return NULL;
		}
		break;
	default:
		/* Raw packet and driver QPs: rxe refuses them the same way. */
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (a->qp_type == IBV_QPT_XRC_RECV) {
		req.pd = container_of(xrcd, struct sroce_xrcd, xrcd)->handle;
	} else {
		req.pd = pd->handle;
		req.send_cq = a->send_cq->handle;
		req.recv_cq = a->recv_cq ? a->recv_cq->handle : 0;
	}
	req.srq = a->srq ? a->srq->handle : 0;
	req.qp_type = (uint8_t)a->qp_type;
	req.sq_sig_all = a->sq_sig_all ? 1 : 0;
	req.cap.max_send_wr = a->cap.max_send_wr;
	req.cap.max_recv_wr = norq ? 0 : a->cap.max_recv_wr;
	req.cap.max_send_sge = a->cap.max_send_sge;
	req.cap.max_recv_sge = norq ? 0 : a->cap.max_recv_sge;
	req.cap.max_inline_data = a->cap.max_inline_data;
	struct ibv_qp t = {.context = context, .qp_context = a->qp_context, .pd = pd, .send_cq = a->send_cq,
			   .recv_cq = a->recv_cq, .srq = a->srq, .state = IBV_QPS_RESET, .qp_type = a->qp_type};
	qp = qp_call(c, SROCE_OP_CREATE_QP, &req, sizeof(req), norq, &t, &reply);
	if (!qp)
		return NULL;
	qp->sq_sig_all = a->sq_sig_all;
	if (pd && to_spd(pd)->parent) { /* a QP holds the parent domain it was made in */
		qp->pd = to_spd(pd);
		__atomic_add_fetch(&qp->pd->refs, 1, __ATOMIC_RELAXED);
	}
	/* What the QP got, as rdma-core reports it back. */
	a->cap.max_send_wr = reply.cap.max_send_wr;
	a->cap.max_send_sge = reply.cap.max_send_sge;
	a->cap.max_inline_data = reply.cap.max_inline_data;
	if (!norq) {
		a->cap.max_recv_wr = reply.cap.max_recv_wr;
		a->cap.max_recv_sge = reply.cap.max_recv_sge;
	}
	return &qp->qp;
}

/*
 * ibv_open_qp: another handle of an XRC_RECV QP of a domain this process
 * has open, which another process may have created; the QP lives until
 * its last handle is destroyed (ibv_destroy_qp of this one).
 */
struct ibv_qp *sroce_open_qp(struct ibv_context *context, struct ibv_qp_open_attr *a)
{
	struct sroce_context *c = to_sctx(context);
	uint32_t need = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;
	struct sroce_ctl_open_qp req = {0};
	struct sroce_ctl_qp reply;
	struct sroce_qp *qp;

	if (a->comp_mask & ~(uint32_t)(need | IBV_QP_OPEN_ATTR_CONTEXT)) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if ((a->comp_mask & need) != need || !a->xrcd || a->xrcd->context != context ||
	    a->qp_type != IBV_QPT_XRC_RECV) {
		errno = EINVAL;
		return NULL;
	}
	req.xrcd = container_of(a->xrcd, struct sroce_xrcd, xrcd)->handle;
	req.qpn = a->qp_num;
	req.qp_type = IBV_QPT_XRC_RECV;
	struct ibv_qp t = {.context = context, .qp_type = IBV_QPT_XRC_RECV,
			   .qp_context = (a->comp_mask & IBV_QP_OPEN_ATTR_CONTEXT) ? a->qp_context : NULL};
	qp = qp_call(c, SROCE_OP_OPEN_QP, &req, sizeof(req), 1, &t, &reply);
	if (!qp)
		return NULL;
	qp->qp.state = (int)qp->ctl->state;
	return &qp->qp;
}

EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	if (attr->qp_type == IBV_QPT_XRC_RECV) {
		errno = EINVAL; /* needs its domain: ibv_create_qp_ex */
		return NULL;
	}
	return create_qp(pd->context, pd, attr, NULL);
}

static void set_wr_ops(struct ibv_qp_ex *x);

/*
 * ibv_create_qp_ex: a PD, optionally zero create flags, and optionally
 * send_ops_flags for the ibv_wr_* API (ibv_qp_to_qp_ex). XRC, RSS and TSO
 * are not offered.
 */
struct ibv_qp *sroce_create_qp_ex(struct ibv_context *context, struct ibv_qp_init_attr_ex *a)
{
	struct ibv_qp_init_attr ia;
	struct ibv_xrcd *xrcd = NULL;
	uint32_t known = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_XRCD | IBV_QP_INIT_ATTR_CREATE_FLAGS |
			 IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	if (a->qp_type == IBV_QPT_XRC_RECV) {
		/* A target: its domain instead of a PD. */
		xrcd = a->xrcd;
		if (!(a->comp_mask & IBV_QP_INIT_ATTR_XRCD) || !xrcd || xrcd->context != context) {
			errno = EINVAL;
			return NULL;
		}
	} else if (!(a->comp_mask & IBV_QP_INIT_ATTR_PD) || !a->pd || a->pd->context != context) {
		errno = EINVAL;
		return NULL;
	}
	if (a->comp_mask & ~known) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if ((a->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && a->create_flags) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if ((a->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) &&
	    (a->send_ops_flags & ~(uint64_t)SROCE_SEND_OPS)) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	memcpy(&ia, a, sizeof(ia));
	struct ibv_qp *qp = create_qp(context, xrcd ? NULL : a->pd, &ia, xrcd);
	if (!qp)
		return NULL;
	a->cap = ia.cap;
	if (a->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) {
		struct sroce_qp *sqp = container_of(qp, struct sroce_qp, qp);
		sqp->extended = 1;
		sqp->send_ops = a->send_ops_flags;
		set_wr_ops(&sqp->qpx);
	}
	return qp;
}

EXPORT struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *ibqp)
{
	struct sroce_qp *qp = container_of(ibqp, struct sroce_qp, qp);
	if (!qp->extended) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	return &qp->qpx;
}

EXPORT int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask)
{
	struct sroce_ctl_modify_qp req;
	struct sroce_ctl_qp_attr *o = &req.attr;
	int err;

	memset(&req, 0, sizeof(req));
	req.handle = qp->handle;
	req.attr_mask = (uint32_t)mask;
	o->qp_state = (uint32_t)a->qp_state;
	o->cur_qp_state = (uint32_t)a->cur_qp_state;
	o->path_mtu = (uint32_t)a->path_mtu;
	o->path_mig_state = (uint32_t)a->path_mig_state;
	o->qkey = a->qkey;
	o->rq_psn = a->rq_psn;
	o->sq_psn = a->sq_psn;
	o->dest_qp_num = a->dest_qp_num;
	o->qp_access_flags = a->qp_access_flags;
	o->cap.max_send_wr = a->cap.max_send_wr;
	o->cap.max_recv_wr = a->cap.max_recv_wr;
	o->cap.max_send_sge = a->cap.max_send_sge;
	o->cap.max_recv_sge = a->cap.max_recv_sge;
	o->cap.max_inline_data = a->cap.max_inline_data;
	memcpy(o->ah_attr.dgid, a->ah_attr.grh.dgid.raw, 16);
	o->ah_attr.flow_label = a->ah_attr.grh.flow_label;
	o->ah_attr.sgid_index = a->ah_attr.grh.sgid_index;
	o->ah_attr.hop_limit = a->ah_attr.grh.hop_limit;
	o->ah_attr.traffic_class = a->ah_attr.grh.traffic_class;
	o->ah_attr.sl = a->ah_attr.sl;
	o->ah_attr.is_global = a->ah_attr.is_global;
	o->ah_attr.port_num = a->ah_attr.port_num;
	o->ah_attr.static_rate = a->ah_attr.static_rate;
	o->ah_attr.src_path_bits = a->ah_attr.src_path_bits;
	o->ah_attr.dlid = a->ah_attr.dlid;
	o->pkey_index = a->pkey_index;
	o->en_sqd_async_notify = a->en_sqd_async_notify;
	o->sq_draining = a->sq_draining;
	o->max_rd_atomic = a->max_rd_atomic;
	o->max_dest_rd_atomic = a->max_dest_rd_atomic;
	o->min_rnr_timer = a->min_rnr_timer;
	o->port_num = a->port_num;
	o->timeout = a->timeout;
	o->retry_cnt = a->retry_cnt;
	o->rnr_retry = a->rnr_retry;
	if (mask & (IBV_QP_ALT_PATH | IBV_QP_RATE_LIMIT))
		return EOPNOTSUPP;
	err = sroce_call(to_sctx(qp->context), SROCE_OP_MODIFY_QP, &req, sizeof(req), NULL, 0,
			 NULL, 0, NULL, 0);
	if (err)
		return err;
	if (mask & IBV_QP_STATE) {
		qp->state = a->qp_state;
		if (a->qp_state == IBV_QPS_RESET) {
			if (qp->recv_cq)
				sroce_cq_clean(qp->recv_cq, qp->qp_num);
			if (qp->send_cq && qp->send_cq != qp->recv_cq)
				sroce_cq_clean(qp->send_cq, qp->qp_num);
		}
	}
	return 0;
}

EXPORT int ibv_query_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *a, int mask,
			struct ibv_qp_init_attr *init)
{
	struct sroce_qp *qp = container_of(ibqp, struct sroce_qp, qp);
	struct sroce_ctl_modify_qp req = {.handle = ibqp->handle, .attr_mask = (uint32_t)mask};
	struct sroce_ctl_modify_qp reply;
	int err = sroce_call(to_sctx(ibqp->context), SROCE_OP_QUERY_QP, &req, sizeof(req), NULL, 0,
			     &reply, sizeof(reply), NULL, 0);
	if (err)
		return err;
	sroce_qp_attr_from_ctl(a, &reply.attr);
	ibqp->state = a->qp_state;
	if (init) {
		memset(init, 0, sizeof(*init));
		init->qp_context = ibqp->qp_context;
		init->send_cq = ibqp->send_cq;
		init->recv_cq = ibqp->recv_cq;
		init->srq = ibqp->srq;
		init->cap = a->cap;
		init->qp_type = ibqp->qp_type;
		init->sq_sig_all = qp->sq_sig_all;
	}
	return 0;
}

EXPORT int ibv_destroy_qp(struct ibv_qp *ibqp)
{
	struct sroce_qp *qp = container_of(ibqp, struct sroce_qp, qp);
	struct sroce_context *c = to_sctx(ibqp->context);
	struct sroce_ctl_handle h = {.handle = ibqp->handle};
	int err;

	/* Destroyed first, then its events waited for, as ibv_destroy_cq does. */
	err = sroce_destroy_call(c, SROCE_OP_DESTROY_QP, &h, sizeof(h));
	if (err)
		return err;
	sroce_table_del(c, &c->qps, ibqp->handle);
	if (qp->pd)
		__atomic_sub_fetch(&qp->pd->refs, 1, __ATOMIC_RELAXED);
	pthread_mutex_lock(&c->table_lock);
	uint32_t async = qp->async_delivered;
	pthread_mutex_unlock(&c->table_lock);
	if (sroce_wait_acks(&ibqp->mutex, &ibqp->cond, &ibqp->events_completed, async, NULL, 0,
			    "ibv_destroy_qp")) {
		munmap(qp->mem, qp->mem_size);
		return 0;
	}
	munmap(qp->mem, qp->mem_size);
	pthread_spin_destroy(&qp->sq_lock);
	pthread_spin_destroy(&qp->rq_lock);
	free(qp);
	return 0;
}

/* Fills one send WQE; 0 or an errno value for a malformed request. */
static int fill_send(struct sroce_qp *qp, struct sroce_ring_hdr *r, struct sroce_send_wqe *w,
		     const struct ibv_send_wr *wr)
{
	size_t room = r->stride - sizeof(*w);
	uint64_t total = 0;

	if (wr->num_sge < 0 || (uint32_t)wr->num_sge > qp->cap.max_send_sge)
		return EINVAL;
	memset(w, 0, sizeof(*w));
	w->wr_id = wr->wr_id;
	/* The opcode's row of the table (sroce_wr_ops.h, generated from the engine's). */
	const struct sroce_wr_op *op = sroce_wr_op(wr->opcode);
	if (!op || !(op->qp_types & (1u << qp->qp.qp_type)))
		return EINVAL; /* TSO, driver opcodes, an opcode of another QP type: as rxe */
	w->opcode = (uint8_t)wr->opcode;
	w->send_flags = wr->send_flags;
	if (qp->sq_sig_all)
		w->send_flags |= IBV_SEND_SIGNALED;
	if (op->flags & SROCE_WR_IMM)
		w->imm = ntohl(wr->imm_data);
	if (op->flags & SROCE_WR_INV)
		w->invalidate_rkey = wr->invalidate_rkey;
	switch (op->cls) {
	case SROCE_WR_CLASS_WRITE:
	case SROCE_WR_CLASS_READ:
	case SROCE_WR_CLASS_ATOMIC_WRITE:
		w->remote_addr = wr->wr.rdma.remote_addr;
		w->rkey = wr->wr.rdma.rkey;
		break;
	case SROCE_WR_CLASS_ATOMIC:
		w->remote_addr = wr->wr.atomic.remote_addr;
		w->rkey = wr->wr.atomic.rkey;
		w->compare_add = wr->wr.atomic.compare_add;
		w->swap = wr->wr.atomic.swap;
		break;
	case SROCE_WR_CLASS_LOCAL:
		/* A local operation's operands are its own (the engine's localOp). */
		if (wr->opcode == IBV_WR_LOCAL_INV) {
			w->invalidate_rkey = wr->invalidate_rkey;
		} else if (wr->opcode == IBV_WR_BIND_MW) {
			/* rkey: the window's new rkey; invalidate_rkey: its current one. */
			w->rkey = wr->bind_mw.rkey;
			w->invalidate_rkey = wr->bind_mw.mw ? wr->bind_mw.mw->rkey : 0;
			w->bind_addr = wr->bind_mw.bind_info.addr;
			w->bind_length = wr->bind_mw.bind_info.length;
			w->bind_lkey = wr->bind_mw.bind_info.mr ? wr->bind_mw.bind_info.mr->lkey : 0;
			w->bind_access = wr->bind_mw.bind_info.mw_access_flags;
		}
		break;
	default:
		break;
	}
	if (qp->qp.qp_type == IBV_QPT_XRC_SEND)
		w->ud.remote_qpn = wr->qp_type.xrc.remote_srqn; /* the ring's remote queue number */
	if (qp->qp.qp_type == IBV_QPT_UD) {
		if (!wr->wr.ud.ah)
			return EINVAL;
		struct sroce_ah *ah = container_of(wr->wr.ud.ah, struct sroce_ah, ah);
		w->ah = ah->ah.handle;
		memcpy(w->ud.dgid, ah->attr.dgid, 16);
		w->ud.flow_label = ah->attr.flow_label;
		w->ud.remote_qpn = wr->wr.ud.remote_qpn;
		w->ud.remote_qkey = wr->wr.ud.remote_qkey;
		w->ud.sgid_index = ah->attr.sgid_index;
		w->ud.hop_limit = ah->attr.hop_limit;
		w->ud.traffic_class = ah->attr.traffic_class;
		w->ud.port_num = ah->attr.port_num;
		memcpy(w->ud.dmac, ah->attr.dmac, 6);
	}
	if ((wr->send_flags & IBV_SEND_INLINE) && (op->flags & SROCE_WR_INLINE)) {
		uint8_t *dst = SROCE_SLOT_TAIL(w);
		for (int i = 0; i < wr->num_sge; i++)
			total += wr->sg_list[i].length;
		/* An 8-byte operand fits the WQE whatever max_inline_data (as the engine's check). */
		if ((total > qp->cap.max_inline_data && op->payload != SROCE_WR_PAYLOAD_ATOMIC8) ||
		    total > room || total > 0xffff)
			return EINVAL;
		for (int i = 0; i < wr->num_sge; i++) {
			memcpy(dst, (void *)(uintptr_t)wr->sg_list[i].addr, wr->sg_list[i].length);
			dst += wr->sg_list[i].length;
		}
		w->inline_len = (uint16_t)total;
		w->num_sge = 0;
	} else {
		struct sroce_sge *sge = SROCE_SLOT_TAIL(w);
		if ((size_t)wr->num_sge * sizeof(*sge) > room)
			return EINVAL;
		for (int i = 0; i < wr->num_sge; i++) {
			sge[i].addr = wr->sg_list[i].addr;
			sge[i].length = wr->sg_list[i].length;
			sge[i].lkey = wr->sg_list[i].lkey;
			total += wr->sg_list[i].length;
		}
		w->num_sge = (uint8_t)wr->num_sge;
		w->send_flags &= ~(uint32_t)IBV_SEND_INLINE;
	}
	if (total > 0xffffffffu)
		return EINVAL;
	/* An atomic takes one 8-byte buffer and an aligned remote address (rxe checks the same). */
	if (op->payload == SROCE_WR_PAYLOAD_ATOMIC8 && (total != 8 || (w->remote_addr & 7)))
		return EINVAL;
	w->length = (uint32_t)total;
	return 0;
}

int sroce_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	struct sroce_qp *qp = container_of(ibqp, struct sroce_qp, qp);
	int err = 0, posted = 0;
	int state = ibqp->state;

	if (sroce_is_gone(to_sctx(ibqp->context))) {
		*bad = wr;
		return SROCE_GONE_ERRNO;
	}
	if (state == IBV_QPS_RESET || state == IBV_QPS_INIT || state == IBV_QPS_RTR) {
		*bad = wr;
		return EINVAL;
	}
	pthread_spin_lock(&qp->sq_lock);
	for (; wr; wr = wr->next) {
		struct sroce_send_wqe *w = sroce_ring_next(qp->sq);
		if (!w) {
			err = ENOMEM;
			break;
		}
		err = fill_send(qp, qp->sq, w, wr);
		if (err)
			break;
		sroce_ring_publish(qp->sq);
		posted++;
	}
	pthread_spin_unlock(&qp->sq_lock);
	if (err)
		*bad = wr;
	if (posted)
		sroce_ring_bell(to_sctx(ibqp->context), qp->bell);
	return err;
}

/*
 * The ibv_wr_* API: between wr_start and wr_complete each wr_<opcode> call
 * fills the next free slot of the send ring, unpublished; the wr_set_*
 * calls complete it; wr_complete publishes them all at once (or none, if
 * one was malformed), wr_abort drops them. The send queue's lock is held
 * from wr_start to wr_complete or wr_abort.
 */
static struct sroce_qp *to_xqp(struct ibv_qp_ex *x)
{
	return container_of(x, struct sroce_qp, qpx);
}

static void xwr_start(struct ibv_qp_ex *x)
{
	struct sroce_qp *qp = to_xqp(x);
	pthread_spin_lock(&qp->sq_lock);
	qp->wr_pending = 0;
	qp->wr_err = 0;
	qp->wr_cur = NULL;
}

/* A new WQE for opcode op, or NULL (and wr_err set). */
static struct sroce_send_wqe *xwr_next(struct ibv_qp_ex *x, int op, uint64_t flag)
{
	struct sroce_qp *qp = to_xqp(x);
	struct sroce_ring_hdr *r = qp->sq;
	qp->wr_cur = NULL;
	if (qp->wr_err)
		return NULL;
	if (!(qp->send_ops & flag)) {
		qp->wr_err = EOPNOTSUPP;
		return NULL;
	}
	uint32_t idx = r->prod + qp->wr_pending;
	if (idx - __atomic_load_n(&r->cons, __ATOMIC_ACQUIRE) >= r->limit) {
		qp->wr_err = ENOMEM;
		return NULL;
	}
	struct sroce_send_wqe *w = sroce_ring_slot(r, idx);
	memset(w, 0, sizeof(*w));
	w->wr_id = x->wr_id;
	w->opcode = (uint8_t)op;
	w->send_flags = x->wr_flags & ~(uint32_t)IBV_SEND_INLINE;
	if (qp->sq_sig_all)
		w->send_flags |= IBV_SEND_SIGNALED;
	qp->wr_pending++;
	qp->wr_cur = w;
	return w;
}

static void xwr_rdma_write(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr)
{
	struct sroce_send_wqe *w = xwr_next(x, IBV_WR_RDMA_WRITE, IBV_QP_EX_WITH_RDMA_WRITE);
	if (w) {
		w->rkey = rkey;
		w->remote_addr = addr;
	}
}

static void xwr_rdma_write_imm(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr, uint32_t imm)
{
	struct sroce_send_wqe *w =
		xwr_next(x, IBV_WR_RDMA_WRITE_WITH_IMM, IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM);
	if (w) {
		w->rkey = rkey;
		w->remote_addr = addr;
		w->imm = ntohl(imm);
	}
}

static void xwr_rdma_read(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr)
{
	struct sroce_send_wqe *w = xwr_next(x, IBV_WR_RDMA_READ, IBV_QP_EX_WITH_RDMA_READ);
	if (w) {
		w->rkey = rkey;
		w->remote_addr = addr;
	}
}

static void xwr_send(struct ibv_qp_ex *x)
{
	xwr_next(x, IBV_WR_SEND, IBV_QP_EX_WITH_SEND);
}

static void xwr_send_imm(struct ibv_qp_ex *x, uint32_t imm)
{
	struct sroce_send_wqe *w = xwr_next(x, IBV_WR_SEND_WITH_IMM, IBV_QP_EX_WITH_SEND_WITH_IMM);
	if (w)
		w->imm = ntohl(imm);
}

static void xwr_send_inv(struct ibv_qp_ex *x, uint32_t rkey)
{
	struct sroce_send_wqe *w = xwr_next(x, IBV_WR_SEND_WITH_INV, IBV_QP_EX_WITH_SEND_WITH_INV);
	if (w)
		w->invalidate_rkey = rkey;
}

static void xwr_local_inv(struct ibv_qp_ex *x, uint32_t rkey)
{
	struct sroce_send_wqe *w = xwr_next(x, IBV_WR_LOCAL_INV, IBV_QP_EX_WITH_LOCAL_INV);
	if (w)
		w->invalidate_rkey = rkey;
}

static void xwr_atomic_cmp_swp(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr, uint64_t compare,
			       uint64_t swap)
{
	struct sroce_send_wqe *w =
		xwr_next(x, IBV_WR_ATOMIC_CMP_AND_SWP, IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP);
	if (w) {
		w->rkey = rkey;
		w->remote_addr = addr;
		w->compare_add = compare;
		w->swap = swap;
		w->length = 8;
	}
}

static void xwr_atomic_fetch_add(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr, uint64_t add)
{
	struct sroce_send_wqe *w =
		xwr_next(x, IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD);
	if (w) {
		w->rkey = rkey;
		w->remote_addr = addr;
		w->compare_add = add;
		w->length = 8;
	}
}

/* ibv_wr_atomic_write: the 8 bytes travel inline in the WQE, as rxe's WQE holds them. */
static void xwr_atomic_write(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr, const void *v)
{
	struct sroce_qp *qp = to_xqp(x);
	struct sroce_send_wqe *w = xwr_next(x, IBV_WR_ATOMIC_WRITE, IBV_QP_EX_WITH_ATOMIC_WRITE);
	if (!w)
		return;
	if (qp->sq->stride - sizeof(*w) < 8 || (addr & 7)) {
		qp->wr_err = EINVAL;
		return;
	}
	w->rkey = rkey;
	w->remote_addr = addr;
	memcpy(SROCE_SLOT_TAIL(w), v, 8);
	w->inline_len = 8;
	w->length = 8;
	w->num_sge = 0;
	w->send_flags |= IBV_SEND_INLINE;
}

static void xwr_bind_mw(struct ibv_qp_ex *x, struct ibv_mw *mw, uint32_t rkey,
			const struct ibv_mw_bind_info *b)
{
	struct sroce_send_wqe *w = xwr_next(x, IBV_WR_BIND_MW, IBV_QP_EX_WITH_BIND_MW);
	if (w) {
		w->rkey = rkey;
		w->invalidate_rkey = mw->rkey;
		w->bind_addr = b->addr;
		w->bind_length = b->length;
		w->bind_lkey = b->mr ? b->mr->lkey : 0;
		w->bind_access = b->mw_access_flags;
	}
}

static void xwr_unsupported(struct ibv_qp_ex *x)
{
	struct sroce_qp *qp = to_xqp(x);
	qp->wr_cur = NULL;
	if (!qp->wr_err)
		qp->wr_err = EOPNOTSUPP;
}

static void xwr_send_tso(struct ibv_qp_ex *x, void *hdr, uint16_t hdr_sz, uint16_t mss)
{
	(void)hdr;
	(void)hdr_sz;
	(void)mss;
	xwr_unsupported(x);
}

static void xwr_set_xrc_srqn(struct ibv_qp_ex *x, uint32_t srqn)
{
	struct sroce_qp *qp = to_xqp(x);
	struct sroce_send_wqe *w = qp->wr_cur;
	if (!w)
		return;
	if (qp->qp.qp_type != IBV_QPT_XRC_SEND) {
		qp->wr_err = EINVAL;
		return;
	}
	w->ud.remote_qpn = srqn;
}

static void xwr_set_ud_addr(struct ibv_qp_ex *x, struct ibv_ah *ibah, uint32_t qpn, uint32_t qkey)
{
	struct sroce_qp *qp = to_xqp(x);
	struct sroce_send_wqe *w = qp->wr_cur;
	if (!w)
		return;
	if (qp->qp.qp_type != IBV_QPT_UD || !ibah) {
		qp->wr_err = EINVAL;
		return;
	}
	struct sroce_ah *ah = container_of(ibah, struct sroce_ah, ah);
	w->ah = ibah->handle;
	memcpy(w->ud.dgid, ah->attr.dgid, 16);
	w->ud.flow_label = ah->attr.flow_label;
	w->ud.remote_qpn = qpn;
	w->ud.remote_qkey = qkey;
	w->ud.sgid_index = ah->attr.sgid_index;
	w->ud.hop_limit = ah->attr.hop_limit;
	w->ud.traffic_class = ah->attr.traffic_class;
	w->ud.port_num = ah->attr.port_num;
	memcpy(w->ud.dmac, ah->attr.dmac, 6);
}

static void xwr_set_sge_list(struct ibv_qp_ex *x, size_t n, const struct ibv_sge *sg)
{
	struct sroce_qp *qp = to_xqp(x);
	struct sroce_send_wqe *w = qp->wr_cur;
	uint64_t total = 0;
	if (!w)
		return;
	if (n > qp->cap.max_send_sge || sizeof(*w) + n * sizeof(struct sroce_sge) > qp->sq->stride) {
		qp->wr_err = EINVAL;
		return;
	}
	struct sroce_sge *dst = SROCE_SLOT_TAIL(w);
	for (size_t i = 0; i < n; i++) {
		dst[i].addr = sg[i].addr;
		dst[i].length = sg[i].length;
		dst[i].lkey = sg[i].lkey;
		total += sg[i].length;
	}
	if (total > 0xffffffffu) {
		qp->wr_err = EINVAL;
		return;
	}
	w->num_sge = (uint8_t)n;
	w->inline_len = 0;
	w->send_flags &= ~(uint32_t)IBV_SEND_INLINE;
	/* An atomic's length is its operand's, whatever the SGE says. */
	const struct sroce_wr_op *op = sroce_wr_op(w->opcode);
	if (!op || op->payload != SROCE_WR_PAYLOAD_ATOMIC8)
		w->length = (uint32_t)total;
}

static void xwr_set_sge(struct ibv_qp_ex *x, uint32_t lkey, uint64_t addr, uint32_t length)
{
	struct ibv_sge sg = {.addr = addr, .length = length, .lkey = lkey};
	xwr_set_sge_list(x, 1, &sg);
}

static void xwr_set_inline_data_list(struct ibv_qp_ex *x, size_t n, const struct ibv_data_buf *b)
{
	struct sroce_qp *qp = to_xqp(x);
	struct sroce_send_wqe *w = qp->wr_cur;
	size_t total = 0;
	if (!w)
		return;
	for (size_t i = 0; i < n; i++)
		total += b[i].length;
	if (total > qp->cap.max_inline_data || total > qp->sq->stride - sizeof(*w) ||
	    total > 0xffff) {
		qp->wr_err = EINVAL;
		return;
	}
	uint8_t *dst = SROCE_SLOT_TAIL(w);
	for (size_t i = 0; i < n; i++) {
		memcpy(dst, b[i].addr, b[i].length);
		dst += b[i].length;
	}
	w->num_sge = 0;
	w->inline_len = (uint16_t)total;
	w->length = (uint32_t)total;
	w->send_flags |= IBV_SEND_INLINE;
}

static void xwr_set_inline_data(struct ibv_qp_ex *x, void *addr, size_t length)
{
	struct ibv_data_buf b = {.addr = addr, .length = length};
	xwr_set_inline_data_list(x, 1, &b);
}

static int xwr_complete(struct ibv_qp_ex *x)
{
	struct sroce_qp *qp = to_xqp(x);
	int err = qp->wr_err;
	uint32_t n = qp->wr_pending;
	int state = qp->qp.state;
	if (!err && n && (state == IBV_QPS_RESET || state == IBV_QPS_INIT || state == IBV_QPS_RTR))
		err = EINVAL;
	if (!err && sroce_is_gone(to_sctx(qp->qp.context)))
		err = SROCE_GONE_ERRNO;
	if (!err && n)
		__atomic_store_n(&qp->sq->prod, qp->sq->prod + n, __ATOMIC_RELEASE);
	qp->wr_pending = 0;
	qp->wr_cur = NULL;
	pthread_spin_unlock(&qp->sq_lock);
	if (!err && n)
		sroce_ring_bell(to_sctx(qp->qp.context), qp->bell);
	return err;
}

static void xwr_abort(struct ibv_qp_ex *x)
{
	struct sroce_qp *qp = to_xqp(x);
	qp->wr_pending = 0;
	qp->wr_cur = NULL;
	pthread_spin_unlock(&qp->sq_lock);
}

static void set_wr_ops(struct ibv_qp_ex *x)
{
	x->comp_mask = 0;
	x->wr_atomic_cmp_swp = xwr_atomic_cmp_swp;
	x->wr_atomic_fetch_add = xwr_atomic_fetch_add;
	x->wr_bind_mw = xwr_bind_mw;
	x->wr_local_inv = xwr_local_inv;
	x->wr_rdma_read = xwr_rdma_read;
	x->wr_rdma_write = xwr_rdma_write;
	x->wr_rdma_write_imm = xwr_rdma_write_imm;
	x->wr_send = xwr_send;
	x->wr_send_imm = xwr_send_imm;
	x->wr_send_inv = xwr_send_inv;
	x->wr_send_tso = xwr_send_tso;
	x->wr_set_ud_addr = xwr_set_ud_addr;
	x->wr_set_xrc_srqn = xwr_set_xrc_srqn;
	x->wr_set_inline_data = xwr_set_inline_data;
	x->wr_set_inline_data_list = xwr_set_inline_data_list;
	x->wr_set_sge = xwr_set_sge;
	x->wr_set_sge_list = xwr_set_sge_list;
	x->wr_start = xwr_start;
	x->wr_complete = xwr_complete;
	x->wr_abort = xwr_abort;
	x->wr_atomic_write = xwr_atomic_write;
}

/* Posts to the ring *rp, read under lock (ibv_modify_srq replaces an SRQ's ring under it). */
static int post_recv_ring(struct sroce_ring_hdr *const *rp, pthread_spinlock_t *lock, uint32_t max_sge,
			  struct ibv_recv_wr *wr, struct ibv_recv_wr **bad, int *posted)
{
	int err = 0;
	pthread_spin_lock(lock);
	struct sroce_ring_hdr *r = *rp;
	for (; wr; wr = wr->next) {
		struct sroce_recv_wqe *w = sroce_ring_next(r);
		uint64_t total = 0;
		if (!w) {
			err = ENOMEM;
			break;
		}
		if (wr->num_sge < 0 || (uint32_t)wr->num_sge > max_sge ||
		    sizeof(*w) + (size_t)wr->num_sge * sizeof(struct sroce_sge) > r->stride) {
			err = EINVAL;
			break;
		}
		struct sroce_sge *sge = SROCE_SLOT_TAIL(w);
		for (int i = 0; i < wr->num_sge; i++) {
			sge[i].addr = wr->sg_list[i].addr;
			sge[i].length = wr->sg_list[i].length;
			sge[i].lkey = wr->sg_list[i].lkey;
			total += wr->sg_list[i].length;
		}
		if (total > 0xffffffffu) {
			err = EINVAL;
			break;
		}
		w->wr_id = wr->wr_id;
		w->num_sge = (uint32_t)wr->num_sge;
		w->length = (uint32_t)total;
		sroce_ring_publish(r);
		(*posted)++;
	}
	pthread_spin_unlock(lock);
	if (err)
		*bad = wr;
	return err;
}

int sroce_post_recv(struct ibv_qp *ibqp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct sroce_qp *qp = container_of(ibqp, struct sroce_qp, qp);
	int posted = 0, err;
	if (sroce_is_gone(to_sctx(ibqp->context))) {
		*bad = wr;
		return SROCE_GONE_ERRNO;
	}
	if (!qp->rq || ibqp->state == IBV_QPS_RESET) {
		*bad = wr;
		return EINVAL;
	}
	err = post_recv_ring(&qp->rq, &qp->rq_lock, qp->cap.max_recv_sge, wr, bad, &posted);
	if (posted)
		sroce_ring_bell(to_sctx(ibqp->context), qp->bell);
	return err;
}

/* Shared receive queues. */

/* Takes the memory the daemon gave the SRQ (mapped at srq->mem). */
static void srq_use(struct sroce_srq *srq, const struct sroce_ctl_srq_created *reply)
{
	srq->mem_size = reply->mem_size;
	srq->rq = (struct sroce_ring_hdr *)((char *)srq->mem + reply->ring_offset);
	srq->max_wr = reply->max_wr;
	srq->max_sge = reply->max_sge;
	srq->bell = reply->bell;
}

/* create_srq: an SRQ of pd; of domain xrcd with completion queue cq for an XRC SRQ. */
static struct ibv_srq *create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *a, struct ibv_xrcd *xrcd,
				  struct ibv_cq *cq)
{
	struct sroce_context *c = to_sctx(pd->context);
	struct sroce_ctl_srq req = {.pd_or_handle = pd->handle,
				    .max_wr = a->attr.max_wr,
				    .max_sge = a->attr.max_sge,
				    .srq_limit = a->attr.srq_limit,
				    .xrcd = xrcd ? container_of(xrcd, struct sroce_xrcd, xrcd)->handle : 0,
				    .cq = cq ? cq->handle : 0};
	struct sroce_ctl_srq_created reply;
	struct sroce_srq *srq;
	int fd = -1, err;

	srq = calloc(1, sizeof(*srq));
	if (!srq) {
		errno = ENOMEM;
		return NULL;
	}
	err = sroce_call(c, SROCE_OP_CREATE_SRQ, &req, sizeof(req), NULL, 0, &reply, sizeof(reply),
			 &fd, 1);
	if (err) {
		free(srq);
		errno = err;
		return NULL;
	}
	err = sroce_map_queue(fd, reply.mem_size, reply.ring_offset, SROCE_RING_RECV,
			      sizeof(struct sroce_recv_wqe), &srq->mem);
	if (err)
		goto fail;
	srq_use(srq, &reply);
	srq->srq_num = reply.srq_num;
	pthread_spin_init(&srq->lock, PTHREAD_PROCESS_PRIVATE);
	srq->srq.context = pd->context;
	srq->srq.srq_context = a->srq_context;
	srq->srq.pd = pd;
	srq->srq.handle = reply.handle;
	pthread_mutex_init(&srq->srq.mutex, NULL);
	pthread_cond_init(&srq->srq.cond, NULL);
	err = sroce_table_put(c, &c->srqs, reply.handle, srq);
	if (err)
		goto fail;
	a->attr.max_wr = reply.max_wr;
	a->attr.max_sge = reply.max_sge;
	return &srq->srq;
fail:
	if (srq->mem)
		munmap(srq->mem, reply.mem_size);
	{
		struct sroce_ctl_handle h = {.handle = reply.handle};
		sroce_call(c, SROCE_OP_DESTROY_SRQ, &h, sizeof(h), NULL, 0, NULL, 0, NULL, 0);
	}
	free(srq);
	errno = err;
	return NULL;
}

EXPORT struct ibv_srq *ibv_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *a)
{
	return create_srq(pd, a, NULL, NULL);
}

/*
 * ibv_create_srq_ex: a basic SRQ of a PD, or an XRC SRQ (IBV_SRQT_XRC)
 * with its PD, domain and CQ; tag matching is not offered.
 */
struct ibv_srq *sroce_create_srq_ex(struct ibv_context *context, struct ibv_srq_init_attr_ex *a)
{
	uint32_t known = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD |
			 IBV_SRQ_INIT_ATTR_CQ;
	int type = (a->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) ? (int)a->srq_type : IBV_SRQT_BASIC;
	struct ibv_srq_init_attr ia = {.srq_context = a->srq_context, .attr = a->attr};
	struct ibv_srq *srq;

	if (a->comp_mask & ~known || (type != IBV_SRQT_BASIC && type != IBV_SRQT_XRC)) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (!(a->comp_mask & IBV_SRQ_INIT_ATTR_PD) || !a->pd || a->pd->context != context) {
		errno = EINVAL;
		return NULL;
	}
	if (type == IBV_SRQT_XRC &&
	    (!(a->comp_mask & IBV_SRQ_INIT_ATTR_XRCD) || !(a->comp_mask & IBV_SRQ_INIT_ATTR_CQ) || !a->xrcd ||
	     !a->cq || a->xrcd->context != context || a->cq->context != context)) {
		errno = EINVAL;
		return NULL;
	}
	if (type == IBV_SRQT_XRC)
		srq = create_srq(a->pd, &ia, a->xrcd, a->cq);
	else
		srq = create_srq(a->pd, &ia, NULL, NULL);
	if (srq)
		a->attr = ia.attr;
	return srq;
}

int sroce_get_srq_num(struct ibv_srq *ibsrq, uint32_t *num)
{
	struct sroce_srq *srq = container_of(ibsrq, struct sroce_srq, srq);
	if (!srq->srq_num)
		return EINVAL; /* not an XRC SRQ */
	*num = srq->srq_num;
	return 0;
}

/* ibv_open_xrcd: the domain of the file attr->fd names (shared by every
 * process that opens that file), or a new domain of its own with fd -1. */
struct ibv_xrcd *sroce_open_xrcd(struct ibv_context *context, struct ibv_xrcd_init_attr *a)
{
	struct sroce_context *c = to_sctx(context);
	struct sroce_ctl_open_xrcd req = {0};
	struct sroce_ctl_handle reply;
	struct sroce_xrcd *x;
	int fd = -1, err;

	if (a->comp_mask & ~(uint32_t)(IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS)) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (!(a->comp_mask & IBV_XRCD_INIT_ATTR_FD) || !(a->comp_mask & IBV_XRCD_INIT_ATTR_OFLAGS)) {
		errno = EINVAL;
		return NULL;
	}
	fd = a->fd;
	req.oflags = (uint32_t)a->oflags;
	x = calloc(1, sizeof(*x));
	if (!x) {
		errno = ENOMEM;
		return NULL;
	}
	err = sroce_call(c, SROCE_OP_OPEN_XRCD, &req, sizeof(req), fd >= 0 ? &fd : NULL, fd >= 0 ? 1 : 0,
			 &reply, sizeof(reply), NULL, 0);
	if (err) {
		free(x);
		errno = err;
		return NULL;
	}
	x->xrcd.context = context;
	x->handle = reply.handle;
	return &x->xrcd;
}

int sroce_close_xrcd(struct ibv_xrcd *xrcd)
{
	struct sroce_xrcd *x = container_of(xrcd, struct sroce_xrcd, xrcd);
	struct sroce_ctl_handle h = {.handle = x->handle};
	int err = sroce_destroy_call(to_sctx(xrcd->context), SROCE_OP_CLOSE_XRCD, &h, sizeof(h));
	if (err)
		return err;
	free(x);
	return 0;
}

/*
 * ibv_modify_srq. With IBV_SRQ_MAX_WR the daemon moves the SRQ to new
 * memory with the receives not yet taken; posting waits on the SRQ's lock
 * until the new ring is mapped, as rxe's provider does.
 */
EXPORT int ibv_modify_srq(struct ibv_srq *ibsrq, struct ibv_srq_attr *a, int mask)
{
	struct sroce_srq *srq = container_of(ibsrq, struct sroce_srq, srq);
	struct sroce_context *c = to_sctx(ibsrq->context);
	struct sroce_ctl_srq req = {.pd_or_handle = ibsrq->handle,
				    .attr_mask = (uint32_t)mask,
				    .max_wr = a->max_wr,
				    .srq_limit = a->srq_limit};
	struct sroce_ctl_srq_created reply;
	int err;

	if (!(mask & IBV_SRQ_MAX_WR))
		return sroce_call(c, SROCE_OP_MODIFY_SRQ, &req, sizeof(req), NULL, 0, NULL, 0, NULL, 0);
	pthread_spin_lock(&srq->lock);
	err = sroce_call_remap(c, SROCE_OP_MODIFY_SRQ, &req, sizeof(req), &reply, sizeof(reply), &reply.mem_size,
			       &reply.ring_offset, SROCE_RING_RECV, sizeof(struct sroce_recv_wqe), &srq->mem,
			       srq->mem_size);
	if (!err)
		srq_use(srq, &reply);
	pthread_spin_unlock(&srq->lock);
	return err;
}

EXPORT int ibv_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *a)
{
	struct sroce_ctl_srq req = {.pd_or_handle = srq->handle}, reply;
	int err = sroce_call(to_sctx(srq->context), SROCE_OP_QUERY_SRQ, &req, sizeof(req), NULL, 0,
			     &reply, sizeof(reply), NULL, 0);
	if (err)
		return err;
	a->max_wr = reply.max_wr;
	a->max_sge = reply.max_sge;
	a->srq_limit = reply.srq_limit;
	return 0;
}

EXPORT int ibv_destroy_srq(struct ibv_srq *ibsrq)
{
	struct sroce_srq *srq = container_of(ibsrq, struct sroce_srq, srq);
	struct sroce_context *c = to_sctx(ibsrq->context);
	struct sroce_ctl_handle h = {.handle = ibsrq->handle};
	int err;

	/* Destroyed first (EBUSY while a QP uses it), then its events waited for. */
	err = sroce_destroy_call(c, SROCE_OP_DESTROY_SRQ, &h, sizeof(h));
	if (err)
		return err;
	sroce_table_del(c, &c->srqs, ibsrq->handle);
	pthread_mutex_lock(&c->table_lock);
	uint32_t async = srq->async_delivered;
	pthread_mutex_unlock(&c->table_lock);
	if (sroce_wait_acks(&ibsrq->mutex, &ibsrq->cond, &ibsrq->events_completed, async, NULL,
			    0, "ibv_destroy_srq")) {
		munmap(srq->mem, srq->mem_size);
		return 0;
	}
	munmap(srq->mem, srq->mem_size);
	pthread_spin_destroy(&srq->lock);
	free(srq);
	return 0;
}

int sroce_post_srq_recv(struct ibv_srq *ibsrq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct sroce_srq *srq = container_of(ibsrq, struct sroce_srq, srq);
	int posted = 0;
	if (sroce_is_gone(to_sctx(ibsrq->context))) {
		*bad = wr;
		return SROCE_GONE_ERRNO;
	}
	int err = post_recv_ring(&srq->rq, &srq->lock, srq->max_sge, wr, bad, &posted);
	if (posted)
		sroce_ring_bell(to_sctx(ibsrq->context), srq->bell);
	return err;
}

/* ibv_attach_mcast and ibv_detach_mcast go to the daemon, which answers as
 * rxe does: EINVAL for a QP that is not UD, a GID that is not multicast or
 * (detach) a group the QP is not attached to, ENOMEM beyond the device's
 * multicast limits. */
static int mcast(uint16_t op, struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	struct sroce_ctl_mcast m = {.qp = qp->handle, .lid = lid};

	memcpy(m.gid, gid->raw, sizeof(m.gid));
	return sroce_call(to_sctx(qp->context), op, &m, sizeof(m), NULL, 0, NULL, 0, NULL, 0);
}

EXPORT int ibv_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	return mcast(SROCE_OP_ATTACH_MCAST, qp, gid, lid);
}

EXPORT int ibv_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	return mcast(SROCE_OP_DETACH_MCAST, qp, gid, lid);
}

/* Names that also have an IBVERBS_1.0 compatibility version get their default version here. */
SROCE_DEFAULT_1_1(ibv_attach_mcast)
SROCE_DEFAULT_1_1(ibv_create_qp)
SROCE_DEFAULT_1_1(ibv_create_srq)
SROCE_DEFAULT_1_1(ibv_destroy_qp)
SROCE_DEFAULT_1_1(ibv_detach_mcast)
SROCE_DEFAULT_1_1(ibv_destroy_srq)
SROCE_DEFAULT_1_1(ibv_modify_qp)
SROCE_DEFAULT_1_1(ibv_modify_srq)
SROCE_DEFAULT_1_1(ibv_query_qp)
SROCE_DEFAULT_1_1(ibv_query_srq)
