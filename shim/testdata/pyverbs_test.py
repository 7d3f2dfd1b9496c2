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

# A receive queue holds max_recv_wr requests, whatever the daemon has
# taken from the ring meanwhile: one more is ENOMEM (as on rxe); a flushed
# request's room comes back.
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.wr import RecvWR, SGE

ud = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_UD, scq=cq, rcq=cq,
                       cap=QPCap(max_send_wr=4, max_recv_wr=4)))
def ud_init(q):
    a = QPAttr(port_num=1)
    a.qkey = 0x11111111
    q.to_init(a)


ud_init(ud)
max_recv = ud.query(e.IBV_QP_CAP)[0].cap.max_recv_wr
sge = SGE(mr.buf, 64, mr.lkey)


def fill(q, n):
    for i in range(n):
        q.post_recv(RecvWR(wr_id=i, num_sge=1, sg=[sge]))


def full(q):
    try:
        q.post_recv(RecvWR(wr_id=99, num_sge=1, sg=[sge]))
    except PyverbsRDMAError as ex:
        assert ex.error_code == 12, ex.error_code  # ENOMEM
        return True
    return False


import time
fill(ud, max_recv)
time.sleep(0.2)  # the daemon takes the receives into the engine meanwhile
assert full(ud), "a receive beyond max_recv_wr was accepted"
ud.modify(QPAttr(qp_state=e.IBV_QPS_ERR), e.IBV_QP_STATE)
got, deadline = 0, time.time() + 10
while got < max_recv and time.time() < deadline:
    n, wcs = cq.poll(max_recv)
    for wc in wcs[:n]:
        assert wc.status == e.IBV_WC_WR_FLUSH_ERR, wc.status
    got += n
assert got == max_recv, f"{got} of {max_recv} flushed receives completed in 10 s"
# A receive posted in the error state is flushed too: it rings the
# daemon's doorbell, where a receive in another state does not.
ud.post_recv(RecvWR(wr_id=7, num_sge=1, sg=[sge]))
seen, deadline = [], time.time() + 10
while not seen and time.time() < deadline:
    n, wcs = cq.poll(1)
    seen += [(wc.wr_id, wc.status) for wc in wcs[:n]]
assert seen == [(7, e.IBV_WC_WR_FLUSH_ERR)], \
    f"a receive posted in the error state: in 10 s the CQ gave {seen}; want it flushed"
print("ok a receive posted in the error state is flushed")
fill(ud, max_recv)
print("ok receive queue full at max_recv_wr")

# A QP moved to RESET leaves no completion behind in its CQ; another
# QP's stay, in order.
time.sleep(0.2)  # the engine flushes the receives just posted to ud
other = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_UD, scq=cq, rcq=cq,
                          cap=QPCap(max_send_wr=4, max_recv_wr=4)))
ud_init(other)
fill(other, 2)
other.modify(QPAttr(qp_state=e.IBV_QPS_ERR), e.IBV_QP_STATE)
ud.modify(QPAttr(qp_state=e.IBV_QPS_RESET), e.IBV_QP_STATE)
seen, deadline = [], time.time() + 10
while len(seen) < 2 and time.time() < deadline:
    n, wcs = cq.poll(16)
    seen += [(wc.qp_num, wc.wr_id) for wc in wcs[:n]]
assert seen == [(other.qp_num, 0), (other.qp_num, 1)], \
    f"after ud's reset, in 10 s the CQ gave {seen}; want other's two flushed receives only"
print("ok reset cleans the CQ")

# A parent domain: QPs, MRs and extended CQs made in it are its PD's
# (verbs_test.c checks what frees are EBUSY).
from pyverbs.pd import ParentDomain, ParentDomainInitAttr, ParentDomainContext
import pyverbs.mem_alloc as mem


def alloc(pd, context, size, alignment, resource_type):
    return mem.posix_memalign(size, alignment)


def free(pd, context, ptr, resource_type):
    mem.free(ptr)


pd2 = PD(ctx)
pdctx = ParentDomainContext(pd2, alloc, free)
parent = ParentDomain(ctx, attr=ParentDomainInitAttr(pd=pd2, pd_context=pdctx))
pcq = CQEX(ctx, CqInitAttrEx(cqe=8, parent_domain=parent,
                             comp_mask=e.IBV_CQ_INIT_ATTR_MASK_PD))
pqp = QP(parent, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=pcq, rcq=pcq,
                            cap=QPCap(max_send_wr=4, max_recv_wr=4)))
pqp.to_init(QPAttr(port_num=1))
pmr = MR(parent, 4096, e.IBV_ACCESS_LOCAL_WRITE)
pmr.close()
pqp.close()
pcq.close()
parent.close()
pd2.close()
print("ok parent domain")

# On-demand paging: offered (explicit, not implicit) for every operation;
# an ODP MR registers, a QP takes ON_DEMAND among
# its access flags as the kernel does, and ibv_advise_mr prefetches and
# refuses an unknown advice.
from pyverbs.mr import MR as _MR
odp = ctx.query_device_ex().odp_caps
assert odp.general_caps & e.IBV_ODP_SUPPORT and not odp.general_caps & e.IBV_ODP_SUPPORT_IMPLICIT, odp.general_caps
want = e.IBV_ODP_SUPPORT_SEND | e.IBV_ODP_SUPPORT_RECV | e.IBV_ODP_SUPPORT_WRITE | \
    e.IBV_ODP_SUPPORT_READ | e.IBV_ODP_SUPPORT_ATOMIC | e.IBV_ODP_SUPPORT_SRQ_RECV
assert odp.rc_odp_caps == want, odp.rc_odp_caps
odp_access = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_ON_DEMAND | e.IBV_ACCESS_REMOTE_WRITE
odp_mr = _MR(pd, 8192, odp_access)
oq = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=QPCap(max_send_wr=2, max_recv_wr=2)))
a = QPAttr(port_num=1)
a.qp_access_flags = odp_access | e.IBV_ACCESS_REMOTE_ATOMIC
oq.to_init(a)
pd.advise_mr(e._IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, e._IBV_ADVISE_MR_FLAG_FLUSH,
             [SGE(odp_mr.buf, 8192, odp_mr.lkey)])
try:
    pd.advise_mr(7, 0, [SGE(odp_mr.buf, 8192, odp_mr.lkey)])
    raise AssertionError("ibv_advise_mr took advice 7")
except PyverbsRDMAError as ex:
    assert ex.error_code == 22, ex.error_code
print("ok on-demand paging")
