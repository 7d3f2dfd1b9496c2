/*
 * cm.h: the library's own objects. Every struct rdma_cm_id the program sees
 * is the first member of a struct sroce_cm_id that holds the daemon's handle
 * for it; every event channel holds the socket the daemon sends its events
 * on. One control connection per process (the CM ops of sroce_ctl.h) carries
 * every request; the verbs of an ID's device go through sroce's libibverbs.
 */
#ifndef SROCE_CM_H
#define SROCE_CM_H

#include <pthread.h>

#include "sroce_ctl.h"
#include "sroce_rdmacm.h"

#define EXPORT __attribute__((visibility("default")))

/* How long rdma_destroy_id waits for the program to ack the ID's events. */
#define SROCE_CM_ACK_WAIT_SEC 30
/* How long a synchronous ID (no event channel) waits for its event. */
#define SROCE_CM_SYNC_WAIT_SEC 60

/* An event read from a channel's socket but not handed out yet: what
 * rdma_migrate_id took out of the old channel's socket. */
struct sroce_pending_event {
	struct sroce_ctl_cm_event ev;
	struct sroce_pending_event *next;
};

struct sroce_cm_channel {
	struct rdma_event_channel ch; /* fd: the daemon's event socket */
	uint32_t handle;
	/* Events handed out before the socket's (rdma_get_cm_event takes
	 * these first; poll on ch.fd does not see them). */
	pthread_mutex_t pend_lock;
	struct sroce_pending_event *pend_head, *pend_tail;
};

/* One rdma_join_multicast of an ID: what the JOIN event told of the group
 * (its MGID, for ibv_detach_mcast at the leave) and the program's
 * context, which the join's events carry in param.ud.private_data. */
struct sroce_cm_mc {
	uint32_t uid; /* the protocol's name for it (cm_mcast.uid, cm_event.mcast_uid) */
	int send_only;
	int attached; /* the ID's QP is attached to the group (under the ID's lock) */
	void *context;
	struct sockaddr_storage addr;
	union ibv_gid mgid;
	uint16_t mlid;
	struct sroce_cm_mc *next;
};

struct sroce_cm_id {
	struct rdma_cm_id id;
	uint32_t handle;
	int sync;                    /* created without a channel: calls wait for their event */
	struct sroce_cm_channel *own_channel; /* the private channel of a synchronous ID */
	int lib_cqs;                 /* rdma_create_qp made the CQs (and their channels) */
	int lib_pd;                  /* rdma_create_qp allocated the PD */
	uint8_t initiator_depth;     /* what the connection negotiated */
	uint8_t responder_resources;
	struct ibv_qp_init_attr *qp_init; /* rdma_create_ep on a passive ID: QPs for its requests */
	struct ibv_sa_path_rec path;
	struct sroce_cm_mc *mc_list; /* joins, newest first (under lock) */
	uint32_t events;             /* events handed out, not yet acked */
	int removed;                 /* got DEVICE_REMOVAL: the daemon went away (under ids_lock) */
	pthread_mutex_t lock;
	pthread_cond_t acked;
	struct sroce_cm_id *next;    /* the handle table's chain */
};

struct sroce_cm_event {
	struct rdma_cm_event ev;
	uint8_t private_data[SROCE_CTL_CM_PRIVATE];
};

static inline struct sroce_cm_id *to_sid(struct rdma_cm_id *id)
{
	return (struct sroce_cm_id *)id;
}

/* ctl.c of libibverbs, compiled into this library too. */
int sroce_connect(int *fd_out);
int sroce_call_fd(int sock, uint32_t *seq, uint16_t op, const void *req, size_t reqlen,
		  const int *fds, unsigned nfds, void *reply, size_t replymax,
		  size_t *replylen, int *rfds, unsigned *nrfds);
const char *sroce_socket_path(void);
const char *sroce_socket_also(void);
void sroce_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* cm.c */
int sroce_cm_call(uint16_t op, const void *req, size_t reqlen, void *reply, size_t replylen,
		  int *rfds, unsigned nrfds);
struct ibv_context *sroce_cm_device(const char *name);

/* addr.c */
void sroce_cm_addr_to(struct sroce_ctl_cm_addr *out, const struct sockaddr *sa);
void sroce_cm_addr_from(struct sockaddr_storage *out, const struct sroce_ctl_cm_addr *in);
socklen_t sroce_cm_addr_len(const struct sockaddr *sa);

#endif /* SROCE_CM_H */
