/*
 * addr.c: socket addresses between the program's struct sockaddr and the
 * protocol's struct sroce_ctl_cm_addr, and rdma_getaddrinfo over the C
 * library's getaddrinfo for the cases RDMA CM programs use: a passive
 * address to bind (RAI_PASSIVE) or a destination to resolve, numeric or by
 * name, with the port space and QP type of the hints.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>

#include "cm.h"

void sroce_cm_addr_to(struct sroce_ctl_cm_addr *out, const struct sockaddr *sa)
{
	memset(out, 0, sizeof(*out));
	if (!sa)
		return;
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
		out->family = AF_INET;
		out->port = ntohs(in->sin_port);
		memcpy(out->addr, &in->sin_addr, 4);
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
		out->family = AF_INET6;
		out->port = ntohs(in6->sin6_port);
		out->scope_id = in6->sin6_scope_id;
		memcpy(out->addr, &in6->sin6_addr, 16);
	}
}

void sroce_cm_addr_from(struct sockaddr_storage *out, const struct sroce_ctl_cm_addr *in)
{
	memset(out, 0, sizeof(*out));
	if (in->family == AF_INET) {
		struct sockaddr_in *sin = (struct sockaddr_in *)out;
		sin->sin_family = AF_INET;
		sin->sin_port = htons(in->port);
		memcpy(&sin->sin_addr, in->addr, 4);
	} else if (in->family == AF_INET6) {
		struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)out;
		sin6->sin6_family = AF_INET6;
		sin6->sin6_port = htons(in->port);
		sin6->sin6_scope_id = in->scope_id;
		memcpy(&sin6->sin6_addr, in->addr, 16);
	}
}

socklen_t sroce_cm_addr_len(const struct sockaddr *sa)
{
	if (!sa)
		return 0;
	switch (sa->sa_family) {
	case AF_INET:
		return sizeof(struct sockaddr_in);
	case AF_INET6:
		return sizeof(struct sockaddr_in6);
	}
	return 0;
}

static struct sockaddr *copy_addr(const struct sockaddr *sa, socklen_t len)
{
	struct sockaddr *p = calloc(1, sizeof(struct sockaddr_storage));
	if (p)
		memcpy(p, sa, len);
	return p;
}

EXPORT void rdma_freeaddrinfo(struct rdma_addrinfo *res)
{
	while (res) {
		struct rdma_addrinfo *next = res->ai_next;
		free(res->ai_src_addr);
		free(res->ai_dst_addr);
		free(res->ai_src_canonname);
		free(res->ai_dst_canonname);
		free(res->ai_route);
		free(res->ai_connect);
		free(res);
		res = next;
	}
}

/* The getaddrinfo error as an errno-style failure: rdma_getaddrinfo returns
 * -1 with errno set, as librdmacm does for resolution failures. */
static int gai_fail(int rc)
{
	switch (rc) {
	case EAI_MEMORY:
		errno = ENOMEM;
		break;
	case EAI_SYSTEM:
		break;
	case EAI_FAMILY:
	case EAI_SERVICE:
	case EAI_BADFLAGS:
		errno = EINVAL;
		break;
	default:
		errno = ENOENT;
	}
	return -1;
}

/* rdma_getaddrinfo without a node or service: the result is the hints'
 * flags, family, QP type and port space with copies of their addresses, as
 * librdmacm answers (libfabric's verbs provider asks this way with only a
 * destination or source address in its hints). */
static int addrinfo_from_hints(const struct rdma_addrinfo *hints, struct rdma_addrinfo **res)
{
	struct rdma_addrinfo *r;

	if (hints->ai_dst_len > sizeof(struct sockaddr_storage) ||
	    hints->ai_src_len > sizeof(struct sockaddr_storage)) {
		errno = EINVAL;
		return -1;
	}
	r = calloc(1, sizeof(*r));
	if (!r) {
		errno = ENOMEM;
		return -1;
	}
	r->ai_flags = hints->ai_flags;
	r->ai_family = hints->ai_family;
	r->ai_qp_type = hints->ai_qp_type;
	r->ai_port_space = hints->ai_port_space;
	if (hints->ai_dst_addr && hints->ai_dst_len) {
		r->ai_dst_addr = copy_addr(hints->ai_dst_addr, hints->ai_dst_len);
		r->ai_dst_len = hints->ai_dst_len;
		if (!r->ai_dst_addr)
			goto nomem;
	}
	if (hints->ai_src_addr && hints->ai_src_len) {
		r->ai_src_addr = copy_addr(hints->ai_src_addr, hints->ai_src_len);
		r->ai_src_len = hints->ai_src_len;
		if (!r->ai_src_addr)
			goto nomem;
	}
	*res = r;
	return 0;
nomem:
	rdma_freeaddrinfo(r);
	errno = ENOMEM;
	return -1;
}

EXPORT int rdma_getaddrinfo(const char *node, const char *service,
			    const struct rdma_addrinfo *hints, struct rdma_addrinfo **res)
{
	struct addrinfo ai_hints = {0}, *ai = NULL;
	struct rdma_addrinfo *r;
	int passive = hints && (hints->ai_flags & RAI_PASSIVE);
	int rc;

	if (!res || (!node && !service && !hints)) {
		errno = EINVAL;
		return -1;
	}
	if (!node && !service)
		return addrinfo_from_hints(hints, res);
	ai_hints.ai_flags = AI_ADDRCONFIG;
	if (passive)
		ai_hints.ai_flags |= AI_PASSIVE;
	if (hints && (hints->ai_flags & RAI_NUMERICHOST))
		ai_hints.ai_flags |= AI_NUMERICHOST;
	if (hints && (hints->ai_flags & RAI_FAMILY))
		ai_hints.ai_family = hints->ai_family;
	ai_hints.ai_socktype = SOCK_STREAM;
	if (hints && (hints->ai_port_space == RDMA_PS_UDP || hints->ai_qp_type == IBV_QPT_UD))
		ai_hints.ai_socktype = SOCK_DGRAM;
	rc = getaddrinfo(node, service, &ai_hints, &ai);
	if (rc && (ai_hints.ai_flags & AI_ADDRCONFIG)) {
		/* No configured address of the family (a namespace with only lo). */
		ai_hints.ai_flags &= ~AI_ADDRCONFIG;
		rc = getaddrinfo(node, service, &ai_hints, &ai);
	}
	if (rc)
		return gai_fail(rc);
	r = calloc(1, sizeof(*r));
	if (!r) {
		freeaddrinfo(ai);
		errno = ENOMEM;
		return -1;
	}
	r->ai_flags = hints ? hints->ai_flags : 0;
	r->ai_family = ai->ai_family;
	r->ai_qp_type = hints && hints->ai_qp_type ? hints->ai_qp_type : IBV_QPT_RC;
	r->ai_port_space = hints && hints->ai_port_space ? hints->ai_port_space : RDMA_PS_TCP;
	if (r->ai_qp_type == IBV_QPT_UD && !(hints && hints->ai_port_space))
		r->ai_port_space = RDMA_PS_UDP;
	if (passive) {
		r->ai_src_addr = copy_addr(ai->ai_addr, ai->ai_addrlen);
		r->ai_src_len = ai->ai_addrlen;
		if (!r->ai_src_addr)
			goto nomem;
	} else {
		r->ai_dst_addr = copy_addr(ai->ai_addr, ai->ai_addrlen);
		r->ai_dst_len = ai->ai_addrlen;
		if (!r->ai_dst_addr)
			goto nomem;
		if (hints && hints->ai_src_addr && hints->ai_src_len) {
			r->ai_src_addr = copy_addr(hints->ai_src_addr, hints->ai_src_len);
			r->ai_src_len = hints->ai_src_len;
			if (!r->ai_src_addr)
				goto nomem;
		}
	}
	if (node && ai->ai_canonname) {
		char *cn = strdup(ai->ai_canonname);
		if (passive)
			r->ai_src_canonname = cn;
		else
			r->ai_dst_canonname = cn;
	}
	freeaddrinfo(ai);
	*res = r;
	return 0;
nomem:
	freeaddrinfo(ai);
	rdma_freeaddrinfo(r);
	errno = ENOMEM;
	return -1;
}
