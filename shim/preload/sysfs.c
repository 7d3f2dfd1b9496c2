/*
 * libsroce_preload.so: the few sysfs files of a sroce device that programs
 * read beside libibverbs.
 *
 * A kernel RDMA device has a directory in /sys/class/infiniband; a device
 * of the sroce daemon has none. Most programs only use verbs, but some read
 * the GID table's attributes from sysfs because older libibverbs had no
 * verb for them: UCX 1.13 reads ports/P/gid_attrs/types/I to tell RoCE v1
 * from v2 and takes a GID whose file it cannot read for RoCE v1, so it
 * would never reach a RoCE v2 peer such as rdma_rxe. "sroce run" preloads
 * this library, which answers opens of
 *
 *     /sys/class/infiniband/sroce_IF/ports/P/gid_attrs/types/I   "RoCE v2"
 *     /sys/class/infiniband/sroce_IF/ports/P/gid_attrs/ndevs/I   "IF"
 *
 * with a sealed memory file holding what the kernel's file would hold for
 * a GID of a RoCE v2 device on interface IF (sroce's GIDs are all RoCE v2:
 * it speaks nothing else). Every other path, and every open for writing,
 * goes to the C library untouched: the cost for them is one prefix check.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

static const char sysfs_prefix[] = "/sys/class/infiniband/";
static const char dev_prefix[] = "sroce_";

/* number consumes a decimal number of at most 5 digits at *p. */
static int number(const char **p)
{
	int n = 0, digits = 0;

	while (**p >= '0' && **p <= '9') {
		if (++digits > 5)
			return -1;
		n = n * 10 + (**p - '0');
		(*p)++;
	}
	return digits ? n : -1;
}

/* skip consumes word at *p. */
static int skip(const char **p, const char *word)
{
	size_t n = strlen(word);

	if (strncmp(*p, word, n))
		return 0;
	*p += n;
	return 1;
}

/*
 * content writes into buf what the file at path holds when it is one of the
 * files above, and returns its length; 0 when path is not such a file.
 */
static size_t content(const char *path, char *buf, size_t len)
{
	const char *p = path, *ifname, *slash;
	size_t iflen;
	int ndevs;

	if (!skip(&p, sysfs_prefix) || !skip(&p, dev_prefix))
		return 0;
	ifname = p;
	slash = strchr(p, '/');
	if (!slash || slash == ifname || slash - ifname > 15)
		return 0;
	iflen = (size_t)(slash - ifname);
	p = slash;
	if (!skip(&p, "/ports/") || number(&p) < 1 || !skip(&p, "/gid_attrs/"))
		return 0;
	if (skip(&p, "types/"))
		ndevs = 0;
	else if (skip(&p, "ndevs/"))
		ndevs = 1;
	else
		return 0;
	if (number(&p) < 0 || *p != '\0')
		return 0;
	if (!ndevs)
		return (size_t)snprintf(buf, len, "RoCE v2\n");
	return (size_t)snprintf(buf, len, "%.*s\n", (int)iflen, ifname);
}

/*
 * synth returns a read-only descriptor of a sealed memory file holding
 * path's content (sealed: a write fails with EPERM), -1 with errno set when it cannot make one, or -2 when
 * path is not a file this library answers for.
 */
static int synth(const char *path, int flags)
{
	char buf[64];
	size_t n;
	int fd;

	if ((flags & O_ACCMODE) != O_RDONLY)
		return -2;
	n = content(path, buf, sizeof(buf));
	if (n == 0 || n >= sizeof(buf))
		return -2;
	fd = (int)syscall(SYS_memfd_create, "sroce-sysfs", MFD_ALLOW_SEALING | MFD_CLOEXEC);
	if (fd < 0)
		return -1;
	if (write(fd, buf, n) != (ssize_t)n ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL) < 0)
		goto fail;
	if (fchmod(fd, 0444) < 0 || lseek(fd, 0, SEEK_SET) != 0 || (!(flags & O_CLOEXEC) && fcntl(fd, F_SETFD, 0) < 0))
		goto fail;
	return fd;
fail:
	{
		int err = errno;

		close(fd);
		errno = err;
	}
	return -1;
}

/* mode_arg reads open's optional third argument. */
#define MODE_ARG(flags, mode)                                          \
	do {                                                           \
		if ((flags) & (O_CREAT | __O_TMPFILE)) {               \
			va_list ap;                                    \
			va_start(ap, flags);                           \
			mode = va_arg(ap, mode_t);                     \
			va_end(ap);                                    \
		}                                                      \
	} while (0)

static int open_at(int dirfd, const char *path, int flags, mode_t mode)
{
	if (path && path[0] == '/') {
		int fd = synth(path, flags);

		if (fd != -2)
			return fd;
	}
	return (int)syscall(SYS_openat, dirfd, path, flags, mode);
}

EXPORT int open(const char *path, int flags, ...)
{
	mode_t mode = 0;

	MODE_ARG(flags, mode);
	return open_at(AT_FDCWD, path, flags, mode);
}

EXPORT int open64(const char *path, int flags, ...)
{
	mode_t mode = 0;

	MODE_ARG(flags, mode);
	return open_at(AT_FDCWD, path, flags | O_LARGEFILE, mode);
}

EXPORT int openat(int dirfd, const char *path, int flags, ...)
{
	mode_t mode = 0;

	MODE_ARG(flags, mode);
	return open_at(dirfd, path, flags, mode);
}

EXPORT int openat64(int dirfd, const char *path, int flags, ...)
{
	mode_t mode = 0;

	MODE_ARG(flags, mode);
	return open_at(dirfd, path, flags | O_LARGEFILE, mode);
}

/* The fortified entry points (_FORTIFY_SOURCE) take no mode. */
EXPORT int __open_2(const char *path, int flags)
{
	return open_at(AT_FDCWD, path, flags, 0);
}

EXPORT int __open64_2(const char *path, int flags)
{
	return open_at(AT_FDCWD, path, flags | O_LARGEFILE, 0);
}

EXPORT int __openat_2(int dirfd, const char *path, int flags)
{
	return open_at(dirfd, path, flags, 0);
}

EXPORT int __openat64_2(int dirfd, const char *path, int flags)
{
	return open_at(dirfd, path, flags | O_LARGEFILE, 0);
}

typedef FILE *(*fopen_fn)(const char *, const char *);

static FILE *fopen_with(const char *name, const char *path, const char *mode)
{
	fopen_fn real;
	int fd;

	if (path && mode && mode[0] == 'r' && !strchr(mode, '+')) {
		fd = synth(path, O_RDONLY | (strchr(mode, 'e') ? O_CLOEXEC : 0));
		if (fd >= 0) {
			FILE *f = fdopen(fd, mode);

			if (!f)
				close(fd);
			return f;
		}
		if (fd == -1)
			return NULL;
	}
	real = (fopen_fn)dlsym(RTLD_NEXT, name);
	if (!real) {
		errno = ENOSYS;
		return NULL;
	}
	return real(path, mode);
}

EXPORT FILE *fopen(const char *path, const char *mode)
{
	return fopen_with("fopen", path, mode);
}

EXPORT FILE *fopen64(const char *path, const char *mode)
{
	return fopen_with("fopen64", path, mode);
}
