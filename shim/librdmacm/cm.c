/*
 * cm.c: librdmacm's connection manager calls over the sroce daemon. The
 * daemon runs the CM (MADs to QP1 on the wire); this library holds one
 * control connection per process for the CM ops of sroce_ctl.h, turns the
 * event datagrams of a channel's socket into struct rdma_cm_event, and moves
 * the program's QP through INIT, RTR and RTS with ibv_modify_qp (sroce's
 * libibverbs) from the attributes the daemon gives, as librdmacm does.
 *
 * Event flow: a request that ends in an event (resolve, connect, accept,
 * disconnect) returns once the daemon took it; the event arrives later on
 * the ID's channel socket, which the program polls or reads through
 * rdma_get_cm_event (blocking unless it set O_NONBLOCK on channel->fd). An
 * ID created without a channel is synchronous: it gets a private channel and
 * each call waits there for its own event, bounded by SROCE_CM_SYNC_WAIT_SEC.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "cm.h"
#include "sroce_conv.h"

/* The process's control connection for the CM. */
static pthread_mutex_t ctl_lock = PTHREAD_MUTEX_INITIALIZER;
static int ctl_sock = -1;
static uint32_t ctl_seq;

/* Open devices by name (kept open until the process exits, as librdmacm keeps its own). */
struct open_dev {
	char name[SROCE_CTL_NAME];
	struct ibv_context *ctx;
	struct open_dev *next;
};
static pthread_mutex_t dev_lock = PTHREAD_MUTEX_INITIALIZER;
static struct open_dev *devs;

/* IDs by handle: events name them by handle. */
#define ID_BUCKETS 256
static pthread_mutex_t ids_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sroce_cm_id *ids[ID_BUCKETS];

/* One request on the CM connection (connecting first if needed); 0 or an errno value. */
int sroce_cm_call(uint16_t op, const void *req, size_t reqlen, void *reply, size_t replylen,
		  int *rfds, unsigned nrfds)
{
	unsigned n = nrfds;
	int err;

	pthread_mutex_lock(&ctl_lock);
	if (ctl_sock < 0) {
		err = sroce_connect(&ctl_sock);
		if (err) {
			ctl_sock = -1;
			pthread_mutex_unlock(&ctl_lock);
			sroce_warn("no sroce daemon at %s (%s)%s", sroce_socket_path(), strerror(err),
				   sroce_socket_also());
			return err == ENOENT || err == ECONNREFUSED ? ENODEV : err;
		}
	}
	err = sroce_call_fd(ctl_sock, &ctl_seq, op, req, reqlen, NULL, 0, reply, replylen, NULL,
			    rfds, nrfds ? &n : NULL);
	if (err == ECONNRESET || err == EPIPE || err == ENOTCONN) {
		/* The daemon went away, and its IDs with it. */
		close(ctl_sock);
		ctl_sock = -1;
		err = ENODEV;
	}
	pthread_mutex_unlock(&ctl_lock);
	return err;
}

/* Returns errno = err and -1, librdmacm's way of failing. */
static int fail(int err)
{
	errno = err;
	return -1;
}

/* The context of the daemon's device name, opened through libibverbs on first use. */
struct ibv_context *sroce_cm_device(const char *name)
{
	struct open_dev *d;
	struct ibv_device **list;
	struct ibv_context *ctx = NULL;
	int n;

	if (!name || !*name)
		return NULL;
	pthread_mutex_lock(&dev_lock);
	for (d = devs; d; d = d->next) {
		if (!strcmp(d->name, name)) {
			ctx = d->ctx;
			goto out;
		}
	}
	list = ibv_get_device_list(&n);
	if (!list)
		goto out;
	for (int i = 0; i < n; i++) {
		if (!strcmp(list[i]->name, name)) {
			ctx = ibv_open_device(list[i]);
			break;
		}
	}
	ibv_free_device_list(list);
	if (ctx) {
		d = calloc(1, sizeof(*d));
		if (d) {
			snprintf(d->name, sizeof(d->name), "%s", name);
			d->ctx = ctx;
			d->next = devs;
			devs = d;
		}
	}
out:
	pthread_mutex_unlock(&dev_lock);
	return ctx;
}

static void id_put(struct sroce_cm_id *s)
{
	pthread_mutex_lock(&ids_lock);
	s->next = ids[s->handle % ID_BUCKETS];
	ids[s->handle % ID_BUCKETS] = s;
	pthread_mutex_unlock(&ids_lock);
}

/* Finds the ID of handle and counts an event on it, both under the
 * table's lock: rdma_destroy_id unlinks the ID first and then waits until its
 * events are acked, so an event being made for it (in another thread)
 * keeps it alive until the program acks that event, as librdmacm's
 * reported/completed counts do. id_event_done drops the count. */
static struct sroce_cm_id *id_get_event(uint32_t handle)
{
	struct sroce_cm_id *s;
	pthread_mutex_lock(&ids_lock);
	for (s = ids[handle % ID_BUCKETS]; s && s->handle != handle; s = s->next)
		;
	if (s) {
		pthread_mutex_lock(&s->lock);
		s->events++;
		pthread_mutex_unlock(&s->lock);
	}
	pthread_mutex_unlock(&ids_lock);
	return s;
}

static void id_event_done(struct sroce_cm_id *s)
{
	pthread_mutex_lock(&s->lock);
	if (s->events)
		s->events--;
	pthread_cond_broadcast(&s->acked);
	pthread_mutex_unlock(&s->lock);
}

static void id_del(struct sroce_cm_id *s)
{
	struct sroce_cm_id **p;
	pthread_mutex_lock(&ids_lock);
	for (p = &ids[s->handle % ID_BUCKETS]; *p; p = &(*p)->next) {
		if (*p == s) {
			*p = s->next;
			break;
		}
	}
	pthread_mutex_unlock(&ids_lock);
}

/* ---- event channels ---- */

/* The descriptors of the channels alive, to tell a daemon that went away
 * from a channel the program destroyed while another thread was reading
 * it. */
#define MAX_LIVE_CHANNELS 1024
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static int live_fds[MAX_LIVE_CHANNELS];
static int live_n;

static void live_add(int fd)
{
	pthread_mutex_lock(&live_lock);
	if (live_n < MAX_LIVE_CHANNELS)
		live_fds[live_n++] = fd;
	pthread_mutex_unlock(&live_lock);
}

static void live_del(int fd)
{
	pthread_mutex_lock(&live_lock);
	for (int i = 0; i < live_n; i++) {
		if (live_fds[i] == fd) {
			live_fds[i] = live_fds[--live_n];
			break;
		}
	}
	pthread_mutex_unlock(&live_lock);
}

static int live_has(int fd)
{
	int found = 0;
	pthread_mutex_lock(&live_lock);
	for (int i = 0; i < live_n && !found; i++)
		found = live_fds[i] == fd;
	pthread_mutex_unlock(&live_lock);
	return found;
}

EXPORT struct rdma_event_channel *rdma_create_event_channel(void)
{
	struct sroce_cm_channel *c = calloc(1, sizeof(*c));
	struct sroce_ctl_handle reply;
	int fd = -1, err;

	if (!c) {
		errno = ENOMEM;
		return NULL;
	}
	err = sroce_cm_call(SROCE_OP_CM_CREATE_CHANNEL, NULL, 0, &reply, sizeof(reply), &fd, 1);
	if (err) {
		free(c);
		errno = err;
		return NULL;
	}
	c->handle = reply.handle;
	c->ch.fd = fd;
	pthread_mutex_init(&c->pend_lock, NULL);
	live_add(fd);
	return &c->ch;
}

EXPORT void rdma_destroy_event_channel(struct rdma_event_channel *channel)
{
	struct sroce_cm_channel *c = (struct sroce_cm_channel *)channel;
	struct sroce_ctl_handle h = {.handle = c->handle};

	/*
	 * As librdmacm's, which closes the channel's file quietly: the daemon
	 * destroys the IDs still on it, as the kernel does at that close. A
	 * refusal (a daemon gone) changes nothing for the program.
	 */
	live_del(c->ch.fd); /* first: the daemon's close ends a read in another thread */
	(void)sroce_cm_call(SROCE_OP_CM_DESTROY_CHANNEL, &h, sizeof(h), NULL, 0, NULL, 0);
	close(c->ch.fd);
	while (c->pend_head) {
		struct sroce_pending_event *p = c->pend_head;
		c->pend_head = p->next;
		free(p);
	}
	free(c);
}

/* Takes the first event kept on the channel, if any: 1 with *out set. */
static int pending_pop(struct sroce_cm_channel *c, struct sroce_ctl_cm_event *out)
{
	struct sroce_pending_event *p;
	pthread_mutex_lock(&c->pend_lock);
	p = c->pend_head;
	if (p) {
		c->pend_head = p->next;
		if (!c->pend_head)
			c->pend_tail = NULL;
	}
	pthread_mutex_unlock(&c->pend_lock);
	if (!p)
		return 0;
	*out = p->ev;
	free(p);
	return 1;
}

static void pending_push(struct sroce_cm_channel *c, struct sroce_pending_event *p)
{
	p->next = NULL;
	if (c->pend_tail)
		c->pend_tail->next = p;
	else
		c->pend_head = p;
	c->pend_tail = p;
}

/*
 * After an ID moved from channel from to channel to: the events the daemon
 * wrote to from's socket before the move are read out of it (the kernel's
 * rdma_migrate_id moves them too), and those of the ID (and the connection
 * requests it heard, if it listens) are kept for to, in order, ahead of
 * what to's socket holds; the others stay kept on from.
 */
static void move_pending(struct sroce_cm_channel *from, struct sroce_cm_channel *to, uint32_t id)
{
	struct sroce_pending_event *p, *next, *keep = NULL, **tail = &keep;
	pthread_mutex_lock(&from->pend_lock);
	for (;;) {
		p = malloc(sizeof(*p));
		if (!p)
			break;
		ssize_t n = recv(from->ch.fd, &p->ev, sizeof(p->ev), MSG_DONTWAIT);
		if (n != (ssize_t)sizeof(p->ev)) {
			free(p);
			break;
		}
		pending_push(from, p);
	}
	p = from->pend_head;
	from->pend_head = from->pend_tail = NULL;
	pthread_mutex_lock(&to->pend_lock);
	for (; p; p = next) {
		next = p->next;
		if (p->ev.info.handle == id ||
		    (p->ev.event == RDMA_CM_EVENT_CONNECT_REQUEST && p->ev.listen_id == id)) {
			pending_push(to, p);
		} else {
			p->next = NULL;
			*tail = p;
			tail = &p->next;
		}
	}
	pthread_mutex_unlock(&to->pend_lock);
	for (p = keep; p; p = next) {
		next = p->next;
		pending_push(from, p);
	}
	pthread_mutex_unlock(&from->pend_lock);
}

/* ---- IDs ---- */

/* Copies what the daemon says of an ID into the program's view of it. */
static void apply_info(struct sroce_cm_id *s, const struct sroce_ctl_cm_id_info *in)
{
	struct rdma_cm_id *id = &s->id;
	struct rdma_addr *a = &id->route.addr;

	if (in->src.family)
		sroce_cm_addr_from(&a->src_storage, &in->src);
	if (in->dst.family)
		sroce_cm_addr_from(&a->dst_storage, &in->dst);
	if (in->device[0] && !id->verbs) {
		char name[SROCE_CTL_NAME];
		memcpy(name, in->device, sizeof(name));
		name[sizeof(name) - 1] = 0;
		id->verbs = sroce_cm_device(name);
	}
	if (in->port_num)
		id->port_num = in->port_num;
	memcpy(a->addr.ibaddr.sgid.raw, in->sgid, 16);
	memcpy(a->addr.ibaddr.dgid.raw, in->dgid, 16);
	a->addr.ibaddr.pkey = htons(in->pkey);
	if (in->num_paths) {
		struct ibv_sa_path_rec *p = &s->path;
		memset(p, 0, sizeof(*p));
		memcpy(p->sgid.raw, in->sgid, 16);
		memcpy(p->dgid.raw, in->dgid, 16);
		p->pkey = htons(in->pkey);
		p->hop_limit = in->hop_limit;
		p->traffic_class = in->traffic_class;
		p->mtu = (uint8_t)in->path_mtu;
		p->mtu_selector = 2; /* exactly */
		p->numb_path = 1;
		p->reversible = 1;
		id->route.path_rec = p;
		id->route.num_paths = 1;
	}
}

static int query_id(struct sroce_cm_id *s)
{
	struct sroce_ctl_cm_id_arg req = {.id = s->handle};
	struct sroce_ctl_cm_id_info info;
	int err = sroce_cm_call(SROCE_OP_CM_QUERY, &req, sizeof(req), &info, sizeof(info), NULL, 0);
	if (!err)
		apply_info(s, &info);
	return err;
}

static struct sroce_cm_id *new_id(struct rdma_event_channel *channel, void *context,
				  enum rdma_port_space ps, enum ibv_qp_type qp_type, uint32_t handle)
{
	struct sroce_cm_id *s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->id.channel = channel;
	s->id.context = context;
	s->id.ps = ps;
	s->id.qp_type = qp_type;
	s->handle = handle;
	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->acked, NULL);
	return s;
}

static enum ibv_qp_type qp_type_of(enum rdma_port_space ps)
{
	return ps == RDMA_PS_UDP || ps == RDMA_PS_IPOIB ? IBV_QPT_UD : IBV_QPT_RC;
}

static int create_id(struct rdma_event_channel *channel, struct rdma_cm_id **id, void *context,
		     enum rdma_port_space ps, enum ibv_qp_type qp_type)
{
	struct sroce_cm_channel *own = NULL;
	struct sroce_ctl_cm_create_id req = {.ps = (uint16_t)ps, .qp_type = (uint8_t)qp_type};
	struct sroce_ctl_handle reply;
	struct sroce_cm_id *s;
	int err;

	if (!id)
		return fail(EINVAL);
	if (!channel) {
		channel = rdma_create_event_channel();
		if (!channel)
			return -1;
		own = (struct sroce_cm_channel *)channel;
	}
	req.channel = ((struct sroce_cm_channel *)channel)->handle;
	err = sroce_cm_call(SROCE_OP_CM_CREATE_ID, &req, sizeof(req), &reply, sizeof(reply), NULL, 0);
	if (err) {
		if (own)
			rdma_destroy_event_channel(channel);
		return fail(err);
	}
	s = new_id(channel, context, ps, qp_type, reply.handle);
	if (!s) {
		struct sroce_ctl_cm_id_arg d = {.id = reply.handle};
		sroce_cm_call(SROCE_OP_CM_DESTROY_ID, &d, sizeof(d), NULL, 0, NULL, 0);
		if (own)
			rdma_destroy_event_channel(channel);
		return fail(ENOMEM);
	}
	s->sync = own != NULL;
	s->own_channel = own;
	id_put(s);
	*id = &s->id;
	return 0;
}

EXPORT int rdma_create_id(struct rdma_event_channel *channel, struct rdma_cm_id **id,
			  void *context, enum rdma_port_space ps)
{
	return create_id(channel, id, context, ps, qp_type_of(ps));
}

EXPORT int rdma_destroy_id(struct rdma_cm_id *id)
{
	struct sroce_cm_id *s = to_sid(id);
	struct sroce_ctl_cm_id_arg req = {.id = s->handle};
	struct timespec deadline;
	int err;

	err = sroce_cm_call(SROCE_OP_CM_DESTROY_ID, &req, sizeof(req), NULL, 0, NULL, 0);
	if (err && err != ENOENT)
		return fail(err);
	id_del(s);
	/* As librdmacm: the event a synchronous call kept is acked here, then
	 * wait until the program acked every other event of the ID. */
	if (id->event) {
		rdma_ack_cm_event(id->event);
		id->event = NULL;
	}
	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_sec += SROCE_CM_ACK_WAIT_SEC;
	pthread_mutex_lock(&s->lock);
	while (s->events) {
		if (pthread_cond_timedwait(&s->acked, &s->lock, &deadline) == ETIMEDOUT) {
			sroce_warn("rdma_destroy_id: %u events of the ID were not acked within %d s; "
				   "freeing it anyway", s->events, SROCE_CM_ACK_WAIT_SEC);
			break;
		}
	}
	pthread_mutex_unlock(&s->lock);
	if (s->own_channel)
		rdma_destroy_event_channel(&s->own_channel->ch);
	while (s->mc_list) {
		struct sroce_cm_mc *mc = s->mc_list;
		s->mc_list = mc->next;
		free(mc);
	}
	free(s->qp_init);
	free(s);
	return 0;
}

/* ---- events ---- */

EXPORT int rdma_init_qp_attr(struct rdma_cm_id *id, struct ibv_qp_attr *attr, int *mask)
{
	struct sroce_ctl_cm_id_arg req = {.id = to_sid(id)->handle, .arg = (uint32_t)attr->qp_state};
	struct sroce_ctl_modify_qp reply;
	const struct sroce_ctl_qp_attr *a = &reply.attr;
	int err;

	err = sroce_cm_call(SROCE_OP_CM_INIT_QP_ATTR, &req, sizeof(req), &reply, sizeof(reply), NULL, 0);
	if (err)
		return fail(err);
	sroce_qp_attr_from_ctl(attr, a);
	*mask = (int)reply.attr_mask;
	return 0;
}

/* Moves the ID's QP to state with the CM's attributes (and the negotiated
 * RDMA read depths). 0 or -1 with errno. */
static int modify_qp(struct sroce_cm_id *s, enum ibv_qp_state state)
{
	struct ibv_qp_attr attr = {.qp_state = state};
	int mask;

	if (state == IBV_QPS_RTR && s->id.qp_type != IBV_QPT_UD) {
		/* As librdmacm: INIT again first, with the access flags the
		 * connection allows (RDMA READ and atomics when it has
		 * responder resources). */
		if (modify_qp(s, IBV_QPS_INIT))
			return -1;
	}
	if (rdma_init_qp_attr(&s->id, &attr, &mask))
		return -1;
	if (state == IBV_QPS_RTR && s->responder_resources != RDMA_MAX_RESP_RES)
		attr.max_dest_rd_atomic = s->responder_resources;
	if (state == IBV_QPS_RTS && s->initiator_depth != RDMA_MAX_INIT_DEPTH)
		attr.max_rd_atomic = s->initiator_depth;
	errno = ibv_modify_qp(s->id.qp, &attr, mask);
	return errno ? -1 : 0;
}

static int qp_to_err(struct sroce_cm_id *s)
{
	struct ibv_qp_attr attr = {.qp_state = IBV_QPS_ERR};
	if (!s->id.qp)
		return 0;
	errno = ibv_modify_qp(s->id.qp, &attr, IBV_QP_STATE);
	return errno ? -1 : 0;
}

/* Reads one event datagram from a channel; 0, or an errno value (EAGAIN for a
 * nonblocking channel with nothing pending). timeout_ms < 0 blocks. */
static int read_event(int fd, struct sroce_ctl_cm_event *ev, int timeout_ms)
{
	ssize_t n;
	if (timeout_ms >= 0) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		int r;
		do {
			r = poll(&p, 1, timeout_ms);
		} while (r < 0 && errno == EINTR);
		if (r < 0)
			return errno;
		if (r == 0)
			return ETIMEDOUT;
	}
	do {
		n = recv(fd, ev, sizeof(*ev), 0);
	} while (n < 0 && errno == EINTR);
	if (n < 0)
		return errno;
	if (n == 0 && !live_has(fd)) {
		/* The program destroyed the channel while this thread read it:
		 * with the kernel's rdma_cm the read never returns, and programs
		 * (rping's CM thread) rely on that until they exit. */
		for (;;)
			pause();
	}
	if (n == 0)
		return ENODEV; /* the daemon went away */
	if ((size_t)n != sizeof(*ev))
		return EPROTO;
	return 0;
}

/* The listener's synchronous requests get a private channel of their own. */
static int move_to_own_channel(struct sroce_cm_id *s)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct sroce_ctl_cm_id_arg req = {.id = s->handle};
	int err;
	if (!ch)
		return errno;
	req.arg = ((struct sroce_cm_channel *)ch)->handle;
	err = sroce_cm_call(SROCE_OP_CM_MIGRATE_ID, &req, sizeof(req), NULL, 0, NULL, 0);
	if (err) {
		rdma_destroy_event_channel(ch);
		return err;
	}
	move_pending((struct sroce_cm_channel *)s->id.channel, (struct sroce_cm_channel *)ch, s->handle);
	s->id.channel = ch;
	s->own_channel = (struct sroce_cm_channel *)ch;
	s->sync = 1;
	return 0;
}

static int create_qp_for(struct sroce_cm_id *s, struct ibv_pd *pd, struct ibv_qp_init_attr *attr);

/* ---- multicast ---- */

/* mc_find returns the join uid of s; the caller holds s->lock. */
static struct sroce_cm_mc *mc_find(struct sroce_cm_id *s, uint32_t uid)
{
	struct sroce_cm_mc *mc;
	for (mc = s->mc_list; mc && mc->uid != uid; mc = mc->next)
		;
	return mc;
}

/* The event of join uid of s (MULTICAST_JOIN or MULTICAST_ERROR), under
 * s->lock so that a leave on another thread finds the join either not yet
 * attached or attached, never half-way: the event carries the join's
 * context, and as librdmacm at MULTICAST_JOIN the group is remembered for
 * the leave and the ID's QP, unless the join is send-only, is attached to
 * it; if that fails the event becomes MULTICAST_ERROR with status -1 and
 * errno set. Returns EAGAIN when the join was left meanwhile. */
static int process_mcast(struct sroce_cm_id *s, uint32_t uid, struct rdma_cm_event *ev)
{
	struct sroce_cm_mc *mc;
	int err = 0;

	pthread_mutex_lock(&s->lock);
	mc = mc_find(s, uid);
	if (!mc) {
		pthread_mutex_unlock(&s->lock);
		return EAGAIN;
	}
	ev->param.ud.private_data = mc->context;
	ev->param.ud.private_data_len = 0;
	if (ev->event == RDMA_CM_EVENT_MULTICAST_JOIN) {
		mc->mgid = ev->param.ud.ah_attr.grh.dgid;
		mc->mlid = ev->param.ud.ah_attr.dlid;
		if (s->id.qp && !mc->send_only && !mc->attached) {
			err = ibv_attach_mcast(s->id.qp, &mc->mgid, mc->mlid);
			if (err) {
				errno = err;
				ev->event = RDMA_CM_EVENT_MULTICAST_ERROR;
				ev->status = -1;
			} else {
				mc->attached = 1;
			}
		}
	}
	pthread_mutex_unlock(&s->lock);
	return 0;
}

/* Turns a datagram into the program's event. Returns 0 with *out set, or
 * EAGAIN when the event was the library's own and was consumed. */
static int process_event(const struct sroce_ctl_cm_event *in, struct sroce_cm_event **out)
{
	struct sroce_cm_event *e;
	struct sroce_cm_id *s, *listen = NULL;
	int ret = 0;

	if (in->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
		listen = id_get_event(in->listen_id);
		if (!listen) {
			/* The listener is gone: refuse the request. */
			struct sroce_ctl_cm_conn rej = {.id = in->info.handle};
			struct sroce_ctl_cm_id_arg d = {.id = in->info.handle};
			sroce_cm_call(SROCE_OP_CM_REJECT, &rej, sizeof(rej), NULL, 0, NULL, 0);
			sroce_cm_call(SROCE_OP_CM_DESTROY_ID, &d, sizeof(d), NULL, 0, NULL, 0);
			return EAGAIN;
		}
		s = new_id(listen->id.channel, listen->id.context, listen->id.ps, listen->id.qp_type,
			   in->info.handle);
		if (!s) {
			id_event_done(listen);
			return ENOMEM;
		}
		/* A connection request counts on its listener until acked, as
		 * librdmacm counts it (the new ID has no event of its own: a
		 * program may reject and destroy it before it acks the event). */
		id_put(s);
	} else {
		s = id_get_event(in->info.handle);
		if (!s)
			return EAGAIN; /* an event of an ID destroyed meanwhile */
	}
	apply_info(s, &in->info);

	e = calloc(1, sizeof(*e));
	if (!e) {
		ret = ENOMEM;
		goto drop;
	}
	e->ev.id = &s->id;
	e->ev.listen_id = listen ? &listen->id : NULL;
	e->ev.event = (enum rdma_cm_event_type)in->event;
	e->ev.status = in->status;
	memcpy(e->private_data, in->conn.private_data, sizeof(e->private_data));
	if (s->id.qp_type == IBV_QPT_UD) {
		e->ev.param.ud.private_data = in->conn.private_data_len ? e->private_data : NULL;
		e->ev.param.ud.private_data_len = in->conn.private_data_len;
		sroce_ah_from_ctl(&e->ev.param.ud.ah_attr, &in->ah_attr);
		e->ev.param.ud.qp_num = in->conn.qp_num;
		e->ev.param.ud.qkey = in->conn.qkey;
	} else {
		struct rdma_conn_param *p = &e->ev.param.conn;
		p->private_data = in->conn.private_data_len ? e->private_data : NULL;
		p->private_data_len = in->conn.private_data_len;
		p->responder_resources = in->conn.responder_resources;
		p->initiator_depth = in->conn.initiator_depth;
		p->flow_control = in->conn.flow_control;
		p->retry_count = in->conn.retry_count;
		p->rnr_retry_count = in->conn.rnr_retry_count;
		p->srq = in->conn.srq;
		p->qp_num = in->conn.qp_num;
	}

	switch (e->ev.event) {
	case RDMA_CM_EVENT_CONNECT_REQUEST:
		/* The peer's initiator depth is what we answer with at most. */
		s->responder_resources = in->conn.initiator_depth;
		s->initiator_depth = in->conn.responder_resources;
		if (listen->sync) {
			ret = move_to_own_channel(s);
			if (ret)
				goto drop;
		}
		if (listen->qp_init) {
			if (create_qp_for(s, listen->id.pd, listen->qp_init)) {
				ret = errno;
				goto drop;
			}
		}
		break;
	case RDMA_CM_EVENT_CONNECT_RESPONSE:
		s->initiator_depth = in->conn.responder_resources < s->initiator_depth
					     ? in->conn.responder_resources
					     : s->initiator_depth;
		if (!s->id.qp)
			break; /* the program's own QP: it calls rdma_establish */
		if (modify_qp(s, IBV_QPS_RTR) || modify_qp(s, IBV_QPS_RTS) || rdma_establish(&s->id)) {
			int err = errno;
			struct sroce_ctl_cm_conn rej = {.id = s->handle};
			sroce_cm_call(SROCE_OP_CM_REJECT, &rej, sizeof(rej), NULL, 0, NULL, 0);
			e->ev.event = RDMA_CM_EVENT_CONNECT_ERROR;
			e->ev.status = -err;
		} else {
			e->ev.event = RDMA_CM_EVENT_ESTABLISHED;
		}
		break;
	case RDMA_CM_EVENT_MULTICAST_JOIN:
	case RDMA_CM_EVENT_MULTICAST_ERROR:
		if (process_mcast(s, in->mcast_uid, &e->ev)) {
			ret = EAGAIN; /* a join left meanwhile */
			goto drop;
		}
		break;
	case RDMA_CM_EVENT_DISCONNECTED:
	case RDMA_CM_EVENT_REJECTED:
	case RDMA_CM_EVENT_UNREACHABLE:
	case RDMA_CM_EVENT_CONNECT_ERROR:
		if (e->ev.event != RDMA_CM_EVENT_DISCONNECTED)
			qp_to_err(s);
		break;
	default:
		break;
	}
	*out = e; /* the ID's (the listener's) count stays until the program acks the event */
	return 0;
drop:
	free(e);
	id_event_done(listen ? listen : s);
	return ret;
}

/*
 * After the daemon went away (its end of channel's socket closed): one
 * RDMA_CM_EVENT_DEVICE_REMOVAL for each ID of channel that is on a device,
 * as the kernel's rdma_cm gives when a device goes; ENODEV once none is
 * left.
 */
static int removal_event(struct rdma_event_channel *channel, struct rdma_cm_event **event)
{
	struct sroce_cm_id *s = NULL, *t;
	struct sroce_cm_event *e;
	pthread_mutex_lock(&ids_lock);
	for (int b = 0; b < ID_BUCKETS && !s; b++)
		for (t = ids[b]; t && !s; t = t->next)
			if (t->id.channel == channel && t->id.verbs && !t->removed)
				s = t;
	if (s) {
		s->removed = 1;
		pthread_mutex_lock(&s->lock);
		s->events++;
		pthread_mutex_unlock(&s->lock);
	}
	pthread_mutex_unlock(&ids_lock);
	if (!s)
		return ENODEV;
	e = calloc(1, sizeof(*e));
	if (!e) {
		id_event_done(s);
		return ENOMEM;
	}
	e->ev.id = &s->id;
	e->ev.event = RDMA_CM_EVENT_DEVICE_REMOVAL;
	*event = &e->ev;
	return 0;
}

static int get_event(struct rdma_event_channel *channel, struct rdma_cm_event **event,
		     int timeout_ms)
{
	struct sroce_ctl_cm_event in;
	struct sroce_cm_event *e = NULL;
	int err;

	if (!channel || !event)
		return EINVAL;
	for (;;) {
		if (!pending_pop((struct sroce_cm_channel *)channel, &in)) {
			err = read_event(channel->fd, &in, timeout_ms);
			if (err == ENODEV)
				return removal_event(channel, event);
			if (err)
				return err;
		}
		err = process_event(&in, &e);
		if (err == EAGAIN)
			continue;
		if (err)
			return err;
		*event = &e->ev;
		return 0;
	}
}

EXPORT int rdma_get_cm_event(struct rdma_event_channel *channel, struct rdma_cm_event **event)
{
	int err = get_event(channel, event, -1);
	return err ? fail(err) : 0;
}

EXPORT int rdma_ack_cm_event(struct rdma_cm_event *event)
{
	struct sroce_cm_id *s;
	if (!event)
		return fail(EINVAL);
	/* A connection request's event counts on its listener (process_event). */
	s = to_sid(event->event == RDMA_CM_EVENT_CONNECT_REQUEST && event->listen_id ? event->listen_id : event->id);
	id_event_done(s);
	free(event);
	return 0;
}

/* A synchronous ID's call waits for its event: 0 when it is want, else -1
 * with errno (the event's status, or ETIMEDOUT). The event is kept in
 * id->event until the next call, as librdmacm does. */
static int sync_wait(struct sroce_cm_id *s, enum rdma_cm_event_type want)
{
	struct rdma_cm_event *ev;
	int err;

	if (s->id.event) {
		rdma_ack_cm_event(s->id.event);
		s->id.event = NULL;
	}
	err = get_event(s->id.channel, &ev, SROCE_CM_SYNC_WAIT_SEC * 1000);
	if (err == ETIMEDOUT)
		sroce_warn("no %s event within %d s", rdma_event_str(want), SROCE_CM_SYNC_WAIT_SEC);
	if (err)
		return fail(err);
	s->id.event = ev;
	if (ev->event != want) {
		err = ev->status < 0 ? -ev->status : ECONNREFUSED;
		return fail(err);
	}
	return 0;
}

/* ---- addressing ---- */

EXPORT int rdma_bind_addr(struct rdma_cm_id *id, struct sockaddr *addr)
{
	struct sroce_cm_id *s = to_sid(id);
	struct sroce_ctl_cm_addr_req req = {.id = s->handle};
	struct sroce_ctl_cm_id_info info;
	int err;

	if (!addr || !sroce_cm_addr_len(addr))
		return fail(EINVAL);
	sroce_cm_addr_to(&req.src, addr);
	err = sroce_cm_call(SROCE_OP_CM_BIND, &req, sizeof(req), &info, sizeof(info), NULL, 0);
	if (err)
		return fail(err);
	apply_info(s, &info);
	return 0;
}

EXPORT int rdma_resolve_addr(struct rdma_cm_id *id, struct sockaddr *src_addr,
			     struct sockaddr *dst_addr, int timeout_ms)
{
	struct sroce_cm_id *s = to_sid(id);
	struct sroce_ctl_cm_addr_req req = {.id = s->handle, .timeout_ms = (uint32_t)timeout_ms};
	int err;

	if (!dst_addr || !sroce_cm_addr_len(dst_addr))
		return fail(EINVAL);
	if (src_addr && sroce_cm_addr_len(src_addr))
		sroce_cm_addr_to(&req.src, src_addr);
	sroce_cm_addr_to(&req.dst, dst_addr);
	memcpy(&id->route.addr.dst_storage, dst_addr, sroce_cm_addr_len(dst_addr));
	err = sroce_cm_call(SROCE_OP_CM_RESOLVE_ADDR, &req, sizeof(req), NULL, 0, NULL, 0);
	if (err)
		return fail(err);
	return s->sync ? sync_wait(s, RDMA_CM_EVENT_ADDR_RESOLVED) : 0;
}

EXPORT int rdma_resolve_route(struct rdma_cm_id *id, int timeout_ms)
{
	struct sroce_cm_id *s = to_sid(id);
	struct sroce_ctl_cm_id_arg req = {.id = s->handle, .arg = (uint32_t)timeout_ms};
	int err = sroce_cm_call(SROCE_OP_CM_RESOLVE_ROUTE, &req, sizeof(req), NULL, 0, NULL, 0);
	if (err)
		return fail(err);
	return s->sync ? sync_wait(s, RDMA_CM_EVENT_ROUTE_RESOLVED) : 0;
}

EXPORT uint16_t rdma_get_src_port(struct rdma_cm_id *id)
{
	struct sockaddr *sa = &id->route.addr.src_addr;
	if (sa->sa_family == AF_INET6)
		return id->route.addr.src_sin6.sin6_port;
	return sa->sa_family == AF_INET ? id->route.addr.src_sin.sin_port : 0;
}

EXPORT uint16_t rdma_get_dst_port(struct rdma_cm_id *id)
{
	struct sockaddr *sa = &id->route.addr.dst_addr;
	if (sa->sa_family == AF_INET6)
		return id->route.addr.dst_sin6.sin6_port;
	return sa->sa_family == AF_INET ? id->route.addr.dst_sin.sin_port : 0;
}

/* ---- QPs ---- */

/* Creates the CQs (and completion channels) rdma_create_qp makes when the
 * program gave none, as librdmacm does. */
static int create_cqs(struct sroce_cm_id *s, struct ibv_qp_init_attr *attr)
{
	struct rdma_cm_id *id = &s->id;
	if (!attr->recv_cq) {
		id->recv_cq_channel = ibv_create_comp_channel(id->verbs);
		if (!id->recv_cq_channel)
			return -1;
		id->recv_cq = ibv_create_cq(id->verbs, (int)(attr->cap.max_recv_wr ? attr->cap.max_recv_wr : 1),
					    id, id->recv_cq_channel, 0);
		if (!id->recv_cq)
			return -1;
		attr->recv_cq = id->recv_cq;
		s->lib_cqs |= 1;
	}
	if (!attr->send_cq) {
		id->send_cq_channel = ibv_create_comp_channel(id->verbs);
		if (!id->send_cq_channel)
			return -1;
		id->send_cq = ibv_create_cq(id->verbs, (int)(attr->cap.max_send_wr ? attr->cap.max_send_wr : 1),
					    id, id->send_cq_channel, 0);
		if (!id->send_cq)
			return -1;
		attr->send_cq = id->send_cq;
		s->lib_cqs |= 2;
	}
	return 0;
}

static void destroy_cqs(struct sroce_cm_id *s)
{
	struct rdma_cm_id *id = &s->id;
	if (s->lib_cqs & 1) {
		if (id->recv_cq)
			ibv_destroy_cq(id->recv_cq);
		if (id->recv_cq_channel)
			ibv_destroy_comp_channel(id->recv_cq_channel);
		id->recv_cq = NULL;
		id->recv_cq_channel = NULL;
	}
	if (s->lib_cqs & 2) {
		if (id->send_cq)
			ibv_destroy_cq(id->send_cq);
		if (id->send_cq_channel)
			ibv_destroy_comp_channel(id->send_cq_channel);
		id->send_cq = NULL;
		id->send_cq_channel = NULL;
	}
	s->lib_cqs = 0;
}

/* The first states of a new QP: INIT for a connected QP, up to RTS for UD
 * (which needs no peer), from the CM's attributes. */
static int init_qp(struct sroce_cm_id *s)
{
	if (!s->id.route.addr.src_addr.sa_family && !s->id.verbs)
		return 0;
	if (modify_qp(s, IBV_QPS_INIT))
		return -1;
	if (s->id.qp_type != IBV_QPT_UD)
		return 0;
	if (modify_qp(s, IBV_QPS_RTR))
		return -1;
	return modify_qp(s, IBV_QPS_RTS);
}

static int create_qp_for(struct sroce_cm_id *s, struct ibv_pd *pd, struct ibv_qp_init_attr *in)
{
	struct rdma_cm_id *id = &s->id;
	struct ibv_qp_init_attr attr = *in;
	struct ibv_qp *qp;

	if (!id->verbs)
		return fail(EINVAL);
	if (!pd) {
		pd = ibv_alloc_pd(id->verbs);
		if (!pd)
			return fail(ENOMEM);
		s->lib_pd = 1;
	} else if (pd->context != id->verbs) {
		return fail(EINVAL);
	}
	if (create_cqs(s, &attr))
		goto fail_cqs;
	if (!attr.srq && id->srq)
		attr.srq = id->srq;
	attr.qp_type = id->qp_type;
	qp = ibv_create_qp(pd, &attr);
	if (!qp)
		goto fail_cqs;
	id->qp = qp;
	id->pd = pd;
	if (init_qp(s)) {
		int err = errno;
		ibv_destroy_qp(qp);
		id->qp = NULL;
		errno = err;
		goto fail_cqs;
	}
	in->cap = attr.cap;
	return 0;
fail_cqs: {
	int err = errno ? errno : ENOMEM;
	destroy_cqs(s);
	if (s->lib_pd) {
		ibv_dealloc_pd(pd);
		s->lib_pd = 0;
		id->pd = NULL;
	}
	return fail(err);
}
}

EXPORT int rdma_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd,
			  struct ibv_qp_init_attr *qp_init_attr)
{
	if (!qp_init_attr)
		return fail(EINVAL);
	return create_qp_for(to_sid(id), pd, qp_init_attr);
}

EXPORT int rdma_create_qp_ex(struct rdma_cm_id *id, struct ibv_qp_init_attr_ex *attr)
{
	struct ibv_qp_init_attr a;
	int ret;

	if (!attr || (attr->comp_mask & ~(uint32_t)IBV_QP_INIT_ATTR_PD))
		return fail(EOPNOTSUPP);
	memset(&a, 0, sizeof(a));
	a.qp_context = attr->qp_context;
	a.send_cq = attr->send_cq;
	a.recv_cq = attr->recv_cq;
	a.srq = attr->srq;
	a.cap = attr->cap;
	a.qp_type = attr->qp_type;
	a.sq_sig_all = attr->sq_sig_all;
	ret = create_qp_for(to_sid(id), (attr->comp_mask & IBV_QP_INIT_ATTR_PD) ? attr->pd : NULL, &a);
	if (!ret)
		attr->cap = a.cap;
	return ret;
}

EXPORT void rdma_destroy_qp(struct rdma_cm_id *id)
{
	struct sroce_cm_id *s = to_sid(id);
	if (id->qp)
		ibv_destroy_qp(id->qp);
	id->qp = NULL;
	destroy_cqs(s);
	if (s->lib_pd && id->pd) {
		ibv_dealloc_pd(id->pd);
		id->pd = NULL;
		s->lib_pd = 0;
	}
}

EXPORT int rdma_create_srq_ex(struct rdma_cm_id *id, struct ibv_srq_init_attr_ex *attr)
{
	(void)id;
	(void)attr;
	return fail(EOPNOTSUPP);
}

EXPORT int rdma_create_srq(struct rdma_cm_id *id, struct ibv_pd *pd,
			   struct ibv_srq_init_attr *attr)
{
	struct ibv_srq *srq;
	if (!id->verbs || !attr)
		return fail(EINVAL);
	if (!pd) {
		pd = id->pd ? id->pd : ibv_alloc_pd(id->verbs);
		if (!pd)
			return fail(ENOMEM);
		if (!id->pd) {
			id->pd = pd;
			to_sid(id)->lib_pd = 1;
		}
	}
	srq = ibv_create_srq(pd, attr);
	if (!srq)
		return -1;
	id->srq = srq;
	return 0;
}

EXPORT void rdma_destroy_srq(struct rdma_cm_id *id)
{
	if (id->srq)
		ibv_destroy_srq(id->srq);
	id->srq = NULL;
}

/* ---- connections ---- */

static int conn_req(struct sroce_cm_id *s, struct sroce_ctl_cm_conn *out,
		    const struct rdma_conn_param *p, int for_accept)
{
	struct ibv_device_attr da;
	memset(out, 0, sizeof(*out));
	out->id = s->handle;
	out->retry_count = 7;
	out->rnr_retry_count = 7;
	out->responder_resources = s->responder_resources;
	out->initiator_depth = s->initiator_depth;
	if (p) {
		if (p->private_data_len > SROCE_CTL_CM_PRIVATE || (p->private_data_len && !p->private_data))
			return EINVAL;
		out->private_data_len = p->private_data_len;
		if (p->private_data_len)
			memcpy(out->private_data, p->private_data, p->private_data_len);
		out->responder_resources = p->responder_resources;
		out->initiator_depth = p->initiator_depth;
		out->flow_control = p->flow_control;
		if (!for_accept)
			out->retry_count = p->retry_count;
		out->rnr_retry_count = p->rnr_retry_count;
		out->srq = p->srq;
		out->qp_num = p->qp_num;
	}
	/* Clamp the read depths to the device, as librdmacm does. */
	if (s->id.verbs && !ibv_query_device(s->id.verbs, &da)) {
		if (out->responder_resources > da.max_qp_rd_atom)
			out->responder_resources = (uint8_t)da.max_qp_rd_atom;
		if (out->initiator_depth > da.max_qp_init_rd_atom)
			out->initiator_depth = (uint8_t)da.max_qp_init_rd_atom;
	}
	if (s->id.qp) {
		out->qp_num = s->id.qp->qp_num;
		out->srq = s->id.qp->srq != NULL;
	}
	if (s->id.qp_type == IBV_QPT_UD)
		out->qkey = RDMA_UDP_QKEY;
	s->responder_resources = out->responder_resources;
	s->initiator_depth = out->initiator_depth;
	return 0;
}

EXPORT int rdma_connect(struct rdma_cm_id *id, struct rdma_conn_param *conn_param)
{
	struct sroce_cm_id *s = to_sid(id);
	struct sroce_ctl_cm_conn req;
	int err;

	if (!conn_param && id->qp_type != IBV_QPT_UD && !id->qp)
		return fail(EINVAL);
	s->responder_resources = RDMA_MAX_RESP_RES;
	s->initiator_depth = RDMA_MAX_INIT_DEPTH;
	err = conn_req(s, &req, conn_param, 0);
	if (err)
		return fail(err);
	err = sroce_cm_call(SROCE_OP_CM_CONNECT, &req, sizeof(req), NULL, 0, NULL, 0);
	if (err)
		return fail(err);
	return s->sync ? sync_wait(s, RDMA_CM_EVENT_ESTABLISHED) : 0;
}

EXPORT int rdma_establish(struct rdma_cm_id *id)
{
	struct sroce_cm_id *s = to_sid(id);
	struct sroce_ctl_cm_conn req = {.id = s->handle};
	int err = sroce_cm_call(SROCE_OP_CM_ACCEPT, &req, sizeof(req), NULL, 0, NULL, 0);
	return err ? fail(err) : 0;
}

EXPORT int rdma_listen(struct rdma_cm_id *id, int backlog)
{
	struct sroce_cm_id *s = to_sid(id);
	struct sroce_ctl_cm_id_arg req = {.id = s->handle, .arg = backlog > 0 ? (uint32_t)backlog : 0};
	int err = sroce_cm_call(SROCE_OP_CM_LISTEN, &req, sizeof(req), NULL, 0, NULL, 0);
	if (err)
		return fail(err);
	query_id(s);
	return 0;
}

EXPORT int rdma_get_request(struct rdma_cm_id *listen, struct rdma_cm_id **id)
{
	struct sroce_cm_id *s = to_sid(listen);
	struct rdma_cm_event *ev;
	int err;

	if (!s->sync)
		return fail(EINVAL);
	if (listen->event) {
		rdma_ack_cm_event(listen->event);
		listen->event = NULL;
	}
	for (;;) {
		err = get_event(listen->channel, &ev, -1);
		if (err)
			return fail(err);
		if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST)
			break;
		/* Nothing else is for a listener; drop it. */
		rdma_ack_cm_event(ev);
	}
	if (ev->status) {
		err = -ev->status;
		rdma_ack_cm_event(ev);
		return fail(err);
	}
	*id = ev->id;
	ev->id->event = ev;
	return 0;
}

EXPORT int rdma_accept(struct rdma_cm_id *id, struct rdma_conn_param *conn_param)
{
	struct sroce_cm_id *s = to_sid(id);
	struct sroce_ctl_cm_conn req;
	int err;

	if (!conn_param && id->qp_type != IBV_QPT_UD && !id->qp)
		return fail(EINVAL);
	err = conn_req(s, &req, conn_param, 1);
	if (err)
		return fail(err);
	/* RTR before the REP leaves; RTS once the daemon has chosen the
	 * starting PSN the REP carries (the QP sends nothing before
	 * rdma_accept returns either way). */
	if (id->qp && id->qp_type != IBV_QPT_UD && modify_qp(s, IBV_QPS_RTR)) {
		err = errno;
		rdma_reject(id, NULL, 0);
		return fail(err);
	}
	err = sroce_cm_call(SROCE_OP_CM_ACCEPT, &req, sizeof(req), NULL, 0, NULL, 0);
	if (!err && id->qp && id->qp_type != IBV_QPT_UD && modify_qp(s, IBV_QPS_RTS))
		err = errno;
	if (err) {
		qp_to_err(s);
		return fail(err);
	}
	if (s->sync && id->qp_type != IBV_QPT_UD)
		return sync_wait(s, RDMA_CM_EVENT_ESTABLISHED);
	return 0;
}

EXPORT int rdma_reject(struct rdma_cm_id *id, const void *private_data, uint8_t private_data_len)
{
	struct sroce_ctl_cm_conn req = {.id = to_sid(id)->handle};
	int err;
	if (private_data_len > SROCE_CTL_CM_PRIVATE || (private_data_len && !private_data))
		return fail(EINVAL);
	req.private_data_len = private_data_len;
	if (private_data_len)
		memcpy(req.private_data, private_data, private_data_len);
	err = sroce_cm_call(SROCE_OP_CM_REJECT, &req, sizeof(req), NULL, 0, NULL, 0);
	return err ? fail(err) : 0;
}

EXPORT int rdma_reject_ece(struct rdma_cm_id *id, const void *private_data,
			   uint8_t private_data_len)
{
	return rdma_reject(id, private_data, private_data_len);
}

EXPORT int rdma_notify(struct rdma_cm_id *id, enum ibv_event_type event)
{
	struct sroce_ctl_cm_id_arg req = {.id = to_sid(id)->handle, .arg = (uint32_t)event};
	int err = sroce_cm_call(SROCE_OP_CM_NOTIFY, &req, sizeof(req), NULL, 0, NULL, 0);
	return err ? fail(err) : 0;
}

EXPORT int rdma_disconnect(struct rdma_cm_id *id)
{
	struct sroce_cm_id *s = to_sid(id);
	struct sroce_ctl_cm_id_arg req = {.id = s->handle};
	int err;

	if (qp_to_err(s))
		return -1;
	err = sroce_cm_call(SROCE_OP_CM_DISCONNECT, &req, sizeof(req), NULL, 0, NULL, 0);
	return err ? fail(err) : 0;
}

EXPORT int rdma_set_option(struct rdma_cm_id *id, int level, int optname, void *optval,
			   size_t optlen)
{
	struct sroce_ctl_cm_option req = {.id = to_sid(id)->handle, .level = (uint32_t)level,
					  .optname = (uint32_t)optname};
	int err;

	if (!optval)
		return fail(EINVAL);
	if (level != RDMA_OPTION_ID)
		return fail(ENOSYS); /* RDMA_OPTION_IB_PATH: paths come from the daemon */
	switch (optlen) {
	case 1:
		req.value = *(uint8_t *)optval;
		break;
	case 2:
		req.value = *(uint16_t *)optval;
		break;
	case 4:
		req.value = *(uint32_t *)optval;
		break;
	case 8:
		req.value = *(uint64_t *)optval;
		break;
	default:
		return fail(EINVAL);
	}
	err = sroce_cm_call(SROCE_OP_CM_SET_OPTION, &req, sizeof(req), NULL, 0, NULL, 0);
	return err ? fail(err) : 0;
}

EXPORT int rdma_migrate_id(struct rdma_cm_id *id, struct rdma_event_channel *channel)
{
	struct sroce_cm_id *s = to_sid(id);
	struct sroce_cm_channel *old_own = s->own_channel;
	struct sroce_ctl_cm_id_arg req = {.id = s->handle};
	struct rdma_event_channel *ch = channel;
	int err;

	if (!ch) {
		ch = rdma_create_event_channel();
		if (!ch)
			return -1;
	}
	req.arg = ((struct sroce_cm_channel *)ch)->handle;
	err = sroce_cm_call(SROCE_OP_CM_MIGRATE_ID, &req, sizeof(req), NULL, 0, NULL, 0);
	if (err) {
		if (!channel)
			rdma_destroy_event_channel(ch);
		return fail(err);
	}
	if (id->channel != ch)
		move_pending((struct sroce_cm_channel *)id->channel, (struct sroce_cm_channel *)ch, s->handle);
	id->channel = ch;
	s->sync = channel == NULL;
	s->own_channel = channel ? NULL : (struct sroce_cm_channel *)ch;
	if (old_own)
		rdma_destroy_event_channel(&old_own->ch);
	return 0;
}

/* ---- endpoints ---- */

EXPORT int rdma_create_ep(struct rdma_cm_id **id, struct rdma_addrinfo *res, struct ibv_pd *pd,
			  struct ibv_qp_init_attr *qp_init_attr)
{
	struct rdma_cm_id *cid;
	struct sroce_cm_id *s;
	int err;

	if (!id || !res)
		return fail(EINVAL);
	if (create_id(NULL, &cid, NULL, (enum rdma_port_space)res->ai_port_space,
		      (enum ibv_qp_type)res->ai_qp_type))
		return -1;
	s = to_sid(cid);
	if (res->ai_flags & RAI_PASSIVE) {
		if (rdma_bind_addr(cid, res->ai_src_addr))
			goto fail;
		if (qp_init_attr) {
			s->qp_init = malloc(sizeof(*qp_init_attr));
			if (!s->qp_init) {
				errno = ENOMEM;
				goto fail;
			}
			*s->qp_init = *qp_init_attr;
			cid->pd = pd;
		}
		*id = cid;
		return 0;
	}
	if (rdma_resolve_addr(cid, res->ai_src_addr, res->ai_dst_addr, 2000))
		goto fail;
	if (rdma_resolve_route(cid, 2000))
		goto fail;
	if (qp_init_attr && rdma_create_qp(cid, pd, qp_init_attr))
		goto fail;
	*id = cid;
	return 0;
fail:
	err = errno;
	rdma_destroy_ep(cid);
	return fail(err);
}

EXPORT void rdma_destroy_ep(struct rdma_cm_id *id)
{
	if (id->qp)
		rdma_destroy_qp(id);
	if (id->srq)
		rdma_destroy_srq(id);
	rdma_destroy_id(id); /* which acks the event a synchronous ID kept */
}

/* ---- devices ---- */

EXPORT struct ibv_context **rdma_get_devices(int *num_devices)
{
	struct ibv_device **list;
	struct ibv_context **out;
	int n, k = 0;

	list = ibv_get_device_list(&n);
	if (!list) {
		if (num_devices)
			*num_devices = 0;
		return NULL;
	}
	out = calloc((size_t)n + 1, sizeof(*out));
	if (out) {
		for (int i = 0; i < n; i++) {
			struct ibv_context *c = sroce_cm_device(list[i]->name);
			if (c)
				out[k++] = c;
		}
	}
	ibv_free_device_list(list);
	if (num_devices)
		*num_devices = k;
	return out;
}

EXPORT void rdma_free_devices(struct ibv_context **list)
{
	free(list); /* the contexts stay open for the process, as librdmacm's do */
}

/* ---- multicast ---- */

static uint32_t mc_next_uid;

/* Joins the group of addr: the join is the ID's first, then the daemon is
 * asked; MULTICAST_JOIN follows (a synchronous ID waits for it here). */
static int join_multicast(struct rdma_cm_id *id, struct sockaddr *addr, int send_only, void *context)
{
	struct sroce_cm_id *s = to_sid(id);
	struct sroce_ctl_cm_mcast req = {.id = s->handle,
					 .join_flags = send_only ? RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER
								 : RDMA_MC_JOIN_FLAG_FULLMEMBER};
	struct sroce_cm_mc *mc, **pos;
	socklen_t len = sroce_cm_addr_len(addr);
	int err;

	if (!len)
		return fail(EINVAL);
	mc = calloc(1, sizeof(*mc));
	if (!mc)
		return fail(ENOMEM);
	mc->uid = __atomic_add_fetch(&mc_next_uid, 1, __ATOMIC_RELAXED);
	mc->send_only = send_only;
	mc->context = context;
	memcpy(&mc->addr, addr, len);
	req.uid = mc->uid;
	sroce_cm_addr_to(&req.addr, addr);
	pthread_mutex_lock(&s->lock);
	mc->next = s->mc_list;
	s->mc_list = mc;
	pthread_mutex_unlock(&s->lock);
	err = sroce_cm_call(SROCE_OP_CM_JOIN_MCAST, &req, sizeof(req), NULL, 0, NULL, 0);
	if (err) {
		pthread_mutex_lock(&s->lock);
		for (pos = &s->mc_list; *pos != mc; pos = &(*pos)->next)
			;
		*pos = mc->next;
		pthread_mutex_unlock(&s->lock);
		free(mc);
		return fail(err);
	}
	return s->sync ? sync_wait(s, RDMA_CM_EVENT_MULTICAST_JOIN) : 0;
}

EXPORT int rdma_join_multicast(struct rdma_cm_id *id, struct sockaddr *addr, void *context)
{
	return join_multicast(id, addr, 0, context);
}

EXPORT int rdma_join_multicast_ex(struct rdma_cm_id *id, struct rdma_cm_join_mc_attr_ex *attr,
				  void *context)
{
	if (!attr)
		return fail(EINVAL);
	if (attr->comp_mask >= RDMA_CM_JOIN_MC_ATTR_RESERVED)
		return fail(EOPNOTSUPP);
	if (!(attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_ADDRESS) ||
	    !(attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS) ||
	    attr->join_flags >= RDMA_MC_JOIN_FLAG_RESERVED)
		return fail(EINVAL);
	return join_multicast(id, attr->addr,
			      attr->join_flags == RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER, context);
}

/* As librdmacm: the newest join of the same address (the whole socket
 * address, port included) is left, the QP detached from its group, and
 * the daemon told; EADDRNOTAVAIL when the ID has no such join. */
EXPORT int rdma_leave_multicast(struct rdma_cm_id *id, struct sockaddr *addr)
{
	struct sroce_cm_id *s = to_sid(id);
	struct sroce_ctl_cm_mcast req = {.id = s->handle};
	struct sroce_cm_mc *mc, **pos;
	socklen_t len = sroce_cm_addr_len(addr);
	int err;

	if (!len)
		return fail(EINVAL);
	pthread_mutex_lock(&s->lock);
	for (pos = &s->mc_list; *pos && memcmp(&(*pos)->addr, addr, len); pos = &(*pos)->next)
		;
	mc = *pos;
	if (mc) {
		*pos = mc->next;
		if (mc->attached && id->qp)
			ibv_detach_mcast(id->qp, &mc->mgid, mc->mlid);
	}
	pthread_mutex_unlock(&s->lock);
	if (!mc)
		return fail(EADDRNOTAVAIL);
	req.uid = mc->uid;
	sroce_cm_addr_to(&req.addr, addr);
	free(mc);
	err = sroce_cm_call(SROCE_OP_CM_LEAVE_MCAST, &req, sizeof(req), NULL, 0, NULL, 0);
	return err ? fail(err) : 0;
}

/* ---- what sroce does not offer ---- */

EXPORT int rdma_get_remote_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
	(void)id;
	if (!ece)
		return fail(EINVAL);
	memset(ece, 0, sizeof(*ece)); /* no enhanced connection establishment options */
	return 0;
}

EXPORT int rdma_set_local_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
	(void)id;
	if (!ece)
		return fail(EINVAL);
	return fail(EOPNOTSUPP);
}

EXPORT const char *rdma_event_str(enum rdma_cm_event_type event)
{
	static const char *const names[] = {
		"RDMA_CM_EVENT_ADDR_RESOLVED",    "RDMA_CM_EVENT_ADDR_ERROR",
		"RDMA_CM_EVENT_ROUTE_RESOLVED",   "RDMA_CM_EVENT_ROUTE_ERROR",
		"RDMA_CM_EVENT_CONNECT_REQUEST",  "RDMA_CM_EVENT_CONNECT_RESPONSE",
		"RDMA_CM_EVENT_CONNECT_ERROR",    "RDMA_CM_EVENT_UNREACHABLE",
		"RDMA_CM_EVENT_REJECTED",         "RDMA_CM_EVENT_ESTABLISHED",
		"RDMA_CM_EVENT_DISCONNECTED",     "RDMA_CM_EVENT_DEVICE_REMOVAL",
		"RDMA_CM_EVENT_MULTICAST_JOIN",   "RDMA_CM_EVENT_MULTICAST_ERROR",
		"RDMA_CM_EVENT_ADDR_CHANGE",      "RDMA_CM_EVENT_TIMEWAIT_EXIT",
	};
	if ((unsigned)event < sizeof(names) / sizeof(names[0]))
		return names[event];
	return "UNKNOWN EVENT";
}
