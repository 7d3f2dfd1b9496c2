"""XRC through sroce's libibverbs on one device, data checked: a domain
opened twice through a file (the XRC_RECV QP made in the second open, the
SRQs in the first: one domain), ibv_open_xrcd's O_EXCL and missing-O_CREAT
errors, two XRC SRQs with a CQ each, one XRC_RECV QP and one XRC_SEND QP
connected to each other through the device's IPv4 GID.
A SEND of three packets (path MTU 1024) to each SRQ lands in that SRQ's
buffer and completes on that SRQ's CQ; an RDMA WRITE through the XRC QPs
reaches memory of the SRQs' PD and a READ brings it back. Run by
TestXRCPingpong with the device name; prints "ok NAME" per check."""
import errno
import ipaddress
import os
import stat
import sys
import tempfile
import time

import pyverbs.device as d
import pyverbs.enums as e
from pyverbs.addr import AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttrEx
from pyverbs.srq import SRQ, SrqInitAttrEx
from pyverbs.wr import SGE, RecvWR, SendWR
from pyverbs.xrcd import XRCD, XRCDInitAttr

name = sys.argv[1]
ctx = d.Context(name=name)
pd = PD(ctx)
gidx = None
for i in range(ctx.query_port(1).gid_tbl_len):
    a = ipaddress.IPv6Address(str(ctx.query_gid(1, i)))
    if a.ipv4_mapped is not None:
        gidx = i
        break
assert gidx is not None, "no IPv4 GID"

tmp = tempfile.NamedTemporaryFile()
fd = os.open(tmp.name, os.O_RDONLY | os.O_CREAT, stat.S_IRUSR | stat.S_IRGRP)
MASK = e.IBV_XRCD_INIT_ATTR_FD | e.IBV_XRCD_INIT_ATTR_OFLAGS


def open_fails(oflags, f, want):
    try:
        XRCD(ctx, XRCDInitAttr(MASK, oflags, f)).close()
    except PyverbsRDMAError as ex:
        assert ex.error_code == want, (oflags, ex.error_code, want)
        return
    raise AssertionError("ibv_open_xrcd with oflags %#x succeeded, want errno %d" % (oflags, want))


open_fails(0, fd, errno.ENOENT)
xrcd = XRCD(ctx, XRCDInitAttr(MASK, os.O_CREAT, fd))
open_fails(os.O_CREAT | os.O_EXCL, fd, errno.EEXIST)
xrcd2 = XRCD(ctx, XRCDInitAttr(MASK, 0, fd))
print("ok ibv_open_xrcd: ENOENT without O_CREAT, EEXIST with O_EXCL, the same file opens the same domain")
scq = CQ(ctx, 16)
cqs = [CQ(ctx, 16), CQ(ctx, 16)]
srqs = []
for cq in cqs:
    at = SrqInitAttrEx(max_wr=8)
    at.srq_type = e.IBV_SRQT_XRC
    at.pd, at.xrcd, at.cq = pd, xrcd, cq
    at.comp_mask = e.IBV_SRQ_INIT_ATTR_TYPE | e.IBV_SRQ_INIT_ATTR_PD | e.IBV_SRQ_INIT_ATTR_CQ | e.IBV_SRQ_INIT_ATTR_XRCD
    srqs.append(SRQ(ctx, at))
nums = [s.get_srq_num() for s in srqs]
assert nums[0] != nums[1], nums
print("ok XRC SRQ numbers %s" % nums)

init = QPAttr(port_num=1)
init.pkey_index = 0
init.qp_access_flags = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_READ | e.IBV_ACCESS_REMOTE_WRITE
rqp = QP(ctx, QPInitAttrEx(qp_type=e.IBV_QPT_XRC_RECV, comp_mask=e.IBV_QP_INIT_ATTR_XRCD, xrcd=xrcd2), init)
init.qp_access_flags = 0
sqp = QP(ctx, QPInitAttrEx(qp_type=e.IBV_QPT_XRC_SEND, sq_sig_all=1, comp_mask=e.IBV_QP_INIT_ATTR_PD, pd=pd, scq=scq,
                           cap=QPCap(max_send_wr=8, max_recv_wr=0, max_recv_sge=0)), init)
gr = GlobalRoute(dgid=ctx.query_gid(1, gidx), sgid_index=gidx)
attr = QPAttr()
attr.ah_attr = AHAttr(port_num=1, is_global=True, gr=gr)
attr.path_mtu = e.IBV_MTU_1024
attr.max_rd_atomic = attr.max_dest_rd_atomic = 1
attr.min_rnr_timer, attr.timeout, attr.retry_cnt, attr.rnr_retry = 12, 14, 7, 7
attr.dest_qp_num, attr.rq_psn, attr.sq_psn = sqp.qp_num, 100, 200
rqp.to_rts(attr)
attr.dest_qp_num, attr.rq_psn, attr.sq_psn = rqp.qp_num, 200, 100
sqp.to_rts(attr)

SIZE = 3000
mr = MR(pd, 4 * 4096, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_READ | e.IBV_ACCESS_REMOTE_WRITE)
for i, s in enumerate(srqs):
    s.post_recv(RecvWR(wr_id=10 + i, num_sge=1, sg=[SGE(mr.buf + 4096 * i, 4096, mr.lkey)]))


def wait(cq, what):
    deadline = time.monotonic() + 10
    while True:
        assert time.monotonic() < deadline, "no completion of %s within 10 s" % what
        nc, wcs = cq.poll()
        if nc:
            assert wcs[0].status == e.IBV_WC_SUCCESS, (what, wcs[0])
            return wcs[0]


for i in (1, 0):
    msg = bytes((i * 31 + k * 7 + (k >> 8)) & 0xff for k in range(SIZE))
    mr.write(msg, SIZE, 8192)
    wr = SendWR(wr_id=i, num_sge=1, sg=[SGE(mr.buf + 8192, SIZE, mr.lkey)])
    wr.set_qp_type_xrc(nums[i])
    sqp.post_send(wr)
    wait(scq, "the SEND to SRQ %d" % nums[i])
    wc = wait(cqs[i], "the receive of SRQ %d" % nums[i])
    assert wc.wr_id == 10 + i and wc.byte_len == SIZE and wc.qp_num == rqp.qp_num, wc
    got = mr.read(SIZE, 4096 * i)
    assert got == msg, "SRQ %d's buffer differs" % nums[i]
    other = cqs[1 - i].poll()[0]
    assert other == 0, "a completion on the other SRQ's CQ"
print("ok SEND of %d bytes to each XRC SRQ, data checked, each on its SRQ's CQ" % SIZE)

word = bytes(range(1, 65))
mr.write(word, 64, 12288)
wr = SendWR(wr_id=20, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(mr.buf + 12288, 64, mr.lkey)])
wr.set_wr_rdma(mr.rkey, mr.buf + 12288 + 1024)
wr.set_qp_type_xrc(nums[0])
sqp.post_send(wr)
wait(scq, "the RDMA WRITE")
wr = SendWR(wr_id=21, opcode=e.IBV_WR_RDMA_READ, num_sge=1, sg=[SGE(mr.buf + 12288 + 2048, 64, mr.lkey)])
wr.set_wr_rdma(mr.rkey, mr.buf + 12288 + 1024)
wr.set_qp_type_xrc(nums[1])
sqp.post_send(wr)
wait(scq, "the RDMA READ")
assert mr.read(64, 12288 + 2048) == word, "READ back differs"
print("ok RDMA WRITE and READ through XRC, data checked")

rqp.close()
sqp.close()
for s in srqs:
    s.close()
xrcd2.close()
xrcd.close()
os.close(fd)
print("ok torn down")
