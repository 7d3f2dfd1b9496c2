/*
 * mr_test.c: the memory remapping behind ibv_reg_mr (mr.c), without a
 * daemon. Compiled with the library's sources by TestMemoryRemapping; prints
 * "ok NAME" per check and exits 1 at the first failure.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "internal.h"

/* Lines of /proc/self/maps that map the library's memfd. */
static int memfd_mappings(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	int n = 0;
	while (fgets(line, sizeof(line), f))
		if (strstr(line, "/memfd:sroce-mr"))
			n++;
	fclose(f);
	return n;
}

static void fill(unsigned char *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (unsigned char)(i * 31 + seed);
}

static int same_as_fd(int fd, void *addr, size_t n)
{
	unsigned char *buf = malloc(n);
	ssize_t r = pread(fd, buf, n, (off_t)(uintptr_t)addr);
	int ok = r == (ssize_t)n && memcmp(buf, addr, n) == 0;
	free(buf);
	return ok;
}

int main(void)
{
	int fd;
	uint64_t off;
	long pg = sysconf(_SC_PAGESIZE);

	/* Heap memory keeps its contents and becomes the memfd's pages. */
	size_t n = 3 * (size_t)pg + 100;
	unsigned char *heap = malloc(n);
	fill(heap, n, 7);
	CHECK(sroce_mem_backing(heap, n, &fd, &off) == 0, "heap: %s", strerror(errno));
	CHECK(off == (uint64_t)(uintptr_t)heap, "offset %llx != address %p", (unsigned long long)off, (void *)heap);
	for (size_t i = 0; i < n; i++)
		CHECK(heap[i] == (unsigned char)(i * 31 + 7), "heap byte %zu changed by the remap", i);
	CHECK(same_as_fd(fd, heap, n), "the memfd does not hold the heap's bytes");
	printf("ok heap contents kept\n");

	/* Writes through the memfd (as the daemon's) show in the program, and back. */
	const char msg[] = "written by the daemon";
	CHECK(pwrite(fd, msg, sizeof(msg), (off_t)(uintptr_t)(heap + 10)) == sizeof(msg), "pwrite");
	CHECK(memcmp(heap + 10, msg, sizeof(msg)) == 0, "a write to the memfd is not seen at the address");
	heap[5000 % n] = 0xab;
	CHECK(same_as_fd(fd, heap, n), "a write by the program is not in the memfd");
	printf("ok shared both ways\n");

	/* Registering again, or a range inside, remaps nothing. */
	int before = memfd_mappings();
	CHECK(sroce_mem_backing(heap + 100, 200, &fd, &off) == 0, "inside: %s", strerror(errno));
	CHECK(off == (uint64_t)(uintptr_t)(heap + 100), "inside: offset");
	CHECK(memfd_mappings() == before, "a range inside remapped again (%d -> %d mappings)", before, memfd_mappings());
	printf("ok reuse inside a remapped range\n");

	/* A range that runs past the remapped pages extends them; the old part stays as it was. */
	unsigned char *big = mmap(NULL, 8 * (size_t)pg, PROT_READ | PROT_WRITE,
				  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	fill(big, 8 * (size_t)pg, 3);
	CHECK(sroce_mem_backing(big + pg, 2 * (size_t)pg, &fd, &off) == 0, "first part");
	CHECK(pwrite(fd, "X", 1, (off_t)(uintptr_t)(big + pg)) == 1, "pwrite");
	CHECK(sroce_mem_backing(big, 6 * (size_t)pg, &fd, &off) == 0, "overlapping range: %s", strerror(errno));
	CHECK(big[pg] == 'X', "the first registration's pages were replaced");
	for (size_t i = 0; i < 8 * (size_t)pg; i++)
		if (i != (size_t)pg)
			CHECK(big[i] == (unsigned char)(i * 31 + 3), "byte %zu changed", i);
	CHECK(same_as_fd(fd, big, 6 * (size_t)pg), "the extended range is not in the memfd");
	printf("ok overlapping ranges\n");

	/* Memory unmapped and mapped again at the same address is remapped again. */
	munmap(big, 8 * (size_t)pg);
	unsigned char *again = mmap(big, 8 * (size_t)pg, PROT_READ | PROT_WRITE,
				    MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
	CHECK(again == big, "mmap at the same address");
	fill(again, 8 * (size_t)pg, 9);
	CHECK(sroce_mem_backing(again, 8 * (size_t)pg, &fd, &off) == 0, "again: %s", strerror(errno));
	CHECK(same_as_fd(fd, again, 8 * (size_t)pg), "a fresh mapping at a reused address was taken for the old one");
	printf("ok fresh mapping at a reused address\n");

	/* Read-only memory keeps its protection. */
	unsigned char *ro = mmap(NULL, (size_t)pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	fill(ro, (size_t)pg, 1);
	mprotect(ro, (size_t)pg, PROT_READ);
	CHECK(sroce_mem_backing(ro, (size_t)pg, &fd, &off) == 0, "read-only: %s", strerror(errno));
	CHECK(ro[10] == (unsigned char)(10 * 31 + 1), "read-only contents");
	{
		FILE *f = fopen("/proc/self/maps", "r");
		char line[512];
		int found = 0;
		while (fgets(line, sizeof(line), f)) {
			unsigned long s, e;
			char perms[8];
			if (sscanf(line, "%lx-%lx %7s", &s, &e, perms) == 3 && s <= (uintptr_t)ro &&
			    (uintptr_t)ro < e) {
				CHECK(!strcmp(perms, "r--s"), "read-only page mapped %s", perms);
				found = 1;
			}
		}
		fclose(f);
		CHECK(found, "read-only page not in maps");
	}
	printf("ok read-only protection kept\n");

	/* The stack, code, holes and empty ranges are refused; a private file
	 * mapping is remapped (the process's own copy of the file's pages);
	 * a shared one is left for the daemon to map (fd -1). */
	char stackbuf[256];
	stackbuf[0] = 1;
	CHECK(sroce_mem_backing(stackbuf, sizeof(stackbuf), &fd, &off) == EINVAL, "the stack was accepted");
	char path[] = "/tmp/sroce-mr-test-XXXXXX";
	int tf = mkstemp(path);
	CHECK(tf >= 0 && ftruncate(tf, pg) == 0, "temp file");
	unsigned char *fm = mmap(NULL, (size_t)pg, PROT_READ | PROT_WRITE, MAP_PRIVATE, tf, 0);
	unsigned char *fs = mmap(NULL, (size_t)pg, PROT_READ | PROT_WRITE, MAP_SHARED, tf, 0);
	void *code = mmap(NULL, (size_t)pg, PROT_READ | PROT_EXEC, MAP_PRIVATE, tf, 0);
	unlink(path);
	fs[5] = 55;
	CHECK(sroce_mem_backing(fm, 16, &fd, &off) == 0 && fd >= 0 && fm[5] == 55, "a private file mapping was refused");
	CHECK(sroce_mem_backing(fs, 16, &fd, &off) == 0 && fd == -1, "a shared file mapping was not left to the daemon");
	fm[6] = 66;
	CHECK(fs[6] == 0, "a write to the remapped private mapping reached the file");
	CHECK(sroce_mem_backing(code, 16, &fd, &off) == EINVAL, "code was accepted");
	unsigned char *hole = mmap(NULL, 3 * (size_t)pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	munmap(hole + pg, (size_t)pg);
	CHECK(sroce_mem_backing(hole, 3 * (size_t)pg, &fd, &off) == EINVAL, "a range with a hole was accepted");
	CHECK(sroce_mem_backing(heap, 0, &fd, &off) == EINVAL, "an empty range was accepted");
	printf("ok refused: stack, code, hole, empty; files private and shared\n");

	/* The program's static data (a file's private writable mapping) is accepted. */
	{
		static unsigned char statbuf[64] = {1, 2, 3};
		statbuf[63] = 9;
		CHECK(sroce_mem_backing(statbuf, sizeof(statbuf), &fd, &off) == 0, "static data was refused");
		CHECK(statbuf[0] == 1 && statbuf[63] == 9, "static data lost its contents");
		printf("ok static data accepted\n");
	}

	/* Pages the program unmapped after their MR went away are given back to the system. */
	{
		size_t len = 256 * (size_t)pg;
		struct stat st0, st1, st2;
		unsigned char *buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		fill(buf, len, 5);
		fstat(fd, &st0);
		CHECK(sroce_mem_backing(buf, len, &fd, &off) == 0, "reclaim: register");
		fstat(fd, &st1);
		CHECK((st1.st_blocks - st0.st_blocks) * 512 >= (long long)len, "the memfd did not grow by the range (%lld -> %lld blocks)",
		      (long long)st0.st_blocks, (long long)st1.st_blocks);
		/* Unmapped while its MR is live: kept. */
		munmap(buf, len / 2);
		CHECK(sroce_mem_backing(heap, 16, &fd, &off) == 0, "reclaim: another registration");
		sroce_mem_release(heap, 16);
		fstat(fd, &st2);
		CHECK(st2.st_blocks == st1.st_blocks, "pages of a live MR were given back (%lld -> %lld blocks)",
		      (long long)st1.st_blocks, (long long)st2.st_blocks);
		/* The MR goes away: the unmapped half is given back, the mapped half stays. */
		sroce_mem_release(buf, len);
		fstat(fd, &st2);
		CHECK((st1.st_blocks - st2.st_blocks) * 512 == (long long)len / 2, "%lld blocks given back, want %zu bytes' worth",
		      (long long)(st1.st_blocks - st2.st_blocks), len / 2);
		for (size_t i = len / 2; i < len; i++)
			CHECK(buf[i] == (unsigned char)(i * 31 + 5), "reclaim: mapped byte %zu changed", i);
		CHECK(same_as_fd(fd, buf + len / 2, len / 2), "reclaim: the mapped half left the memfd");
		munmap(buf + len / 2, len / 2);
		sroce_mem_release(heap, 0); /* no such MR: only reclaims */
		struct stat st3;
		fstat(fd, &st3);
		CHECK((st1.st_blocks - st3.st_blocks) * 512 == (long long)len, "the rest was not given back");
	}
	printf("ok unmapped pages given back\n");

	/* After fork the child has its own copy of registered pages. */
	heap[0] = 1;
	pid_t pid = fork();
	if (pid == 0) {
		int ok = heap[0] == 1 && memfd_mappings() == 0;
		heap[0] = 0x5a;
		_exit(ok ? 0 : 2);
	}
	int st;
	waitpid(pid, &st, 0);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child did not see the parent's bytes in private pages");
	CHECK(heap[0] == 1, "the child's write reached the parent's registered pages");
	printf("ok fork copies registered pages into the child\n");
	return 0;
}
