/*
 * cm_teardown_test.c: the drop-in librdmacm's addresses and teardown as
 * the kernel's rdma_cm answers them, against a daemon: binding to the
 * wildcard addresses of both families and to 127.0.0.1 (which no device
 * holds), resolving 127.0.0.1; rdma_disconnect of an ID never connected
 * (EINVAL); rdma_destroy_event_channel with a listening ID still on it,
 * which destroys the ID (its port is free again) and says nothing.
 * Usage: cm_teardown_test IPv4-ADDRESS (the device's). Prints "ok: ..."
 * per step and "ok: all" at the end.
 */
#include <arpa/inet.h>

#include "cm_test.h"

static struct rdma_cm_id *new_id(void)
{
	struct rdma_cm_id *id;
	if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
		FAIL("rdma_create_id");
	return id;
}

static void bind4(struct rdma_cm_id *id, const char *addr, int port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
	inet_pton(AF_INET, addr, &a.sin_addr);
	if (rdma_bind_addr(id, (struct sockaddr *)&a))
		FAIL("rdma_bind_addr(%s:%d)", addr, port);
	printf("ok: bound to %s:%d\n", addr, port);
}

int main(int argc, char **argv)
{
	struct sockaddr_in6 any6 = {.sin6_family = AF_INET6, .sin6_port = htons(7302)};
	struct sockaddr_in lo = {.sin_family = AF_INET, .sin_port = htons(7303)};
	struct rdma_cm_id *id;

	if (argc < 2)
		FAIL("usage: cm_teardown_test IPv4-ADDRESS");
	ch = rdma_create_event_channel();
	if (!ch)
		FAIL("rdma_create_event_channel");

	id = new_id();
	bind4(id, "0.0.0.0", 7301);
	errno = 0;
	if (rdma_disconnect(id) != -1 || errno != EINVAL)
		FAIL("rdma_disconnect of an ID never connected returned no EINVAL");
	printf("ok: rdma_disconnect of a bound ID: EINVAL\n");
	rdma_destroy_id(id);

	id = new_id();
	if (rdma_bind_addr(id, (struct sockaddr *)&any6))
		FAIL("rdma_bind_addr(::)");
	printf("ok: bound to [::]:7302\n");
	rdma_destroy_id(id);

	id = new_id();
	bind4(id, "127.0.0.1", 7304);
	if (rdma_listen(id, 4))
		FAIL("rdma_listen on 127.0.0.1");
	rdma_destroy_id(id);

	id = new_id();
	inet_pton(AF_INET, "127.0.0.1", &lo.sin_addr);
	if (rdma_resolve_addr(id, NULL, (struct sockaddr *)&lo, 2000))
		FAIL("rdma_resolve_addr(127.0.0.1)");
	rdma_ack_cm_event(expect(RDMA_CM_EVENT_ADDR_RESOLVED));
	if (!id->verbs)
		FAIL("resolved to 127.0.0.1 without a device");
	rdma_destroy_id(id);

	/* A listener left on the channel: destroying the channel destroys it. */
	id = new_id();
	bind4(id, argv[1], 7305);
	if (rdma_listen(id, 4))
		FAIL("rdma_listen");
	rdma_destroy_event_channel(ch);
	printf("ok: rdma_destroy_event_channel with a listener on it\n");
	ch = rdma_create_event_channel();
	if (!ch)
		FAIL("rdma_create_event_channel");
	id = new_id();
	bind4(id, argv[1], 7305);
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
	printf("ok: all\n");
	return 0;
}
