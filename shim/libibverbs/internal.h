/*
 * internal.h: the library's own objects. Every verbs object the program
 * sees (struct ibv_context, ibv_cq, ibv_qp, ...) is the first member, or for
 * the context the last member of struct verbs_context, of a larger struct
 * that holds what the daemon gave for it: its handle, the shared memory of
 * its queues. The daemon (see sroce_ctl.h) owns every object; the library
 * holds the client side of one SOCK_SEQPACKET connection per context.
 */
#ifndef SROCE_INTERNAL_H
#define SROCE_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

#include "sroce_ctl.h"
#include "sroce_ring.h"
#include "sroce_verbs.h"

#define EXPORT __attribute__((visibility("default")))

/* device_cap_flags_ex bit of the kernel's IB_UVERBS_DEVICE_ATOMIC_WRITE (rdma-core 44 has no IBV_ name for it). */
#define SROCE_DEVICE_ATOMIC_WRITE (1ULL << 40)

/*
 * Exports name as name@@IBVERBS_1.1 beside its name@IBVERBS_1.0
 * compatibility version. SROCE_NO_SYMVER leaves versions out, for test
 * programs that link the sources into an executable.
 */
#ifndef SROCE_NO_SYMVER
#define SROCE_DEFAULT_1_1(name)                                                              \
	extern __typeof__(name) __sroce_default_##name                                       \
		__attribute__((alias(#name), visibility("default")));                        \
	__asm__(".symver __sroce_default_" #name "," #name "@@IBVERBS_1.1");
#define SROCE_SYMVER(sym, versioned) __asm__(".symver " #sym "," versioned);
#else
#define SROCE_DEFAULT_1_1(name)
#define SROCE_SYMVER(sym, versioned)
#endif
#define container_of(ptr, type, member) \
	((type *)((char *)(ptr) - offsetof(type, member)))

/* How long a reply of the daemon may take before the call fails with ETIMEDOUT. */
#define SROCE_CTL_TIMEOUT_SEC 30
/* How long ibv_destroy_cq/qp/srq wait for the program to acknowledge the events it got. */
#define SROCE_ACK_WAIT_SEC 30

struct sroce_device {
	struct ibv_device dev;
	char ifname[16];
	uint64_t guid; /* as ibv_get_device_guid returns it */
	int index;
	struct sroce_device *next;
};

/* A handle-to-object table: events name objects by handle. */
struct sroce_table {
	uint32_t *keys;
	void **vals;
	uint32_t cap;
	uint32_t n;
};

struct sroce_context {
	int sock; /* the control connection */
	uint32_t seq;
	pthread_mutex_t ctl_lock;
	int doorbell;
	struct sroce_ctx_page *page;
	struct sroce_ctl_device_attr dattr;
	int dead; /* the async socket reached its end: DEVICE_FATAL was reported */
	int gone; /* the daemon went away (sroce_daemon_gone): calls fail with EIO */
	unsigned gen; /* sroce_daemon_gone's generation when the context opened */
	char sockpath[512]; /* the daemon's socket, for the line that says it went */
	pthread_t watcher; /* waits for the control connection's end (sroce_watch) */
	int watch_pipe[2]; /* ibv_close_device stops the watcher through it */
	pid_t watch_pid;   /* the process that has the watcher (not a forked child) */
	struct sroce_context *watch_next; /* the contexts watched, for the check at exit */
	pthread_mutex_t table_lock;
	struct sroce_table cqs, qps, srqs, channels;
	struct verbs_context vctx; /* last: ends with struct ibv_context */
};

static inline struct sroce_context *to_sctx(struct ibv_context *c)
{
	return container_of(c, struct sroce_context, vctx.context);
}

/* A PD, or a parent domain over one (ibv_alloc_parent_domain). */
struct sroce_pd {
	struct ibv_pd pd;
	struct sroce_pd *parent; /* a parent domain's PD; NULL for a PD */
	struct ibv_td *td;       /* a parent domain's thread domain, or NULL */
	uint32_t refs;           /* parent domains on a PD; CQs made with a parent domain */
};

static inline struct sroce_pd *to_spd(struct ibv_pd *pd)
{
	return container_of(pd, struct sroce_pd, pd);
}

struct sroce_td {
	struct ibv_td td;
	uint32_t refs; /* parent domains holding it */
};

static inline struct sroce_td *to_std(struct ibv_td *td)
{
	return container_of(td, struct sroce_td, td);
}

struct sroce_comp_channel {
	struct ibv_comp_channel ch;
	uint32_t handle;
};

struct sroce_cq {
	struct ibv_cq_ex cq; /* ibv_cq's layout is its prefix */
	struct sroce_cq_ctl *ctl;
	struct sroce_ring_hdr *ring;
	void *mem;
	size_t mem_size;
	pthread_spinlock_t lock;  /* polling, and ibv_resize_cq while it swaps the memory */
	pthread_mutex_t arm_lock; /* ibv_req_notify_cq, and ibv_resize_cq while it moves ctl */
	struct sroce_cqe *cur;    /* extended polling: the entry being read */
	uint32_t empty_polls;     /* polls in a row that found nothing */
	uint32_t comp_delivered;  /* events handed to the program */
	uint32_t async_delivered;
	struct sroce_pd *pd;      /* the parent domain it was made in, or NULL */
};

struct sroce_qp {
	union {
		struct ibv_qp qp;
		struct ibv_qp_ex qpx; /* its prefix is the ibv_qp */
	};
	int extended;          /* created with send_ops_flags: the ibv_wr_* API */
	uint64_t send_ops;     /* the opcodes it allows (IBV_QP_EX_WITH_*) */
	uint32_t wr_pending;   /* ibv_wr_*: WQEs built since wr_start, not yet published */
	int wr_err;            /* ibv_wr_*: the first error since wr_start */
	struct sroce_send_wqe *wr_cur; /* ibv_wr_*: the WQE being built */
	struct sroce_ctl_qp_cap cap;
	struct sroce_pd *pd;   /* the parent domain it was made in, or NULL */
	int sq_sig_all;
	struct sroce_qp_ctl *ctl;
	struct sroce_ring_hdr *sq, *rq;
	void *mem;
	size_t mem_size;
	pthread_spinlock_t sq_lock, rq_lock;
	uint32_t async_delivered;
	uint32_t bell;         /* its doorbell number */
};

struct sroce_srq {
	struct ibv_srq srq;
	uint32_t max_wr, max_sge;
	uint32_t srq_num;       /* an XRC SRQ's number */
	uint32_t bell;          /* its doorbell number */
	struct sroce_ring_hdr *rq;
	void *mem;
	size_t mem_size;
	pthread_spinlock_t lock;
	uint32_t async_delivered;
};

struct sroce_xrcd {
	struct ibv_xrcd xrcd;
	uint32_t handle;
};

struct sroce_ah {
	struct ibv_ah ah;
	struct sroce_ctl_ah_attr attr;
};

/* ctl.c */
const char *sroce_socket_path(void);
const char *sroce_socket_also(void);
int sroce_connect(int *fd_out);
int sroce_call_fd(int sock, uint32_t *seq, uint16_t op, const void *req, size_t reqlen,
		  const int *fds, unsigned nfds, void *reply, size_t replymax,
		  size_t *replylen, int *rfds, unsigned *nrfds);
int sroce_call(struct sroce_context *c, uint16_t op, const void *req, size_t reqlen,
	       const int *fds, unsigned nfds, void *reply, size_t replylen,
	       int *rfds, unsigned nrfds);
void sroce_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The daemon and the device after it went away: the kernel's errno for a
 * disassociated device. */
#define SROCE_GONE_ERRNO EIO
int sroce_watch(struct sroce_context *c);
void sroce_unwatch(struct sroce_context *c);
void sroce_daemon_gone(struct sroce_context *c, const char *why);
int sroce_check_gone(struct sroce_context *c);
void sroce_await_gone(struct sroce_context *c);
int sroce_destroy_call(struct sroce_context *c, uint16_t op, const void *req, size_t reqlen);
static inline int sroce_is_gone(struct sroce_context *c)
{
	return __atomic_load_n(&c->gone, __ATOMIC_ACQUIRE);
}

/* table */
int sroce_table_put(struct sroce_context *c, struct sroce_table *t, uint32_t key, void *val);
void *sroce_table_get(struct sroce_context *c, struct sroce_table *t, uint32_t key);
void *sroce_table_get_counted(struct sroce_context *c, struct sroce_table *t, uint32_t key, size_t off);
void sroce_table_del(struct sroce_context *c, struct sroce_table *t, uint32_t key);

/* qp.c */
int sroce_map_queue(int fd, uint64_t mem_size, uint64_t off, uint16_t kind, size_t entry, void **mem);
int sroce_call_remap(struct sroce_context *c, uint16_t op, const void *req, size_t reqlen, void *reply,
		     size_t replylen, const uint64_t *mem_size, const uint64_t *off, uint16_t kind,
		     size_t entry, void **mem, size_t old_size);

/* mr.c */
int sroce_mem_backing(void *addr, size_t length, int *fd, uint64_t *offset);
int sroce_mem_backing_access(void *addr, size_t length, unsigned int access, int *fd, uint64_t *offset);
void sroce_mem_release(void *addr, size_t length);

/* exported verbs the library also calls itself */
int ibv_query_device(struct ibv_context *context, struct ibv_device_attr *attr);
int ibv_query_port(struct ibv_context *context, uint8_t port_num, struct ibv_port_attr *attr);

/* helpers shared between files */
void sroce_ring_doorbell(struct sroce_context *c);
void sroce_ring_bell(struct sroce_context *c, uint32_t bell);
int sroce_wait_acks(pthread_mutex_t *m, pthread_cond_t *cv, uint32_t *done_a,
		    uint32_t want_a, uint32_t *done_b, uint32_t want_b, const char *what);
void sroce_port_attr_from_ctl(struct ibv_port_attr *out, const struct sroce_ctl_port_attr *in);
int sroce_query_port(struct ibv_context *context, uint8_t port_num,
		     struct ibv_port_attr *attr, size_t len);
int sroce_query_device_ex(struct ibv_context *context,
			  const struct ibv_query_device_ex_input *input,
			  struct ibv_device_attr_ex *attr, size_t attr_size);
int sroce_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc);
int sroce_req_notify_cq(struct ibv_cq *cq, int solicited_only);
struct ibv_cq_ex *sroce_create_cq_ex(struct ibv_context *context, struct ibv_cq_init_attr_ex *attr);
void sroce_cq_clean(struct ibv_cq *cq, uint32_t qpn);
struct ibv_pd *sroce_alloc_parent_domain(struct ibv_context *context,
					 struct ibv_parent_domain_init_attr *attr);
struct ibv_td *sroce_alloc_td(struct ibv_context *context, struct ibv_td_init_attr *attr);
int sroce_dealloc_td(struct ibv_td *td);
int sroce_advise_mr(struct ibv_pd *pd, uint32_t advice, uint32_t flags, struct ibv_sge *sg_list,
		    uint32_t num_sges);
int sroce_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
int sroce_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
int sroce_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
struct ibv_qp *sroce_create_qp_ex(struct ibv_context *context, struct ibv_qp_init_attr_ex *attr);
struct ibv_xrcd *sroce_open_xrcd(struct ibv_context *context, struct ibv_xrcd_init_attr *attr);
int sroce_close_xrcd(struct ibv_xrcd *xrcd);
struct ibv_srq *sroce_create_srq_ex(struct ibv_context *context, struct ibv_srq_init_attr_ex *attr);
int sroce_get_srq_num(struct ibv_srq *srq, uint32_t *num);
struct ibv_qp *sroce_open_qp(struct ibv_context *context, struct ibv_qp_open_attr *attr);
struct ibv_mw *sroce_alloc_mw(struct ibv_pd *pd, int type);
int sroce_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *bind);
int sroce_dealloc_mw(struct ibv_mw *mw);

#endif /* SROCE_INTERNAL_H */
