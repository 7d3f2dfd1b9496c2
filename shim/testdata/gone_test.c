/*
 * gone_test.c: holds a context on DEVICE with a PD, an MR, a CQ on a
 * completion channel and an RC QP, and an RDMA CM ID bound to ADDR, prints
 * "ready", and waits for the daemon to go (TestDaemonGoesUnderPrograms
 * stops or kills it). Then checks what a program sees of a device that went
 * away, as on a kernel device that was disassociated: DEVICE_FATAL, EIO
 * from every call, CQ polls that fail instead of waiting, DEVICE_REMOVAL
 * on the CM ID, destruction that succeeds. Prints "ok ..." per check and
 * exits 0, or "FAIL line N: ..." and exits 1.
 *
 * usage: gone_test DEVICE ADDR PORT
 */
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static void waitfd(int fd, int ms, const char *what)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	CHECK(poll(&p, 1, ms) == 1, "nothing on %s within %d ms", what, ms);
}

int main(int argc, char **argv)
{
	CHECK(argc == 4, "usage: gone_test DEVICE ADDR PORT");
	int n = 0;
	struct ibv_device **l = ibv_get_device_list(&n);
	struct ibv_context *c = NULL;
	for (int i = 0; l && i < n; i++)
		if (!strcmp(ibv_get_device_name(l[i]), argv[1]))
			c = ibv_open_device(l[i]);
	CHECK(c, "no device %s", argv[1]);
	struct ibv_pd *pd = ibv_alloc_pd(c);
	CHECK(pd, "ibv_alloc_pd: %s", strerror(errno));
	static char buf[4096];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr, "ibv_reg_mr: %s", strerror(errno));
	struct ibv_comp_channel *ch = ibv_create_comp_channel(c);
	CHECK(ch, "ibv_create_comp_channel: %s", strerror(errno));
	struct ibv_cq *cq = ibv_create_cq(c, 16, NULL, ch, 0);
	CHECK(cq, "ibv_create_cq: %s", strerror(errno));
	struct ibv_qp_init_attr qa = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qp = ibv_create_qp(pd, &qa);
	CHECK(qp, "ibv_create_qp: %s", strerror(errno));

	struct rdma_event_channel *ech = rdma_create_event_channel();
	CHECK(ech, "rdma_create_event_channel: %s", strerror(errno));
	struct rdma_cm_id *id;
	CHECK(rdma_create_id(ech, &id, NULL, RDMA_PS_TCP) == 0, "rdma_create_id: %s", strerror(errno));
	struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[3]))};
	CHECK(inet_pton(AF_INET, argv[2], &sin.sin_addr) == 1, "bad address %s", argv[2]);
	CHECK(rdma_bind_addr(id, (struct sockaddr *)&sin) == 0, "rdma_bind_addr: %s", strerror(errno));
	CHECK(id->verbs, "the bound CM ID has no device");
	CHECK(rdma_listen(id, 1) == 0, "rdma_listen: %s", strerror(errno));
	printf("ready\n");
	fflush(stdout);

	/* The daemon goes. */
	waitfd(c->async_fd, 60000, "the async event channel");
	struct ibv_async_event ev;
	CHECK(ibv_get_async_event(c, &ev) == 0, "ibv_get_async_event: %s", strerror(errno));
	CHECK(ev.event_type == IBV_EVENT_DEVICE_FATAL, "event %s, want DEVICE_FATAL", ibv_event_type_str(ev.event_type));
	ibv_ack_async_event(&ev);
	printf("ok async event DEVICE_FATAL\n");

	struct ibv_wc wc;
	errno = 0;
	CHECK(ibv_poll_cq(cq, 1, &wc) < 0 && errno == EIO, "ibv_poll_cq: want a failure with EIO, errno %s", strerror(errno));
	printf("ok ibv_poll_cq fails with EIO\n");
	CHECK(ibv_req_notify_cq(cq, 0) == EIO, "ibv_req_notify_cq: want EIO");
	printf("ok ibv_req_notify_cq EIO\n");
	errno = 0;
	CHECK(!ibv_alloc_pd(c) && errno == EIO, "ibv_alloc_pd: want NULL with EIO, errno %s", strerror(errno));
	printf("ok ibv_alloc_pd EIO\n");
	struct ibv_port_attr pa;
	CHECK(ibv_query_port(c, 1, &pa) == EIO, "ibv_query_port: want EIO");
	printf("ok ibv_query_port EIO\n");
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = IBV_ACCESS_LOCAL_WRITE};
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == EIO,
	      "ibv_modify_qp: want EIO");
	printf("ok ibv_modify_qp EIO\n");
	struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey};
	struct ibv_recv_wr rwr = {.sg_list = &sge, .num_sge = 1}, *bad;
	CHECK(ibv_post_recv(qp, &rwr, &bad) == EIO, "ibv_post_recv: want EIO");
	printf("ok ibv_post_recv EIO\n");
	struct ibv_cq *evcq;
	void *evctx;
	waitfd(ch->fd, 10000, "the completion channel");
	errno = 0;
	CHECK(ibv_get_cq_event(ch, &evcq, &evctx) < 0 && errno == EIO, "ibv_get_cq_event: want a failure with EIO, errno %s",
	      strerror(errno));
	printf("ok ibv_get_cq_event EIO\n");

	struct rdma_cm_event *cev;
	waitfd(ech->fd, 10000, "the RDMA CM event channel");
	CHECK(rdma_get_cm_event(ech, &cev) == 0, "rdma_get_cm_event: %s", strerror(errno));
	CHECK(cev->event == RDMA_CM_EVENT_DEVICE_REMOVAL && cev->id == id, "CM event %s, want DEVICE_REMOVAL on the ID",
	      rdma_event_str(cev->event));
	rdma_ack_cm_event(cev);
	printf("ok RDMA_CM_EVENT_DEVICE_REMOVAL\n");
	errno = 0;
	CHECK(rdma_get_cm_event(ech, &cev) != 0 && errno == ENODEV, "a second CM event: want ENODEV, errno %s", strerror(errno));
	printf("ok then ENODEV\n");

	CHECK(ibv_destroy_qp(qp) == 0, "ibv_destroy_qp");
	CHECK(ibv_destroy_cq(cq) == 0, "ibv_destroy_cq");
	CHECK(ibv_destroy_comp_channel(ch) == 0, "ibv_destroy_comp_channel");
	CHECK(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr");
	CHECK(ibv_dealloc_pd(pd) == 0, "ibv_dealloc_pd");
	CHECK(ibv_close_device(c) == 0, "ibv_close_device");
	printf("ok destroyed\n");
	ibv_free_device_list(l);
	return 0;
}
