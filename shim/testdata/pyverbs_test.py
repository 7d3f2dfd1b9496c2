"""pyverbs on sroce's libibverbs: run by TestRealProgramsOnTheDaemon with the
device name and a RoCE v2 GID index. Prints "ok NAME" per check."""
import sys

import pyverbs.device as d
import pyverbs.enums as e
from pyverbs.cq import CQ, CQEX, CqInitAttrEx
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr

name, gid_index = sys.argv[1], int(sys.argv[2])
names = [x.name.decode() for x in d.get_device_list()]
assert name in names, names
ctx = d.Context(name=name)
attr = ctx.query_device()
assert attr.phys_port_cnt == 1, attr.phys_port_cnt
port = ctx.query_port(1)
assert port.state == e.IBV_PORT_ACTIVE, port.state
gid = ctx.query_gid(1, gid_index)
assert str(gid).startswith("0000:0000:0000:0000:0000:ffff:"), str(gid)
assert ctx.query_gid_type(1, gid_index) == e.IBV_GID_TYPE_SYSFS_ROCE_V2
entry = ctx.query_gid_ex(1, gid_index)
assert entry.gid_type == e.IBV_GID_TYPE_ROCE_V2, entry.gid_type
print("ok queries")
pd = PD(ctx)
mr = MR(pd, 4096, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE)
mr.write(b"pyverbs", 7)
assert mr.read(7, 0) == b"pyverbs"
print("ok pd and mr")
cq = CQ(ctx, 16)
cqx = CQEX(ctx, CqInitAttrEx(cqe=16))
qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq,
                       cap=QPCap(max_send_wr=4, max_recv_wr=4)))
qp.to_init(QPAttr(port_num=1))
assert qp.qp_state == e.IBV_QPS_INIT, qp.qp_state
print("ok cq, cq_ex and qp")
