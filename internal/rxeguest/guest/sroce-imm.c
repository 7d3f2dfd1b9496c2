/*
 * sroce-imm: generates RC SEND-with-immediate and RDMA WRITE-with-immediate
 * traffic between two libibverbs devices (for rdma_rxe golden captures).
 *
 *   server: sroce-imm [-d DEV] [-g GIDX] [-p PORT] [-s SIZE] [-n ITERS]
 *   client: sroce-imm [-d DEV] [-g GIDX] [-p PORT] [-s SIZE] [-n ITERS] SERVER
 *
 * The client posts ITERS SEND_WITH_IMM work requests and then ITERS
 * RDMA_WRITE_WITH_IMM ones. Even-numbered requests carry 64 bytes (one
 * packet, *_ONLY_WITH_IMMEDIATE), odd-numbered ones SIZE bytes (several
 * packets when SIZE exceeds the path MTU: FIRST, MIDDLE, LAST_WITH_IMMEDIATE).
 * The server checks every receive completion: opcode, immediate value
 * (0x5e000000 + i for sends, 0x3e000000 + i for writes) and payload.
 * Both sides exchange QPN, PSN, GID, rkey and address over TCP, one line
 * of text each way, and exit 0 on success.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <infiniband/verbs.h>

#define SMALL 64
#define SEND_IMM_BASE 0x5e000000u
#define WRITE_IMM_BASE 0x3e000000u

struct peer {
	uint32_t qpn, psn, rkey;
	uint64_t addr;
	union ibv_gid gid;
};

static void die(const char *what)
{
	fprintf(stderr, "sroce-imm: %s: %s\n", what, strerror(errno));
	exit(1);
}

static void fail(const char *what)
{
	fprintf(stderr, "sroce-imm: %s\n", what);
	exit(1);
}

static int tcp_connect(const char *host, const char *port, int server)
{
	struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM};
	struct addrinfo *res;
	int fd, one = 1;

	if (server)
		hints.ai_flags = AI_PASSIVE;
	if (getaddrinfo(host, port, &hints, &res))
		fail("getaddrinfo");
	fd = socket(res->ai_family, res->ai_socktype, 0);
	if (fd < 0)
		die("socket");
	if (server) {
		int c;
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(fd, res->ai_addr, res->ai_addrlen) || listen(fd, 1))
			die("bind/listen");
		c = accept(fd, NULL, NULL);
		if (c < 0)
			die("accept");
		close(fd);
		fd = c;
	} else if (connect(fd, res->ai_addr, res->ai_addrlen)) {
		die("connect");
	}
	freeaddrinfo(res);
	return fd;
}

/* Reads one '\n'-terminated line of at most n-1 bytes. */
static void read_line(int fd, char *buf, size_t n)
{
	size_t i = 0;

	while (i < n - 1) {
		ssize_t r = read(fd, buf + i, 1);
		if (r <= 0)
			fail("peer closed the TCP connection");
		if (buf[i] == '\n')
			break;
		i++;
	}
	buf[i] = 0;
}

static void write_all(int fd, const char *buf, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, buf, n);
		if (w <= 0)
			die("write");
		buf += w;
		n -= w;
	}
}

static void exchange(int fd, const struct peer *me, struct peer *them)
{
	char line[256], gid[33];
	unsigned int b;
	int i;

	for (i = 0; i < 16; i++)
		sprintf(gid + 2 * i, "%02x", me->gid.raw[i]);
	snprintf(line, sizeof(line), "%06x %06x %08x %016" PRIx64 " %s\n",
		 me->qpn, me->psn, me->rkey, me->addr, gid);
	write_all(fd, line, strlen(line));
	read_line(fd, line, sizeof(line));
	if (sscanf(line, "%x %x %x %" SCNx64 " %32s", &them->qpn, &them->psn,
		   &them->rkey, &them->addr, gid) != 5 || strlen(gid) != 32)
		fail("bad peer line");
	for (i = 0; i < 16; i++) {
		sscanf(gid + 2 * i, "%2x", &b);
		them->gid.raw[i] = b;
	}
}

static void to_init(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			  IBV_QP_ACCESS_FLAGS))
		die("modify QP to INIT");
}

static void to_rts(struct ibv_qp *qp, const struct peer *me, const struct peer *them,
		   int gidx, enum ibv_mtu mtu)
{
	struct ibv_qp_attr a;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = mtu;
	a.dest_qp_num = them->qpn;
	a.rq_psn = them->psn;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = them->gid;
	a.ah_attr.grh.sgid_index = gidx;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
			  IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
			  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		die("modify QP to RTR");

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = me->psn;
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			  IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		die("modify QP to RTS");
}

static void poll_n(struct ibv_cq *cq, int n, struct ibv_wc *out)
{
	int got = 0;
	time_t deadline = time(NULL) + 120;

	while (got < n) {
		int r = ibv_poll_cq(cq, n - got, out + got);
		if (r < 0)
			fail("ibv_poll_cq");
		for (int i = got; i < got + r; i++)
			if (out[i].status != IBV_WC_SUCCESS) {
				fprintf(stderr, "sroce-imm: completion %d: %s\n", i,
					ibv_wc_status_str(out[i].status));
				exit(1);
			}
		got += r;
		if (r == 0) {
			if (time(NULL) > deadline)
				fail("timed out waiting for completions");
			usleep(1000);
		}
	}
}

static uint8_t pattern(int i, size_t j)
{
	return (uint8_t)(i * 31 + j);
}

static size_t msg_len(int i, size_t size)
{
	return (i % 2 == 0) ? SMALL : size;
}

int main(int argc, char **argv)
{
	const char *devname = "rxe0", *port = "18517", *server = NULL;
	int gidx = 1, iters = 4, opt, ndev, i, fd;
	size_t size = 4096;
	struct ibv_device **devs;
	struct ibv_context *ctx = NULL;
	struct peer me, them;

	while ((opt = getopt(argc, argv, "d:g:p:s:n:")) != -1) {
		switch (opt) {
		case 'd': devname = optarg; break;
		case 'g': gidx = atoi(optarg); break;
		case 'p': port = optarg; break;
		case 's': size = strtoul(optarg, NULL, 0); break;
		case 'n': iters = atoi(optarg); break;
		default: fail("usage: sroce-imm [-d dev] [-g gidx] [-p port] [-s size] [-n iters] [server]");
		}
	}
	if (optind < argc)
		server = argv[optind];
	if (size < SMALL || iters < 1 || iters > 64)
		fail("bad size or iteration count");

	devs = ibv_get_device_list(&ndev);
	for (i = 0; devs && i < ndev; i++)
		if (!strcmp(ibv_get_device_name(devs[i]), devname))
			ctx = ibv_open_device(devs[i]);
	if (!ctx)
		fail("device not found");

	size_t region = size * (size_t)iters;
	uint8_t *buf = calloc(1, region * 2);
	if (!buf)
		fail("out of memory");
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_mr *mr = pd ? ibv_reg_mr(pd, buf, region * 2,
					    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) : NULL;
	struct ibv_cq *cq = ibv_create_cq(ctx, 4 * iters + 4, NULL, NULL, 0);
	if (!mr || !cq)
		die("alloc pd/mr/cq");
	struct ibv_qp_init_attr qia = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = {.max_send_wr = 2 * iters + 4, .max_recv_wr = 2 * iters + 4,
			.max_send_sge = 1, .max_recv_sge = 1},
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &qia);
	if (!qp)
		die("create QP");

	struct ibv_port_attr pa;
	if (ibv_query_port(ctx, 1, &pa))
		die("query port");
	enum ibv_mtu mtu = pa.active_mtu < IBV_MTU_1024 ? pa.active_mtu : IBV_MTU_1024;

	srand48(getpid() ^ time(NULL));
	memset(&me, 0, sizeof(me));
	me.qpn = qp->qp_num;
	me.psn = lrand48() & 0xffffff;
	me.rkey = mr->rkey;
	me.addr = (uintptr_t)buf;
	if (ibv_query_gid(ctx, 1, gidx, &me.gid))
		die("query GID");

	struct ibv_wc *wc = calloc(4 * iters, sizeof(*wc));
	to_init(qp);
	if (!server) {
		/* Receives for the sends (first region) and the writes. */
		for (i = 0; i < 2 * iters; i++) {
			struct ibv_sge sge = {
				.addr = (uintptr_t)buf + (size_t)(i % iters) * size,
				.length = size, .lkey = mr->lkey};
			struct ibv_recv_wr wr = {.wr_id = i, .sg_list = &sge, .num_sge = 1}, *bad;
			if (ibv_post_recv(qp, &wr, &bad))
				die("post recv");
		}
	}
	fd = tcp_connect(server, port, !server);
	exchange(fd, &me, &them);
	to_rts(qp, &me, &them, gidx, mtu);

	char sync[8];
	if (server) {
		/* Client: fill the source region, send, then write. */
		uint8_t *src = buf + region;
		for (i = 0; i < iters; i++)
			for (size_t j = 0; j < size; j++)
				src[(size_t)i * size + j] = pattern(i, j);
		read_line(fd, sync, sizeof(sync)); /* server is in RTS */
		for (i = 0; i < 2 * iters; i++) {
			int k = i % iters, w = i >= iters;
			struct ibv_sge sge = {
				.addr = (uintptr_t)src + (size_t)k * size,
				.length = msg_len(k, size), .lkey = mr->lkey};
			struct ibv_send_wr wr = {
				.wr_id = i, .sg_list = &sge, .num_sge = 1,
				.send_flags = IBV_SEND_SIGNALED}, *bad;
			if (!w) {
				wr.opcode = IBV_WR_SEND_WITH_IMM;
				wr.imm_data = htonl(SEND_IMM_BASE + k);
			} else {
				wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
				wr.imm_data = htonl(WRITE_IMM_BASE + k);
				wr.wr.rdma.remote_addr = them.addr + region + (size_t)k * size;
				wr.wr.rdma.rkey = them.rkey;
			}
			if (ibv_post_send(qp, &wr, &bad))
				die("post send");
		}
		poll_n(cq, 2 * iters, wc);
		read_line(fd, sync, sizeof(sync)); /* server checked everything */
		printf("sroce-imm: client ok: %d SEND_WITH_IMM and %d RDMA_WRITE_WITH_IMM, size %zu/%d, mtu %d\n",
		       iters, iters, size, SMALL, 128 << mtu);
	} else {
		write_all(fd, "rts\n", 4);
		poll_n(cq, 2 * iters, wc);
		for (i = 0; i < 2 * iters; i++) {
			int k, w;
			uint32_t imm = ntohl(wc[i].imm_data);
			if (!(wc[i].wc_flags & IBV_WC_WITH_IMM))
				fail("completion without immediate data");
			if (wc[i].opcode == IBV_WC_RECV) {
				w = 0;
				k = imm - SEND_IMM_BASE;
			} else if (wc[i].opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
				w = 1;
				k = imm - WRITE_IMM_BASE;
			} else {
				fail("unexpected completion opcode");
			}
			if (k < 0 || k >= iters)
				fail("unexpected immediate value");
			if (!w && wc[i].byte_len != msg_len(k, size))
				fail("unexpected SEND length");
			uint8_t *dst = w ? buf + region + (size_t)k * size
					 : buf + (size_t)wc[i].wr_id % iters * size;
			for (size_t j = 0; j < msg_len(k, size); j++)
				if (dst[j] != pattern(k, j))
					fail("payload mismatch");
		}
		write_all(fd, "ok\n", 3);
		printf("sroce-imm: server ok: %d SEND_WITH_IMM and %d RDMA_WRITE_WITH_IMM received and checked\n",
		       iters, iters);
	}
	close(fd);
	ibv_destroy_qp(qp);
	ibv_destroy_cq(cq);
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(devs);
	return 0;
}
