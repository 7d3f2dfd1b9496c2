package shim

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// systemVerbsH is the header of the system's libibverbs (libibverbs-dev).
const systemVerbsH = "/usr/include/infiniband/verbs.h"

// layoutChecks lists, per struct, the members whose offsets (and the
// struct's size) must equal the system header's. Every struct the library
// reads or writes field by field is here, with each of those fields.
var layoutChecks = map[string][]string{
	"ibv_gid_entry":        {"gid", "gid_index", "port_num", "gid_type", "ndev_ifindex"},
	"ibv_device_attr":      {"fw_ver", "node_guid", "sys_image_guid", "max_mr_size", "page_size_cap", "vendor_id", "vendor_part_id", "hw_ver", "max_qp", "max_qp_wr", "device_cap_flags", "max_sge", "max_sge_rd", "max_cq", "max_cqe", "max_mr", "max_pd", "max_qp_rd_atom", "max_ee_rd_atom", "max_res_rd_atom", "max_qp_init_rd_atom", "max_ee_init_rd_atom", "atomic_cap", "max_ee", "max_rdd", "max_mw", "max_raw_ipv6_qp", "max_raw_ethy_qp", "max_mcast_grp", "max_mcast_qp_attach", "max_total_mcast_qp_attach", "max_ah", "max_fmr", "max_map_per_fmr", "max_srq", "max_srq_wr", "max_srq_sge", "max_pkeys", "local_ca_ack_delay", "phys_port_cnt"},
	"ibv_device_attr_ex":   {"orig_attr", "comp_mask", "odp_caps", "completion_timestamp_mask", "hca_core_clock", "device_cap_flags_ex", "tso_caps", "rss_caps", "max_wq_type_rq", "packet_pacing_caps", "raw_packet_caps", "tm_caps", "cq_mod_caps", "max_dm_size", "pci_atomic_caps", "xrc_odp_caps", "phys_port_cnt_ex"},
	"ibv_port_attr":        {"state", "max_mtu", "active_mtu", "gid_tbl_len", "port_cap_flags", "max_msg_sz", "bad_pkey_cntr", "qkey_viol_cntr", "pkey_tbl_len", "lid", "sm_lid", "lmc", "max_vl_num", "sm_sl", "subnet_timeout", "init_type_reply", "active_width", "active_speed", "phys_state", "link_layer", "flags", "port_cap_flags2"},
	"ibv_async_event":      {"element", "event_type"},
	"ibv_wc":               {"wr_id", "status", "opcode", "vendor_err", "byte_len", "imm_data", "invalidated_rkey", "qp_num", "src_qp", "wc_flags", "pkey_index", "slid", "sl", "dlid_path_bits"},
	"ibv_pd":               {"context", "handle"},
	"ibv_mr":               {"context", "pd", "addr", "length", "handle", "lkey", "rkey"},
	"ibv_mw":               {"context", "pd", "rkey", "handle", "type"},
	"ibv_mw_bind_info":     {"mr", "addr", "length", "mw_access_flags"},
	"ibv_mw_bind":          {"wr_id", "send_flags", "bind_info"},
	"ibv_global_route":     {"dgid", "flow_label", "sgid_index", "hop_limit", "traffic_class"},
	"ibv_grh":              {"version_tclass_flow", "paylen", "next_hdr", "hop_limit", "sgid", "dgid"},
	"ibv_ah_attr":          {"grh", "dlid", "sl", "src_path_bits", "static_rate", "is_global", "port_num"},
	"ibv_srq_attr":         {"max_wr", "max_sge", "srq_limit"},
	"ibv_srq_init_attr":    {"srq_context", "attr"},
	"ibv_srq_init_attr_ex": {"srq_context", "attr", "comp_mask", "srq_type", "pd", "xrcd", "cq", "tm_cap"},
	"ibv_xrcd_init_attr":   {"comp_mask", "fd", "oflags"},
	"ibv_xrcd":             {"context"},
	"ibv_qp_open_attr":     {"comp_mask", "qp_num", "xrcd", "qp_context", "qp_type"},
	"ibv_qp_cap":           {"max_send_wr", "max_recv_wr", "max_send_sge", "max_recv_sge", "max_inline_data"},
	"ibv_qp_init_attr":     {"qp_context", "send_cq", "recv_cq", "srq", "cap", "qp_type", "sq_sig_all"},
	"ibv_qp_init_attr_ex":  {"qp_context", "send_cq", "recv_cq", "srq", "cap", "qp_type", "sq_sig_all", "comp_mask", "pd", "xrcd", "create_flags", "max_tso_header", "rwq_ind_tbl", "rx_hash_conf", "source_qpn", "send_ops_flags"},
	"ibv_qp_attr":          {"qp_state", "cur_qp_state", "path_mtu", "path_mig_state", "qkey", "rq_psn", "sq_psn", "dest_qp_num", "qp_access_flags", "cap", "ah_attr", "alt_ah_attr", "pkey_index", "alt_pkey_index", "en_sqd_async_notify", "sq_draining", "max_rd_atomic", "max_dest_rd_atomic", "min_rnr_timer", "port_num", "timeout", "retry_cnt", "rnr_retry", "alt_port_num", "alt_timeout", "rate_limit"},
	"ibv_sge":              {"addr", "length", "lkey"},
	"ibv_send_wr":          {"wr_id", "next", "sg_list", "num_sge", "opcode", "send_flags", "imm_data", "invalidate_rkey", "wr.rdma.remote_addr", "wr.rdma.rkey", "wr.atomic.remote_addr", "wr.atomic.compare_add", "wr.atomic.swap", "wr.atomic.rkey", "wr.ud.ah", "wr.ud.remote_qpn", "wr.ud.remote_qkey", "qp_type.xrc.remote_srqn", "bind_mw.mw", "bind_mw.rkey", "bind_mw.bind_info", "tso.hdr", "tso.hdr_sz", "tso.mss"},
	"ibv_recv_wr":          {"wr_id", "next", "sg_list", "num_sge"},
	"ibv_srq":              {"context", "srq_context", "pd", "handle", "mutex", "cond", "events_completed"},
	"ibv_qp":               {"context", "qp_context", "pd", "send_cq", "recv_cq", "srq", "handle", "qp_num", "state", "qp_type", "mutex", "cond", "events_completed"},
	"ibv_qp_ex":            {"qp_base", "comp_mask", "wr_id", "wr_flags", "wr_atomic_cmp_swp", "wr_atomic_fetch_add", "wr_bind_mw", "wr_local_inv", "wr_rdma_read", "wr_rdma_write", "wr_rdma_write_imm", "wr_send", "wr_send_imm", "wr_send_inv", "wr_send_tso", "wr_set_ud_addr", "wr_set_xrc_srqn", "wr_set_inline_data", "wr_set_inline_data_list", "wr_set_sge", "wr_set_sge_list", "wr_start", "wr_complete", "wr_abort", "wr_atomic_write"},
	"ibv_data_buf":         {"addr", "length"},
	"ibv_comp_channel":     {"context", "fd", "refcnt"},
	"ibv_cq":               {"context", "channel", "cq_context", "handle", "cqe", "mutex", "cond", "comp_events_completed", "async_events_completed"},
	"ibv_poll_cq_attr":     {"comp_mask"},
	"ibv_cq_ex":            {"context", "channel", "cq_context", "handle", "cqe", "mutex", "cond", "comp_events_completed", "async_events_completed", "comp_mask", "status", "wr_id", "start_poll", "next_poll", "end_poll", "read_opcode", "read_vendor_err", "read_byte_len", "read_imm_data", "read_qp_num", "read_src_qp", "read_wc_flags", "read_slid", "read_sl", "read_dlid_path_bits", "read_completion_ts", "read_cvlan", "read_flow_tag", "read_tm_info", "read_completion_wallclock_ns"},
	"ibv_cq_init_attr_ex":  {"cqe", "cq_context", "channel", "comp_vector", "wc_flags", "comp_mask", "flags", "parent_domain"},
	"ibv_ah":               {"context", "pd", "handle"},
	"ibv_device":           {"node_type", "transport_type", "name", "dev_name", "dev_path", "ibdev_path"},
	"ibv_context_ops":      {"_compat_query_device", "_compat_query_port", "alloc_mw", "bind_mw", "dealloc_mw", "poll_cq", "req_notify_cq", "post_srq_recv", "post_send", "post_recv", "_compat_async_event"},
	"ibv_context":          {"device", "ops", "cmd_fd", "async_fd", "num_comp_vectors", "mutex", "abi_compat"},
	"verbs_context":        {"query_port", "advise_mr", "alloc_null_mr", "read_counters", "create_counters", "alloc_dm", "modify_cq", "create_cq_ex", "priv", "query_device_ex", "ibv_destroy_flow", "ibv_create_flow", "open_qp", "create_qp_ex", "get_srq_num", "create_srq_ex", "open_xrcd", "close_xrcd", "_ABI_placeholder3", "sz", "context"},
}

// layoutEnums lists enum constants whose values the library relies on.
var layoutEnums = []string{
	"IBV_QPT_RC", "IBV_QPT_UC", "IBV_QPT_UD", "IBV_QPS_RESET", "IBV_QPS_RTS", "IBV_QPS_ERR",
	"IBV_WR_RDMA_WRITE", "IBV_WR_SEND", "IBV_WR_RDMA_READ", "IBV_WR_ATOMIC_FETCH_AND_ADD",
	"IBV_WR_LOCAL_INV", "IBV_WR_BIND_MW", "IBV_WR_SEND_WITH_INV", "IBV_WR_ATOMIC_WRITE",
	"IBV_SEND_INLINE", "IBV_SEND_SIGNALED", "IBV_WC_WITH_INV", "IBV_WC_WITH_IMM", "IBV_WC_GRH",
	"IBV_WC_RECV", "IBV_WC_RECV_RDMA_WITH_IMM", "IBV_WC_TM_RNDV_INCOMPLETE",
	"IBV_EVENT_WQ_FATAL", "IBV_EVENT_QP_LAST_WQE_REACHED", "IBV_EVENT_SRQ_LIMIT_REACHED",
	"IBV_QP_STATE", "IBV_QP_ALT_PATH", "IBV_QP_DEST_QPN", "IBV_QP_RATE_LIMIT",
	"IBV_QP_INIT_ATTR_PD", "IBV_QP_INIT_ATTR_CREATE_FLAGS", "IBV_QP_INIT_ATTR_SEND_OPS_FLAGS",
	"IBV_CQ_INIT_ATTR_MASK_FLAGS", "IBV_GID_TYPE_ROCE_V2", "IBV_FORK_UNNEEDED",
	"IBV_PORT_ACTIVE_DEFER", "IBV_NODE_UNSPECIFIED", "IBV_MW_TYPE_2", "IBV_SRQ_LIMIT",
	"IBV_SRQ_MAX_WR", "IBV_REREG_MR_CHANGE_TRANSLATION", "IBV_REREG_MR_CHANGE_PD", "IBV_REREG_MR_CHANGE_ACCESS",
	"IBV_REREG_MR_FLAGS_SUPPORTED", "IBV_REREG_MR_ERR_INPUT", "IBV_REREG_MR_ERR_DONT_FORK_NEW",
	"IBV_REREG_MR_ERR_CMD",
	"IBV_ACCESS_HUGETLB", "IBV_QP_EX_WITH_RDMA_WRITE", "IBV_QP_EX_WITH_SEND_WITH_INV",
	"IBV_QP_EX_WITH_TSO", "IBV_QP_EX_WITH_ATOMIC_WRITE",
}

// TestLayoutMatchesSystemHeader prints, from a program compiled against the
// system's verbs.h, a _Static_assert for every offset, size and constant
// above, then compiles those assertions against the library's own header.
func TestLayoutMatchesSystemHeader(t *testing.T) {
	extra := "\tprintf(\"_Static_assert(SROCE_COMPAT_PORT_ATTR_SIZE == %zu, \\\"compat port attr\\\");\\n\", offsetof(struct ibv_port_attr, port_cap_flags2));\n"
	checkLayout(t, systemVerbsH, "infiniband/verbs.h", "sroce_verbs.h", "libibverbs-dev", layoutChecks, layoutEnums, extra)
}

// systemCMH is the header of the system's librdmacm (librdmacm-dev).
const systemCMH = "/usr/include/rdma/rdma_cma.h"

// cmLayoutChecks lists the structs of rdma_cma.h (and sa.h's path record)
// that programs and the drop-in librdmacm share, with every member.
var cmLayoutChecks = map[string][]string{
	"ibv_sa_path_rec":         {"dgid", "sgid", "dlid", "slid", "raw_traffic", "flow_label", "hop_limit", "traffic_class", "reversible", "numb_path", "pkey", "sl", "mtu_selector", "mtu", "rate_selector", "rate", "packet_life_time_selector", "packet_life_time", "preference"},
	"rdma_ib_addr":            {"sgid", "dgid", "pkey"},
	"rdma_addr":               {"src_addr", "src_sin", "src_sin6", "src_storage", "dst_addr", "dst_sin", "dst_sin6", "dst_storage", "addr.ibaddr"},
	"rdma_route":              {"addr", "path_rec", "num_paths"},
	"rdma_event_channel":      {"fd"},
	"rdma_cm_id":              {"verbs", "channel", "context", "qp", "route", "ps", "port_num", "event", "send_cq_channel", "send_cq", "recv_cq_channel", "recv_cq", "srq", "pd", "qp_type"},
	"rdma_conn_param":         {"private_data", "private_data_len", "responder_resources", "initiator_depth", "flow_control", "retry_count", "rnr_retry_count", "srq", "qp_num"},
	"rdma_ud_param":           {"private_data", "private_data_len", "ah_attr", "qp_num", "qkey"},
	"rdma_cm_event":           {"id", "listen_id", "event", "status", "param.conn", "param.ud"},
	"rdma_addrinfo":           {"ai_flags", "ai_family", "ai_qp_type", "ai_port_space", "ai_src_len", "ai_dst_len", "ai_src_addr", "ai_dst_addr", "ai_src_canonname", "ai_dst_canonname", "ai_route_len", "ai_route", "ai_connect_len", "ai_connect", "ai_next"},
	"rdma_cm_join_mc_attr_ex": {"comp_mask", "join_flags", "addr"},
	"ibv_ece":                 {"vendor_id", "options", "comp_mask"},
}

// cmLayoutEnums lists the constants of rdma_cma.h the library relies on.
var cmLayoutEnums = []string{
	"RDMA_CM_EVENT_ADDR_RESOLVED", "RDMA_CM_EVENT_CONNECT_REQUEST", "RDMA_CM_EVENT_CONNECT_RESPONSE",
	"RDMA_CM_EVENT_ESTABLISHED", "RDMA_CM_EVENT_DISCONNECTED", "RDMA_CM_EVENT_TIMEWAIT_EXIT",
	"RDMA_PS_IPOIB", "RDMA_PS_TCP", "RDMA_PS_UDP", "RDMA_PS_IB", "RDMA_UDP_QKEY",
	"RDMA_MAX_RESP_RES", "RDMA_MAX_INIT_DEPTH", "RAI_PASSIVE", "RAI_NUMERICHOST", "RAI_NOROUTE", "RAI_FAMILY",
	"RDMA_OPTION_ID", "RDMA_OPTION_IB", "RDMA_OPTION_ID_TOS", "RDMA_OPTION_ID_REUSEADDR",
	"RDMA_OPTION_ID_AFONLY", "RDMA_OPTION_ID_ACK_TIMEOUT", "RDMA_CM_EVENT_MULTICAST_JOIN", "RDMA_CM_EVENT_MULTICAST_ERROR",
	"RDMA_CM_JOIN_MC_ATTR_ADDRESS", "RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS", "RDMA_CM_JOIN_MC_ATTR_RESERVED",
	"RDMA_MC_JOIN_FLAG_FULLMEMBER", "RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER", "RDMA_MC_JOIN_FLAG_RESERVED",
}

// TestCMLayoutMatchesSystemHeader checks the drop-in librdmacm's header
// against the system's rdma_cma.h the same way.
func TestCMLayoutMatchesSystemHeader(t *testing.T) {
	checkLayout(t, systemCMH, "rdma/rdma_cma.h", "sroce_rdmacm.h", "librdmacm-dev", cmLayoutChecks, cmLayoutEnums, "")
}

// checkLayout prints, from a program compiled against the system header
// sysInc, a _Static_assert for every size, offset and constant of checks
// and enums (and the extra printf lines), then compiles those assertions
// against the library's own header ours.
func checkLayout(t *testing.T, sysPath, sysInc, ours, pkg string, checks map[string][]string, enums []string, extra string) {
	if _, err := os.Stat(sysPath); err != nil {
		t.Skipf("skipping: %s is missing (apt-get install %s): no system layout to compare with", sysPath, pkg)
	}
	cc, err := Compiler()
	if err != nil {
		t.Skipf("skipping: %v", err)
	}
	dir := t.TempDir()
	if err := WriteSources(dir); err != nil {
		t.Fatal(err)
	}

	var gen strings.Builder
	fmt.Fprintf(&gen, "#include <stdio.h>\n#include <stddef.h>\n#include <%s>\nint main(void)\n{\n", sysInc)
	n := 0
	for s, fields := range checks {
		fmt.Fprintf(&gen, "\tprintf(\"_Static_assert(sizeof(struct %[1]s) == %%zu, \\\"sizeof %[1]s\\\");\\n\", sizeof(struct %[1]s));\n", s)
		n++
		for _, f := range fields {
			fmt.Fprintf(&gen, "\tprintf(\"_Static_assert(offsetof(struct %[1]s, %[2]s) == %%zu, \\\"%[1]s.%[2]s\\\");\\n\", offsetof(struct %[1]s, %[2]s));\n", s, f)
			fmt.Fprintf(&gen, "\tprintf(\"_Static_assert(sizeof(((struct %[1]s *)0)->%[2]s) == %%zu, \\\"sizeof %[1]s.%[2]s\\\");\\n\", sizeof(((struct %[1]s *)0)->%[2]s));\n", s, f)
			n += 2
		}
	}
	for _, e := range enums {
		fmt.Fprintf(&gen, "\tprintf(\"_Static_assert(%[1]s == %%lld, \\\"%[1]s\\\");\\n\", (long long)%[1]s);\n", e)
		n++
	}
	if extra != "" {
		gen.WriteString(extra)
		n++
	}
	gen.WriteString("\treturn 0;\n}\n")
	genC := filepath.Join(dir, "gen_layout.c")
	if err := os.WriteFile(genC, []byte(gen.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(cc, "-o", filepath.Join(dir, "gen_layout"), genC).CombinedOutput(); err != nil {
		t.Fatalf("compiling against the system's %s: %v\n%s", sysInc, err, out)
	}
	asserts, err := exec.Command(filepath.Join(dir, "gen_layout")).Output()
	if err != nil {
		t.Fatalf("running the layout generator: %v", err)
	}
	if got := strings.Count(string(asserts), "_Static_assert"); got != n {
		t.Fatalf("the generator printed %d assertions, want %d", got, n)
	}
	check := fmt.Sprintf("#include <stddef.h>\n#include \"%s\"\n", ours) + string(asserts)
	checkC := filepath.Join(dir, "check_layout.c")
	if err := os.WriteFile(checkC, []byte(check), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(cc, "-fsyntax-only", "-I", dir, checkC).CombinedOutput(); err != nil {
		t.Fatalf("the library's layouts differ from %s:\n%s", sysPath, out)
	}
	t.Logf("%d sizes, offsets and constants equal the system header's", n)
}

// TestLayoutCheckCatchesADifference makes sure the check above can fail: a
// wrong offset in the generated assertions must not compile.
func TestLayoutCheckCatchesADifference(t *testing.T) {
	cc, err := Compiler()
	if err != nil {
		t.Skipf("skipping: %v", err)
	}
	dir := t.TempDir()
	if err := WriteSources(dir); err != nil {
		t.Fatal(err)
	}
	bad := "#include <stddef.h>\n#include \"sroce_verbs.h\"\n_Static_assert(offsetof(struct ibv_qp, qp_num) == 56, \"ibv_qp.qp_num\");\n"
	badC := filepath.Join(dir, "bad.c")
	if err := os.WriteFile(badC, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := exec.Command(cc, "-fsyntax-only", "-I", dir, badC).Run(); err == nil {
		t.Fatal("a wrong offset compiled: the layout check would pass vacuously")
	}
}
