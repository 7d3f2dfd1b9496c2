/*
 * cq.c: completion queues. The daemon produces struct sroce_cqe entries on
 * the CQ's ring in shared memory; ibv_poll_cq consumes them with no system
 * call. ibv_req_notify_cq arms the CQ in its control block; the daemon then
 * sends one struct sroce_ctl_cq_event on the completion channel's socket.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "internal.h"

static struct sroce_cq *to_scq(struct ibv_cq *cq)
{
	return (struct sroce_cq *)cq;
}

static void cqe_to_wc(const struct sroce_cqe *e, struct ibv_wc *wc)
{
	wc->wr_id = e->wr_id;
	wc->status = e->status;
	wc->opcode = e->opcode;
	wc->vendor_err = e->vendor_err;
	wc->byte_len = e->byte_len;
	if (e->wc_flags & IBV_WC_WITH_INV)
		wc->invalidated_rkey = e->invalidated_rkey;
	else
		wc->imm_data = htonl(e->imm);
	wc->qp_num = e->qp_num;
	wc->src_qp = e->src_qp;
	wc->wc_flags = e->wc_flags;
	wc->pkey_index = e->pkey_index;
	wc->slid = e->slid;
	wc->sl = e->sl;
	wc->dlid_path_bits = e->dlid_path_bits;
}

/*
 * The device is software: the daemon that produces completions needs a
 * CPU, and a program polling an empty CQ in a loop can take the one it
 * would run on. Every SROCE_EMPTY_POLLS-th empty poll in a row yields the
 * CPU (sched_yield returns at once when no other thread waits for it);
 * the polls between cost no system call, so a completion that comes while
 * the program polls is seen at once.
 */
#define SROCE_EMPTY_POLLS 64

/* empty_poll counts an empty poll of cq and says whether to yield. */
static int empty_poll(struct sroce_cq *cq)
{
	return ++cq->empty_polls % SROCE_EMPTY_POLLS == 0;
}

/*
 * Whether the daemon is gone, for a poll that found e: an error completion
 * may be one the daemon made while it was stopping (a flushed work
 * request), after it closed the connection; the program is told the
 * device's fate instead (ibv_poll_cq fails, as a CQ of a device that went
 * away does; a program polling for work that never completes does not
 * wait for ever).
 */
static int gone_at(struct sroce_cq *cq, const struct sroce_cqe *e)
{
	struct sroce_context *c = to_sctx(cq->cq.context);
	if (sroce_is_gone(c))
		return 1;
	return e && e->status != IBV_WC_SUCCESS && sroce_check_gone(c);
}

int sroce_poll_cq(struct ibv_cq *ibcq, int n, struct ibv_wc *wc)
{
	struct sroce_cq *cq = to_scq(ibcq);
	int i;
	pthread_spin_lock(&cq->lock);
	for (i = 0; i < n; i++) {
		struct sroce_cqe *e = sroce_ring_front(cq->ring);
		if (gone_at(cq, e)) {
			pthread_spin_unlock(&cq->lock);
			errno = SROCE_GONE_ERRNO;
			return -1;
		}
		if (!e)
			break;
		cqe_to_wc(e, &wc[i]);
		sroce_ring_release(cq->ring);
	}
	if (i > 0 || n <= 0)
		cq->empty_polls = 0;
	else if (empty_poll(cq))
		i = -1;
	pthread_spin_unlock(&cq->lock);
	if (i < 0) {
		sched_yield();
		i = 0;
	}
	return i;
}

int sroce_req_notify_cq(struct ibv_cq *ibcq, int solicited_only)
{
	struct sroce_cq *cq = to_scq(ibcq);
	if (sroce_is_gone(to_sctx(ibcq->context)))
		return SROCE_GONE_ERRNO;
	/* Not the poll lock: a program may arm between ibv_start_poll and ibv_end_poll. */
	pthread_mutex_lock(&cq->arm_lock);
	__atomic_store_n(&cq->ctl->arm, solicited_only ? 2u : 1u, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&cq->arm_lock);
	/* A daemon that sleeps looks at the arm flag when woken. */
	sroce_ring_doorbell(to_sctx(ibcq->context));
	return 0;
}

/* Extended polling (ibv_create_cq_ex): the current entry stays on the ring until the next one. */
static int cqx_load(struct sroce_cq *cq)
{
	struct sroce_cqe *e = sroce_ring_front(cq->ring);
	if (gone_at(cq, e)) {
		cq->cur = NULL;
		return SROCE_GONE_ERRNO;
	}
	if (!e) {
		cq->cur = NULL;
		return ENOENT;
	}
	cq->cur = e;
	cq->cq.wr_id = e->wr_id;
	cq->cq.status = e->status;
	return 0;
}

static int cqx_start_poll(struct ibv_cq_ex *ex, struct ibv_poll_cq_attr *attr)
{
	struct sroce_cq *cq = (struct sroce_cq *)ex;
	if (attr && attr->comp_mask)
		return EINVAL;
	pthread_spin_lock(&cq->lock);
	int err = cqx_load(cq);
	if (err) {
		int yield = empty_poll(cq);
		pthread_spin_unlock(&cq->lock);
		if (yield)
			sched_yield();
	} else {
		cq->empty_polls = 0;
	}
	return err;
}

static int cqx_next_poll(struct ibv_cq_ex *ex)
{
	struct sroce_cq *cq = (struct sroce_cq *)ex;
	if (cq->cur)
		sroce_ring_release(cq->ring);
	return cqx_load(cq);
}

static void cqx_end_poll(struct ibv_cq_ex *ex)
{
	struct sroce_cq *cq = (struct sroce_cq *)ex;
	if (cq->cur)
		sroce_ring_release(cq->ring);
	cq->cur = NULL;
	pthread_spin_unlock(&cq->lock);
}

#define CUR(ex) (((struct sroce_cq *)(ex))->cur)
static int cqx_opcode(struct ibv_cq_ex *ex) { return CUR(ex)->opcode; }
static uint32_t cqx_vendor_err(struct ibv_cq_ex *ex) { return CUR(ex)->vendor_err; }
static uint32_t cqx_byte_len(struct ibv_cq_ex *ex) { return CUR(ex)->byte_len; }
static uint32_t cqx_imm_data(struct ibv_cq_ex *ex)
{
	struct sroce_cqe *e = CUR(ex);
	return (e->wc_flags & IBV_WC_WITH_INV) ? e->invalidated_rkey : htonl(e->imm);
}
static uint32_t cqx_qp_num(struct ibv_cq_ex *ex) { return CUR(ex)->qp_num; }
static uint32_t cqx_src_qp(struct ibv_cq_ex *ex) { return CUR(ex)->src_qp; }
static unsigned int cqx_wc_flags(struct ibv_cq_ex *ex) { return CUR(ex)->wc_flags; }
static uint32_t cqx_slid(struct ibv_cq_ex *ex) { return CUR(ex)->slid; }
static uint8_t cqx_sl(struct ibv_cq_ex *ex) { return CUR(ex)->sl; }
static uint8_t cqx_dlid_path_bits(struct ibv_cq_ex *ex) { return CUR(ex)->dlid_path_bits; }

/* Takes the memory the daemon gave the CQ (mapped at cq->mem). */
static void cq_use(struct sroce_cq *cq, const struct sroce_ctl_cq *reply)
{
	cq->mem_size = reply->mem_size;
	cq->ctl = cq->mem;
	cq->ring = (struct sroce_ring_hdr *)((char *)cq->mem + reply->ring_offset);
	cq->cq.cqe = (int)reply->cqe;
}

static struct sroce_cq *create_cq(struct ibv_context *context, uint32_t cqe, void *cq_context,
				  struct ibv_comp_channel *channel, uint32_t comp_vector)
{
	struct sroce_context *c = to_sctx(context);
	struct sroce_ctl_create_cq req = {.cqe = cqe, .comp_vector = comp_vector};
	struct sroce_ctl_cq reply;
	struct sroce_cq *cq;
	int fd = -1, err;

	if (cqe == 0 || comp_vector >= (uint32_t)context->num_comp_vectors) {
		errno = EINVAL;
		return NULL;
	}
	if (channel)
		req.channel = container_of(channel, struct sroce_comp_channel, ch)->handle;
	cq = calloc(1, sizeof(*cq));
	if (!cq) {
		errno = ENOMEM;
		return NULL;
	}
	err = sroce_call(c, SROCE_OP_CREATE_CQ, &req, sizeof(req), NULL, 0, &reply, sizeof(reply),
			 &fd, 1);
	if (err) {
		free(cq);
		errno = err;
		return NULL;
	}
	err = sroce_map_queue(fd, reply.mem_size, reply.ring_offset, SROCE_RING_CQ,
			      sizeof(struct sroce_cqe), &cq->mem);
	if (err)
		goto fail;
	cq_use(cq, &reply);
	pthread_spin_init(&cq->lock, PTHREAD_PROCESS_PRIVATE);
	pthread_mutex_init(&cq->arm_lock, NULL);
	struct ibv_cq_ex *x = &cq->cq;
	x->context = context;
	x->channel = channel;
	x->cq_context = cq_context;
	x->handle = reply.handle;
	pthread_mutex_init(&x->mutex, NULL);
	pthread_cond_init(&x->cond, NULL);
	x->start_poll = cqx_start_poll;
	x->next_poll = cqx_next_poll;
	x->end_poll = cqx_end_poll;
	x->read_opcode = cqx_opcode;
	x->read_vendor_err = cqx_vendor_err;
	x->read_byte_len = cqx_byte_len;
	x->read_imm_data = cqx_imm_data;
	x->read_qp_num = cqx_qp_num;
	x->read_src_qp = cqx_src_qp;
	x->read_wc_flags = cqx_wc_flags;
	x->read_slid = cqx_slid;
	x->read_sl = cqx_sl;
	x->read_dlid_path_bits = cqx_dlid_path_bits;
	err = sroce_table_put(c, &c->cqs, reply.handle, cq);
	if (err)
		goto fail;
	if (channel) {
		pthread_mutex_lock(&context->mutex);
		channel->refcnt++;
		pthread_mutex_unlock(&context->mutex);
	}
	return cq;
fail:
	if (cq->mem)
		munmap(cq->mem, reply.mem_size);
	{
		struct sroce_ctl_handle h = {.handle = reply.handle};
		sroce_call(c, SROCE_OP_DESTROY_CQ, &h, sizeof(h), NULL, 0, NULL, 0, NULL, 0);
	}
	free(cq);
	errno = err;
	return NULL;
}

EXPORT struct ibv_cq *ibv_create_cq(struct ibv_context *context, int cqe, void *cq_context,
				    struct ibv_comp_channel *channel, int comp_vector)
{
	if (cqe <= 0 || comp_vector < 0) {
		errno = EINVAL;
		return NULL;
	}
	struct sroce_cq *cq = create_cq(context, (uint32_t)cqe, cq_context, channel,
					(uint32_t)comp_vector);
	return cq ? (struct ibv_cq *)&cq->cq : NULL;
}

/*
 * ibv_create_cq_ex for the common case: the standard completion fields
 * (byte_len, imm, qp_num, src_qp, slid, sl, dlid_path_bits), no timestamps,
 * no parent domain. Anything else fails with EOPNOTSUPP, as rxe does for
 * the fields it lacks.
 */
struct ibv_cq_ex *sroce_create_cq_ex(struct ibv_context *context, struct ibv_cq_init_attr_ex *a)
{
	if (a->wc_flags & ~(uint64_t)SROCE_WC_STANDARD_FLAGS) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (a->comp_mask & ~(uint32_t)(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD)) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if ((a->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) && (a->flags & ~3u)) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	/* A CQ may be made in a parent domain (not a plain PD), which it holds. */
	struct sroce_pd *pd = NULL;
	if (a->comp_mask & IBV_CQ_INIT_ATTR_MASK_PD) {
		if (!a->parent_domain || a->parent_domain->context != context ||
		    !to_spd(a->parent_domain)->parent) {
			errno = EINVAL;
			return NULL;
		}
		pd = to_spd(a->parent_domain);
	}
	struct sroce_cq *cq = create_cq(context, a->cqe, a->cq_context, a->channel, a->comp_vector);
	if (!cq)
		return NULL;
	if (pd) {
		cq->pd = pd;
		__atomic_add_fetch(&pd->refs, 1, __ATOMIC_RELAXED);
	}
	return &cq->cq;
}

/*
 * sroce_cq_clean removes the completions of QP qpn that wait on the CQ,
 * keeping the others in order: a QP moved to RESET leaves nothing behind
 * in its CQs (as RoCE NICs' providers clean their CQs), so a program that
 * resets a QP after an error and uses it again does not poll the old
 * QP's flushed requests. Only the consumer's index moves: the entries
 * past the producer index read here are the daemon's and stay untouched.
 */
void sroce_cq_clean(struct ibv_cq *ibcq, uint32_t qpn)
{
	struct sroce_cq *cq = to_scq(ibcq);
	pthread_spin_lock(&cq->lock);
	struct sroce_ring_hdr *h = cq->ring;
	uint32_t cons = h->cons;
	uint32_t prod = __atomic_load_n(&h->prod, __ATOMIC_ACQUIRE);
	uint32_t freed = 0;
	if (prod - cons <= h->size) {
		for (uint32_t i = prod; i != cons;) {
			i--;
			struct sroce_cqe *e = sroce_ring_slot(h, i);
			if (e->qp_num == qpn)
				freed++;
			else if (freed)
				memcpy(sroce_ring_slot(h, i + freed), e, sizeof(*e));
		}
	}
	if (freed)
		__atomic_store_n(&h->cons, cons + freed, __ATOMIC_RELEASE);
	pthread_spin_unlock(&cq->lock);
}

EXPORT int ibv_destroy_cq(struct ibv_cq *ibcq)
{
	struct sroce_cq *cq = to_scq(ibcq);
	struct sroce_context *c = to_sctx(ibcq->context);
	struct sroce_ctl_handle h = {.handle = ibcq->handle};
	struct ibv_comp_channel *channel = ibcq->channel;
	int err;

	/*
	 * As the kernel's uverbs: the CQ is destroyed first, so one still used
	 * by a QP or an SRQ is EBUSY at once and keeps its events; then, once
	 * out of the table (no more events handed out for it), the library
	 * waits for the program to acknowledge those it was given.
	 */
	err = sroce_destroy_call(c, SROCE_OP_DESTROY_CQ, &h, sizeof(h));
	if (err)
		return err;
	sroce_table_del(c, &c->cqs, ibcq->handle);
	if (cq->pd)
		__atomic_sub_fetch(&cq->pd->refs, 1, __ATOMIC_RELAXED);
	pthread_mutex_lock(&c->table_lock);
	uint32_t comp = cq->comp_delivered, async = cq->async_delivered;
	pthread_mutex_unlock(&c->table_lock);
	/* Unacknowledged events keep the struct: an ibv_ack_cq_events may still come. */
	int keep = sroce_wait_acks(&ibcq->mutex, &ibcq->cond, &ibcq->comp_events_completed, comp,
				   &ibcq->async_events_completed, async, "ibv_destroy_cq");
	if (channel) {
		pthread_mutex_lock(&ibcq->context->mutex);
		channel->refcnt--;
		pthread_mutex_unlock(&ibcq->context->mutex);
	}
	munmap(cq->mem, cq->mem_size);
	if (keep)
		return 0;
	pthread_spin_destroy(&cq->lock);
	pthread_mutex_destroy(&cq->arm_lock);
	free(cq);
	return 0;
}

/*
 * ibv_resize_cq: the daemon moves the CQ to new memory with the
 * completions not yet polled and the arm state. Polling and arming wait on
 * the CQ's locks until the new memory is mapped, as with rxe's provider
 * (which holds its poll lock across the command too); cq->cqe becomes the
 * new capacity.
 */
EXPORT int ibv_resize_cq(struct ibv_cq *ibcq, int cqe)
{
	struct sroce_cq *cq = to_scq(ibcq);
	struct sroce_ctl_resize_cq req = {.handle = ibcq->handle, .cqe = (uint32_t)cqe};
	struct sroce_ctl_cq reply;
	int err;

	if (cqe <= 0)
		return EINVAL;
	pthread_mutex_lock(&cq->arm_lock);
	pthread_spin_lock(&cq->lock);
	err = sroce_call_remap(to_sctx(ibcq->context), SROCE_OP_RESIZE_CQ, &req, sizeof(req), &reply,
			       sizeof(reply), &reply.mem_size, &reply.ring_offset, SROCE_RING_CQ,
			       sizeof(struct sroce_cqe), &cq->mem, cq->mem_size);
	if (!err)
		cq_use(cq, &reply);
	pthread_spin_unlock(&cq->lock);
	pthread_mutex_unlock(&cq->arm_lock);
	return err;
}

/* Names that also have an IBVERBS_1.0 compatibility version get their default version here. */
SROCE_DEFAULT_1_1(ibv_create_cq)
SROCE_DEFAULT_1_1(ibv_destroy_cq)
SROCE_DEFAULT_1_1(ibv_resize_cq)
