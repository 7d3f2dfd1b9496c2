/*
 * cm_test.c: the drop-in librdmacm against a daemon, two IDs on one device
 * in one process: a listener on ADDR (argv[1]) and port 0, a client that
 * resolves it, both with rdma_create_qp's QPs (CQs made by the library),
 * private data both ways, a message each way over the connection, then
 * rdma_disconnect and DISCONNECTED on both sides. Compiled against the
 * system's <rdma/rdma_cma.h>. Prints "ok: ..." per step; exits 0 only when
 * every step passed. Each wait for an event is bounded (5 s).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cm_test.h"

struct side {
	struct rdma_cm_id *id;
	struct ibv_mr *mr;
	char *buf; /* a page of its own: ibv_reg_mr remaps it */
};

static void setup_qp(struct side *s)
{
	struct ibv_qp_init_attr qa = {.cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1,
					      .max_recv_sge = 1, .max_inline_data = 64},
				      .qp_type = IBV_QPT_RC, .sq_sig_all = 1};
	struct ibv_sge sge;
	struct ibv_recv_wr wr = {.sg_list = &sge, .num_sge = 1}, *bad;
	if (posix_memalign((void **)&s->buf, 4096, 4096))
		FAIL("posix_memalign");
	memset(s->buf, 0, 4096);
	if (rdma_create_qp(s->id, NULL, &qa))
		FAIL("rdma_create_qp");
	if (!s->id->recv_cq || !s->id->send_cq || !s->id->pd)
		FAIL("rdma_create_qp left the ID without its CQs or PD");
	s->mr = ibv_reg_mr(s->id->pd, s->buf, 64, IBV_ACCESS_LOCAL_WRITE);
	if (!s->mr)
		FAIL("ibv_reg_mr");
	sge = (struct ibv_sge){.addr = (uintptr_t)s->buf, .length = 64, .lkey = s->mr->lkey};
	if (ibv_post_recv(s->id->qp, &wr, &bad))
		FAIL("ibv_post_recv");
}

static void send_msg(struct side *from, struct side *to, const char *msg)
{
	char out[64];
	struct ibv_sge sge = {.addr = (uintptr_t)out, .length = (uint32_t)strlen(msg) + 1};
	struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE},
			   *bad;
	snprintf(out, sizeof(out), "%s", msg);
	if (ibv_post_send(from->id->qp, &wr, &bad))
		FAIL("ibv_post_send");
	poll_one(from->id->send_cq, "the send");
	poll_one(to->id->recv_cq, "the receive");
	if (strcmp(to->buf, msg))
		FAIL("received \"%s\", sent \"%s\"", to->buf, msg);
	printf("ok: message \"%s\"\n", msg);
}

int main(int argc, char **argv)
{
	struct sockaddr_in addr = {.sin_family = AF_INET};
	struct rdma_cm_id *listen_id;
	struct side srv = {0}, cli = {0};
	struct rdma_conn_param cp = {.private_data = "hello", .private_data_len = 6,
				     .responder_resources = 1, .initiator_depth = 1, .retry_count = 7,
				     .rnr_retry_count = 7};
	struct rdma_cm_event *ev;

	if (argc < 2 || inet_pton(AF_INET, argv[1], &addr.sin_addr) != 1) {
		fprintf(stderr, "usage: cm_test IPv4-ADDRESS\n");
		return 2;
	}
	ch = rdma_create_event_channel();
	if (!ch)
		FAIL("rdma_create_event_channel");
	if (rdma_create_id(ch, &listen_id, NULL, RDMA_PS_TCP))
		FAIL("rdma_create_id");
	if (rdma_bind_addr(listen_id, (struct sockaddr *)&addr))
		FAIL("rdma_bind_addr");
	if (!listen_id->verbs)
		FAIL("a bound ID has no verbs context");
	if (rdma_listen(listen_id, 4))
		FAIL("rdma_listen");
	addr.sin_port = rdma_get_src_port(listen_id);
	if (!addr.sin_port)
		FAIL("the listener has no port");
	printf("ok: listening on %s port %u (device %s)\n", argv[1], ntohs(addr.sin_port),
	       ibv_get_device_name(listen_id->verbs->device));

	/* Nothing pending: a nonblocking channel says EAGAIN at once. */
	{
		int fl = fcntl(ch->fd, F_GETFL);
		if (fl < 0 || fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK) < 0)
			FAIL("fcntl O_NONBLOCK");
		errno = 0;
		if (rdma_get_cm_event(ch, &ev) != -1 || errno != EAGAIN)
			FAIL("rdma_get_cm_event on an empty nonblocking channel did not fail with EAGAIN");
		fcntl(ch->fd, F_SETFL, fl);
		printf("ok: EAGAIN on an empty nonblocking channel\n");
	}

	if (rdma_create_id(ch, &cli.id, NULL, RDMA_PS_TCP))
		FAIL("rdma_create_id");
	if (rdma_resolve_addr(cli.id, NULL, (struct sockaddr *)&addr, 2000))
		FAIL("rdma_resolve_addr");
	rdma_ack_cm_event(expect(RDMA_CM_EVENT_ADDR_RESOLVED));
	if (rdma_resolve_route(cli.id, 2000))
		FAIL("rdma_resolve_route");
	rdma_ack_cm_event(expect(RDMA_CM_EVENT_ROUTE_RESOLVED));
	if (cli.id->route.num_paths != 1 || !cli.id->route.path_rec)
		FAIL("no path after ROUTE_RESOLVED");
	setup_qp(&cli);
	if (rdma_connect(cli.id, &cp))
		FAIL("rdma_connect");

	ev = expect(RDMA_CM_EVENT_CONNECT_REQUEST);
	if (ev->listen_id != listen_id)
		FAIL("CONNECT_REQUEST names another listener");
	if (ev->param.conn.private_data_len < 6 || memcmp(ev->param.conn.private_data, "hello", 6))
		FAIL("CONNECT_REQUEST's private data is not the client's");
	srv.id = ev->id;
	rdma_ack_cm_event(ev);
	if (!srv.id->verbs || rdma_get_dst_port(srv.id) != rdma_get_src_port(cli.id))
		FAIL("the new ID's device or peer port is wrong");
	setup_qp(&srv);
	cp.private_data = "world";
	if (rdma_accept(srv.id, &cp))
		FAIL("rdma_accept");

	/* The client's ESTABLISHED (after the library's RTR/RTS and the RTU),
	 * then the server's, in either order. */
	for (int i = 0; i < 2; i++) {
		ev = expect(RDMA_CM_EVENT_ESTABLISHED);
		if (ev->id == cli.id &&
		    (ev->param.conn.private_data_len < 6 || memcmp(ev->param.conn.private_data, "world", 6)))
			FAIL("the client's ESTABLISHED lacks the server's private data (%u bytes: %.6s)", ev->param.conn.private_data_len, (const char *)ev->param.conn.private_data);
		rdma_ack_cm_event(ev);
	}
	if (cli.id->qp->state != IBV_QPS_RTS && cli.id->qp->state != 0)
		FAIL("the client's QP is in state %d", cli.id->qp->state);
	send_msg(&cli, &srv, "ping from the client");
	send_msg(&srv, &cli, "pong from the server");

	if (rdma_disconnect(cli.id))
		FAIL("rdma_disconnect");
	for (int i = 0; i < 2; i++)
		rdma_ack_cm_event(expect(RDMA_CM_EVENT_DISCONNECTED));

	ibv_dereg_mr(cli.mr);
	ibv_dereg_mr(srv.mr);
	rdma_destroy_qp(cli.id);
	rdma_destroy_qp(srv.id);
	if (rdma_destroy_id(cli.id) || rdma_destroy_id(srv.id) || rdma_destroy_id(listen_id))
		FAIL("rdma_destroy_id");
	rdma_destroy_event_channel(ch);
	printf("ok: all\n");
	return 0;
}
