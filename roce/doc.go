// Package roce is sroce's verbs API: a software RDMA device that speaks
// RoCEv2 over a Link, with the objects and calls of libibverbs.
//
// Open a Device on a Link (AF_XDP, UDP, or the in-memory router of package
// memlink), give it its GIDs (the port's IP addresses), start its loop, then
// use it as a verbs program would:
//
//	ibv_alloc_pd          Device.AllocPD         ibv_dealloc_pd      PD.Dealloc
//	ibv_reg_mr            PD.RegMR, RegMRRegion  ibv_dereg_mr        MR.Dereg
//	ibv_create_cq         Device.CreateCQ        ibv_destroy_cq      CQ.Destroy
//	ibv_create_qp         PD.CreateQP            ibv_destroy_qp      QP.Destroy
//	ibv_modify_qp         QP.Modify              ibv_query_qp        QP.Query
//	ibv_create_srq        PD.CreateSRQ           ibv_destroy_srq     SRQ.Destroy
//	ibv_create_ah         PD.CreateAH            ibv_destroy_ah      PD.DestroyAH
//	ibv_post_send         QP.PostSend            ibv_post_recv       QP.PostRecv
//	ibv_poll_cq           CQ.Poll                (blocking)          CQ.Wait, CQ.WaitTimeout
//	ibv_req_notify_cq     CQ.ReqNotify           ibv_get_cq_event    CompChannel.GetEvent
//	ibv_get_async_event   Device.GetAsyncEvent   ibv_query_gid       Device.QueryGID
//	ibv_alloc_mw          PD.AllocMW             ibv_dealloc_mw      mr.MW.Dealloc
//	ibv_bind_mw           QP.BindMW              IBV_WR_BIND_MW      verbs.WROpBindMW
//	ib_alloc_mr           PD.AllocMR             ib_dereg_mr         mr.FastMR.Dealloc
//	ib_map_mr_sg          mr.FastMR.Map          IB_WR_REG_MR        verbs.WROpRegMR
//	IBV_WR_LOCAL_INV      verbs.WROpLocalInv     ibv_inc_rkey        mr.IncKey
//	ibv_attach_mcast      QP.AttachMcast         ibv_detach_mcast    QP.DetachMcast
//
// The vocabulary of these calls is package verbs': QP types and states,
// QPAttr and QPAttrMask (those of ibv_modify_qp), SendWR, RecvWR and WC,
// work completion statuses named after ibv_wc_status (WCSuccess,
// WCRemAccessErr, WCRetryExcErr, ...) that print as ibv_wc_status_str
// does, MTUs, port and device attributes, event types and counters. Memory
// regions' access flags, scatter/gather elements, memory windows and
// fast-registration MRs are package mr's.
//
// # The loop
//
// The device runs one loop per link, its engine, and each QP belongs to
// one engine: the engine reads frames from its link, checks them as rdma_rxe does (ICRC, destination GID, QPN, P_Key,
// Q_Key, the addresses bound to RC and UC QPs), hands them to the QP state
// machines of package qp, fires their timers and transmits what they
// produce. In real time the loop is a goroutine (Run, or Start and Close)
// that sleeps until a frame arrives, the earliest QP timer expires or work
// is posted. Tests drive the same loop in virtual time with Step and
// NextDeadline, with memlink's router and Sim. Application goroutines post
// and poll concurrently with the loop; posting copies the work request into
// a preallocated ring slot and rings a doorbell, so it neither allocates
// nor waits for the loop.
//
// # Several queues
//
// OpenLinks gives a device one engine per link, such as one AF_XDP socket
// per receive queue of a multi-queue interface (package roce/iface does
// this with Options.Queues). Each engine has its own goroutine, lock,
// frame batches, run queue, timers and doorbells; a QP belongs to the
// engine of its QP number modulo the engine count (a QP on a shared
// receive queue, to the SRQ's engine, so that one engine consumes each
// SRQ). The QP and GID tables are read by the engines without a lock and
// the MR table's lookups are lock-free. A frame that arrives on engine i
// for a QP of engine j is checked by i and copied into a bounded
// single-producer, single-consumer ring from i to j, which j empties on
// its next step; a full ring drops the frame and counts it
// (EngineStats). A QP's packets carry a UDP source port derived from its
// number (UDPSourcePort, as rdma_rxe does), so a NIC's receive-side
// scaling spreads QPs over queues. QPs of several engines may share a
// CQ: completions are appended under the CQ's own producer lock.
//
// Control calls never wait for an engine's batch: creating and destroying
// objects and registering memory take the device lock, which no engine
// holds, and calls on one QP (modify, query, destroy) take that QP's
// lock, which its engine holds only while it handles one packet, timer
// or transmit turn of the QP; a change the engine must act on rings the
// QP's doorbell. With one link, the device is exactly the one-loop device
// it always was.
//
// Everything the device drops is counted under a name (Counters), using
// rdma_rxe's hw_counters names where they exist.
//
// # Differences from rdma_rxe
//
// A SEND with invalidate or LOCAL_INV revokes only a fast-registration MR
// or a type 2 memory window, as with rdma_rxe; sroce checks more than rxe
// does before it invalidates: the MR or window must be of the QP's PD, a
// fast-registration MR must have remote rights for a peer to revoke it, and
// a type 2 window must have been bound by the QP the SEND arrives on. A
// refused SEND with invalidate is handled as rxe does (its class J): the
// SEND is acknowledged, the receive completes with WCRemInvReqErr, the QP
// moves to the error state. Binds check the PDs of the QP, the window and
// the MR for both window types (rxe checks the QP's for type 2 only). Key
// bytes of registrations, re-registrations and type 1 binds come from
// crypto/rand (rxe's type 1 bind increments the key byte), and a REG_MR or
// BIND_MW must change the key. WROpRegMR and WCRegMR have the kernel's
// values (IB_WR_REG_MR, IB_WC_REG_MR): libibverbs has no REG_MR. FLUSH and
// ATOMIC_WRITE requests are refused as unsupported opcodes.
//
// The responder keeps max_dest_rd_atomic READ/atomic resources rounded up
// to a power of two, as rxe does, but unlike rxe it enforces them: a READ
// or atomic that arrives while every resource still has responses queued
// gets the invalid request NAK the IBTA names for too many outstanding
// READ/atomic requests, and the QP moves to the error state. A duplicate
// READ or atomic whose responses are still queued is answered by them, not
// queued again. A duplicate SEND or WRITE is acknowledged with the PSN of
// the last SEND, WRITE or atomic executed, as rxe's responder does since
// 2018 (never a READ's PSN, which an rxe requester would take as that
// READ's completion); rxe's own requester rules are checked on every frame
// of the in-memory tests. The responder merges the ACKs of requests taken
// in one batch into one (ACK coalescing), never moving an ACK to an
// earlier PSN. The requester compares PSNs in its window as offsets from
// the oldest unacknowledged one, so one READ may span 2^23 PSNs (2 GiB at
// path MTU 256), where rxe's signed comparisons fail; it keeps exactly
// max_rd_atomic READs/atomics outstanding (rxe rounds it up). Every
// acknowledgement that completes a request, including the implied one of
// a sequence or RNR NAK, restores the retry and RNR retry budgets, as in
// rxe. A UD send whose Q_Key has the high bit set goes out with the QP's
// own Q_Key (IBTA C10-15).
package roce
