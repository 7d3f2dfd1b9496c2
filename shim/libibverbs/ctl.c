/*
 * ctl.c: the client side of the control protocol (sroce_ctl.h). A request
 * is one datagram on the context's SOCK_SEQPACKET connection, descriptors
 * ride along as SCM_RIGHTS, and the reply echoes op and seq. Calls on one
 * connection are serialized by the context's lock; every wait for a reply
 * is bounded by SROCE_CTL_TIMEOUT_SEC.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "internal.h"

/* The name warnings start with: this file is compiled into librdmacm too. */
#ifndef SROCE_LIB_NAME
#define SROCE_LIB_NAME "libibverbs"
#endif

/* Room for a path; dial refuses those longer than a unix socket's. */
#define SROCE_PATH_ROOM 512
static char socket_path[SROCE_PATH_ROOM];

#define SROCE_SYSTEM_SOCKET "/run/sroce/sroce.sock"

/* Whether dir is a directory (not a link) of this user that no one else may write to. */
static int own_dir(const char *dir)
{
	struct stat st;
	return lstat(dir, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == geteuid() &&
	       !(st.st_mode & (S_IWGRP | S_IWOTH));
}

/*
 * The place of this user's own daemon (as internal/sockpath.User): the
 * system daemon's for root; else $XDG_RUNTIME_DIR/sroce.sock; else
 * /run/user/UID/sroce.sock when that directory is the user's; else
 * $TMPDIR/sroce-UID/sroce.sock. 0, or -1 when the place is not to be
 * trusted (a temporary directory that is not the user's own).
 */
static int user_socket(char *buf, size_t n)
{
	unsigned uid = (unsigned)geteuid();
	const char *rt = getenv("XDG_RUNTIME_DIR");
	char dir[SROCE_PATH_ROOM - 16];
	if (uid == 0) {
		snprintf(buf, n, "%s", SROCE_SYSTEM_SOCKET);
		return 0;
	}
	if (rt && *rt) {
		snprintf(buf, n, "%.*s/sroce.sock", (int)sizeof(dir) - 1, rt);
		return 0;
	}
	snprintf(dir, sizeof(dir), "/run/user/%u", uid);
	if (own_dir(dir)) {
		snprintf(buf, n, "%s/sroce.sock", dir);
		return 0;
	}
	const char *tmp = getenv("TMPDIR");
	if (!tmp || !*tmp)
		tmp = "/tmp";
	size_t l = strlen(tmp);
	while (l > 1 && tmp[l - 1] == '/')
		l--;
	if (l > sizeof(dir) - 20)
		l = sizeof(dir) - 20;
	snprintf(dir, sizeof(dir), "%.*s/sroce-%u", (int)l, tmp, uid);
	snprintf(buf, n, "%s/sroce.sock", dir);
	return own_dir(dir) ? 0 : -1;
}

/* A connected SOCK_SEQPACKET socket to path, or -1 with errno set. */
static int dial(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct timeval tv = {.tv_sec = SROCE_CTL_TIMEOUT_SEC};
	int fd, err;
	if (strlen(path) >= sizeof(sa.sun_path)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	strcpy(sa.sun_path, path);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		err = errno;
		close(fd);
		errno = err;
		return -1;
	}
	return fd;
}

/*
 * The one rule that finds the daemon (internal/sockpath in Go, and
 * docs/operating.md): SROCE_SOCKET when set; else the user's own daemon
 * when one listens (a connect succeeds); else the system daemon at
 * /run/sroce/sroce.sock. Returns a connected socket or -1 with errno set;
 * socket_path names the socket used (or, on failure, the last tried).
 */
static pthread_mutex_t path_lock = PTHREAD_MUTEX_INITIALIZER;

/* The user's place when the rule tried it and no daemon answered there ("" otherwise). */
static char user_tried[SROCE_PATH_ROOM];

static int find_daemon(void)
{
	char user[SROCE_PATH_ROOM];
	const char *env = getenv("SROCE_SOCKET");
	int fd = -1, err;
	pthread_mutex_lock(&path_lock);
	if (env && *env) {
		snprintf(socket_path, sizeof(socket_path), "%s", env);
	} else {
		user_tried[0] = 0;
		if (user_socket(user, sizeof(user)) == 0 && strcmp(user, SROCE_SYSTEM_SOCKET)) {
			fd = dial(user);
			if (fd >= 0)
				snprintf(socket_path, sizeof(socket_path), "%s", user);
			else
				snprintf(user_tried, sizeof(user_tried), "%s", user);
		}
		if (fd < 0)
			snprintf(socket_path, sizeof(socket_path), "%s", SROCE_SYSTEM_SOCKET);
	}
	if (fd < 0)
		fd = dial(socket_path);
	err = errno;
	pthread_mutex_unlock(&path_lock);
	errno = err;
	return fd;
}

/* For a message saying no daemon was found: ", nor at PATH" naming the
 * user's place when the rule tried it, else "". */
const char *sroce_socket_also(void)
{
	static char buf[SROCE_PATH_ROOM + 16];
	if (!user_tried[0])
		return "";
	snprintf(buf, sizeof(buf), ", nor at %.*s", SROCE_PATH_ROOM - 1, user_tried);
	return buf;
}

/* The daemon's socket: the one the last connection used (or tried last), else the rule's. */
const char *sroce_socket_path(void)
{
	if (!socket_path[0]) {
		int fd = find_daemon();
		if (fd >= 0)
			close(fd);
	}
	return socket_path;
}

/* Prints one line on standard error, prefixed with the library's name. */
void sroce_warn(const char *fmt, ...)
{
	char buf[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	fprintf(stderr, SROCE_LIB_NAME " (sroce): %s\n", buf);
}

/* Opens a connection to the daemon and says hello; 0 or an errno value. */
int sroce_connect(int *fd_out)
{
	struct sroce_ctl_hello hello = {.abi = SROCE_CTL_VERSION}, reply;
	uint32_t seq = 0;
	int fd, err;

	fd = find_daemon();
	if (fd < 0)
		return errno;
	err = sroce_call_fd(fd, &seq, SROCE_OP_HELLO, &hello, sizeof(hello), NULL, 0,
			    &reply, sizeof(reply), NULL, NULL, NULL);
	if (err) {
		close(fd);
		return err;
	}
	*fd_out = fd;
	return 0;
}

static void close_fds(int *fds, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		if (fds[i] >= 0)
			close(fds[i]);
}

/*
 * Sends one request and reads its reply on sock. The reply body (at most
 * replymax bytes) goes to reply, its length to *replylen; descriptors to
 * rfds (*nrfds in: room, out: received). Returns 0, the daemon's errno, or
 * the errno of the transport (ETIMEDOUT when the daemon did not answer,
 * EPROTO for a malformed reply).
 */
int sroce_call_fd(int sock, uint32_t *seq, uint16_t op, const void *req, size_t reqlen,
		  const int *fds, unsigned nfds, void *reply, size_t replymax,
		  size_t *replylen, int *rfds, unsigned *nrfds)
{
	uint8_t buf[SROCE_CTL_MAX_MSG];
	struct sroce_ctl_hdr *h = (struct sroce_ctl_hdr *)buf;
	union {
		char b[CMSG_SPACE(sizeof(int) * SROCE_CTL_MAX_FDS)];
		struct cmsghdr align;
	} cbuf;
	struct iovec iov;
	struct msghdr msg;
	struct cmsghdr *cm;
	int got[SROCE_CTL_MAX_FDS];
	unsigned ngot = 0, room = nrfds ? *nrfds : 0;
	ssize_t n;
	uint32_t myseq = ++*seq;

	if (sizeof(*h) + reqlen > sizeof(buf) || nfds > SROCE_CTL_MAX_FDS)
		return EINVAL;
	memset(h, 0, sizeof(*h));
	h->magic = SROCE_CTL_MAGIC;
	h->version = SROCE_CTL_VERSION;
	h->op = op;
	h->len = (uint32_t)(sizeof(*h) + reqlen);
	h->seq = myseq;
	h->nfds = nfds;
	if (reqlen)
		memcpy(buf + sizeof(*h), req, reqlen);

	memset(&msg, 0, sizeof(msg));
	iov.iov_base = buf;
	iov.iov_len = h->len;
	msg.msg_iov = &iov;
	msg.msg_iovlen = 1;
	if (nfds) {
		memset(&cbuf, 0, sizeof(cbuf));
		msg.msg_control = cbuf.b;
		msg.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
		cm = CMSG_FIRSTHDR(&msg);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
		memcpy(CMSG_DATA(cm), fds, sizeof(int) * nfds);
	}
	do {
		n = sendmsg(sock, &msg, MSG_NOSIGNAL);
	} while (n < 0 && errno == EINTR);
	if (n < 0)
		return errno == EAGAIN ? ETIMEDOUT : errno;

	for (;;) {
		memset(&msg, 0, sizeof(msg));
		iov.iov_base = buf;
		iov.iov_len = sizeof(buf);
		msg.msg_iov = &iov;
		msg.msg_iovlen = 1;
		msg.msg_control = cbuf.b;
		msg.msg_controllen = sizeof(cbuf.b);
		n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			sroce_warn("the daemon at %s did not answer request %u (op %u) within %d s",
				   socket_path[0] ? socket_path : sroce_socket_path(), myseq, op,
				   SROCE_CTL_TIMEOUT_SEC);
			return ETIMEDOUT;
		}
		if (n < 0)
			return errno;
		if (n == 0)
			return ECONNRESET;
		ngot = 0;
		for (cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
			if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
				continue;
			unsigned k = (unsigned)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
			for (unsigned i = 0; i < k && ngot < SROCE_CTL_MAX_FDS; i++)
				memcpy(&got[ngot++], CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
		}
		if ((size_t)n < sizeof(*h) || h->magic != SROCE_CTL_MAGIC || h->len != (uint32_t)n ||
		    (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) {
			close_fds(got, ngot);
			return EPROTO;
		}
		if (h->seq != myseq || h->op != op) {
			/* A reply to an earlier request that timed out: drop it. */
			close_fds(got, ngot);
			continue;
		}
		break;
	}
	if (h->err) {
		close_fds(got, ngot);
		return h->err > 0 ? h->err : EPROTO;
	}
	size_t body = (size_t)n - sizeof(*h);
	if (replylen)
		*replylen = body;
	else if (body < replymax) {
		close_fds(got, ngot);
		return EPROTO;
	}
	if (reply)
		memcpy(reply, buf + sizeof(*h), body < replymax ? body : replymax);
	if (ngot < room) {
		/* The reply lacks descriptors the op promises. */
		close_fds(got, ngot);
		return EPROTO;
	}
	for (unsigned i = 0; i < ngot; i++) {
		if (i < room)
			rfds[i] = got[i];
		else
			close(got[i]);
	}
	if (nrfds)
		*nrfds = ngot < room ? ngot : room;
	return 0;
}

/*
 * A call on a context's connection with a fixed-size reply and nrfds
 * descriptors. Once the daemon is gone every call fails with EIO, the
 * kernel's errno for the calls on a device that was disassociated from
 * its contexts.
 */
int sroce_call(struct sroce_context *c, uint16_t op, const void *req, size_t reqlen,
	       const int *fds, unsigned nfds, void *reply, size_t replylen,
	       int *rfds, unsigned nrfds)
{
	int err;
	unsigned n = nrfds;
	if (sroce_is_gone(c))
		return SROCE_GONE_ERRNO;
	pthread_mutex_lock(&c->ctl_lock);
	err = sroce_call_fd(c->sock, &c->seq, op, req, reqlen, fds, nfds, reply, replylen,
			    NULL, rfds, nrfds ? &n : NULL);
	pthread_mutex_unlock(&c->ctl_lock);
	if ((err == ECONNRESET || err == EPIPE || err == ENOTCONN) && sroce_check_gone(c))
		return SROCE_GONE_ERRNO;
	return err;
}

/*
 * The destruction of an object: as with rdma-core over a disassociated
 * device (where the kernel destroyed everything already and its EIO counts
 * as done), it succeeds once the daemon is gone, which freed the object.
 */
int sroce_destroy_call(struct sroce_context *c, uint16_t op, const void *req, size_t reqlen)
{
	int err = sroce_call(c, op, req, reqlen, NULL, 0, NULL, 0, NULL, 0);
	return err == SROCE_GONE_ERRNO && sroce_is_gone(c) ? 0 : err;
}

/* ---- the daemon's going ---- */

/* Counts the lines said: contexts opened after one went get a line of their own. */
static unsigned gone_gen;

/* Whether a daemon listens at path and answers a HELLO within 2 s (one
 * that is dying may still accept). */
static int daemon_answers(const char *path)
{
	struct sroce_ctl_hello hello = {.abi = SROCE_CTL_VERSION}, reply;
	struct timeval tv = {.tv_sec = 2};
	uint32_t seq = 0;
	int fd = dial(path), err;
	if (fd < 0)
		return 0;
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	err = sroce_call_fd(fd, &seq, SROCE_OP_HELLO, &hello, sizeof(hello), NULL, 0, &reply,
			    sizeof(reply), NULL, NULL, NULL);
	close(fd);
	return err == 0;
}

/*
 * Marks c's daemon gone (once) and says so on standard error, once for
 * all the contexts that were open when it went. A daemon that still
 * listens at its socket took the device away (its interface went) rather
 * than going itself.
 */
static pthread_mutex_t gone_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sroce_context *watched; /* the contexts with a watcher, under gone_lock */

void sroce_daemon_gone(struct sroce_context *c, const char *why)
{
	if (sroce_is_gone(c))
		return;
	/* The line is out before any call fails: a program may exit at its
	 * first failure. */
	pthread_mutex_lock(&gone_lock);
	if (c->gone) {
		pthread_mutex_unlock(&gone_lock);
		return;
	}
	if (c->gen == gone_gen) {
		gone_gen++;
		const char *dev = c->vctx.context.device ? c->vctx.context.device->name : "?";
		if (daemon_answers(c->sockpath))
			fprintf(stderr,
				"sroce: the sroce daemon at %s took device %s away (its interface went away?); "
				"it is unusable: its calls fail with EIO and its contexts got IBV_EVENT_DEVICE_FATAL\n",
				c->sockpath, dev);
		else
			fprintf(stderr,
				"sroce: the sroce daemon at %s has gone (%s); device %s is unusable: "
				"its calls fail with EIO and its contexts got IBV_EVENT_DEVICE_FATAL\n",
				c->sockpath, why, dev);
	}
	__atomic_store_n(&c->gone, 1, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&gone_lock);
}

/* After the daemon said DEVICE_FATAL: it closes the connection next;
 * waits for that (at most a second), so that the calls that follow the
 * event fail. */
void sroce_await_gone(struct sroce_context *c)
{
	struct pollfd p = {.fd = c->sock, .events = POLLRDHUP};
	if (!sroce_is_gone(c) && poll(&p, 1, 1000) == 1)
		sroce_check_gone(c);
}

/* Whether the control connection reached its end (the daemon stopped or
 * died); marks the daemon gone if so. Costs one poll(2). */
int sroce_check_gone(struct sroce_context *c)
{
	struct pollfd p = {.fd = c->sock, .events = POLLRDHUP};
	if (sroce_is_gone(c))
		return 1;
	if (poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLRDHUP | POLLERR))) {
		sroce_daemon_gone(c, (p.revents & POLLERR) ? "connection reset" : "connection closed");
		return 1;
	}
	return 0;
}

/* The watcher: waits for the end of the control connection, or for ibv_close_device. */
static void *watch(void *arg)
{
	struct sroce_context *c = arg;
	struct pollfd p[2] = {{.fd = c->sock, .events = POLLRDHUP}, {.fd = c->watch_pipe[0], .events = POLLIN}};
	for (;;) {
		int r = poll(p, 2, -1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 || p[1].revents)
			return NULL;
		if (p[0].revents & (POLLHUP | POLLRDHUP | POLLERR)) {
			sroce_daemon_gone(c, (p[0].revents & POLLERR) ? "connection reset" : "connection closed");
			return NULL;
		}
	}
}

/*
 * Starts c's watcher thread, which tells the program at once when the
 * daemon goes (a program may be waiting elsewhere, on a socket of its own,
 * when it does). Its signals are blocked: the program's threads take them.
 */
int sroce_watch(struct sroce_context *c)
{
	sigset_t all, old;
	int err;
	snprintf(c->sockpath, sizeof(c->sockpath), "%s", sroce_socket_path());
	pthread_mutex_lock(&gone_lock);
	c->gen = gone_gen;
	pthread_mutex_unlock(&gone_lock);
	if (pipe2(c->watch_pipe, O_CLOEXEC) < 0)
		return errno;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	err = pthread_create(&c->watcher, NULL, watch, c);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	c->watch_pid = getpid();
	if (err) {
		close(c->watch_pipe[0]);
		close(c->watch_pipe[1]);
		c->watch_pipe[0] = c->watch_pipe[1] = -1;
		return err;
	}
	pthread_mutex_lock(&gone_lock);
	c->watch_next = watched;
	watched = c;
	pthread_mutex_unlock(&gone_lock);
	return 0;
}

/*
 * At exit: a program may end because of the daemon's going before its
 * watcher said so (a peer that saw it first closed their TCP connection,
 * and the program exits at that failure), so every context still open
 * looks at its connection once more and the line is said if it ended.
 */
__attribute__((destructor)) static void sroce_watch_at_exit(void)
{
	struct sroce_context *cs[64];
	int n = 0;
	pthread_mutex_lock(&gone_lock);
	for (struct sroce_context *c = watched; c && n < 64; c = c->watch_next)
		if (c->watch_pid == getpid())
			cs[n++] = c;
	pthread_mutex_unlock(&gone_lock);
	for (int i = 0; i < n; i++)
		sroce_check_gone(cs[i]);
}

/* Stops c's watcher (before its connection is closed). */
void sroce_unwatch(struct sroce_context *c)
{
	if (c->watch_pipe[1] < 0)
		return;
	pthread_mutex_lock(&gone_lock);
	for (struct sroce_context **p = &watched; *p; p = &(*p)->watch_next)
		if (*p == c) {
			*p = c->watch_next;
			break;
		}
	pthread_mutex_unlock(&gone_lock);
	close(c->watch_pipe[1]);
	/* A forked child has no watcher of its own to join. */
	if (c->watch_pid == getpid())
		pthread_join(c->watcher, NULL);
	close(c->watch_pipe[0]);
	c->watch_pipe[0] = c->watch_pipe[1] = -1;
}

/* Handle tables: open addressing would be faster; these are control-path only. */
int sroce_table_put(struct sroce_context *c, struct sroce_table *t, uint32_t key, void *val)
{
	int err = 0;
	pthread_mutex_lock(&c->table_lock);
	if (t->n == t->cap) {
		uint32_t ncap = t->cap ? t->cap * 2 : 16;
		uint32_t *k = realloc(t->keys, ncap * sizeof(*k));
		if (k)
			t->keys = k;
		void **v = k ? realloc(t->vals, ncap * sizeof(*v)) : NULL;
		if (v)
			t->vals = v;
		if (!k || !v)
			err = ENOMEM;
		else
			t->cap = ncap;
	}
	if (!err) {
		t->keys[t->n] = key;
		t->vals[t->n] = val;
		t->n++;
	}
	pthread_mutex_unlock(&c->table_lock);
	return err;
}

void *sroce_table_get(struct sroce_context *c, struct sroce_table *t, uint32_t key)
{
	void *v = NULL;
	pthread_mutex_lock(&c->table_lock);
	for (uint32_t i = 0; i < t->n; i++)
		if (t->keys[i] == key) {
			v = t->vals[i];
			break;
		}
	pthread_mutex_unlock(&c->table_lock);
	return v;
}

/* The value of key with the uint32_t counter at byte offset off in it
 * incremented, both under the table lock: an event delivered for the
 * object, which its destruction waits to see acknowledged. NULL if the key
 * is unknown (the object was destroyed meanwhile). */
void *sroce_table_get_counted(struct sroce_context *c, struct sroce_table *t, uint32_t key, size_t off)
{
	void *v = NULL;
	pthread_mutex_lock(&c->table_lock);
	for (uint32_t i = 0; i < t->n; i++)
		if (t->keys[i] == key) {
			v = t->vals[i];
			(*(uint32_t *)((char *)v + off))++;
			break;
		}
	pthread_mutex_unlock(&c->table_lock);
	return v;
}

void sroce_table_del(struct sroce_context *c, struct sroce_table *t, uint32_t key)
{
	pthread_mutex_lock(&c->table_lock);
	for (uint32_t i = 0; i < t->n; i++)
		if (t->keys[i] == key) {
			t->keys[i] = t->keys[t->n - 1];
			t->vals[i] = t->vals[t->n - 1];
			t->n--;
			break;
		}
	pthread_mutex_unlock(&c->table_lock);
}
