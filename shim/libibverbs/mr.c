/*
 * mr.c: memory registration.
 *
 * The daemon maps a registered range itself, in one of two ways.
 *
 * Memory shared with a file (a MAP_SHARED mapping of a regular file, POSIX
 * or SysV shm, a memfd, hugetlbfs, or shared anonymous memory, which is a
 * file of the kernel's shmem) stays as it is: the library sends the
 * range's address without a descriptor and the daemon maps the same file
 * pages through /proc/PID/map_files of the connected process.
 *
 * Private memory has no file the daemon could map, so the library remaps
 * it onto a memfd. It keeps one memfd for the whole process, as large as
 * the user address space and sparse, in which the page at virtual address
 * A lives at file offset A. ibv_reg_mr remaps the pages that cover the
 * range onto it: it copies their current contents into the memfd and maps
 * the memfd over the same addresses with MAP_SHARED | MAP_FIXED and the
 * same protection, so the program sees the same bytes at the same
 * addresses and the daemon, which maps the same file pages, sees what the
 * program writes and the program sees what the daemon writes. Because
 * offsets equal addresses, any range is contiguous in the file whatever
 * was remapped before, and pages already remapped (found in
 * /proc/self/maps, which stays right when the program unmaps and maps
 * again) are left as they are, so an MR inside or across earlier ones
 * reuses their pages. Pages stay remapped after ibv_dereg_mr: they are
 * still the program's memory. When the whole range is on the memfd, the
 * memfd goes to the daemon with the range's offset; when a part is shared
 * with a file, the range goes by address and the daemon maps the memfd's
 * part from the process's mappings like any other shared file.
 *
 * The file keeps its pages when the program unmaps them (free() of a large
 * buffer), so the library keeps a table of the segments it remapped and of
 * the live registrations; at every registration and deregistration it
 * gives back to the system (FALLOC_FL_PUNCH_HOLE) the parts of remapped
 * segments that the program no longer maps and no live MR covers.
 *
 * What is remapped: anonymous memory (heap, malloc, MAP_PRIVATE |
 * MAP_ANONYMOUS, private huge pages, remapped whole onto base pages) and
 * the private mappings of files that are not code (the static data of the
 * program and its libraries among them): their pages become the process's
 * own copies, as rxe's pinning for write makes them. The stack, code,
 * device mappings and unmapped holes are refused with EINVAL; memory the
 * process maps read-only, with EFAULT when the registration writes.
 *
 * Fork: see fork_child. While ibv_reg_mr copies and remaps, other threads
 * must not write to the pages being registered (a write between the copy
 * and the remap is lost). Registrations are serialized by one lock per
 * process.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

#define SROCE_MEMFD_SIZE (1ULL << 47)

static pthread_mutex_t mem_lock = PTHREAD_MUTEX_INITIALIZER;
static int mem_fd = -1;
static ino_t mem_ino;

struct maps_entry {
	uintptr_t start, end;
	int prot;
	int shared;
	unsigned long long offset;
	unsigned long long ino;
	char path[256];
};

static int parse_maps_line(const char *line, struct maps_entry *e)
{
	char perms[8] = {0};
	unsigned maj, min;
	int pos = 0;
	e->path[0] = 0;
	if (sscanf(line, "%lx-%lx %7s %llx %x:%x %llu %n", &e->start, &e->end, perms, &e->offset,
		   &maj, &min, &e->ino, &pos) < 7)
		return -1;
	if (pos > 0) {
		snprintf(e->path, sizeof(e->path), "%s", line + pos);
		size_t l = strlen(e->path);
		if (l && e->path[l - 1] == '\n')
			e->path[l - 1] = 0;
	}
	e->prot = (perms[0] == 'r' ? PROT_READ : 0) | (perms[1] == 'w' ? PROT_WRITE : 0) |
		  (perms[2] == 'x' ? PROT_EXEC : 0);
	e->shared = perms[3] == 's';
	return 0;
}

static int open_mem_fd(void)
{
	struct stat st;
	if (mem_fd >= 0)
		return 0;
	int fd = memfd_create("sroce-mr", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return errno;
	/* The daemon maps only memfds that cannot shrink under it. */
	if (ftruncate(fd, (off_t)SROCE_MEMFD_SIZE) < 0 ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) < 0 || fstat(fd, &st) < 0) {
		int err = errno;
		close(fd);
		return err;
	}
	mem_fd = fd;
	mem_ino = st.st_ino;
	return 0;
}

struct find_obj {
	uintptr_t addr;
	int found;
};

static int find_obj_cb(struct dl_phdr_info *info, size_t size, void *data)
{
	struct find_obj *f = data;
	(void)size;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		uintptr_t s = info->dlpi_addr + ph->p_vaddr;
		if (ph->p_type == PT_LOAD && (ph->p_flags & PF_W) && f->addr >= (s & ~(uintptr_t)4095) &&
		    f->addr < s + ph->p_memsz) {
			f->found = 1;
			return 1;
		}
	}
	return 0;
}

/* Whether addr is in a writable segment of the program or a library it
 * loaded (its static data). */
static int loaded_object(uintptr_t addr)
{
	struct find_obj f = {.addr = addr};
	dl_iterate_phdr(find_obj_cb, &f);
	return f.found;
}

/* Whether a mapping is a piece of the memfd at the offset of its address. */
static int is_ours(const struct maps_entry *e)
{
	return e->shared && e->ino == (unsigned long long)mem_ino &&
	       !strncmp(e->path, "/memfd:sroce-mr", 15) && e->offset == (unsigned long long)e->start;
}

/* A page-aligned range of addresses, and so of memfd offsets. */
struct ival {
	uintptr_t s, e;
};

/* A growable list of ranges. */
struct ivals {
	struct ival *v;
	size_t n, cap;
};

static struct ivals segs; /* ranges remapped onto the memfd */
static struct ivals live; /* ranges of live MRs, one entry per MR */

static int ivals_add(struct ivals *l, uintptr_t s, uintptr_t e)
{
	if (l->n == l->cap) {
		size_t ncap = l->cap ? l->cap * 2 : 16;
		struct ival *v = realloc(l->v, ncap * sizeof(*v));
		if (!v)
			return ENOMEM;
		l->v = v;
		l->cap = ncap;
	}
	l->v[l->n].s = s;
	l->v[l->n].e = e;
	l->n++;
	return 0;
}

/* Adds to out the parts of in that overlap a range of with. */
static void intersect(struct ival in, const struct ivals *with, struct ivals *out)
{
	for (size_t i = 0; i < with->n; i++) {
		uintptr_t s = in.s > with->v[i].s ? in.s : with->v[i].s;
		uintptr_t e = in.e < with->v[i].e ? in.e : with->v[i].e;
		if (s < e)
			ivals_add(out, s, e);
	}
}

/* Adds to out the parts of in that no range of sub (from index i on) covers. */
static void subtract(struct ival in, const struct ivals *sub, size_t i, struct ivals *out)
{
	for (; i < sub->n && in.s < in.e; i++) {
		struct ival b = sub->v[i];
		if (b.e <= in.s || b.s >= in.e)
			continue;
		if (b.s > in.s)
			subtract((struct ival){in.s, b.s}, sub, i + 1, out);
		in.s = b.e;
	}
	if (in.s < in.e)
		ivals_add(out, in.s, in.e);
}

static int ival_cmp(const void *a, const void *b)
{
	const struct ival *x = a, *y = b;
	return x->s < y->s ? -1 : x->s > y->s;
}

/* Reads the memfd's mappings in the process from /proc/self/maps. */
static int our_mappings(struct ivals *out)
{
	FILE *f = fopen("/proc/self/maps", "re");
	char line[512];
	if (!f)
		return errno;
	while (fgets(line, sizeof(line), f)) {
		struct maps_entry e;
		if (parse_maps_line(line, &e) == 0 && is_ours(&e))
			ivals_add(out, e.start, e.end);
	}
	fclose(f);
	return 0;
}

/*
 * Gives back the memfd pages of remapped segments that the process no
 * longer maps and no live MR covers, and keeps the rest in the table.
 * Called with mem_lock held.
 */
static void reclaim(void)
{
	struct ivals ours = {0}, unmapped = {0}, dead = {0}, keep = {0};
	if (mem_fd < 0 || !segs.n || our_mappings(&ours))
		goto out;
	for (size_t i = 0; i < segs.n; i++) {
		intersect(segs.v[i], &ours, &keep);
		subtract(segs.v[i], &ours, 0, &unmapped);
	}
	for (size_t i = 0; i < unmapped.n; i++) {
		intersect(unmapped.v[i], &live, &keep);
		subtract(unmapped.v[i], &live, 0, &dead);
	}
	for (size_t i = 0; i < dead.n; i++)
		fallocate(mem_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)dead.v[i].s,
			  (off_t)(dead.v[i].e - dead.v[i].s));
	/* Sorted and merged, so that the table stays as small as what it covers. */
	qsort(keep.v, keep.n, sizeof(*keep.v), ival_cmp);
	size_t m = 0;
	for (size_t i = 0; i < keep.n; i++) {
		if (m && keep.v[i].s <= keep.v[m - 1].e) {
			if (keep.v[i].e > keep.v[m - 1].e)
				keep.v[m - 1].e = keep.v[i].e;
		} else {
			keep.v[m++] = keep.v[i];
		}
	}
	keep.n = m;
	free(segs.v);
	segs = keep;
	keep.v = NULL;
out:
	free(ours.v);
	free(unmapped.v);
	free(dead.v);
	free(keep.v);
}

/* Remaps [start, end) of one private anonymous mapping onto the memfd. */
static int remap(uintptr_t start, uintptr_t end, int prot)
{
	size_t len = end - start;
	int tmpprot = prot | PROT_READ;
	if (!(prot & PROT_READ) && mprotect((void *)start, len, tmpprot) < 0)
		return errno;
	/* pwrite copies the current contents into the file at offset == address. */
	size_t done = 0;
	while (done < len) {
		ssize_t n = pwrite(mem_fd, (void *)(start + done), len - done, (off_t)(start + done));
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return errno;
		}
		done += (size_t)n;
	}
	void *p = mmap((void *)start, len, prot, MAP_SHARED | MAP_FIXED, mem_fd, (off_t)start);
	if (p == MAP_FAILED)
		return errno;
	return 0;
}

/* The page size of the mapping at addr (KernelPageSize in smaps: huge
 * pages for hugetlb), or the base page size. */
static uintptr_t vma_page_size(uintptr_t addr)
{
	uintptr_t size = (uintptr_t)sysconf(_SC_PAGESIZE);
	FILE *f = fopen("/proc/self/smaps", "re");
	char line[512];
	int in = 0;
	if (!f)
		return size;
	while (fgets(line, sizeof(line), f)) {
		uintptr_t s, e;
		unsigned long kb;
		if (!strncmp(line, "KernelPageSize:", 15)) {
			if (in && sscanf(line + 15, "%lu", &kb) == 1) {
				size = kb * 1024;
				break;
			}
		} else if (sscanf(line, "%lx-%lx ", &s, &e) == 2) {
			in = addr >= s && addr < e;
		}
	}
	fclose(f);
	return size;
}

/* Whether a mapping is memory the process shares with a file (a MAP_SHARED
 * mapping of a regular file, POSIX shm, a memfd, hugetlbfs, or shared
 * anonymous memory, which is a file of the kernel's shmem), which the
 * daemon maps itself. */
static int shared_file(const struct maps_entry *e)
{
	return e->shared && e->ino != 0;
}

/* Whether a private mapping can be remapped onto the memfd: anonymous
 * memory (heap, malloc, MAP_PRIVATE|MAP_ANONYMOUS, MAP_HUGETLB) and the
 * private mappings of files that are not code (their pages are the
 * process's own copies once written, as rxe's pinning makes them). */
static int remappable(const struct maps_entry *e)
{
	if (e->shared)
		return 0;
	if (e->ino == 0)
		return e->path[0] == 0 || !strcmp(e->path, "[heap]");
	return !(e->prot & PROT_EXEC) || ((e->prot & PROT_WRITE) && loaded_object(e->start));
}

/* Remaps [s, t) of the private mapping e onto the memfd: at base pages,
 * or, where the kernel refuses to split the mapping there (hugetlb), over
 * the huge pages that hold the range. */
static int remap_entry(const struct maps_entry *e, uintptr_t s, uintptr_t t)
{
	int err = remap(s, t, e->prot);
	if (err == EINVAL) {
		uintptr_t ps = vma_page_size(s);
		uintptr_t hs = s & ~(ps - 1), ht = (t + ps - 1) & ~(ps - 1);
		if (hs < e->start)
			hs = e->start;
		if (ht > e->end)
			ht = e->end;
		if (hs != s || ht != t) {
			err = remap(hs, ht, e->prot);
			if (!err)
				err = ivals_add(&segs, hs, ht);
			return err;
		}
	}
	if (!err)
		err = ivals_add(&segs, s, t);
	return err;
}

/* Fork: see ibv_fork_init. */
static int fork_enabled, fork_too_late;

/*
 * Makes [addr, addr + length) reachable by the daemon: private memory is
 * remapped onto the process memfd; memory shared with a file stays as it
 * is. Returns 0 with the memfd (owned by the library: the caller sends it,
 * never closes it) and the offset of addr in it when the whole range is in
 * the memfd; with *fd = -1 when a part is memory shared with a file, which
 * the daemon then maps by address from the process's mappings. EINVAL for
 * memory that is neither (the stack, code, devices, holes).
 */
int sroce_mem_backing(void *addr, size_t length, int *fd, uint64_t *offset)
{
	return sroce_mem_backing_access(addr, length, 0, fd, offset);
}

/* The access flags that make the pages written: rxe pins such memory for
 * writing, which fails with EFAULT where the process may not write. */
#define SROCE_WRITE_ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)

/* sroce_mem_backing for a registration with access flags access: EFAULT
 * where one of them writes and the process maps a page read-only. */
int sroce_mem_backing_access(void *addr, size_t length, unsigned int access, int *fd, uint64_t *offset)
{
	long pg = sysconf(_SC_PAGESIZE);
	uintptr_t start = (uintptr_t)addr & ~(uintptr_t)(pg - 1);
	uintptr_t end;
	int err = 0, shared = 0;

	if (length == 0 || (uintptr_t)addr + length < (uintptr_t)addr)
		return EINVAL;
	end = ((uintptr_t)addr + length + (uintptr_t)pg - 1) & ~(uintptr_t)(pg - 1);
	if (end > SROCE_MEMFD_SIZE)
		return EINVAL;

	pthread_mutex_lock(&mem_lock);
	err = open_mem_fd();
	if (err)
		goto out;
	FILE *f = fopen("/proc/self/maps", "re");
	if (!f) {
		err = errno;
		goto out;
	}
	/* First pass: check that every page is ours already, shared with a
	 * file, or can be remapped. */
	struct maps_entry todo[64]; /* whole mappings */
	uintptr_t todo_s[64], todo_e[64]; /* the parts to remap */
	int ntodo = 0;
	uintptr_t covered = start;
	char line[512];
	while (fgets(line, sizeof(line), f) && covered < end) {
		struct maps_entry e;
		if (parse_maps_line(line, &e))
			continue;
		if (e.end <= covered)
			continue;
		if (e.start > covered) {
			err = EINVAL; /* a hole */
			break;
		}
		uintptr_t s = covered, t = e.end < end ? e.end : end;
		if ((access & SROCE_WRITE_ACCESS) && !(e.prot & PROT_WRITE)) {
			err = EFAULT;
			break;
		}
		if (shared_file(&e) && !is_ours(&e)) {
			shared = 1;
		} else if (!is_ours(&e)) {
			if (!remappable(&e)) {
				err = EINVAL; /* stack, code, devices */
				break;
			}
			if (ntodo == (int)(sizeof(todo) / sizeof(todo[0]))) {
				err = ENOMEM;
				break;
			}
			todo[ntodo] = e;
			todo_s[ntodo] = s;
			todo_e[ntodo] = t;
			ntodo++;
		}
		covered = t;
	}
	fclose(f);
	if (!err && covered < end)
		err = EINVAL;
	for (int i = 0; !err && i < ntodo; i++)
		err = remap_entry(&todo[i], todo_s[i], todo_e[i]);
	if (!err)
		err = ivals_add(&live, start, end);
	if (!err && fork_enabled)
		madvise((void *)start, end - start, MADV_DONTFORK);
	if (!err)
		fork_too_late = 1;
	reclaim();
out:
	if (!err) {
		*fd = shared ? -1 : mem_fd;
		*offset = (uint64_t)(uintptr_t)addr;
	}
	pthread_mutex_unlock(&mem_lock);
	return err;
}

/*
 * The MR of [addr, addr + length) is gone (the daemon unmapped it): its
 * pages may be given back once the program no longer maps them, and with
 * fork safety, forked again where no other MR covers them.
 */
void sroce_mem_release(void *addr, size_t length)
{
	long pg = sysconf(_SC_PAGESIZE);
	uintptr_t start = (uintptr_t)addr & ~(uintptr_t)(pg - 1);
	uintptr_t end = ((uintptr_t)addr + length + (uintptr_t)pg - 1) & ~(uintptr_t)(pg - 1);
	pthread_mutex_lock(&mem_lock);
	for (size_t i = 0; i < live.n; i++)
		if (live.v[i].s == start && live.v[i].e == end) {
			live.v[i] = live.v[--live.n];
			break;
		}
	if (fork_enabled) {
		struct ivals free_ = {0};
		subtract((struct ival){start, end}, &live, 0, &free_);
		for (size_t i = 0; i < free_.n; i++)
			madvise((void *)free_.v[i].s, free_.v[i].e - free_.v[i].s, MADV_DOFORK);
		free(free_.v);
	}
	reclaim();
	pthread_mutex_unlock(&mem_lock);
}

/*
 * Fork. rxe's pages are pinned, and since Linux 5.13 fork copies pinned
 * pages into the child at once instead of sharing them copy-on-write, so
 * the parent's registrations keep their pages whatever the child writes;
 * rdma-core then reports IBV_FORK_UNNEEDED. sroce does the same in the
 * child (fork_child): every page remapped onto the memfd, which the
 * child would otherwise share with the parent, becomes a private copy.
 * ibv_fork_init (or RDMAV_FORK_SAFE, IBV_FORK_SAFE) additionally keeps
 * registered ranges out of children (MADV_DONTFORK) as rdma-core does, and
 * fails with EINVAL once memory has been registered; memory shared with a
 * file is shared with children as on rxe.
 */
static void fork_prepare(void)
{
	pthread_mutex_lock(&mem_lock);
}

static void fork_parent(void)
{
	pthread_mutex_unlock(&mem_lock);
}

static void fork_child(void)
{
	FILE *f;
	char line[512];
	pthread_mutex_init(&mem_lock, NULL);
	if (mem_fd < 0)
		return;
	f = fopen("/proc/self/maps", "re");
	if (f) {
		while (fgets(line, sizeof(line), f)) {
			struct maps_entry e;
			if (parse_maps_line(line, &e) || !is_ours(&e))
				continue;
			size_t len = e.end - e.start;
			void *tmp = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
					 -1, 0);
			if (tmp == MAP_FAILED)
				continue;
			if (!(e.prot & PROT_READ))
				mprotect((void *)e.start, len, PROT_READ);
			memcpy(tmp, (void *)e.start, len);
			mprotect(tmp, len, e.prot);
			if (mremap(tmp, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, (void *)e.start) ==
			    MAP_FAILED)
				munmap(tmp, len);
		}
		fclose(f);
	}
	close(mem_fd);
	mem_fd = -1;
	segs.n = 0;
	live.n = 0;
	fork_too_late = 0;
}

EXPORT int ibv_fork_init(void)
{
	int err = 0;
	pthread_mutex_lock(&mem_lock);
	if (!fork_enabled) {
		if (fork_too_late)
			err = EINVAL;
		else
			fork_enabled = 1;
	}
	pthread_mutex_unlock(&mem_lock);
	return err;
}

static void fork_env(void) __attribute__((constructor));
static void fork_env(void)
{
	const char *a = getenv("RDMAV_FORK_SAFE"), *b = getenv("IBV_FORK_SAFE");
	pthread_atfork(fork_prepare, fork_parent, fork_child);
	if ((a && strcmp(a, "0")) || (b && strcmp(b, "0")))
		if (ibv_fork_init())
			fprintf(stderr, "libibverbs: Warning: fork()-safety requested but init failed\n");
}

EXPORT enum ibv_fork_status ibv_is_fork_initialized(void)
{
	return IBV_FORK_UNNEEDED;
}

static int fork_range(void *base, size_t size, int advice)
{
	long pg = sysconf(_SC_PAGESIZE);
	uintptr_t s = (uintptr_t)base & ~(uintptr_t)(pg - 1);
	uintptr_t e = ((uintptr_t)base + size + (uintptr_t)pg - 1) & ~(uintptr_t)(pg - 1);
	int err = 0;
	if (!base || !size)
		return 0;
	pthread_mutex_lock(&mem_lock);
	if (!fork_enabled)
		fork_too_late = 1;
	else if (madvise((void *)s, e - s, advice))
		err = errno;
	pthread_mutex_unlock(&mem_lock);
	return err;
}

EXPORT int ibv_dontfork_range(void *base, size_t size)
{
	return fork_range(base, size, MADV_DONTFORK);
}

EXPORT int ibv_dofork_range(void *base, size_t size)
{
	return fork_range(base, size, MADV_DOFORK);
}

static struct ibv_mr *reg_mr(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
			     unsigned int access)
{
	struct sroce_ctl_reg_mr req = {0};
	struct sroce_ctl_mr reply;
	struct ibv_mr *mr;
	int fd;
	uint64_t off;
	int err;

	access &= ~SROCE_ACCESS_HINTS;
	err = sroce_mem_backing_access(addr, length, access, &fd, &off);
	if (err) {
		errno = err;
		return NULL;
	}
	req.pd = pd->handle;
	req.access = access;
	req.addr = (uint64_t)(uintptr_t)addr;
	req.length = length;
	req.iova = iova;
	req.fd_offset = off;
	err = sroce_call(to_sctx(pd->context), SROCE_OP_REG_MR, &req, sizeof(req), &fd, fd >= 0, &reply,
			 sizeof(reply), NULL, 0);
	if (err) {
		sroce_mem_release(addr, length);
		errno = err;
		return NULL;
	}
	mr = calloc(1, sizeof(*mr));
	if (!mr) {
		struct sroce_ctl_handle h = {.handle = reply.handle};
		sroce_call(to_sctx(pd->context), SROCE_OP_DEREG_MR, &h, sizeof(h), NULL, 0, NULL, 0,
			   NULL, 0);
		sroce_mem_release(addr, length);
		errno = ENOMEM;
		return NULL;
	}
	mr->context = pd->context;
	mr->pd = pd;
	mr->addr = addr;
	mr->length = length;
	mr->handle = reply.handle;
	mr->lkey = reply.lkey;
	mr->rkey = reply.rkey;
	return mr;
}

EXPORT struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	return reg_mr(pd, addr, length, (uint64_t)(uintptr_t)addr, (unsigned)access);
}

EXPORT struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length,
				      uint64_t iova, int access)
{
	return reg_mr(pd, addr, length, iova, (unsigned)access);
}

EXPORT struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length,
				       uint64_t iova, unsigned int access)
{
	return reg_mr(pd, addr, length, iova, access);
}

EXPORT int ibv_dereg_mr(struct ibv_mr *mr)
{
	struct sroce_ctl_handle h = {.handle = mr->handle};
	int err = sroce_destroy_call(to_sctx(mr->context), SROCE_OP_DEREG_MR, &h, sizeof(h));
	if (err)
		return err;
	sroce_mem_release(mr->addr, mr->length);
	free(mr);
	return 0;
}

/*
 * ibv_rereg_mr, with rdma-core's checks and return values (enum
 * ibv_rereg_mr_err_code, errno set): flags other than the three
 * IBV_REREG_MR_CHANGE_* or a translation without address or length, or
 * access without IBV_REREG_MR_CHANGE_ACCESS: IBV_REREG_MR_ERR_INPUT. A new
 * translation is remapped onto the library's memfd as ibv_reg_mr does
 * (failing: IBV_REREG_MR_ERR_DONT_FORK_NEW, rdma-core's failure to prepare
 * the new range); the daemon's refusal is IBV_REREG_MR_ERR_CMD. The MR
 * keeps its handle and, as with rxe, its keys; the iova of a new
 * translation is its address, as in rdma-core.
 */
EXPORT int ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr, size_t length,
			int access)
{
	struct sroce_ctl_rereg_mr req = {.handle = mr->handle, .flags = (uint32_t)flags};
	struct sroce_ctl_mr reply;
	int fd = -1, err;
	int translate = flags & IBV_REREG_MR_CHANGE_TRANSLATION;
	uint64_t off;

	if ((flags & ~(IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_PD |
		       IBV_REREG_MR_CHANGE_ACCESS)) ||
	    (translate && (!addr || !length)) || (access && !(flags & IBV_REREG_MR_CHANGE_ACCESS)) ||
	    ((flags & IBV_REREG_MR_CHANGE_PD) && !pd)) {
		errno = EINVAL;
		return IBV_REREG_MR_ERR_INPUT;
	}
	if (flags & IBV_REREG_MR_CHANGE_PD)
		req.reg.pd = pd->handle;
	if (flags & IBV_REREG_MR_CHANGE_ACCESS)
		req.reg.access = (uint32_t)access & ~SROCE_ACCESS_HINTS;
	if (translate) {
		err = sroce_mem_backing(addr, length, &fd, &off);
		if (err) {
			errno = err;
			return IBV_REREG_MR_ERR_DONT_FORK_NEW;
		}
		req.reg.addr = (uint64_t)(uintptr_t)addr;
		req.reg.length = length;
		req.reg.iova = req.reg.addr;
		req.reg.fd_offset = off;
	}
	err = sroce_call(to_sctx(mr->context), SROCE_OP_REREG_MR, &req, sizeof(req), &fd,
			 translate && fd >= 0, &reply, sizeof(reply), NULL, 0);
	if (err) {
		if (translate)
			sroce_mem_release(addr, length);
		errno = err;
		return IBV_REREG_MR_ERR_CMD;
	}
	mr->lkey = reply.lkey;
	mr->rkey = reply.rkey;
	if (flags & IBV_REREG_MR_CHANGE_PD)
		mr->pd = pd;
	if (translate) {
		sroce_mem_release(mr->addr, mr->length);
		mr->addr = addr;
		mr->length = length;
	}
	return 0;
}

/* Memory windows. */
struct ibv_mw *sroce_alloc_mw(struct ibv_pd *pd, int type)
{
	struct sroce_ctl_mw req = {.pd_or_handle = pd->handle, .type_or_rkey = (uint32_t)type};
	struct sroce_ctl_mw reply;
	struct ibv_mw *mw;
	int err;
	if (type != IBV_MW_TYPE_1 && type != IBV_MW_TYPE_2) {
		errno = EINVAL;
		return NULL;
	}
	err = sroce_call(to_sctx(pd->context), SROCE_OP_ALLOC_MW, &req, sizeof(req), NULL, 0,
			 &reply, sizeof(reply), NULL, 0);
	if (err) {
		errno = err;
		return NULL;
	}
	mw = calloc(1, sizeof(*mw));
	if (!mw) {
		struct sroce_ctl_handle h = {.handle = reply.pd_or_handle};
		sroce_call(to_sctx(pd->context), SROCE_OP_DEALLOC_MW, &h, sizeof(h), NULL, 0, NULL,
			   0, NULL, 0);
		errno = ENOMEM;
		return NULL;
	}
	mw->context = pd->context;
	mw->pd = pd;
	mw->handle = reply.pd_or_handle;
	mw->rkey = reply.type_or_rkey;
	mw->type = type;
	return mw;
}

int sroce_dealloc_mw(struct ibv_mw *mw)
{
	struct sroce_ctl_handle h = {.handle = mw->handle};
	int err = sroce_destroy_call(to_sctx(mw->context), SROCE_OP_DEALLOC_MW, &h, sizeof(h));
	if (err)
		return err;
	free(mw);
	return 0;
}

/*
 * ibv_bind_mw (type 1): posts an IBV_WR_BIND_MW work request on the QP, as
 * rxe's provider does, with the next rkey tag; the window takes the new
 * rkey when the post succeeds.
 */
int sroce_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *bind)
{
	struct ibv_send_wr wr, *bad;
	uint32_t rkey = (mw->rkey & ~0xffu) | ((mw->rkey + 1) & 0xffu);
	int err;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = bind->wr_id;
	wr.opcode = IBV_WR_BIND_MW;
	wr.send_flags = bind->send_flags;
	wr.bind_mw.mw = mw;
	wr.bind_mw.rkey = rkey;
	wr.bind_mw.bind_info = bind->bind_info;
	err = sroce_post_send(qp, &wr, &bad);
	if (err)
		return err;
	mw->rkey = rkey;
	return 0;
}

/* Names that also have an IBVERBS_1.0 compatibility version get their default version here. */
SROCE_DEFAULT_1_1(ibv_dereg_mr)
SROCE_DEFAULT_1_1(ibv_reg_mr)

/*
 * ibv_advise_mr: the pages of every MR are the program's own, mapped, so
 * a prefetch has nothing to fault in; the request is checked as the
 * kernel checks it (known advice and flags, at least one SGE, no SGE
 * wrapping around) and done.
 */
int sroce_advise_mr(struct ibv_pd *pd, uint32_t advice, uint32_t flags, struct ibv_sge *sg_list,
		    uint32_t num_sges)
{
	if (!pd || advice > SROCE_ADVISE_MR_PREFETCH_NO_FAULT || (flags & ~(uint32_t)SROCE_ADVISE_MR_FLAG_FLUSH) ||
	    !num_sges || !sg_list)
		return EINVAL;
	for (uint32_t i = 0; i < num_sges; i++)
		if (sg_list[i].addr + sg_list[i].length < sg_list[i].addr)
			return EINVAL;
	return 0;
}
