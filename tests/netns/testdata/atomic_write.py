"""IBV_WR_ATOMIC_WRITE through sroce's libibverbs (ibv_wr_atomic_write, as
rdma-core's test_qp_ex_rc_atomic_write posts it) between two RC QPs of one
device: the 8 bytes land at the remote address, the completion is
IBV_WC_ATOMIC_WRITE with 8 bytes, a misaligned remote address is refused
at post time (EINVAL), and the device reports IB_UVERBS_DEVICE_ATOMIC_WRITE.
Run by TestAtomicWriteShim with the device name; prints "ok NAME" per check."""
import ipaddress
import sys
import time

import pyverbs.device as d
import pyverbs.enums as e
from pyverbs.addr import AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.qp import QPAttr, QPCap, QPEx, QPInitAttrEx

ctx = d.Context(name=sys.argv[1])
assert ctx.query_device_ex().device_cap_flags_ex & (1 << 40), "no IB_UVERBS_DEVICE_ATOMIC_WRITE"
print("ok device_cap_flags_ex has ATOMIC_WRITE")
pd = PD(ctx)
gidx = None
for i in range(ctx.query_port(1).gid_tbl_len):
    if ipaddress.IPv6Address(str(ctx.query_gid(1, i))).ipv4_mapped is not None:
        gidx = i
        break
assert gidx is not None, "no IPv4 GID"
cq = CQ(ctx, 16)


def rc_qp():
    qia = QPInitAttrEx(cap=QPCap(max_send_wr=4, max_recv_wr=4, max_send_sge=1, max_recv_sge=1),
                       qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, pd=pd, send_ops_flags=e.IBV_QP_EX_WITH_ATOMIC_WRITE,
                       comp_mask=e.IBV_QP_INIT_ATTR_PD | e.IBV_QP_INIT_ATTR_SEND_OPS_FLAGS)
    attr = QPAttr(port_num=1)
    attr.qp_access_flags = e.IBV_ACCESS_REMOTE_WRITE
    return QPEx(ctx, qia, attr)


a, b = rc_qp(), rc_qp()
attr = QPAttr()
attr.ah_attr = AHAttr(port_num=1, is_global=True, gr=GlobalRoute(dgid=ctx.query_gid(1, gidx), sgid_index=gidx))
attr.path_mtu = e.IBV_MTU_1024
attr.max_rd_atomic = attr.max_dest_rd_atomic = 1
attr.min_rnr_timer, attr.timeout, attr.retry_cnt, attr.rnr_retry = 12, 14, 7, 7
attr.dest_qp_num, attr.rq_psn, attr.sq_psn = b.qp_num, 10, 20
a.to_rts(attr)
attr.dest_qp_num, attr.rq_psn, attr.sq_psn = a.qp_num, 20, 10
b.to_rts(attr)
mr = MR(pd, 4096, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE)
val = bytes([0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88])
a.wr_start()
a.wr_id = 5
a.wr_flags = e.IBV_SEND_SIGNALED
a.wr_atomic_write(mr.rkey, mr.buf + 64, val)
a.wr_complete()
deadline = time.monotonic() + 10
while True:
    assert time.monotonic() < deadline, "no completion of the ATOMIC_WRITE within 10 s"
    n, wcs = cq.poll()
    if n:
        break
wc = wcs[0]
assert wc.status == e.IBV_WC_SUCCESS and wc.wr_id == 5 and wc.opcode == 9 and wc.byte_len == 8, wc
assert mr.read(8, 64) == val, mr.read(8, 64)
print("ok ATOMIC_WRITE stored 8 bytes, completion ATOMIC_WRITE")
a.wr_start()
a.wr_atomic_write(mr.rkey, mr.buf + 68, val)
try:
    a.wr_complete()
except PyverbsRDMAError as ex:
    assert ex.error_code == 22, ex.error_code
else:
    raise AssertionError("a misaligned ATOMIC_WRITE was posted")
assert mr.read(8, 64) == val
print("ok a misaligned ATOMIC_WRITE refused with EINVAL")
