/*
 * cm_test.h: what the C programs of the CM tests share: FAIL, the event
 * channel, expect (the next event, bounded) and poll_one (a completion,
 * bounded).
 */
#ifndef SROCE_CM_TEST_H
#define SROCE_CM_TEST_H

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#define FAIL(...)                                                                                  \
	do {                                                                                       \
		fprintf(stderr, "FAIL: " __VA_ARGS__);                                             \
		fprintf(stderr, " (errno %d: %s)\n", errno, strerror(errno));                      \
		exit(1);                                                                           \
	} while (0)

static struct rdma_event_channel *ch;

/* The next event on the channel, within 5 s, expected to be want. */
static struct rdma_cm_event *expect(enum rdma_cm_event_type want)
{
	struct pollfd p = {.fd = ch->fd, .events = POLLIN};
	struct rdma_cm_event *ev;
	if (poll(&p, 1, 5000) != 1)
		FAIL("no event within 5 s, waiting for %s", rdma_event_str(want));
	if (rdma_get_cm_event(ch, &ev))
		FAIL("rdma_get_cm_event");
	if (ev->event != want)
		FAIL("got %s (status %d), waiting for %s", rdma_event_str(ev->event), ev->status,
		     rdma_event_str(want));
	printf("ok: %s\n", rdma_event_str(want));
	return ev;
}

static void poll_one(struct ibv_cq *cq, const char *what)
{
	struct ibv_wc wc;
	for (int i = 0; i < 5000000; i++) {
		int n = ibv_poll_cq(cq, 1, &wc);
		if (n < 0)
			FAIL("ibv_poll_cq");
		if (n == 1) {
			if (wc.status != IBV_WC_SUCCESS)
				FAIL("%s completed with %s", what, ibv_wc_status_str(wc.status));
			return;
		}
	}
	FAIL("no completion for %s", what);
}

#endif /* SROCE_CM_TEST_H */
