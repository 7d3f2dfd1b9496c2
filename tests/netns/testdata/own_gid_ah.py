"""pyverbs through sroce's libibverbs, as UCX and rdma-core's test suite
use a device: an address handle from every GID to every GID of the device
itself, with the flow label UCX sets (0xffffffff), and a UD send through
one such handle to a QP of the same device, its data checked. Run by
TestLoopbackRealPrograms with the device name; prints "ok NAME" per check."""
import ipaddress
import sys
import time

import pyverbs.device as d
import pyverbs.enums as e
from pyverbs.addr import AH, AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import SGE, RecvWR, SendWR

name = sys.argv[1]
ctx = d.Context(name=name)
pd = PD(ctx)
gids = []
for i in range(ctx.query_port(1).gid_tbl_len):
    g = ctx.query_gid(1, i)
    a = ipaddress.IPv6Address(str(g))
    if a != ipaddress.IPv6Address("::"):
        gids.append((i, g, a.ipv4_mapped is not None))
assert len(gids) >= 2, gids


def ah_to(dgid, sgid_index):
    gr = GlobalRoute(dgid=dgid, sgid_index=sgid_index, flow_label=0xffffffff, hop_limit=0, traffic_class=0x68)
    return AH(pd, attr=AHAttr(gr=gr, is_global=1, port_num=1))


n = 0
for si, _, s4 in gids:
    for _, dg, d4 in gids:
        if s4 == d4:
            ah_to(dg, si).close()
            n += 1
print("ok %d address handles to the device's own GIDs" % n)

QKEY = 0x11111111
cq = CQ(ctx, 16)
mr = MR(pd, 8192, e.IBV_ACCESS_LOCAL_WRITE)


def ud_qp():
    qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_UD, scq=cq, rcq=cq, cap=QPCap(max_send_wr=4, max_recv_wr=4)))
    attr = QPAttr()
    attr.qkey = QKEY
    qp.to_rts(attr)
    return qp


a, b = ud_qp(), ud_qp()
msg = b"to myself through an AH to my own link-local GID"
mr.write(msg, len(msg), 4096)
b.post_recv(RecvWR(wr_id=1, num_sge=1, sg=[SGE(mr.buf, 40 + len(msg), mr.lkey)]))
wr = SendWR(wr_id=2, num_sge=1, sg=[SGE(mr.buf + 4096, len(msg), mr.lkey)])
wr.set_wr_ud(ah_to(gids[0][1], gids[0][0]), b.qp_num, QKEY)
a.post_send(wr)
seen = {}
deadline = time.monotonic() + 10
while len(seen) < 2:
    assert time.monotonic() < deadline, "no UD completions within 10 s: %s" % seen
    nc, wcs = cq.poll()
    for wc in wcs[:nc]:
        assert wc.status == e.IBV_WC_SUCCESS, wc
        seen[wc.wr_id] = wc
assert seen[1].byte_len == 40 + len(msg), seen[1].byte_len
got = mr.read(len(msg), 40)
assert got == msg, got
print("ok UD loopback through an AH to the device's own GID")
