/*
 * memkinds_test.c: every kind of memory a program registers, through
 * sroce's libibverbs against a live daemon (TestMemoryKinds). Two RC QPs
 * of one device connected to each other; for each kind (heap, private and
 * shared anonymous memory, POSIX shm, a memfd, a file mapped shared and
 * private, hugetlb memory shared, private and as a memfd, a range that
 * mixes private and shared pages) a source and a destination MR in memory
 * of that kind, an RDMA WRITE, an RDMA READ and a SEND between them, each
 * checked byte for byte, and where the memory is a file's, checked in the
 * file too. Then one range registered twice. Prints "ok NAME" per check,
 * "skip NAME: why" for a kind the machine cannot give (huge pages), and
 * exits 1 at the first failure.
 *
 * Usage: memkinds_test DEVICE GID_INDEX MODE
 *   kinds     the memory kinds and the double registration
 *   fork      fork without fork safety: the child gets a copy
 *   forksafe  fork with RDMAV_FORK_SAFE set: registered pages stay out of the child
 *   undumpable  a non-dumpable process: its shared memory refused unless root
 *   truncate  a registered file truncated under its MR: the WRITE fails, nothing else
 *   bench     registration time and WRITE throughput per kind and size
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "verbs_test.h"

#ifndef MFD_HUGETLB
#define MFD_HUGETLB 4U
#endif

#define ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)
#define HUGE (2UL << 20)
#define LEN 100000 /* bytes moved: many packets at MTU 1024, not page-aligned */
#define AREA (256 << 10)

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *cq;
static struct ibv_qp *qa, *qb;
static union ibv_gid gid;
static int gid_idx;

/* Two RC QPs connected to each other. */
static void make_qps(void)
{
	struct ibv_qp_init_attr qa_attr = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
					   .cap = {.max_send_wr = 64, .max_recv_wr = 64, .max_send_sge = 1, .max_recv_sge = 1}};
	qa = ibv_create_qp(pd, &qa_attr);
	qb = ibv_create_qp(pd, &qa_attr);
	CHECK(qa && qb, "create QPs: %s", strerror(errno));
	connect_qp(qa, qb->qp_num, &gid, gid_idx);
	connect_qp(qb, qa->qp_num, &gid, gid_idx);
}

static void setup(const char *dev, const char *idx)
{
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK(list, "no device list");
	for (int i = 0; i < n && !ctx; i++)
		if (!strcmp(ibv_get_device_name(list[i]), dev))
			ctx = ibv_open_device(list[i]);
	CHECK(ctx, "device %s not opened", dev);
	ibv_free_device_list(list);
	gid_idx = atoi(idx);
	CHECK(!ibv_query_gid(ctx, 1, gid_idx, &gid), "query GID %d", gid_idx);
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 256, NULL, NULL, 0);
	CHECK(pd && cq, "PD, CQ");
	make_qps();
}

static void rdma(struct ibv_qp *qp, enum ibv_wr_opcode op, void *local, uint32_t len, uint32_t lkey, void *remote,
		 uint32_t rkey, const char *what)
{
	struct ibv_sge sge = {(uintptr_t)local, len, lkey};
	struct ibv_send_wr wr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1, .opcode = op,
				 .send_flags = IBV_SEND_SIGNALED}, *bad;
	wr.wr.rdma.remote_addr = (uintptr_t)remote;
	wr.wr.rdma.rkey = rkey;
	CHECK(!ibv_post_send(qp, &wr, &bad), "%s: post", what);
	poll_one(cq, what);
}

static void fill(unsigned char *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (unsigned char)(i * 7 + seed + (i >> 10));
}

static void check_fill(const unsigned char *p, size_t n, unsigned seed, const char *what)
{
	for (size_t i = 0; i < n; i++)
		CHECK(p[i] == (unsigned char)(i * 7 + seed + (i >> 10)), "%s: byte %zu is %u, want %u", what, i, p[i],
		      (unsigned char)(i * 7 + seed + (i >> 10)));
}

/* WRITE, READ and SEND between src and dst of one kind, each checked. */
static void move_data(const char *kind, unsigned char *src, unsigned char *dst, size_t len)
{
	char what[128];
	struct ibv_mr *ms = ibv_reg_mr(pd, src, len, ACCESS);
	CHECK(ms, "%s: ibv_reg_mr of the source: %s", kind, strerror(errno));
	struct ibv_mr *md = ibv_reg_mr(pd, dst, len, ACCESS);
	CHECK(md, "%s: ibv_reg_mr of the destination: %s", kind, strerror(errno));

	snprintf(what, sizeof(what), "%s: WRITE", kind);
	fill(src, len, 1);
	memset(dst, 0, len);
	rdma(qa, IBV_WR_RDMA_WRITE, src, (uint32_t)len, ms->lkey, dst, md->rkey, what);
	check_fill(dst, len, 1, what);

	snprintf(what, sizeof(what), "%s: READ", kind);
	fill(dst, len, 2);
	memset(src, 0, len);
	rdma(qa, IBV_WR_RDMA_READ, src, (uint32_t)len, ms->lkey, dst, md->rkey, what);
	check_fill(src, len, 2, what);

	snprintf(what, sizeof(what), "%s: SEND", kind);
	fill(src, len, 3);
	memset(dst, 0, len);
	struct ibv_sge rs = {(uintptr_t)dst, (uint32_t)len, md->lkey};
	struct ibv_recv_wr rwr = {.wr_id = 2, .sg_list = &rs, .num_sge = 1}, *rbad;
	CHECK(!ibv_post_recv(qb, &rwr, &rbad), "%s: post recv", what);
	struct ibv_sge ss = {(uintptr_t)src, (uint32_t)len, ms->lkey};
	struct ibv_send_wr swr = {.wr_id = 3, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED}, *sbad;
	CHECK(!ibv_post_send(qa, &swr, &sbad), "%s: post send", what);
	poll_one(cq, what);
	poll_one(cq, what);
	check_fill(dst, len, 3, what);

	CHECK(!ibv_dereg_mr(ms) && !ibv_dereg_mr(md), "%s: dereg", kind);
}

/* A WRITE of LEN bytes of pattern seed from src to dst, checked at dst. */
static void write_checked(unsigned char *src, uint32_t lkey, unsigned char *dst, uint32_t rkey, unsigned seed,
			  const char *what)
{
	fill(src, LEN, seed);
	rdma(qa, IBV_WR_RDMA_WRITE, src, LEN, lkey, dst, rkey, what);
	check_fill(dst, LEN, seed, what);
}

/* A file of size bytes in the test's directory, unlinked. */
static int temp_file(size_t size)
{
	char path[] = "/tmp/sroce-memkinds-XXXXXX";
	int fd = mkstemp(path);
	CHECK(fd >= 0 && ftruncate(fd, (off_t)size) == 0, "temp file: %s", strerror(errno));
	unlink(path);
	return fd;
}


static void kind_done(const char *kind)
{
	printf("ok %s\n", kind);
	fflush(stdout);
}

/* Data moved through a mapping of fd (MAP_SHARED or MAP_PRIVATE), then
 * read back from fd: there with MAP_SHARED, not with MAP_PRIVATE. */
static unsigned char *fd_kind(const char *kind, int fd, int flags, unsigned char *back)
{
	unsigned char *p = mmap(NULL, AREA, PROT_READ | PROT_WRITE, flags, fd, 0);
	CHECK(p != MAP_FAILED, "%s: mmap: %s", kind, strerror(errno));
	move_data(kind, p + 100, p + AREA / 2 + 36, LEN);
	CHECK(pread(fd, back, LEN, AREA / 2 + 36) == LEN, "%s: pread", kind);
	if (flags & MAP_SHARED)
		check_fill(back, LEN, 3, kind);
	else
		for (size_t i = 0; i < LEN; i++)
			CHECK(back[i] == 0, "%s: byte %zu of the file changed", kind, i);
	kind_done(kind);
	return p;
}

static void kinds(void)
{
	long pg = sysconf(_SC_PAGESIZE);

	/* Heap. */
	unsigned char *h1 = malloc(LEN + 3), *h2 = malloc(LEN + 5);
	move_data("heap", h1 + 3, h2 + 1, LEN);
	kind_done("heap");

	/* Private anonymous. */
	unsigned char *a = mmap(NULL, AREA, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	move_data("anonymous private", a + 100, a + AREA / 2 + 36, LEN);
	kind_done("anonymous private");

	/* Shared anonymous, seen by a forked child. */
	unsigned char *sa = mmap(NULL, AREA, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	move_data("anonymous shared", sa + 100, sa + AREA / 2 + 36, LEN);
	pid_t pid = fork();
	if (pid == 0) {
		sa[AREA / 2 + 36] = 0x77;
		_exit(0);
	}
	int st;
	waitpid(pid, &st, 0);
	CHECK(sa[AREA / 2 + 36] == 0x77, "anonymous shared: a child's write is not seen: no longer shared");
	kind_done("anonymous shared");

	/* POSIX shm, checked through a second mapping. */
	char name[64];
	snprintf(name, sizeof(name), "/sroce-memkinds-%d", getpid());
	int sfd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
	CHECK(sfd >= 0 && ftruncate(sfd, AREA) == 0, "shm_open: %s", strerror(errno));
	shm_unlink(name);
	unsigned char *s1 = mmap(NULL, AREA, PROT_READ | PROT_WRITE, MAP_SHARED, sfd, 0);
	unsigned char *s2 = mmap(NULL, AREA, PROT_READ, MAP_SHARED, sfd, 0);
	move_data("POSIX shm", s1 + 100, s1 + AREA / 2 + 36, LEN);
	check_fill(s2 + AREA / 2 + 36, LEN, 3, "POSIX shm: another mapping of the object");
	kind_done("POSIX shm");

	/* A memfd, a file mapped shared (the data is in the file) and one
	 * mapped private (the process's copy, the file untouched). */
	unsigned char *back = malloc(LEN);
	int mfd = memfd_create("memkinds", MFD_CLOEXEC);
	CHECK(mfd >= 0 && ftruncate(mfd, AREA) == 0, "memfd: %s", strerror(errno));
	fd_kind("memfd", mfd, MAP_SHARED, back);
	int ffd = temp_file(AREA);
	unsigned char *fs = fd_kind("file shared", ffd, MAP_SHARED, back);
	fd_kind("file private", temp_file(AREA), MAP_PRIVATE, back);

	/* A range mixing private and shared pages: anonymous, file, anonymous. */
	size_t span = 48 * (size_t)pg;
	unsigned char *mix = mmap(NULL, 2 * span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	int xfd = temp_file(16 * (size_t)pg);
	CHECK(mmap(mix + 20 * pg, 8 * (size_t)pg, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, xfd, 8 * pg) ==
		      mix + 20 * pg,
	      "mixed: file in the middle");
	CHECK(mmap(mix + span + 20 * pg, 8 * (size_t)pg, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, xfd, 0) ==
		      mix + span + 20 * pg,
	      "mixed: file in the middle");
	move_data("mixed private and shared", mix + 10, mix + span + 10, span - 20);
	CHECK(pread(xfd, back, 8 * (size_t)pg, 0) == 8 * pg, "mixed: pread");
	for (size_t j = 0; j < 8 * (size_t)pg; j++) {
		size_t i = 20 * (size_t)pg - 10 + j;
		CHECK(back[j] == (unsigned char)(i * 7 + 3 + (i >> 10)), "mixed: byte %zu of the file", j);
	}
	kind_done("mixed private and shared");

	/* Huge pages: shared, private, memfd. */
	struct {
		const char *name;
		int flags;
		int memfd;
	} huge[] = {
		{"hugetlb shared", MAP_SHARED | MAP_ANONYMOUS | MAP_HUGETLB, 0},
		{"hugetlb private", MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, 0},
		{"hugetlb memfd", MAP_SHARED, 1},
	};
	for (size_t k = 0; k < sizeof(huge) / sizeof(huge[0]); k++) {
		int fd = -1;
		if (huge[k].memfd) {
			fd = memfd_create("memkinds-huge", MFD_CLOEXEC | MFD_HUGETLB);
			if (fd < 0 || ftruncate(fd, 2 * HUGE)) {
				printf("skip %s: memfd_create(MFD_HUGETLB): %s\n", huge[k].name, strerror(errno));
				continue;
			}
		}
		unsigned char *hp = mmap(NULL, 2 * HUGE, PROT_READ | PROT_WRITE, huge[k].flags, fd, 0);
		if (hp == MAP_FAILED) {
			printf("skip %s: no huge pages (mmap: %s)\n", huge[k].name, strerror(errno));
			continue;
		}
		memset(hp, 1, 2 * HUGE); /* fault the huge pages in */
		move_data(huge[k].name, hp + 100, hp + HUGE + 36, LEN);
		kind_done(huge[k].name);
		munmap(hp, 2 * HUGE);
		if (fd >= 0)
			close(fd);
	}

	/* One range registered twice: both MRs work, and one deregistered
	 * leaves the other working; in private and in shared memory. */
	unsigned char *twice[2] = {a + AREA / 2, s1 + AREA / 2};
	const char *tname[2] = {"twice private", "twice shared"};
	for (int k = 0; k < 2; k++) {
		unsigned char *src = h1;
		struct ibv_mr *ms = ibv_reg_mr(pd, src, LEN, ACCESS);
		struct ibv_mr *m1 = ibv_reg_mr(pd, twice[k], LEN, ACCESS);
		struct ibv_mr *m2 = ibv_reg_mr(pd, twice[k], LEN, ACCESS);
		CHECK(ms && m1 && m2, "%s: ibv_reg_mr: %s", tname[k], strerror(errno));
		CHECK(m1->rkey != m2->rkey, "%s: two MRs with one key", tname[k]);
		write_checked(src, ms->lkey, twice[k], m1->rkey, 4, tname[k]);
		write_checked(src, ms->lkey, twice[k], m2->rkey, 5, tname[k]);
		CHECK(!ibv_dereg_mr(m1), "%s: dereg the first", tname[k]);
		write_checked(src, ms->lkey, twice[k], m2->rkey, 6, tname[k]);
		fill(twice[k], LEN, 7);
		rdma(qa, IBV_WR_RDMA_READ, src, LEN, ms->lkey, twice[k], m2->rkey, tname[k]);
		check_fill(src, LEN, 7, tname[k]);
		CHECK(!ibv_dereg_mr(m2) && !ibv_dereg_mr(ms), "%s: dereg", tname[k]);
		kind_done(tname[k]);
	}

	/* Read-only memory, private and shared: registered for reading, and
	 * refused with EFAULT for writing, as rxe's pinning refuses it. */
	{
		unsigned char *rp = mmap(NULL, AREA, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		unsigned char *rs = mmap(NULL, AREA, PROT_READ, MAP_SHARED, ffd, 0);
		unsigned char *ro[2] = {rp, rs};
		for (int k = 0; k < 2; k++) {
			errno = 0;
			CHECK(!ibv_reg_mr(pd, ro[k], AREA, ACCESS) && errno == EFAULT,
			      "read-only %s memory registered writable: errno %d, want EFAULT", k ? "shared" : "private",
			      errno);
			struct ibv_mr *m = ibv_reg_mr(pd, ro[k], AREA, IBV_ACCESS_REMOTE_READ);
			CHECK(m, "read-only %s memory registered for reading: %s", k ? "shared" : "private",
			      strerror(errno));
			struct ibv_mr *ms = ibv_reg_mr(pd, h1, LEN, ACCESS);
			rdma(qa, IBV_WR_RDMA_READ, h1, LEN, ms->lkey, ro[k] + 100, m->rkey, "READ of read-only memory");
			CHECK(!memcmp(h1, ro[k] + 100, LEN), "READ of read-only memory: bytes differ");
			CHECK(!ibv_dereg_mr(m) && !ibv_dereg_mr(ms), "dereg");
		}
		kind_done("read-only memory");
	}

	/* ibv_rereg_mr of the translation from private memory to a shared
	 * file and back: WRITEs land in the new range (in the file). */
	{
		unsigned char *src = h1;
		struct ibv_mr *ms = ibv_reg_mr(pd, src, LEN, ACCESS);
		struct ibv_mr *mr = ibv_reg_mr(pd, h2, LEN, ACCESS);
		CHECK(ms && mr, "rereg: ibv_reg_mr: %s", strerror(errno));
		CHECK(!ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, fs + 200, LEN, 0),
		      "rereg to a shared file: %s", strerror(errno));
		write_checked(src, ms->lkey, fs + 200, mr->rkey, 14, "rereg: WRITE to the file");
		CHECK(pread(ffd, back, LEN, 200) == LEN, "rereg: pread");
		check_fill(back, LEN, 14, "rereg: the file");
		CHECK(!ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, a + 300, LEN, 0),
		      "rereg back to private memory: %s", strerror(errno));
		write_checked(src, ms->lkey, a + 300, mr->rkey, 15, "rereg: WRITE to private memory");
		CHECK(!ibv_dereg_mr(mr) && !ibv_dereg_mr(ms), "rereg: dereg");
		kind_done("rereg between private and shared");
	}
}

/* Fork without fork safety: the child sees the registered pages as they
 * were and writes its own copy; the parent's MR keeps its pages. */
static void fork_default(void)
{
	CHECK(ibv_is_fork_initialized() == IBV_FORK_UNNEEDED, "ibv_is_fork_initialized is %d, want IBV_FORK_UNNEEDED",
	      ibv_is_fork_initialized());
	unsigned char *buf = malloc(LEN), *src = malloc(LEN);
	struct ibv_mr *mb = ibv_reg_mr(pd, buf, LEN, ACCESS), *ms = ibv_reg_mr(pd, src, LEN, ACCESS);
	CHECK(mb && ms, "ibv_reg_mr: %s", strerror(errno));
	CHECK(ibv_fork_init() == EINVAL, "ibv_fork_init after a registration did not fail with EINVAL");
	fill(buf, LEN, 8);
	pid_t pid = fork();
	if (pid == 0) {
		for (size_t i = 0; i < LEN; i++)
			if (buf[i] != (unsigned char)(i * 7 + 8 + (i >> 10)))
				_exit(2);
		memset(buf, 0xee, LEN);
		_exit(0);
	}
	int st;
	CHECK(waitpid(pid, &st, 0) == pid, "waitpid");
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child did not see the registered bytes (status %#x)", st);
	check_fill(buf, LEN, 8, "fork: the parent's registered pages after the child wrote");
	printf("ok fork: the child has a copy\n");
	fill(src, LEN, 9);
	rdma(qa, IBV_WR_RDMA_WRITE, src, LEN, ms->lkey, buf, mb->rkey, "fork: WRITE after fork");
	check_fill(buf, LEN, 9, "fork: WRITE after fork");
	fill(buf, LEN, 10);
	rdma(qa, IBV_WR_RDMA_READ, src, LEN, ms->lkey, buf, mb->rkey, "fork: READ after fork");
	check_fill(src, LEN, 10, "fork: READ after fork");
	printf("ok fork: the parent's MR still registered\n");
}

/* Fork with RDMAV_FORK_SAFE: registered ranges are not in the child. */
static void fork_safe(void)
{
	CHECK(ibv_fork_init() == 0, "ibv_fork_init with RDMAV_FORK_SAFE set: not 0");
	CHECK(ibv_is_fork_initialized() == IBV_FORK_UNNEEDED, "ibv_is_fork_initialized is %d",
	      ibv_is_fork_initialized());
	size_t len = 64 << 10;
	unsigned char *buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	unsigned char *src = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct ibv_mr *mb = ibv_reg_mr(pd, buf, len, ACCESS), *ms = ibv_reg_mr(pd, src, len, ACCESS);
	CHECK(mb && ms, "ibv_reg_mr: %s", strerror(errno));
	fill(buf, len, 11);
	pid_t pid = fork();
	if (pid == 0) {
		signal(SIGSEGV, SIG_DFL);
		volatile unsigned char c = buf[0];
		(void)c;
		_exit(0);
	}
	int st;
	CHECK(waitpid(pid, &st, 0) == pid, "waitpid");
	CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV, "the child could touch a registered range (status %#x)", st);
	check_fill(buf, len, 11, "fork safe: the parent's pages");
	printf("ok fork safe: registered pages not in the child\n");
	fill(src, len, 12);
	rdma(qa, IBV_WR_RDMA_WRITE, src, (uint32_t)len, ms->lkey, buf, mb->rkey, "fork safe: WRITE after fork");
	check_fill(buf, len, 12, "fork safe: WRITE after fork");
	printf("ok fork safe: the parent's MR still registered\n");
	CHECK(!ibv_dereg_mr(mb), "dereg");
	pid = fork();
	if (pid == 0)
		_exit(buf[0] == (unsigned char)12 ? 0 : 2);
	CHECK(waitpid(pid, &st, 0) == pid, "waitpid");
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "after dereg the child does not have the pages (status %#x)", st);
	printf("ok fork safe: deregistered pages forked again\n");
}

/* A registered file truncated under its MR: a WRITE to it fails with an
 * error completion; the daemon goes on serving (new QPs move data). */
static void truncated(void)
{
	int fd = temp_file(AREA);
	unsigned char *fs = mmap(NULL, AREA, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	unsigned char *src = malloc(LEN);
	struct ibv_mr *mf = ibv_reg_mr(pd, fs, AREA, ACCESS), *ms = ibv_reg_mr(pd, src, LEN, ACCESS);
	CHECK(mf && ms, "ibv_reg_mr: %s", strerror(errno));
	CHECK(ftruncate(fd, 0) == 0, "truncate");
	fill(src, LEN, 13);
	struct ibv_sge sge = {(uintptr_t)src, LEN, ms->lkey};
	struct ibv_send_wr wr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				 .send_flags = IBV_SEND_SIGNALED}, *bad;
	wr.wr.rdma.remote_addr = (uintptr_t)fs;
	wr.wr.rdma.rkey = mf->rkey;
	CHECK(!ibv_post_send(qa, &wr, &bad), "post");
	struct ibv_wc wc = poll_any(cq, "WRITE to a truncated file");
	CHECK(wc.status != IBV_WC_SUCCESS, "a WRITE to a truncated file succeeded");
	printf("ok truncated file: WRITE fails with %s\n", ibv_wc_status_str(wc.status));
	/* Drain the flushes of the two QPs in error. */
	while (ibv_poll_cq(cq, 1, &wc) > 0)
		;
	make_qps();
	unsigned char *dst = malloc(LEN);
	move_data("after the fault", src, dst, LEN);
	printf("ok truncated file: the daemon still serves\n");
}

/* A process that made itself non-dumpable (as a set-user-ID program is):
 * the daemon does not map its shared memory (EPERM) unless the client is
 * root; its private memory, which it passes as a memfd, registers. */
static void undumpable(void)
{
	CHECK(!prctl(PR_SET_DUMPABLE, 0, 0, 0, 0), "prctl: %s", strerror(errno));
	unsigned char *sa = mmap(NULL, AREA, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	struct ibv_mr *m = ibv_reg_mr(pd, sa, AREA, ACCESS);
	if (geteuid() == 0) {
		CHECK(m, "root's shared memory refused: %s", strerror(errno));
	} else {
		CHECK(!m && errno == EPERM, "shared memory of a non-dumpable process: %s, want EPERM",
		      m ? "registered" : strerror(errno));
	}
	printf("ok non-dumpable: shared memory %s\n", m ? "registered (root)" : "refused");
	unsigned char *a = mmap(NULL, AREA, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	move_data("non-dumpable: private memory", a + 100, a + AREA / 2 + 36, LEN);
	printf("ok non-dumpable: private memory registered\n");
}

/* Registration time (reg + dereg) and WRITE throughput per kind and size. */
static void bench(void)
{
	const char *names[] = {"anonymous private", "anonymous shared", "file shared", "hugetlb shared"};
	size_t sizes[] = {4096, 64 << 10, 1 << 20, 16 << 20};
	printf("%-20s %10s %14s %14s %12s\n", "kind", "size", "first reg us", "reg+dereg us", "WRITE MB/s");
	for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++)
		for (size_t z = 0; z < sizeof(sizes) / sizeof(sizes[0]); z++) {
			size_t sz = sizes[z], area = (sz + HUGE - 1) & ~(HUGE - 1);
			unsigned char *p;
			int fd = -1;
			switch (k) {
			case 0:
				p = mmap(NULL, area, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
				break;
			case 1:
				p = mmap(NULL, area, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
				break;
			case 2:
				fd = temp_file(area);
				p = mmap(NULL, area, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
				break;
			default:
				p = mmap(NULL, area, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
			}
			if (p == MAP_FAILED) {
				printf("%-20s %10zu skipped: %s\n", names[k], sz, strerror(errno));
				continue;
			}
			memset(p, 1, sz);
			double t0 = now();
			struct ibv_mr *mr = ibv_reg_mr(pd, p, sz, ACCESS);
			double first = now() - t0;
			CHECK(mr, "bench: ibv_reg_mr: %s", strerror(errno));
			int n = 0;
			t0 = now();
			do {
				struct ibv_mr *m2 = ibv_reg_mr(pd, p, sz, ACCESS);
				CHECK(m2 && !ibv_dereg_mr(m2), "bench: reg/dereg");
				n++;
			} while (now() - t0 < 0.2);
			double regt = (now() - t0) / n;
			/* WRITEs from the MR into itself, 64 MiB in all. */
			size_t chunk = sz < (1 << 20) ? sz : (1 << 20), total = 64 << 20, moved = 0;
			t0 = now();
			while (moved < total) {
				rdma(qa, IBV_WR_RDMA_WRITE, p, (uint32_t)chunk, mr->lkey, p + sz - chunk, mr->rkey, "bench");
				moved += chunk;
			}
			double bw = (double)total / (now() - t0) / 1e6;
			printf("%-20s %10zu %14.1f %14.1f %12.0f\n", names[k], sz, first * 1e6, regt * 1e6, bw);
			fflush(stdout);
			ibv_dereg_mr(mr);
			munmap(p, area);
			if (fd >= 0)
				close(fd);
		}
}

int main(int argc, char **argv)
{
	CHECK(argc == 4, "usage: memkinds_test DEVICE GID_INDEX kinds|fork|forksafe|undumpable|truncate|bench");
	setvbuf(stdout, NULL, _IOLBF, 0);
	setup(argv[1], argv[2]);
	if (!strcmp(argv[3], "kinds"))
		kinds();
	else if (!strcmp(argv[3], "fork"))
		fork_default();
	else if (!strcmp(argv[3], "forksafe"))
		fork_safe();
	else if (!strcmp(argv[3], "undumpable"))
		undumpable();
	else if (!strcmp(argv[3], "truncate"))
		truncated();
	else if (!strcmp(argv[3], "bench"))
		bench();
	else
		CHECK(0, "unknown mode %s", argv[3]);
	return 0;
}
