/*
 * misc.c: the exported functions that need no daemon (strings, rates,
 * fork), the verbs sroce does not offer (each fails the way rxe's
 * provider makes it fail, never crashes), the IBVERBS_1.0 compatibility
 * symbols and the private IBVERBS_PRIVATE_34 node that providers such as
 * libmlx5 and libefa link against: their constructors register a driver,
 * which is accepted and ignored, since every device is the daemon's.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <string.h>

#include "internal.h"

EXPORT const char *ibv_wc_status_str(int status)
{
	static const char *const s[] = {
		"success",
		"local length error",
		"local QP operation error",
		"local EE context operation error",
		"local protection error",
		"Work Request Flushed Error",
		"memory management operation error",
		"bad response error",
		"local access error",
		"remote invalid request error",
		"remote access error",
		"remote operation error",
		"transport retry counter exceeded",
		"RNR retry counter exceeded",
		"local RDD violation error",
		"remote invalid RD request",
		"aborted error",
		"invalid EE context number",
		"invalid EE context state",
		"fatal error",
		"response timeout error",
		"general error",
		"TM error",
		"TM software rendezvous",
	};
	if (status < 0 || status >= (int)(sizeof(s) / sizeof(s[0])))
		return "unknown";
	return s[status];
}

EXPORT const char *ibv_event_type_str(int event)
{
	static const char *const s[] = {
		"CQ error",
		"local work queue catastrophic error",
		"invalid request local work queue error",
		"local access violation work queue error",
		"communication established",
		"send queue drained",
		"path migrated",
		"path migration request error",
		"local catastrophic error",
		"port active",
		"port error",
		"LID change",
		"P_Key change",
		"SM change",
		"SRQ catastrophic error",
		"SRQ limit reached",
		"last WQE reached",
		"client reregistration",
		"GID table change",
		"WQ fatal",
	};
	if (event < 0 || event >= (int)(sizeof(s) / sizeof(s[0])))
		return "unknown";
	return s[event];
}

EXPORT const char *ibv_node_type_str(int node_type)
{
	static const char *const s[] = {
		"unknown",
		"InfiniBand channel adapter",
		"InfiniBand switch",
		"InfiniBand router",
		"iWARP NIC",
		"usNIC",
		"usNIC UDP",
		"unspecified",
	};
	if (node_type < IBV_NODE_CA || node_type > IBV_NODE_UNSPECIFIED)
		return s[0];
	return s[node_type];
}

EXPORT const char *ibv_port_state_str(int port_state)
{
	static const char *const s[] = {
		"PORT_NOP", "PORT_DOWN", "PORT_INIT", "PORT_ARMED", "PORT_ACTIVE", "PORT_ACTIVE_DEFER",
	};
	if (port_state < IBV_PORT_NOP || port_state > IBV_PORT_ACTIVE_DEFER)
		return "invalid state";
	return s[port_state];
}

/* enum ibv_rate: multiples of 2.5 Gb/s and Mb/s, indexed by the enum's value. */
static const struct {
	int mult;
	int mbps;
} rates[] = {
	[2] = {1, 2500},    [5] = {2, 5000},     [3] = {4, 10000},    [6] = {8, 20000},
	[4] = {12, 30000},  [7] = {16, 40000},   [8] = {24, 60000},   [9] = {32, 80000},
	[10] = {48, 120000}, [11] = {0, 14062},  [12] = {0, 56250},   [13] = {0, 112500},
	[14] = {0, 168750}, [15] = {10, 25781},  [16] = {40, 103125}, [17] = {80, 206250},
	[18] = {120, 309375}, [19] = {0, 28125}, [20] = {20, 53125},  [21] = {160, 425000},
	[22] = {240, 637500}, [23] = {320, 850000}, [24] = {480, 1275000},
};
#define NRATES ((int)(sizeof(rates) / sizeof(rates[0])))

EXPORT int ibv_rate_to_mult(int rate)
{
	if (rate <= 0 || rate > 10 || !rates[rate].mult)
		return -1;
	return rates[rate].mult;
}

EXPORT int mult_to_ibv_rate(int mult)
{
	for (int r = 2; r <= 10; r++)
		if (rates[r].mult == mult)
			return r;
	return 0;
}

EXPORT int ibv_rate_to_mbps(int rate)
{
	if (rate <= 0 || rate >= NRATES || !rates[rate].mbps)
		return -1;
	return rates[rate].mbps;
}

EXPORT int mbps_to_ibv_rate(int mbps)
{
	for (int r = 2; r < NRATES; r++)
		if (rates[r].mbps == mbps)
			return r;
	return 0;
}

/* Fork: see mr.c. */

/* Verbs sroce does not offer. */
EXPORT struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length,
					uint64_t iova, int fd, int access)
{
	(void)pd;
	(void)offset;
	(void)length;
	(void)iova;
	(void)fd;
	(void)access;
	errno = EOPNOTSUPP;
	return NULL;
}

EXPORT int ibv_resolve_eth_l2_from_gid(struct ibv_context *context, struct ibv_ah_attr *attr,
				       uint8_t eth_mac[6], uint16_t *vid)
{
	(void)context;
	(void)attr;
	(void)eth_mac;
	(void)vid;
	return EOPNOTSUPP;
}

EXPORT struct ibv_context *ibv_import_device(int cmd_fd)
{
	(void)cmd_fd;
	errno = EOPNOTSUPP;
	return NULL;
}

EXPORT struct ibv_pd *ibv_import_pd(struct ibv_context *context, uint32_t handle)
{
	(void)context;
	(void)handle;
	errno = EOPNOTSUPP;
	return NULL;
}

EXPORT void ibv_unimport_pd(struct ibv_pd *pd)
{
	(void)pd;
}

EXPORT struct ibv_mr *ibv_import_mr(struct ibv_pd *pd, uint32_t handle)
{
	(void)pd;
	(void)handle;
	errno = EOPNOTSUPP;
	return NULL;
}

EXPORT void ibv_unimport_mr(struct ibv_mr *mr)
{
	(void)mr;
}

EXPORT void *ibv_import_dm(struct ibv_context *context, uint32_t handle)
{
	(void)context;
	(void)handle;
	errno = EOPNOTSUPP;
	return NULL;
}

EXPORT void ibv_unimport_dm(void *dm)
{
	(void)dm;
}

EXPORT int ibv_set_ece(struct ibv_qp *qp, void *ece)
{
	(void)qp;
	(void)ece;
	return EOPNOTSUPP;
}

EXPORT int ibv_query_ece(struct ibv_qp *qp, void *ece)
{
	(void)qp;
	(void)ece;
	return EOPNOTSUPP;
}

/* 0: ordering of data within a message is not promised (rdma-core's answer without support). */
EXPORT int ibv_query_qp_data_in_order(struct ibv_qp *qp, int op, uint32_t flags)
{
	(void)qp;
	(void)op;
	(void)flags;
	return 0;
}

/* Historical helpers other rdma-core libraries used; there is no kernel to convert for. */
EXPORT void ibv_copy_qp_attr_from_kern(void *dst, void *src)
{
	(void)dst;
	(void)src;
}

EXPORT void ibv_copy_ah_attr_from_kern(void *dst, void *src)
{
	(void)dst;
	(void)src;
}

EXPORT void ibv_copy_path_rec_from_kern(void *dst, void *src)
{
	(void)dst;
	(void)src;
}

EXPORT void ibv_copy_path_rec_to_kern(void *dst, void *src)
{
	(void)dst;
	(void)src;
}

EXPORT const char *ibv_get_sysfs_path(void)
{
	return "/sys";
}

EXPORT int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size)
{
	(void)dir;
	(void)file;
	(void)buf;
	(void)size;
	errno = ENOENT;
	return -1;
}

/*
 * IBVERBS_1.0 compatibility symbols: the pre-1.1 ABI with its own structs.
 * Nothing built in the last fifteen years binds to them; they fail.
 */
#define COMPAT_NULL(name)                                                         \
	void *__sroce_compat_##name(void);                                        \
	EXPORT void *__sroce_compat_##name(void)                                  \
	{                                                                         \
		errno = EOPNOTSUPP;                                               \
		return NULL;                                                      \
	}                                                                         \
	SROCE_SYMVER(__sroce_compat_##name, #name "@IBVERBS_1.0")
#define COMPAT_INT(name)                                                          \
	int __sroce_compat_##name(void);                                          \
	EXPORT int __sroce_compat_##name(void)                                    \
	{                                                                         \
		errno = EOPNOTSUPP;                                               \
		return EOPNOTSUPP;                                                \
	}                                                                         \
	SROCE_SYMVER(__sroce_compat_##name, #name "@IBVERBS_1.0")
#define COMPAT_VOID(name)                                                         \
	void __sroce_compat_##name(void);                                         \
	EXPORT void __sroce_compat_##name(void)                                   \
	{                                                                         \
	}                                                                         \
	SROCE_SYMVER(__sroce_compat_##name, #name "@IBVERBS_1.0")

COMPAT_VOID(ibv_ack_async_event)
COMPAT_VOID(ibv_ack_cq_events)
COMPAT_NULL(ibv_alloc_pd)
COMPAT_INT(ibv_attach_mcast)
COMPAT_INT(ibv_close_device)
COMPAT_NULL(ibv_create_ah)
COMPAT_NULL(ibv_create_cq)
COMPAT_NULL(ibv_create_qp)
COMPAT_NULL(ibv_create_srq)
COMPAT_INT(ibv_dealloc_pd)
COMPAT_INT(ibv_dereg_mr)
COMPAT_INT(ibv_destroy_ah)
COMPAT_INT(ibv_destroy_cq)
COMPAT_INT(ibv_destroy_qp)
COMPAT_INT(ibv_destroy_srq)
COMPAT_INT(ibv_detach_mcast)
COMPAT_VOID(ibv_free_device_list)
COMPAT_INT(ibv_get_async_event)
COMPAT_INT(ibv_get_cq_event)
COMPAT_NULL(ibv_get_device_guid)
COMPAT_NULL(ibv_get_device_list)
COMPAT_NULL(ibv_get_device_name)
COMPAT_INT(ibv_modify_qp)
COMPAT_INT(ibv_modify_srq)
COMPAT_NULL(ibv_open_device)
COMPAT_INT(ibv_query_device)
COMPAT_INT(ibv_query_gid)
COMPAT_INT(ibv_query_pkey)
COMPAT_INT(ibv_query_port)
COMPAT_INT(ibv_query_qp)
COMPAT_INT(ibv_query_srq)
COMPAT_NULL(ibv_reg_mr)
COMPAT_INT(ibv_resize_cq)

/* ibv_register_driver@IBVERBS_1.1: the old way for a provider to register. */
void __sroce_compat_ibv_register_driver(const char *name, void *init);
EXPORT void __sroce_compat_ibv_register_driver(const char *name, void *init)
{
	(void)name;
	(void)init;
}
SROCE_SYMVER(__sroce_compat_ibv_register_driver, "ibv_register_driver@IBVERBS_1.1")

/*
 * IBVERBS_PRIVATE_34: the interface between libibverbs and its providers.
 * Providers only get here through devices libibverbs matched to them,
 * which never happens with sroce; registering is accepted so that their
 * libraries load, every command fails with EOPNOTSUPP.
 */
EXPORT bool verbs_allow_disassociate_destroy;

EXPORT void verbs_register_driver_34(const void *ops)
{
	(void)ops;
}

#define PRIV_INT(name)                                                            \
	int name(void);                                                           \
	EXPORT int name(void)                                                     \
	{                                                                         \
		errno = EOPNOTSUPP;                                               \
		return EOPNOTSUPP;                                                \
	}
#define PRIV_NULL(name)                                                           \
	void *name(void);                                                         \
	EXPORT void *name(void)                                                   \
	{                                                                         \
		errno = EOPNOTSUPP;                                               \
		return NULL;                                                      \
	}
#define PRIV_VOID(name)                                                           \
	void name(void);                                                          \
	EXPORT void name(void)                                                    \
	{                                                                         \
	}

EXPORT unsigned int __ioctl_final_num_attrs(unsigned int num_attrs, void *link)
{
	(void)link;
	return num_attrs;
}

EXPORT void __verbs_log(void *ctx, int level, const char *fmt, ...)
{
	(void)ctx;
	(void)level;
	(void)fmt;
}

EXPORT int ibv_read_ibdev_sysfs_file(char *buf, size_t size, const char *fmt, ...)
{
	(void)buf;
	(void)size;
	(void)fmt;
	errno = ENOENT;
	return -1;
}

PRIV_NULL(_verbs_init_and_alloc_context)
PRIV_NULL(verbs_open_device)
PRIV_VOID(verbs_set_ops)
PRIV_VOID(verbs_uninit_context)
PRIV_VOID(verbs_init_cq)
PRIV_INT(execute_ioctl)
PRIV_INT(ibv_cmd_advise_mr)
PRIV_INT(ibv_cmd_alloc_dm)
PRIV_INT(ibv_cmd_alloc_mw)
PRIV_INT(ibv_cmd_alloc_pd)
PRIV_INT(ibv_cmd_attach_mcast)
PRIV_INT(ibv_cmd_close_xrcd)
PRIV_INT(ibv_cmd_create_ah)
PRIV_INT(ibv_cmd_create_counters)
PRIV_INT(ibv_cmd_create_cq)
PRIV_INT(ibv_cmd_create_cq_ex)
PRIV_INT(ibv_cmd_create_flow)
PRIV_INT(ibv_cmd_create_flow_action_esp)
PRIV_INT(ibv_cmd_create_qp)
PRIV_INT(ibv_cmd_create_qp_ex)
PRIV_INT(ibv_cmd_create_qp_ex2)
PRIV_INT(ibv_cmd_create_rwq_ind_table)
PRIV_INT(ibv_cmd_create_srq)
PRIV_INT(ibv_cmd_create_srq_ex)
PRIV_INT(ibv_cmd_create_wq)
PRIV_INT(ibv_cmd_dealloc_mw)
PRIV_INT(ibv_cmd_dealloc_pd)
PRIV_INT(ibv_cmd_dereg_mr)
PRIV_INT(ibv_cmd_destroy_ah)
PRIV_INT(ibv_cmd_destroy_counters)
PRIV_INT(ibv_cmd_destroy_cq)
PRIV_INT(ibv_cmd_destroy_flow)
PRIV_INT(ibv_cmd_destroy_flow_action)
PRIV_INT(ibv_cmd_destroy_qp)
PRIV_INT(ibv_cmd_destroy_rwq_ind_table)
PRIV_INT(ibv_cmd_destroy_srq)
PRIV_INT(ibv_cmd_destroy_wq)
PRIV_INT(ibv_cmd_detach_mcast)
PRIV_INT(ibv_cmd_free_dm)
PRIV_INT(ibv_cmd_get_context)
PRIV_INT(ibv_cmd_modify_cq)
PRIV_INT(ibv_cmd_modify_flow_action_esp)
PRIV_INT(ibv_cmd_modify_qp)
PRIV_INT(ibv_cmd_modify_qp_ex)
PRIV_INT(ibv_cmd_modify_srq)
PRIV_INT(ibv_cmd_modify_wq)
PRIV_INT(ibv_cmd_open_qp)
PRIV_INT(ibv_cmd_open_xrcd)
PRIV_INT(ibv_cmd_poll_cq)
PRIV_INT(ibv_cmd_post_recv)
PRIV_INT(ibv_cmd_post_send)
PRIV_INT(ibv_cmd_post_srq_recv)
PRIV_INT(ibv_cmd_query_context)
PRIV_INT(ibv_cmd_query_device_any)
PRIV_INT(ibv_cmd_query_mr)
PRIV_INT(ibv_cmd_query_port)
PRIV_INT(ibv_cmd_query_qp)
PRIV_INT(ibv_cmd_query_srq)
PRIV_INT(ibv_cmd_read_counters)
PRIV_INT(ibv_cmd_reg_dm_mr)
PRIV_INT(ibv_cmd_reg_dmabuf_mr)
PRIV_INT(ibv_cmd_reg_mr)
PRIV_INT(ibv_cmd_req_notify_cq)
PRIV_INT(ibv_cmd_rereg_mr)
PRIV_INT(ibv_cmd_resize_cq)

/* Names that also have an IBVERBS_1.0 compatibility version get their default version here. */
