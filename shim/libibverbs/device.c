/*
 * device.c: devices, contexts, queries, protection domains, address
 * handles, completion channels and asynchronous events.
 *
 * Devices are the daemon's: ibv_get_device_list asks it over a short-lived
 * connection. struct ibv_device objects are kept for the life of the
 * process (one per name), so a context outlives ibv_free_device_list as
 * with rdma-core. ibv_open_device opens the connection that is the
 * context.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "internal.h"

static pthread_mutex_t devices_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sroce_device *devices;
static int warned_no_daemon;

EXPORT struct ibv_device **ibv_get_device_list(int *num_devices)
{
	uint8_t reply[SROCE_CTL_MAX_MSG];
	size_t len = 0;
	uint32_t seq = 100;
	struct ibv_device **list;
	int fd, err, n = 0;

	if (num_devices)
		*num_devices = 0;
	err = sroce_connect(&fd);
	if (err) {
		pthread_mutex_lock(&devices_lock);
		if (!warned_no_daemon) {
			warned_no_daemon = 1;
			sroce_warn("no sroce daemon at %s (%s)%s: no RDMA devices; start one with "
				   "\"sroce daemon\" or point SROCE_SOCKET at its socket",
				   sroce_socket_path(), strerror(err), sroce_socket_also());
		}
		pthread_mutex_unlock(&devices_lock);
		list = calloc(1, sizeof(*list));
		if (!list)
			errno = ENOMEM;
		return list;
	}
	err = sroce_call_fd(fd, &seq, SROCE_OP_LIST_DEVICES, NULL, 0, NULL, 0, reply,
			    sizeof(reply), &len, NULL, NULL);
	close(fd);
	if (err) {
		errno = err;
		return NULL;
	}
	struct sroce_ctl_devices *hdr = (struct sroce_ctl_devices *)reply;
	if (len < sizeof(*hdr) ||
	    (len - sizeof(*hdr)) / sizeof(struct sroce_ctl_device) < hdr->count) {
		errno = EPROTO;
		return NULL;
	}
	list = calloc(hdr->count + 1, sizeof(*list));
	if (!list) {
		errno = ENOMEM;
		return NULL;
	}
	struct sroce_ctl_device *d = (struct sroce_ctl_device *)(hdr + 1);
	pthread_mutex_lock(&devices_lock);
	for (uint32_t i = 0; i < hdr->count; i++, d++) {
		struct sroce_device *sd;
		d->name[SROCE_CTL_NAME - 1] = 0;
		d->ifname[sizeof(d->ifname) - 1] = 0;
		for (sd = devices; sd; sd = sd->next)
			if (!strcmp(sd->dev.name, d->name))
				break;
		if (!sd) {
			sd = calloc(1, sizeof(*sd));
			if (!sd)
				break;
			snprintf(sd->dev.name, sizeof(sd->dev.name), "%.63s", d->name);
			/*
			 * dev_name is the daemon's entry in /dev/infiniband
			 * (daemon.DevNodeName: the name and the GUID's bytes in
			 * hex), never the kernel's uverbsN, which would name a
			 * kernel device's node on a host that has some. UCX
			 * looks for /dev/infiniband/<dev_name>.
			 */
			const uint8_t *g = (const uint8_t *)&d->node_guid;
			snprintf(sd->dev.dev_name, sizeof(sd->dev.dev_name),
				 "%.40s.%02x%02x%02x%02x%02x%02x%02x%02x", d->name, g[0], g[1],
				 g[2], g[3], g[4], g[5], g[6], g[7]);
			snprintf(sd->dev.dev_path, sizeof(sd->dev.dev_path),
				 "/sys/class/infiniband_verbs/%s", sd->dev.dev_name);
			snprintf(sd->dev.ibdev_path, sizeof(sd->dev.ibdev_path),
				 "/sys/class/infiniband/%.63s", d->name);
			sd->dev.node_type = IBV_NODE_CA;
			sd->dev.transport_type = IBV_TRANSPORT_IB;
			sd->next = devices;
			devices = sd;
		}
		snprintf(sd->ifname, sizeof(sd->ifname), "%.15s", d->ifname);
		sd->guid = d->node_guid;
		sd->index = (int)d->ifindex;
		list[n++] = &sd->dev;
	}
	pthread_mutex_unlock(&devices_lock);
	if (num_devices)
		*num_devices = n;
	return list;
}

EXPORT void ibv_free_device_list(struct ibv_device **list)
{
	free(list);
}

EXPORT const char *ibv_get_device_name(struct ibv_device *device)
{
	return device->name;
}

EXPORT uint64_t ibv_get_device_guid(struct ibv_device *device)
{
	return container_of(device, struct sroce_device, dev)->guid;
}

EXPORT int ibv_get_device_index(struct ibv_device *device)
{
	return container_of(device, struct sroce_device, dev)->index;
}

static int query_device_raw(struct sroce_context *c)
{
	return sroce_call(c, SROCE_OP_QUERY_DEVICE, NULL, 0, NULL, 0, &c->dattr,
			  sizeof(c->dattr), NULL, 0);
}

EXPORT struct ibv_context *ibv_open_device(struct ibv_device *device)
{
	struct sroce_context *c;
	struct sroce_ctl_open req = {{0}};
	struct sroce_ctl_device reply;
	int fds[3] = {-1, -1, -1};
	int err;

	c = calloc(1, sizeof(*c));
	if (!c) {
		errno = ENOMEM;
		return NULL;
	}
	pthread_mutex_init(&c->ctl_lock, NULL);
	pthread_mutex_init(&c->table_lock, NULL);
	c->doorbell = -1;
	c->watch_pipe[0] = c->watch_pipe[1] = -1;
	err = sroce_connect(&c->sock);
	if (err) {
		sroce_warn("cannot open %s: no sroce daemon at %s (%s)%s", device->name,
			   sroce_socket_path(), strerror(err), sroce_socket_also());
		goto fail_free;
	}
	snprintf(req.name, sizeof(req.name), "%s", device->name);
	err = sroce_call(c, SROCE_OP_OPEN, &req, sizeof(req), NULL, 0, &reply, sizeof(reply),
			 fds, 3);
	if (err)
		goto fail_sock;
	c->page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fds[2], 0);
	close(fds[2]);
	fds[2] = -1;
	if (c->page == MAP_FAILED) {
		err = errno;
		goto fail_fds;
	}
	c->doorbell = fds[1];
	err = query_device_raw(c);
	if (err)
		goto fail_map;

	struct ibv_context *ctx = &c->vctx.context;
	ctx->device = device;
	ctx->cmd_fd = c->sock;
	ctx->async_fd = fds[0];
	ctx->num_comp_vectors = 1;
	pthread_mutex_init(&ctx->mutex, NULL);
	ctx->abi_compat = SROCE_ABI_EXTENDED;
	ctx->ops._compat_query_device = ibv_query_device;
	ctx->ops._compat_query_port = ibv_query_port;
	ctx->ops.poll_cq = sroce_poll_cq;
	ctx->ops.req_notify_cq = sroce_req_notify_cq;
	ctx->ops.post_send = sroce_post_send;
	ctx->ops.post_recv = sroce_post_recv;
	ctx->ops.post_srq_recv = sroce_post_srq_recv;
	ctx->ops.alloc_mw = sroce_alloc_mw;
	ctx->ops.bind_mw = sroce_bind_mw;
	ctx->ops.dealloc_mw = sroce_dealloc_mw;
	c->vctx.query_port = sroce_query_port;
	c->vctx.query_device_ex = sroce_query_device_ex;
	c->vctx.create_cq_ex = sroce_create_cq_ex;
	c->vctx.create_qp_ex = sroce_create_qp_ex;
	c->vctx.alloc_parent_domain = sroce_alloc_parent_domain;
	c->vctx.alloc_td = sroce_alloc_td;
	c->vctx.dealloc_td = sroce_dealloc_td;
	c->vctx.advise_mr = sroce_advise_mr;
	c->vctx.open_xrcd = (void *)sroce_open_xrcd;
	c->vctx.close_xrcd = (void *)sroce_close_xrcd;
	c->vctx.create_srq_ex = (void *)sroce_create_srq_ex;
	c->vctx.get_srq_num = (void *)sroce_get_srq_num;
	c->vctx.open_qp = (void *)sroce_open_qp;
	c->vctx.sz = sizeof(struct verbs_context);
	err = sroce_watch(c);
	if (err)
		goto fail_map;
	return ctx;

fail_map:
	munmap(c->page, 4096);
fail_fds:
	for (int i = 0; i < 3; i++)
		if (fds[i] >= 0)
			close(fds[i]);
fail_sock:
	close(c->sock);
fail_free:
	free(c);
	errno = err;
	return NULL;
}

EXPORT int ibv_close_device(struct ibv_context *context)
{
	struct sroce_context *c = to_sctx(context);
	sroce_unwatch(c);
	/* Closing the connection destroys everything the context created. */
	close(c->sock);
	close(context->async_fd);
	if (c->doorbell >= 0)
		close(c->doorbell);
	munmap(c->page, 4096);
	free(c->cqs.keys);
	free(c->cqs.vals);
	free(c->qps.keys);
	free(c->qps.vals);
	free(c->srqs.keys);
	free(c->srqs.vals);
	free(c->channels.keys);
	free(c->channels.vals);
	free(c);
	return 0;
}

/*
 * Rings doorbell number bell after WQEs were published on the rings of
 * its QP or SRQ: the bit tells the daemon which rings to look at (it
 * looks at no others), then the eventfd wakes it if it sleeps.
 */
void sroce_ring_bell(struct sroce_context *c, uint32_t bell)
{
	if (bell && bell < SROCE_CTX_BELLS)
		__atomic_fetch_or(&c->page->bells[bell / 64], (uint64_t)1 << (bell % 64), __ATOMIC_SEQ_CST);
	sroce_ring_doorbell(c);
}

/* Wakes the daemon, when it asked for it: after a doorbell's bit was set, or a CQ armed. */
void sroce_ring_doorbell(struct sroce_context *c)
{
	/*
	 * The ring's index and the bell were stored before; a full fence keeps those stores
	 * from passing this load, or the daemon could set need_wakeup, find
	 * the ring empty and sleep while this thread reads need_wakeup as 0.
	 */
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (__atomic_load_n(&c->page->need_wakeup, __ATOMIC_RELAXED)) {
		uint64_t one = 1;
		ssize_t r = write(c->doorbell, &one, sizeof(one));
		(void)r; /* a full eventfd counter already wakes the daemon */
	}
}

EXPORT int ibv_query_device(struct ibv_context *context, struct ibv_device_attr *a)
{
	struct sroce_context *c = to_sctx(context);
	int err = query_device_raw(c);
	if (err) {
		errno = err;
		return err;
	}
	const struct sroce_ctl_device_attr *d = &c->dattr;
	memset(a, 0, sizeof(*a));
	memcpy(a->fw_ver, d->fw_ver, sizeof(a->fw_ver));
	a->fw_ver[sizeof(a->fw_ver) - 1] = 0;
	a->node_guid = d->node_guid;
	a->sys_image_guid = d->sys_image_guid;
	a->max_mr_size = d->max_mr_size;
	a->page_size_cap = d->page_size_cap;
	a->vendor_id = d->vendor_id;
	a->vendor_part_id = d->vendor_part_id;
	a->hw_ver = d->hw_ver;
	a->max_qp = (int)d->max_qp;
	a->max_qp_wr = (int)d->max_qp_wr;
	a->device_cap_flags = d->device_cap_flags;
	a->max_sge = (int)d->max_sge;
	a->max_sge_rd = (int)d->max_sge_rd;
	a->max_cq = (int)d->max_cq;
	a->max_cqe = (int)d->max_cqe;
	a->max_mr = (int)d->max_mr;
	a->max_pd = (int)d->max_pd;
	a->max_qp_rd_atom = (int)d->max_qp_rd_atom;
	a->max_ee_rd_atom = (int)d->max_ee_rd_atom;
	a->max_res_rd_atom = (int)d->max_res_rd_atom;
	a->max_qp_init_rd_atom = (int)d->max_qp_init_rd_atom;
	a->max_ee_init_rd_atom = (int)d->max_ee_init_rd_atom;
	a->atomic_cap = (int)d->atomic_cap;
	a->max_ee = (int)d->max_ee;
	a->max_rdd = (int)d->max_rdd;
	a->max_mw = (int)d->max_mw;
	a->max_raw_ipv6_qp = (int)d->max_raw_ipv6_qp;
	a->max_raw_ethy_qp = (int)d->max_raw_ethy_qp;
	a->max_mcast_grp = (int)d->max_mcast_grp;
	a->max_mcast_qp_attach = (int)d->max_mcast_qp_attach;
	a->max_total_mcast_qp_attach = (int)d->max_total_mcast_qp_attach;
	a->max_ah = (int)d->max_ah;
	a->max_fmr = (int)d->max_fmr;
	a->max_map_per_fmr = (int)d->max_map_per_fmr;
	a->max_srq = (int)d->max_srq;
	a->max_srq_wr = (int)d->max_srq_wr;
	a->max_srq_sge = (int)d->max_srq_sge;
	a->max_pkeys = d->max_pkeys;
	a->local_ca_ack_delay = d->local_ca_ack_delay;
	a->phys_port_cnt = d->phys_port_cnt;
	return 0;
}

int sroce_query_device_ex(struct ibv_context *context,
			  const struct ibv_query_device_ex_input *input,
			  struct ibv_device_attr_ex *attr, size_t attr_size)
{
	struct ibv_device_attr_ex ex;
	int err;
	if (input && input->comp_mask)
		return EINVAL;
	if (attr_size < sizeof(struct ibv_device_attr))
		return EINVAL;
	memset(&ex, 0, sizeof(ex));
	err = ibv_query_device(context, &ex.orig_attr);
	if (err)
		return err;
	ex.phys_port_cnt_ex = ex.orig_attr.phys_port_cnt;
	/*
	 * On-demand paging: the daemon reaches registered memory through
	 * mappings of the program's own pages and never pins them, so an
	 * IBV_ACCESS_ON_DEMAND registration is an ordinary one, for every
	 * operation. Implicit ODP (the whole address space as one MR) is not
	 * offered: there is nothing to map it from.
	 */
	ex.odp_caps.general_caps = IBV_ODP_SUPPORT;
	ex.odp_caps.per_transport_caps.rc_odp_caps = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV |
		IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC |
		IBV_ODP_SUPPORT_SRQ_RECV;
	ex.odp_caps.per_transport_caps.uc_odp_caps = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV |
		IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_SRQ_RECV;
	ex.odp_caps.per_transport_caps.ud_odp_caps = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV |
		IBV_ODP_SUPPORT_SRQ_RECV;
	ex.xrc_odp_caps = ex.odp_caps.per_transport_caps.rc_odp_caps;
	/* The kernel's 64-bit flags: the 32 of device_cap_flags, and
	 * IB_UVERBS_DEVICE_ATOMIC_WRITE (1 << 40): the engine executes
	 * IBV_WR_ATOMIC_WRITE (ibv_wr_atomic_write). */
	ex.device_cap_flags_ex = ex.orig_attr.device_cap_flags | SROCE_DEVICE_ATOMIC_WRITE;
	memcpy(attr, &ex, attr_size < sizeof(ex) ? attr_size : sizeof(ex));
	if (attr_size > sizeof(ex))
		memset((char *)attr + sizeof(ex), 0, attr_size - sizeof(ex));
	return 0;
}

void sroce_port_attr_from_ctl(struct ibv_port_attr *o, const struct sroce_ctl_port_attr *p)
{
	memset(o, 0, sizeof(*o));
	o->state = (int)p->state;
	o->max_mtu = (int)p->max_mtu;
	o->active_mtu = (int)p->active_mtu;
	o->gid_tbl_len = p->gid_tbl_len;
	o->port_cap_flags = p->port_cap_flags;
	o->max_msg_sz = p->max_msg_sz;
	o->bad_pkey_cntr = p->bad_pkey_cntr;
	o->qkey_viol_cntr = p->qkey_viol_cntr;
	o->pkey_tbl_len = p->pkey_tbl_len;
	o->lid = p->lid;
	o->sm_lid = p->sm_lid;
	o->lmc = p->lmc;
	o->max_vl_num = p->max_vl_num;
	o->sm_sl = p->sm_sl;
	o->subnet_timeout = p->subnet_timeout;
	o->init_type_reply = p->init_type_reply;
	o->active_width = p->active_width;
	o->active_speed = p->active_speed;
	o->phys_state = p->phys_state;
	o->link_layer = p->link_layer;
	o->flags = p->flags;
	o->port_cap_flags2 = (uint16_t)p->port_cap_flags2;
}

static int query_port_ctl(struct ibv_context *context, uint8_t port_num,
			  struct sroce_ctl_port_attr *pa)
{
	struct sroce_ctl_port req = {.port_num = port_num};
	return sroce_call(to_sctx(context), SROCE_OP_QUERY_PORT, &req, sizeof(req), NULL, 0,
			  pa, sizeof(*pa), NULL, 0);
}

/* The extended context's query_port: writes at most len bytes. */
int sroce_query_port(struct ibv_context *context, uint8_t port_num,
		     struct ibv_port_attr *attr, size_t len)
{
	struct sroce_ctl_port_attr pa;
	struct ibv_port_attr full;
	int err = query_port_ctl(context, port_num, &pa);
	if (err)
		return err;
	sroce_port_attr_from_ctl(&full, &pa);
	memcpy(attr, &full, len < sizeof(full) ? len : sizeof(full));
	return 0;
}

/*
 * ibv_query_port as exported: callers compiled against older headers have a
 * struct without port_cap_flags2, so only that much is written.
 */
EXPORT int ibv_query_port(struct ibv_context *context, uint8_t port_num,
			  struct ibv_port_attr *attr)
{
	return sroce_query_port(context, port_num, attr, SROCE_COMPAT_PORT_ATTR_SIZE);
}

static int query_gid_ctl(struct ibv_context *context, uint32_t port, uint32_t index,
			 struct sroce_ctl_gid *g)
{
	struct sroce_ctl_port req = {.port_num = port, .index = index};
	return sroce_call(to_sctx(context), SROCE_OP_QUERY_GID, &req, sizeof(req), NULL, 0, g,
			  sizeof(*g), NULL, 0);
}

EXPORT int ibv_query_gid(struct ibv_context *context, uint8_t port_num, int index,
			 union ibv_gid *gid)
{
	struct sroce_ctl_gid g;
	int err = query_gid_ctl(context, port_num, (uint32_t)index, &g);
	if (err == ENODATA) {
		/* An empty entry reads as the zero GID, as with rdma-core. */
		memset(gid, 0, sizeof(*gid));
		return 0;
	}
	if (err) {
		errno = err;
		return -1;
	}
	memcpy(gid->raw, g.gid, 16);
	return 0;
}

static uint32_t gid_type_of(uint32_t sysfs_type)
{
	return sysfs_type == IBV_GID_TYPE_SYSFS_ROCE_V2 ? IBV_GID_TYPE_ROCE_V2
							: IBV_GID_TYPE_ROCE_V1;
}

EXPORT int _ibv_query_gid_ex(struct ibv_context *context, uint32_t port_num,
			     uint32_t gid_index, struct ibv_gid_entry *entry, uint32_t flags,
			     size_t entry_size)
{
	struct sroce_ctl_gid g;
	struct ibv_gid_entry e;
	int err;
	if (flags)
		return EINVAL;
	if (entry_size < sizeof(e))
		return EINVAL;
	err = query_gid_ctl(context, port_num, gid_index, &g);
	if (err)
		return err;
	memset(&e, 0, sizeof(e));
	memcpy(e.gid.raw, g.gid, 16);
	e.gid_index = gid_index;
	e.port_num = port_num;
	e.gid_type = gid_type_of(g.gid_type);
	e.ndev_ifindex = g.ndev_ifindex;
	memcpy(entry, &e, sizeof(e));
	return 0;
}

EXPORT ssize_t _ibv_query_gid_table(struct ibv_context *context, struct ibv_gid_entry *entries,
				   size_t max_entries, uint32_t flags, size_t entry_size)
{
	struct ibv_device_attr da;
	size_t n = 0;
	if (flags || entry_size < sizeof(struct ibv_gid_entry))
		return -EINVAL;
	if (ibv_query_device(context, &da))
		return -errno;
	for (uint8_t port = 1; port <= da.phys_port_cnt; port++) {
		struct ibv_port_attr pa;
		if (sroce_query_port(context, port, &pa, sizeof(pa)))
			return -EIO;
		for (int i = 0; i < pa.gid_tbl_len; i++) {
			struct ibv_gid_entry e;
			int err = _ibv_query_gid_ex(context, port, (uint32_t)i, &e, 0, sizeof(e));
			if (err == ENODATA)
				continue;
			if (err)
				return -err;
			if (n == max_entries)
				return -EINVAL;
			memcpy((char *)entries + n * entry_size, &e, sizeof(e));
			n++;
		}
	}
	return (ssize_t)n;
}

/* Private ABI: the GID's type as sysfs spells it (ibv_devinfo, pyverbs). */
EXPORT int ibv_query_gid_type(struct ibv_context *context, uint8_t port_num,
			      unsigned int index, enum ibv_gid_type_sysfs *type)
{
	struct sroce_ctl_gid g;
	int err = query_gid_ctl(context, port_num, index, &g);
	if (err == ENODATA) {
		*type = IBV_GID_TYPE_SYSFS_IB_ROCE_V1;
		return 0;
	}
	if (err) {
		errno = err;
		return -1;
	}
	*type = g.gid_type == IBV_GID_TYPE_SYSFS_ROCE_V2 ? IBV_GID_TYPE_SYSFS_ROCE_V2
							 : IBV_GID_TYPE_SYSFS_IB_ROCE_V1;
	return 0;
}

EXPORT int ibv_query_pkey(struct ibv_context *context, uint8_t port_num, int index,
			  uint16_t *pkey)
{
	struct sroce_ctl_port req = {.port_num = port_num, .index = (uint32_t)index};
	struct sroce_ctl_pkey p;
	int err = sroce_call(to_sctx(context), SROCE_OP_QUERY_PKEY, &req, sizeof(req), NULL, 0,
			     &p, sizeof(p), NULL, 0);
	if (err) {
		errno = err;
		return -1;
	}
	*pkey = htons(p.pkey);
	return 0;
}

EXPORT int ibv_get_pkey_index(struct ibv_context *context, uint8_t port_num, uint16_t pkey)
{
	for (int i = 0; i < 128; i++) {
		uint16_t p;
		if (ibv_query_pkey(context, port_num, i, &p))
			break;
		if (p == pkey)
			return i;
	}
	errno = ENOENT;
	return -1;
}

EXPORT struct ibv_pd *ibv_alloc_pd(struct ibv_context *context)
{
	struct sroce_ctl_handle h;
	struct sroce_pd *pd;
	int err = sroce_call(to_sctx(context), SROCE_OP_ALLOC_PD, NULL, 0, NULL, 0, &h,
			     sizeof(h), NULL, 0);
	if (err) {
		errno = err;
		return NULL;
	}
	pd = calloc(1, sizeof(*pd));
	if (!pd) {
		struct sroce_ctl_handle d = {.handle = h.handle};
		sroce_call(to_sctx(context), SROCE_OP_DEALLOC_PD, &d, sizeof(d), NULL, 0, NULL, 0,
			   NULL, 0);
		errno = ENOMEM;
		return NULL;
	}
	pd->pd.context = context;
	pd->pd.handle = h.handle;
	return &pd->pd;
}

/*
 * A parent domain (ibv_alloc_parent_domain) is its PD seen through another
 * ibv_pd: the daemon's handle is the PD's, so every object made with it
 * is the PD's. It holds its PD (which is EBUSY to ibv_dealloc_pd until
 * the parent domains on it go) and its thread domain. The allocators a
 * program may give are not called: the memory of sroce's queues is the
 * daemon's, shared with the program, never the program's to allocate (a
 * provider may use them, it need not).
 */
struct ibv_pd *sroce_alloc_parent_domain(struct ibv_context *context,
					 struct ibv_parent_domain_init_attr *a)
{
	if (!a || !a->pd || a->pd->context != context ||
	    (a->comp_mask & ~(uint32_t)(IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS |
					IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT)) ||
	    (a->td && a->td->context != context)) {
		errno = EINVAL;
		return NULL;
	}
	struct sroce_pd *base = to_spd(a->pd);
	if (base->parent) {
		errno = EINVAL;
		return NULL;
	}
	struct sroce_pd *pd = calloc(1, sizeof(*pd));
	if (!pd) {
		errno = ENOMEM;
		return NULL;
	}
	pd->pd.context = context;
	pd->pd.handle = a->pd->handle;
	pd->parent = base;
	pd->td = a->td;
	if (a->td)
		__atomic_add_fetch(&to_std(a->td)->refs, 1, __ATOMIC_RELAXED);
	__atomic_add_fetch(&base->refs, 1, __ATOMIC_RELAXED);
	return &pd->pd;
}

EXPORT int ibv_dealloc_pd(struct ibv_pd *ibpd)
{
	struct sroce_pd *pd = to_spd(ibpd);
	if (pd->parent) {
		if (__atomic_load_n(&pd->refs, __ATOMIC_RELAXED))
			return EBUSY;
		__atomic_sub_fetch(&pd->parent->refs, 1, __ATOMIC_RELAXED);
		if (pd->td)
			__atomic_sub_fetch(&to_std(pd->td)->refs, 1, __ATOMIC_RELAXED);
		free(pd);
		return 0;
	}
	if (__atomic_load_n(&pd->refs, __ATOMIC_RELAXED))
		return EBUSY;
	struct sroce_ctl_handle h = {.handle = ibpd->handle};
	int err = sroce_destroy_call(to_sctx(ibpd->context), SROCE_OP_DEALLOC_PD, &h, sizeof(h));
	if (err)
		return err;
	free(pd);
	return 0;
}

/*
 * A thread domain (ibv_alloc_td) promises that one thread at a time uses
 * what is made with it; sroce's queues take the same locks either way, so
 * it is a token a parent domain holds (EBUSY to free while held).
 */
struct ibv_td *sroce_alloc_td(struct ibv_context *context, struct ibv_td_init_attr *a)
{
	if (a && a->comp_mask) {
		errno = EINVAL;
		return NULL;
	}
	struct sroce_td *td = calloc(1, sizeof(*td));
	if (!td) {
		errno = ENOMEM;
		return NULL;
	}
	td->td.context = context;
	return &td->td;
}

int sroce_dealloc_td(struct ibv_td *ibtd)
{
	struct sroce_td *td = to_std(ibtd);
	if (__atomic_load_n(&td->refs, __ATOMIC_RELAXED))
		return EBUSY;
	free(td);
	return 0;
}

static void ah_attr_to_ctl(struct sroce_ctl_ah_attr *o, const struct ibv_ah_attr *a)
{
	memset(o, 0, sizeof(*o));
	memcpy(o->dgid, a->grh.dgid.raw, 16);
	o->flow_label = a->grh.flow_label;
	o->sgid_index = a->grh.sgid_index;
	o->hop_limit = a->grh.hop_limit;
	o->traffic_class = a->grh.traffic_class;
	o->sl = a->sl;
	o->is_global = a->is_global;
	o->port_num = a->port_num;
	o->static_rate = a->static_rate;
	o->src_path_bits = a->src_path_bits;
	o->dlid = a->dlid;
}

EXPORT struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
	struct sroce_ctl_ah req = {.pd_or_handle = pd->handle}, reply;
	struct sroce_ah *ah;
	int err;
	ah_attr_to_ctl(&req.attr, attr);
	err = sroce_call(to_sctx(pd->context), SROCE_OP_CREATE_AH, &req, sizeof(req), NULL, 0,
			 &reply, sizeof(reply), NULL, 0);
	if (err) {
		errno = err;
		return NULL;
	}
	ah = calloc(1, sizeof(*ah));
	if (!ah) {
		struct sroce_ctl_handle h = {.handle = reply.pd_or_handle};
		sroce_call(to_sctx(pd->context), SROCE_OP_DESTROY_AH, &h, sizeof(h), NULL, 0, NULL,
			   0, NULL, 0);
		errno = ENOMEM;
		return NULL;
	}
	ah->ah.context = pd->context;
	ah->ah.pd = pd;
	ah->ah.handle = reply.pd_or_handle;
	ah->attr = reply.attr;
	return &ah->ah;
}

EXPORT int ibv_destroy_ah(struct ibv_ah *ibah)
{
	struct sroce_ah *ah = container_of(ibah, struct sroce_ah, ah);
	struct sroce_ctl_handle h = {.handle = ibah->handle};
	int err = sroce_destroy_call(to_sctx(ibah->context), SROCE_OP_DESTROY_AH, &h, sizeof(h));
	if (err)
		return err;
	free(ah);
	return 0;
}

/*
 * The address a UD receive came from, for a reply: RoCE needs the GRH the
 * receive buffer starts with. The source GID index is the entry of the
 * local GID table that equals the GRH's destination.
 */
EXPORT int ibv_init_ah_from_wc(struct ibv_context *context, uint8_t port_num,
			       struct ibv_wc *wc, struct ibv_grh *grh,
			       struct ibv_ah_attr *ah_attr)
{
	struct ibv_port_attr pa;
	memset(ah_attr, 0, sizeof(*ah_attr));
	ah_attr->port_num = port_num;
	ah_attr->sl = wc->sl;
	if (!(wc->wc_flags & IBV_WC_GRH) || !grh) {
		errno = EINVAL;
		return -1;
	}
	if (sroce_query_port(context, port_num, &pa, sizeof(pa))) {
		errno = EIO;
		return -1;
	}
	/* RoCEv2 over IPv4 (as rxe writes it): 20 zero bytes, then the IPv4
	 * header; its addresses are the IPv4-mapped GIDs. Else an IPv6 GRH. */
	const uint8_t *raw = (const uint8_t *)grh;
	union ibv_gid sgid, dgid;
	uint32_t flow = 0;
	uint8_t tclass;
	static const uint8_t zero[20];
	if (!memcmp(raw, zero, sizeof(zero)) && (raw[20] >> 4) == 4) {
		memset(&sgid, 0, sizeof(sgid));
		memset(&dgid, 0, sizeof(dgid));
		sgid.raw[10] = sgid.raw[11] = dgid.raw[10] = dgid.raw[11] = 0xff;
		memcpy(&sgid.raw[12], raw + 20 + 12, 4);
		memcpy(&dgid.raw[12], raw + 20 + 16, 4);
		tclass = raw[21];
	} else {
		sgid = grh->sgid;
		dgid = grh->dgid;
		flow = ntohl(grh->version_tclass_flow);
		tclass = (uint8_t)(flow >> 20);
	}
	int idx = -1;
	for (int i = 0; i < pa.gid_tbl_len; i++) {
		union ibv_gid g;
		if (ibv_query_gid(context, port_num, i, &g) == 0 && !memcmp(g.raw, dgid.raw, 16)) {
			idx = i;
			break;
		}
	}
	if (idx < 0) {
		errno = ENOENT;
		return -1;
	}
	ah_attr->is_global = 1;
	ah_attr->grh.dgid = sgid;
	ah_attr->grh.sgid_index = (uint8_t)idx;
	ah_attr->grh.flow_label = flow & 0xfffff;
	ah_attr->grh.traffic_class = tclass;
	ah_attr->grh.hop_limit = 0xff;
	return 0;
}

EXPORT struct ibv_ah *ibv_create_ah_from_wc(struct ibv_pd *pd, struct ibv_wc *wc,
					    struct ibv_grh *grh, uint8_t port_num)
{
	struct ibv_ah_attr a;
	if (ibv_init_ah_from_wc(pd->context, port_num, wc, grh, &a))
		return NULL;
	return ibv_create_ah(pd, &a);
}

EXPORT struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *context)
{
	struct sroce_context *c = to_sctx(context);
	struct sroce_ctl_handle h;
	struct sroce_comp_channel *ch;
	int fd = -1;
	int err = sroce_call(c, SROCE_OP_CREATE_COMP_CHANNEL, NULL, 0, NULL, 0, &h, sizeof(h),
			     &fd, 1);
	if (err) {
		errno = err;
		return NULL;
	}
	ch = calloc(1, sizeof(*ch));
	if (!ch) {
		close(fd);
		sroce_call(c, SROCE_OP_DESTROY_COMP_CHANNEL, &h, sizeof(h), NULL, 0, NULL, 0, NULL,
			   0);
		errno = ENOMEM;
		return NULL;
	}
	ch->ch.context = context;
	ch->ch.fd = fd;
	ch->ch.refcnt = 0;
	ch->handle = h.handle;
	return &ch->ch;
}

EXPORT int ibv_destroy_comp_channel(struct ibv_comp_channel *channel)
{
	struct sroce_comp_channel *ch = container_of(channel, struct sroce_comp_channel, ch);
	struct sroce_ctl_handle h = {.handle = ch->handle};
	int err;
	pthread_mutex_lock(&channel->context->mutex);
	if (channel->refcnt) {
		pthread_mutex_unlock(&channel->context->mutex);
		return EBUSY;
	}
	err = sroce_destroy_call(to_sctx(channel->context), SROCE_OP_DESTROY_COMP_CHANNEL, &h, sizeof(h));
	pthread_mutex_unlock(&channel->context->mutex);
	if (err)
		return err;
	close(channel->fd);
	free(ch);
	return 0;
}

/*
 * Reads the next completion event from the channel's socket. Events of a
 * CQ destroyed in the meantime are skipped.
 */
EXPORT int ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq,
			    void **cq_context)
{
	struct sroce_context *c = to_sctx(channel->context);
	for (;;) {
		struct sroce_ctl_cq_event ev;
		ssize_t n = read(channel->fd, &ev, sizeof(ev));
		if (n < 0)
			return -1;
		if (n == 0) {
			/* The daemon is gone: as the kernel's read of a
			 * disassociated device's completion channel. */
			sroce_daemon_gone(c, "connection closed");
			errno = SROCE_GONE_ERRNO;
			return -1;
		}
		if (n != sizeof(ev)) {
			errno = EPROTO;
			return -1;
		}
		struct sroce_cq *scq = sroce_table_get_counted(c, &c->cqs, ev.cq, offsetof(struct sroce_cq, comp_delivered));
		if (!scq)
			continue;
		*cq = (struct ibv_cq *)&scq->cq;
		*cq_context = scq->cq.cq_context;
		return 0;
	}
}

EXPORT void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
	pthread_mutex_lock(&cq->mutex);
	cq->comp_events_completed += nevents;
	pthread_cond_signal(&cq->cond);
	pthread_mutex_unlock(&cq->mutex);
}

/* Events given but not yet acknowledged: 0 when the program acknowledged as
 * many or more (fio acknowledges completions rather than events). */
static uint32_t unacked(uint32_t done, uint32_t want)
{
	return (int32_t)(want - done) > 0 ? want - done : 0;
}

/*
 * Waits until the program acknowledged every event it was given, at most
 * SROCE_ACK_WAIT_SEC; 0, or EBUSY after saying on standard error what is
 * missing. Acknowledging more than was given counts as all acknowledged
 * (libibverbs over the kernel would wait forever).
 */
int sroce_wait_acks(pthread_mutex_t *m, pthread_cond_t *cv, uint32_t *done_a, uint32_t want_a,
		    uint32_t *done_b, uint32_t want_b, const char *what)
{
	struct timespec deadline;
	int err = 0;
	uint32_t missing;
	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_sec += SROCE_ACK_WAIT_SEC;
	pthread_mutex_lock(m);
	for (;;) {
		missing = unacked(*done_a, want_a) + (done_b ? unacked(*done_b, want_b) : 0);
		if (!missing || err)
			break;
		err = pthread_cond_timedwait(cv, m, &deadline);
	}
	pthread_mutex_unlock(m);
	if (missing) {
		sroce_warn("%s: %u event(s) given to the program were not acknowledged within "
			   "%d s (ibv_ack_cq_events/ibv_ack_async_event); destroyed, its memory kept",
			   what, missing, SROCE_ACK_WAIT_SEC);
		return EBUSY;
	}
	return 0;
}

EXPORT int ibv_get_async_event(struct ibv_context *context, struct ibv_async_event *event)
{
	struct sroce_context *c = to_sctx(context);
	for (;;) {
		struct sroce_ctl_async_event ev;
		ssize_t n = read(context->async_fd, &ev, sizeof(ev));
		if (n < 0)
			return -1;
		if (n == 0) {
			/* The daemon is gone: the device is, once, as after a fatal error. */
			sroce_daemon_gone(c, "connection closed");
			if (__atomic_exchange_n(&c->dead, 1, __ATOMIC_SEQ_CST)) {
				errno = SROCE_GONE_ERRNO;
				return -1;
			}
			memset(event, 0, sizeof(*event));
			event->event_type = IBV_EVENT_DEVICE_FATAL;
			return 0;
		}
		if (n != sizeof(ev)) {
			errno = EPROTO;
			return -1;
		}
		memset(event, 0, sizeof(*event));
		event->event_type = (int)ev.event_type;
		switch (ev.event_type) {
		case IBV_EVENT_CQ_ERR: {
			struct sroce_cq *o = sroce_table_get_counted(c, &c->cqs, ev.handle,
								    offsetof(struct sroce_cq, async_delivered));
			if (!o)
				continue;
			event->element.cq = (struct ibv_cq *)&o->cq;
			return 0;
		}
		case IBV_EVENT_QP_FATAL:
		case IBV_EVENT_QP_REQ_ERR:
		case IBV_EVENT_QP_ACCESS_ERR:
		case IBV_EVENT_COMM_EST:
		case IBV_EVENT_SQ_DRAINED:
		case IBV_EVENT_PATH_MIG:
		case IBV_EVENT_PATH_MIG_ERR:
		case IBV_EVENT_QP_LAST_WQE_REACHED: {
			struct sroce_qp *o = sroce_table_get_counted(c, &c->qps, ev.handle,
								    offsetof(struct sroce_qp, async_delivered));
			if (!o)
				continue;
			event->element.qp = &o->qp;
			return 0;
		}
		case IBV_EVENT_SRQ_ERR:
		case IBV_EVENT_SRQ_LIMIT_REACHED: {
			struct sroce_srq *o = sroce_table_get_counted(c, &c->srqs, ev.handle,
								    offsetof(struct sroce_srq, async_delivered));
			if (!o)
				continue;
			event->element.srq = &o->srq;
			return 0;
		}
		case IBV_EVENT_DEVICE_FATAL:
			/* The daemon says so before it disconnects (the device's
			 * interface was deleted): the end of the channel that
			 * follows is not a second fatal error. */
			__atomic_store_n(&c->dead, 1, __ATOMIC_SEQ_CST);
			sroce_await_gone(c);
			return 0;
		default:
			event->element.port_num = (int)ev.handle;
			return 0;
		}
	}
}

EXPORT void ibv_ack_async_event(struct ibv_async_event *event)
{
	switch (event->event_type) {
	case IBV_EVENT_CQ_ERR: {
		struct ibv_cq *cq = event->element.cq;
		pthread_mutex_lock(&cq->mutex);
		cq->async_events_completed++;
		pthread_cond_signal(&cq->cond);
		pthread_mutex_unlock(&cq->mutex);
		return;
	}
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST:
	case IBV_EVENT_SQ_DRAINED:
	case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR:
	case IBV_EVENT_QP_LAST_WQE_REACHED: {
		struct ibv_qp *qp = event->element.qp;
		pthread_mutex_lock(&qp->mutex);
		qp->events_completed++;
		pthread_cond_signal(&qp->cond);
		pthread_mutex_unlock(&qp->mutex);
		return;
	}
	case IBV_EVENT_SRQ_ERR:
	case IBV_EVENT_SRQ_LIMIT_REACHED: {
		struct ibv_srq *srq = event->element.srq;
		pthread_mutex_lock(&srq->mutex);
		srq->events_completed++;
		pthread_cond_signal(&srq->cond);
		pthread_mutex_unlock(&srq->mutex);
		return;
	}
	default:
		return;
	}
}

/* Names that also have an IBVERBS_1.0 compatibility version get their default version here. */
SROCE_DEFAULT_1_1(ibv_ack_async_event)
SROCE_DEFAULT_1_1(ibv_ack_cq_events)
SROCE_DEFAULT_1_1(ibv_alloc_pd)
SROCE_DEFAULT_1_1(ibv_close_device)
SROCE_DEFAULT_1_1(ibv_create_ah)
SROCE_DEFAULT_1_1(ibv_dealloc_pd)
SROCE_DEFAULT_1_1(ibv_destroy_ah)
SROCE_DEFAULT_1_1(ibv_free_device_list)
SROCE_DEFAULT_1_1(ibv_get_async_event)
SROCE_DEFAULT_1_1(ibv_get_cq_event)
SROCE_DEFAULT_1_1(ibv_get_device_guid)
SROCE_DEFAULT_1_1(ibv_get_device_list)
SROCE_DEFAULT_1_1(ibv_get_device_name)
SROCE_DEFAULT_1_1(ibv_open_device)
SROCE_DEFAULT_1_1(ibv_query_device)
SROCE_DEFAULT_1_1(ibv_query_gid)
SROCE_DEFAULT_1_1(ibv_query_pkey)
SROCE_DEFAULT_1_1(ibv_query_port)
