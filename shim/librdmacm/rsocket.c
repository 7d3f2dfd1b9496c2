/*
 * rsocket.c: librdmacm's rsocket calls. sroce does not implement rsockets:
 * every call that would make or use one fails with ENOSYS, and a descriptor
 * never names an rsocket. rpoll and rselect behave as poll and select for
 * ordinary descriptors (rping waits on its event channel with rpoll).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "cm.h"

/* The calls below take their parameters only to have the right signature. */
#pragma GCC diagnostic ignored "-Wunused-parameter"

EXPORT int rpoll(struct pollfd *fds, nfds_t nfds, int timeout)
{
	return poll(fds, nfds, timeout);
}

EXPORT int rselect(int nfds, fd_set *readfds, fd_set *writefds, fd_set *exceptfds,
		   struct timeval *timeout)
{
	return select(nfds, readfds, writefds, exceptfds, timeout);
}

/* Every other rsocket call: -1 with errno ENOSYS. */
#define NOSYS(ret, name, ...)                                                                  \
	EXPORT ret name(__VA_ARGS__)                                                           \
	{                                                                                      \
		errno = ENOSYS;                                                                \
		return (ret)-1;                                                                \
	}

NOSYS(int, rsocket, int domain, int type, int protocol)
NOSYS(int, rbind, int socket, const struct sockaddr *addr, socklen_t addrlen)
NOSYS(int, rlisten, int socket, int backlog)
NOSYS(int, raccept, int socket, struct sockaddr *addr, socklen_t *addrlen)
NOSYS(int, rconnect, int socket, const struct sockaddr *addr, socklen_t addrlen)
NOSYS(int, rshutdown, int socket, int how)
NOSYS(int, rclose, int socket)
NOSYS(ssize_t, rrecv, int socket, void *buf, size_t len, int flags)
NOSYS(ssize_t, rrecvfrom, int socket, void *buf, size_t len, int flags, struct sockaddr *src_addr,
      socklen_t *addrlen)
NOSYS(ssize_t, rrecvmsg, int socket, struct msghdr *msg, int flags)
NOSYS(ssize_t, rsend, int socket, const void *buf, size_t len, int flags)
NOSYS(ssize_t, rsendto, int socket, const void *buf, size_t len, int flags,
      const struct sockaddr *dest_addr, socklen_t addrlen)
NOSYS(ssize_t, rsendmsg, int socket, const struct msghdr *msg, int flags)
NOSYS(ssize_t, rread, int socket, void *buf, size_t count)
NOSYS(ssize_t, rreadv, int socket, const struct iovec *iov, int iovcnt)
NOSYS(ssize_t, rwrite, int socket, const void *buf, size_t count)
NOSYS(ssize_t, rwritev, int socket, const struct iovec *iov, int iovcnt)
NOSYS(int, rgetpeername, int socket, struct sockaddr *addr, socklen_t *addrlen)
NOSYS(int, rgetsockname, int socket, struct sockaddr *addr, socklen_t *addrlen)
NOSYS(int, rsetsockopt, int socket, int level, int optname, const void *optval, socklen_t optlen)
NOSYS(int, rgetsockopt, int socket, int level, int optname, void *optval, socklen_t *optlen)
NOSYS(int, rfcntl, int socket, int cmd, ...)
NOSYS(off_t, riomap, int socket, void *buf, size_t len, int prot, int flags, off_t offset)
NOSYS(int, riounmap, int socket, void *buf, size_t len)
NOSYS(size_t, riowrite, int socket, const void *buf, size_t count, off_t offset, int flags)
