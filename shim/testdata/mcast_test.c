/*
 * mcast_test.c: the drop-in librdmacm's multicast joins against a daemon,
 * on its one device at ADDR (argv[1]): the joins the kernel's rdma_cm and
 * librdmacm refuse, with their errno values; a receiver ID bound to ADDR
 * whose QP the MULTICAST_JOIN attaches, and a send-only sender ID resolved
 * to the group (as mckey does) whose event's ah_attr, QPN and Q_Key carry
 * a datagram to the receiver; two joins of one group left twice, a third
 * leave refused; a join of a unicast address, whose attach fails
 * (MULTICAST_ERROR); a synchronous ID's join. Compiled against the
 * system's <rdma/rdma_cma.h>. Prints "ok: ..." per step; exits 0 only when
 * every step passed. Each wait for an event is bounded (5 s).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cm_test.h"

#define GROUP "239.7.7.7"

/* The call returned -1 with errno want. */
static void refused(int ret, int want, const char *what)
{
	if (ret != -1 || errno != want)
		FAIL("%s returned %d, want -1 with errno %d", what, ret, want);
	printf("ok: %s refused (errno %d)\n", what, want);
}

static struct sockaddr_in sin_of(const char *a)
{
	struct sockaddr_in s = {.sin_family = AF_INET};
	if (inet_pton(AF_INET, a, &s.sin_addr) != 1)
		FAIL("bad address %s", a);
	return s;
}

static struct rdma_cm_id *udp_id(struct rdma_event_channel *c)
{
	struct rdma_cm_id *id;
	if (rdma_create_id(c, &id, NULL, RDMA_PS_UDP))
		FAIL("rdma_create_id");
	return id;
}

static void ud_qp(struct rdma_cm_id *id)
{
	struct ibv_qp_init_attr qa = {.cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1,
					      .max_recv_sge = 1},
				      .qp_type = IBV_QPT_UD, .sq_sig_all = 1};
	if (rdma_create_qp(id, NULL, &qa))
		FAIL("rdma_create_qp");
}

static void errors(struct sockaddr_in *local)
{
	struct sockaddr_in group = sin_of(GROUP), any = sin_of("0.0.0.0");
	struct sockaddr_in6 group6 = {.sin6_family = AF_INET6};
	struct rdma_cm_join_mc_attr_ex ax = {.addr = (struct sockaddr *)&group};
	struct rdma_cm_id *id = udp_id(ch), *tcp;

	refused(rdma_join_multicast(id, (struct sockaddr *)&group, NULL), EINVAL, "a join on an unbound ID");
	if (rdma_create_id(ch, &tcp, NULL, RDMA_PS_TCP) || rdma_bind_addr(tcp, (struct sockaddr *)local))
		FAIL("a TCP ID");
	refused(rdma_join_multicast(tcp, (struct sockaddr *)&group, NULL), EINVAL, "a join in the TCP port space");
	rdma_destroy_id(tcp);
	if (rdma_bind_addr(id, (struct sockaddr *)local))
		FAIL("rdma_bind_addr");
	refused(rdma_join_multicast(id, (struct sockaddr *)&any, NULL), EINVAL, "a join of 0.0.0.0");
	inet_pton(AF_INET6, "ff0e::7", &group6.sin6_addr);
	refused(rdma_join_multicast(id, (struct sockaddr *)&group6, NULL), 524, "a join of an IPv6 group (ENOTSUPP)");
	ax.comp_mask = RDMA_CM_JOIN_MC_ATTR_RESERVED;
	refused(rdma_join_multicast_ex(id, &ax, NULL), EOPNOTSUPP, "rdma_join_multicast_ex with an unknown comp_mask bit");
	ax.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS;
	refused(rdma_join_multicast_ex(id, &ax, NULL), EINVAL, "rdma_join_multicast_ex without join flags");
	ax.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS;
	ax.join_flags = RDMA_MC_JOIN_FLAG_RESERVED;
	refused(rdma_join_multicast_ex(id, &ax, NULL), EINVAL, "rdma_join_multicast_ex with unknown join flags");
	refused(rdma_leave_multicast(id, (struct sockaddr *)&group), EADDRNOTAVAIL, "a leave of a group not joined");
	rdma_destroy_id(id);
}

int main(int argc, char **argv)
{
	struct sockaddr_in local, group = sin_of(GROUP), unicast = sin_of("10.77.0.1");
	struct rdma_cm_join_mc_attr_ex ax = {.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS |
							  RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS,
					     .join_flags = RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER,
					     .addr = (struct sockaddr *)&group};
	struct rdma_cm_id *rx, *tx, *sync;
	struct rdma_cm_event *ev;
	struct ibv_ah_attr ah_attr;
	union ibv_gid mgid = {0}, sgid;
	uint32_t qpn, qkey;
	struct ibv_mr *rmr, *smr;
	struct ibv_ah *ah;
	char *rbuf, *sbuf;
	const char msg[] = "to the group";
	int rx_ctx, tx_ctx;

	if (argc < 2) {
		fprintf(stderr, "usage: mcast_test IPv4-ADDRESS\n");
		return 2;
	}
	local = sin_of(argv[1]);
	ch = rdma_create_event_channel();
	if (!ch)
		FAIL("rdma_create_event_channel");
	errors(&local);

	/* The receiver: bound, a QP with a receive posted, then the join. */
	rx = udp_id(ch);
	if (rdma_bind_addr(rx, (struct sockaddr *)&local))
		FAIL("rdma_bind_addr");
	ud_qp(rx);
	if (posix_memalign((void **)&rbuf, 4096, 4096))
		FAIL("posix_memalign");
	memset(rbuf, 0, 4096);
	rmr = ibv_reg_mr(rx->pd, rbuf, 256, IBV_ACCESS_LOCAL_WRITE);
	if (!rmr)
		FAIL("ibv_reg_mr");
	{
		struct ibv_sge sge = {.addr = (uintptr_t)rbuf, .length = 256, .lkey = rmr->lkey};
		struct ibv_recv_wr wr = {.sg_list = &sge, .num_sge = 1}, *bad;
		if (ibv_post_recv(rx->qp, &wr, &bad))
			FAIL("ibv_post_recv");
	}
	if (rdma_join_multicast(rx, (struct sockaddr *)&group, &rx_ctx))
		FAIL("rdma_join_multicast");
	ev = expect(RDMA_CM_EVENT_MULTICAST_JOIN);
	mgid.raw[10] = mgid.raw[11] = 0xff;
	memcpy(&mgid.raw[12], &group.sin_addr, 4);
	if (ev->id != rx || ev->status || ev->param.ud.private_data != &rx_ctx)
		FAIL("MULTICAST_JOIN for ID %p status %d context %p", (void *)ev->id, ev->status,
		     ev->param.ud.private_data);
	ah_attr = ev->param.ud.ah_attr;
	if (ev->param.ud.qp_num != 0xffffff || ev->param.ud.qkey != RDMA_UDP_QKEY || !ah_attr.is_global ||
	    memcmp(&ah_attr.grh.dgid, &mgid, 16) || ah_attr.grh.hop_limit != 64)
		FAIL("MULTICAST_JOIN: qp_num %#x qkey %#x is_global %d hop_limit %d", ev->param.ud.qp_num,
		     ev->param.ud.qkey, ah_attr.is_global, ah_attr.grh.hop_limit);
	if (ibv_query_gid(rx->verbs, rx->port_num, ah_attr.grh.sgid_index, &sgid) ||
	    memcmp(&sgid.raw[12], &local.sin_addr, 4))
		FAIL("the join's sgid_index %d is not the GID of %s", ah_attr.grh.sgid_index, argv[1]);
	rdma_ack_cm_event(ev);
	printf("ok: the join names the group ::ffff:%s, QPN 0xffffff, Q_Key 0x01234567\n", GROUP);

	/* The sender: resolved to the group, joined send-only. */
	tx = udp_id(ch);
	if (rdma_resolve_addr(tx, (struct sockaddr *)&local, (struct sockaddr *)&group, 2000))
		FAIL("rdma_resolve_addr");
	rdma_ack_cm_event(expect(RDMA_CM_EVENT_ADDR_RESOLVED));
	ud_qp(tx);
	if (rdma_join_multicast_ex(tx, &ax, &tx_ctx))
		FAIL("rdma_join_multicast_ex");
	ev = expect(RDMA_CM_EVENT_MULTICAST_JOIN);
	if (ev->id != tx || ev->param.ud.private_data != &tx_ctx)
		FAIL("the send-only join's event");
	qpn = ev->param.ud.qp_num;
	qkey = ev->param.ud.qkey;
	ah = ibv_create_ah(tx->pd, &ev->param.ud.ah_attr);
	if (!ah)
		FAIL("ibv_create_ah to the group");
	rdma_ack_cm_event(ev);
	if (posix_memalign((void **)&sbuf, 4096, 4096)) /* a page of its own: ibv_reg_mr remaps it */
		FAIL("posix_memalign");
	memcpy(sbuf, msg, sizeof(msg));
	smr = ibv_reg_mr(tx->pd, sbuf, sizeof(msg), 0);
	if (!smr)
		FAIL("ibv_reg_mr");
	{
		struct ibv_sge sge = {.addr = (uintptr_t)sbuf, .length = sizeof(msg), .lkey = smr->lkey};
		struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
					 .wr = {.ud = {.ah = ah, .remote_qpn = qpn, .remote_qkey = qkey}}},
				   *bad;
		if (ibv_post_send(tx->qp, &wr, &bad))
			FAIL("ibv_post_send");
	}
	poll_one(tx->send_cq, "the send to the group");
	poll_one(rx->recv_cq, "the receive from the group");
	if (strcmp(rbuf + 40, msg))
		FAIL("received \"%s\"", rbuf + 40);
	printf("ok: the group's datagram arrived\n");

	/* A second join of the group; two leaves, a third refused. The
	 * leaves detached the QP: detaching it again is EINVAL. */
	if (rdma_join_multicast(rx, (struct sockaddr *)&group, NULL))
		FAIL("a second rdma_join_multicast");
	ev = expect(RDMA_CM_EVENT_MULTICAST_JOIN);
	union ibv_gid joined = ev->param.ud.ah_attr.grh.dgid;
	rdma_ack_cm_event(ev);
	for (int i = 0; i < 2; i++)
		if (rdma_leave_multicast(rx, (struct sockaddr *)&group))
			FAIL("rdma_leave_multicast %d", i + 1);
	refused(rdma_leave_multicast(rx, (struct sockaddr *)&group), EADDRNOTAVAIL, "a third leave");
	if (ibv_detach_mcast(rx->qp, &joined, 0) != EINVAL)
		FAIL("the QP was still attached to the group after its leaves");

	/* A unicast address: joined, but the QP cannot be attached to it. */
	if (rdma_join_multicast(rx, (struct sockaddr *)&unicast, NULL))
		FAIL("rdma_join_multicast of a unicast address");
	ev = expect(RDMA_CM_EVENT_MULTICAST_ERROR);
	if (ev->status != -1)
		FAIL("MULTICAST_ERROR status %d, want -1 (librdmacm's failed ibv_attach_mcast)", ev->status);
	rdma_ack_cm_event(ev);
	if (rdma_leave_multicast(rx, (struct sockaddr *)&unicast))
		FAIL("leaving the unicast join");

	/* A synchronous ID's join waits for its event. */
	sync = udp_id(NULL);
	if (rdma_bind_addr(sync, (struct sockaddr *)&local))
		FAIL("rdma_bind_addr");
	if (rdma_join_multicast(sync, (struct sockaddr *)&group, NULL))
		FAIL("a synchronous rdma_join_multicast");
	if (!sync->event || sync->event->event != RDMA_CM_EVENT_MULTICAST_JOIN)
		FAIL("a synchronous join left no MULTICAST_JOIN in id->event");
	printf("ok: a synchronous join\n");
	if (rdma_leave_multicast(sync, (struct sockaddr *)&group))
		FAIL("the synchronous ID's leave");
	{
		/* Destroying it acks the event it kept: no wait for an ack. */
		struct timespec t0, t1;
		clock_gettime(CLOCK_MONOTONIC, &t0);
		rdma_destroy_id(sync);
		clock_gettime(CLOCK_MONOTONIC, &t1);
		if (t1.tv_sec - t0.tv_sec > 2)
			FAIL("rdma_destroy_id of a synchronous ID took %ld s", (long)(t1.tv_sec - t0.tv_sec));
	}

	if (rdma_leave_multicast(tx, (struct sockaddr *)&group))
		FAIL("the sender's leave");
	ibv_destroy_ah(ah);
	ibv_dereg_mr(smr);
	ibv_dereg_mr(rmr);
	rdma_destroy_qp(tx);
	rdma_destroy_qp(rx);
	rdma_destroy_id(tx);
	rdma_destroy_id(rx);
	rdma_destroy_event_channel(ch);
	printf("ok: all\n");
	return 0;
}
