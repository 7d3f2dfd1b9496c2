/*
 * sroce-mw: memory windows and SEND with invalidate on an rdma_rxe device,
 * driven one command at a time by a peer over TCP.
 *
 *   sroce-mw [-d DEV] [-g GIDX] [-p PORT] [-t SECONDS]
 *
 * It listens on PORT (default 18519), serves the first connection and
 * answers every command line with one line: "ok ...", "wc ..." (a work
 * completion), "none" (no completion in time) or "err MESSAGE". It exits 0
 * after "quit", 1 when the peer goes away or on a failure of its own, and
 * is killed by SIGALRM after SECONDS (default 300) whatever it is doing.
 * Every object shares one PD and is numbered from 0 in order of creation;
 * each QP has its own send and receive CQ. Numbers may be decimal or 0x
 * hex; addresses and keys are printed in hex, GIDs as 32 hex digits.
 *
 *   qp                           create an RC QP: ok N QPN PSN GID
 *   rts N QPN PSN GID            connect QP N to that peer QP (INIT, RTR,
 *                                RTS, path MTU at most 1024): ok
 *   mr SIZE ACCESS               register SIZE zeroed bytes with the
 *                                ibv_access_flags ACCESS: ok N ADDR LKEY RKEY
 *   mw TYPE                      allocate a window of type 1 or 2: ok N RKEY
 *   bind QP MW MR OFF LEN ACCESS RKEY
 *                                bind type 2 window MW to LEN bytes at OFF
 *                                of MR with the rights ACCESS and the new
 *                                key RKEY (IBV_WR_BIND_MW on QP): wc
 *   write QP MR OFF LEN RADDR RKEY   RDMA WRITE from OFF of MR: wc
 *   read QP MR OFF LEN RADDR RKEY    RDMA READ into OFF of MR: wc
 *   sendinv QP MR OFF LEN RKEY   SEND with invalidate of RKEY: wc
 *   recv QP MR OFF LEN           post a receive: ok
 *   pollrecv QP MS               wait up to MS ms for a receive: wc or none
 *   put MR OFF HEX               store bytes: ok
 *   get MR OFF LEN               load bytes: ok HEX
 *   state QP                     ok STATE (enum ibv_qp_state)
 *   quit                         ok, and exit 0
 *
 * Send work requests are signaled and waited for (at most 30 s). A
 * completion is printed as
 *   wc STATUS OPCODE WC_FLAGS INVALIDATED_RKEY BYTE_LEN QPN STATUS_STRING
 */
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <infiniband/verbs.h>

#define MAXOBJ 32
#define LINE (1 << 17)
#define SEND_WAIT_MS 30000

struct qpx {
	struct ibv_qp *qp;
	struct ibv_cq *scq, *rcq;
	uint32_t psn;
};

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static int gidx = 1;
static struct qpx qps[MAXOBJ];
static struct ibv_mr *mrs[MAXOBJ];
static struct ibv_mw *mws[MAXOBJ];
static int nqp, nmr, nmw;
static int fd;
static char out[LINE];

static void fail(const char *what)
{
	fprintf(stderr, "sroce-mw: %s\n", what);
	exit(1);
}

static void reply(const char *fmt, ...)
{
	va_list ap;
	size_t n, off = 0;

	va_start(ap, fmt);
	n = vsnprintf(out, sizeof(out) - 1, fmt, ap);
	va_end(ap);
	if (n >= sizeof(out) - 1)
		n = sizeof(out) - 2;
	out[n++] = '\n';
	while (off < n) {
		ssize_t w = write(fd, out + off, n - off);
		if (w <= 0)
			fail("writing to the peer failed");
		off += w;
	}
}

/*
 * Reads one line into buf; returns 0 at end of file, -1 for a line longer
 * than n-1 bytes (which is read and dropped).
 */
static int read_line(char *buf, size_t n)
{
	static char in[4096];
	static size_t have, pos;
	size_t i = 0;
	int over = 0;

	for (;;) {
		if (pos == have) {
			ssize_t r = read(fd, in, sizeof(in));
			if (r <= 0)
				return 0;
			have = r;
			pos = 0;
		}
		char c = in[pos++];
		if (c == '\n')
			break;
		if (i < n - 1)
			buf[i++] = c;
		else
			over = 1;
	}
	buf[i] = 0;
	return over ? -1 : 1;
}

static int listen_accept(const char *port)
{
	struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
	struct addrinfo *res;
	int s, c, one = 1;

	if (getaddrinfo(NULL, port, &hints, &res))
		fail("getaddrinfo");
	s = socket(res->ai_family, res->ai_socktype, 0);
	if (s < 0)
		fail("socket");
	setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(s, res->ai_addr, res->ai_addrlen) || listen(s, 1))
		fail("bind/listen");
	freeaddrinfo(res);
	c = accept(s, NULL, NULL);
	if (c < 0)
		fail("accept");
	close(s);
	return c;
}

static uint64_t num(const char *s, int *ok)
{
	char *end;

	errno = 0;
	uint64_t v = strtoull(s ? s : "", &end, 0);
	if (!s || *s == 0 || *end != 0 || errno)
		*ok = 0;
	return v;
}

static int parse_gid(const char *s, union ibv_gid *g)
{
	unsigned int b;

	if (!s || strlen(s) != 32)
		return 0;
	for (int i = 0; i < 16; i++) {
		if (sscanf(s + 2 * i, "%2x", &b) != 1)
			return 0;
		g->raw[i] = b;
	}
	return 1;
}

static void print_wc(const struct ibv_wc *wc)
{
	reply("wc %u %u %#x %#x %u %#x %s", wc->status, wc->opcode, wc->wc_flags,
	      wc->invalidated_rkey, wc->byte_len, wc->qp_num, ibv_wc_status_str(wc->status));
}

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits up to ms for one completion on cq; prints it or "none". */
static void wait_wc(struct ibv_cq *cq, int64_t ms)
{
	struct ibv_wc wc;
	int64_t deadline = now_ms() + ms;

	for (;;) {
		int r = ibv_poll_cq(cq, 1, &wc);
		if (r < 0) {
			reply("err ibv_poll_cq failed");
			return;
		}
		if (r == 1) {
			print_wc(&wc);
			return;
		}
		if (now_ms() > deadline) {
			reply("none");
			return;
		}
		usleep(500);
	}
}

static void post_and_wait(struct qpx *q, struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad;
	int err;

	wr->send_flags |= IBV_SEND_SIGNALED;
	err = ibv_post_send(q->qp, wr, &bad);
	if (err) {
		reply("err ibv_post_send: %s", strerror(err));
		return;
	}
	wait_wc(q->scq, SEND_WAIT_MS);
}

static int connect_qp(struct qpx *q, uint32_t dqpn, uint32_t dpsn, union ibv_gid *dgid)
{
	struct ibv_qp_attr a;
	struct ibv_port_attr pa;

	if (ibv_query_port(ctx, 1, &pa))
		return errno;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			    IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
	if (ibv_modify_qp(q->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			  IBV_QP_ACCESS_FLAGS))
		return errno;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = pa.active_mtu < IBV_MTU_1024 ? pa.active_mtu : IBV_MTU_1024;
	a.dest_qp_num = dqpn;
	a.rq_psn = dpsn;
	a.max_dest_rd_atomic = 4;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = *dgid;
	a.ah_attr.grh.sgid_index = gidx;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = 1;
	if (ibv_modify_qp(q->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
			  IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
			  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		return errno;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 6;
	a.rnr_retry = 6;
	a.sq_psn = q->psn;
	a.max_rd_atomic = 4;
	if (ibv_modify_qp(q->qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			  IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		return errno;
	return 0;
}

/* Checks that [off, off+len) lies in MR m. */
static int in_mr(uint64_t m, uint64_t off, uint64_t len)
{
	return m < (uint64_t)nmr && off <= mrs[m]->length && len <= mrs[m]->length - off;
}

static void serve(char *line)
{
	char *arg[10];
	int n = 0, ok = 1;
	char *save;

	for (char *t = strtok_r(line, " ", &save); t && n < 10; t = strtok_r(NULL, " ", &save))
		arg[n++] = t;
	for (int i = n; i < 10; i++)
		arg[i] = NULL;
	if (n == 0) {
		reply("err empty command");
		return;
	}
	const char *cmd = arg[0];

	if (!strcmp(cmd, "quit")) {
		reply("ok");
		exit(0);
	} else if (!strcmp(cmd, "qp") && n == 1) {
		if (nqp == MAXOBJ) {
			reply("err too many QPs");
			return;
		}
		struct qpx *q = &qps[nqp];
		q->scq = ibv_create_cq(ctx, 32, NULL, NULL, 0);
		q->rcq = ibv_create_cq(ctx, 32, NULL, NULL, 0);
		if (!q->scq || !q->rcq) {
			reply("err ibv_create_cq: %s", strerror(errno));
			return;
		}
		struct ibv_qp_init_attr qia = {
			.send_cq = q->scq, .recv_cq = q->rcq, .qp_type = IBV_QPT_RC,
			.cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1},
		};
		q->qp = ibv_create_qp(pd, &qia);
		if (!q->qp) {
			reply("err ibv_create_qp: %s", strerror(errno));
			return;
		}
		q->psn = lrand48() & 0xffffff;
		union ibv_gid g;
		if (ibv_query_gid(ctx, 1, gidx, &g)) {
			reply("err ibv_query_gid: %s", strerror(errno));
			return;
		}
		char gs[33];
		for (int i = 0; i < 16; i++)
			sprintf(gs + 2 * i, "%02x", g.raw[i]);
		reply("ok %d %#x %#x %s", nqp, q->qp->qp_num, q->psn, gs);
		nqp++;
	} else if (!strcmp(cmd, "rts") && n == 5) {
		uint64_t i = num(arg[1], &ok), qpn = num(arg[2], &ok), psn = num(arg[3], &ok);
		union ibv_gid g;
		if (!ok || i >= (uint64_t)nqp || !parse_gid(arg[4], &g)) {
			reply("err bad rts arguments");
			return;
		}
		int err = connect_qp(&qps[i], qpn, psn, &g);
		if (err)
			reply("err ibv_modify_qp: %s", strerror(err));
		else
			reply("ok");
	} else if (!strcmp(cmd, "mr") && n == 3) {
		uint64_t size = num(arg[1], &ok), access = num(arg[2], &ok);
		if (!ok || size == 0 || size > (64 << 20) || nmr == MAXOBJ) {
			reply("err bad mr arguments");
			return;
		}
		void *buf = calloc(1, size);
		struct ibv_mr *m = buf ? ibv_reg_mr(pd, buf, size, access) : NULL;
		if (!m) {
			reply("err ibv_reg_mr: %s", strerror(errno));
			free(buf);
			return;
		}
		mrs[nmr] = m;
		reply("ok %d %#" PRIx64 " %#x %#x", nmr, (uint64_t)(uintptr_t)buf, m->lkey, m->rkey);
		nmr++;
	} else if (!strcmp(cmd, "mw") && n == 2) {
		uint64_t type = num(arg[1], &ok);
		if (!ok || (type != 1 && type != 2) || nmw == MAXOBJ) {
			reply("err bad mw arguments");
			return;
		}
		struct ibv_mw *w = ibv_alloc_mw(pd, type == 1 ? IBV_MW_TYPE_1 : IBV_MW_TYPE_2);
		if (!w) {
			reply("err ibv_alloc_mw: %s", strerror(errno));
			return;
		}
		mws[nmw] = w;
		reply("ok %d %#x", nmw, w->rkey);
		nmw++;
	} else if (!strcmp(cmd, "bind") && n == 8) {
		uint64_t q = num(arg[1], &ok), w = num(arg[2], &ok), m = num(arg[3], &ok);
		uint64_t off = num(arg[4], &ok), len = num(arg[5], &ok), access = num(arg[6], &ok);
		uint64_t key = num(arg[7], &ok);
		if (!ok || q >= (uint64_t)nqp || w >= (uint64_t)nmw || !in_mr(m, off, len)) {
			reply("err bad bind arguments");
			return;
		}
		struct ibv_send_wr wr = {.wr_id = 1, .opcode = IBV_WR_BIND_MW, .send_flags = IBV_SEND_SIGNALED};
		wr.bind_mw.mw = mws[w];
		wr.bind_mw.rkey = key;
		wr.bind_mw.bind_info.mr = mrs[m];
		wr.bind_mw.bind_info.addr = (uintptr_t)mrs[m]->addr + off;
		wr.bind_mw.bind_info.length = len;
		wr.bind_mw.bind_info.mw_access_flags = access;
		struct ibv_send_wr *bad;
		int err = ibv_post_send(qps[q].qp, &wr, &bad);
		if (err) {
			reply("err ibv_post_send: %s", strerror(err));
			return;
		}
		struct ibv_wc wc;
		int64_t deadline = now_ms() + SEND_WAIT_MS;
		int r;
		while ((r = ibv_poll_cq(qps[q].scq, 1, &wc)) == 0 && now_ms() <= deadline)
			usleep(500);
		if (r < 0) {
			reply("err ibv_poll_cq failed");
			return;
		}
		if (r == 0) {
			reply("none");
			return;
		}
		/* The next bind names the window by the key it has now. */
		if (wc.status == IBV_WC_SUCCESS)
			mws[w]->rkey = key;
		print_wc(&wc);
	} else if ((!strcmp(cmd, "write") || !strcmp(cmd, "read")) && n == 7) {
		uint64_t q = num(arg[1], &ok), m = num(arg[2], &ok), off = num(arg[3], &ok);
		uint64_t len = num(arg[4], &ok), raddr = num(arg[5], &ok), rkey = num(arg[6], &ok);
		if (!ok || q >= (uint64_t)nqp || !in_mr(m, off, len)) {
			reply("err bad %s arguments", cmd);
			return;
		}
		struct ibv_sge sge = {.addr = (uintptr_t)mrs[m]->addr + off, .length = len, .lkey = mrs[m]->lkey};
		struct ibv_send_wr wr = {.wr_id = 2, .sg_list = &sge, .num_sge = 1,
					 .opcode = cmd[0] == 'w' ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ};
		wr.wr.rdma.remote_addr = raddr;
		wr.wr.rdma.rkey = rkey;
		post_and_wait(&qps[q], &wr);
	} else if (!strcmp(cmd, "sendinv") && n == 6) {
		uint64_t q = num(arg[1], &ok), m = num(arg[2], &ok), off = num(arg[3], &ok);
		uint64_t len = num(arg[4], &ok), rkey = num(arg[5], &ok);
		if (!ok || q >= (uint64_t)nqp || !in_mr(m, off, len)) {
			reply("err bad sendinv arguments");
			return;
		}
		struct ibv_sge sge = {.addr = (uintptr_t)mrs[m]->addr + off, .length = len, .lkey = mrs[m]->lkey};
		struct ibv_send_wr wr = {.wr_id = 3, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND_WITH_INV};
		wr.invalidate_rkey = rkey;
		post_and_wait(&qps[q], &wr);
	} else if (!strcmp(cmd, "recv") && n == 5) {
		uint64_t q = num(arg[1], &ok), m = num(arg[2], &ok), off = num(arg[3], &ok), len = num(arg[4], &ok);
		if (!ok || q >= (uint64_t)nqp || !in_mr(m, off, len)) {
			reply("err bad recv arguments");
			return;
		}
		struct ibv_sge sge = {.addr = (uintptr_t)mrs[m]->addr + off, .length = len, .lkey = mrs[m]->lkey};
		struct ibv_recv_wr wr = {.wr_id = 4, .sg_list = &sge, .num_sge = 1}, *bad;
		int err = ibv_post_recv(qps[q].qp, &wr, &bad);
		if (err)
			reply("err ibv_post_recv: %s", strerror(err));
		else
			reply("ok");
	} else if (!strcmp(cmd, "pollrecv") && n == 3) {
		uint64_t q = num(arg[1], &ok), ms = num(arg[2], &ok);
		if (!ok || q >= (uint64_t)nqp || ms > 600000) {
			reply("err bad pollrecv arguments");
			return;
		}
		wait_wc(qps[q].rcq, ms);
	} else if (!strcmp(cmd, "put") && n == 4) {
		uint64_t m = num(arg[1], &ok), off = num(arg[2], &ok);
		size_t len = arg[3] ? strlen(arg[3]) / 2 : 0;
		if (!ok || !arg[3] || strlen(arg[3]) % 2 || !in_mr(m, off, len)) {
			reply("err bad put arguments");
			return;
		}
		uint8_t *p = (uint8_t *)mrs[m]->addr + off;
		for (size_t i = 0; i < len; i++) {
			unsigned int b;
			if (sscanf(arg[3] + 2 * i, "%2x", &b) != 1) {
				reply("err bad hex");
				return;
			}
			p[i] = b;
		}
		reply("ok");
	} else if (!strcmp(cmd, "get") && n == 4) {
		uint64_t m = num(arg[1], &ok), off = num(arg[2], &ok), len = num(arg[3], &ok);
		if (!ok || !in_mr(m, off, len) || len > (LINE - 8) / 2) {
			reply("err bad get arguments");
			return;
		}
		static char hex[LINE];
		const uint8_t *p = (const uint8_t *)mrs[m]->addr + off;
		for (uint64_t i = 0; i < len; i++)
			sprintf(hex + 2 * i, "%02x", p[i]);
		hex[2 * len] = 0;
		reply("ok %s", hex);
	} else if (!strcmp(cmd, "state") && n == 2) {
		uint64_t q = num(arg[1], &ok);
		struct ibv_qp_attr a;
		struct ibv_qp_init_attr ia;
		if (!ok || q >= (uint64_t)nqp) {
			reply("err bad state arguments");
			return;
		}
		if (ibv_query_qp(qps[q].qp, &a, IBV_QP_STATE, &ia))
			reply("err ibv_query_qp: %s", strerror(errno));
		else
			reply("ok %d", a.qp_state);
	} else {
		reply("err unknown command or wrong argument count: %s", cmd);
	}
}

int main(int argc, char **argv)
{
	const char *devname = "rxe0", *port = "18519";
	int opt, ndev, limit = 300;
	struct ibv_device **devs;
	static char line[LINE];

	while ((opt = getopt(argc, argv, "d:g:p:t:")) != -1) {
		switch (opt) {
		case 'd': devname = optarg; break;
		case 'g': gidx = atoi(optarg); break;
		case 'p': port = optarg; break;
		case 't': limit = atoi(optarg); break;
		default: fail("usage: sroce-mw [-d dev] [-g gidx] [-p port] [-t seconds]");
		}
	}
	if (limit <= 0)
		fail("bad time limit");
	alarm(limit);
	devs = ibv_get_device_list(&ndev);
	for (int i = 0; devs && i < ndev; i++)
		if (!strcmp(ibv_get_device_name(devs[i]), devname))
			ctx = ibv_open_device(devs[i]);
	if (!ctx)
		fail("device not found");
	pd = ibv_alloc_pd(ctx);
	if (!pd)
		fail("ibv_alloc_pd failed");
	srand48(getpid() ^ time(NULL));
	fd = listen_accept(port);
	for (int r; (r = read_line(line, sizeof(line))) != 0;) {
		if (r < 0)
			reply("err line longer than %d bytes", LINE - 1);
		else
			serve(line);
	}
	fail("the peer closed the connection before quit");
	return 1;
}
