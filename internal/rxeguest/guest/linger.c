/*
 * sroce-linger.so: an LD_PRELOAD library that makes a libibverbs program
 * keep each RC queue pair a while before destroying it.
 *
 *   LD_PRELOAD=/usr/local/lib/sroce-linger.so SROCE_LINGER_MS=1000 ibv_rc_pingpong ...
 *
 * ibv_rc_pingpong has no closing handshake: each side destroys its QP as
 * soon as its own last completion is there. When the ACK of the peer's
 * last message is lost, the peer retransmits to a QP that no longer
 * exists and fails with a retry error, whoever the peer is. With this
 * library the kernel's responder keeps answering those retransmissions
 * for SROCE_LINGER_MS milliseconds (default 1000) before ibv_destroy_qp
 * goes ahead, as TCP's TIME_WAIT would.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <infiniband/verbs.h>

int ibv_destroy_qp(struct ibv_qp *qp)
{
	static int (*next)(struct ibv_qp *);
	const char *env;
	long ms = 1000;

	if (!next) {
		next = (int (*)(struct ibv_qp *))dlsym(RTLD_NEXT, "ibv_destroy_qp");
		if (!next) {
			fprintf(stderr, "sroce-linger: ibv_destroy_qp not found: %s\n", dlerror());
			abort();
		}
	}
	env = getenv("SROCE_LINGER_MS");
	if (env)
		ms = strtol(env, NULL, 10);
	if (qp && qp->qp_type == IBV_QPT_RC && ms > 0) {
		struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

		while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
			;
	}
	return next(qp);
}
