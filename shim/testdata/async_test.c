/*
 * async_test.c: waits for asynchronous events on the first device, printing
 * each with ibv_event_type_str; TestDaemonGoneIsDeviceFatal stops the daemon
 * under it. Exits 0 after a DEVICE_FATAL event (printing any event a second
 * ibv_get_async_event still gives: none is due), 1 on a timeout or error.
 */
#include <infiniband/verbs.h>
#include <poll.h>
#include <stdio.h>

int main(void)
{
	struct ibv_device **l = ibv_get_device_list(NULL);
	if (!l || !l[0]) {
		printf("no device\n");
		return 1;
	}
	struct ibv_context *c = ibv_open_device(l[0]);
	if (!c) {
		printf("open failed\n");
		return 1;
	}
	struct pollfd p = {.fd = c->async_fd, .events = POLLIN};
	printf("ready\n");
	fflush(stdout);
	for (;;) {
		if (poll(&p, 1, 20000) != 1) {
			printf("no event within 20 s\n");
			return 1;
		}
		struct ibv_async_event ev;
		if (ibv_get_async_event(c, &ev)) {
			perror("ibv_get_async_event");
			return 1;
		}
		printf("event: %s\n", ibv_event_type_str(ev.event_type));
		fflush(stdout);
		ibv_ack_async_event(&ev);
		if (ev.event_type == IBV_EVENT_DEVICE_FATAL) {
			if (ibv_get_async_event(c, &ev) == 0) {
				printf("event: %s\n", ibv_event_type_str(ev.event_type));
				ibv_ack_async_event(&ev);
			}
			break;
		}
	}
	ibv_close_device(c);
	ibv_free_device_list(l);
	return 0;
}
