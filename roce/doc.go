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
//
// Work completion statuses are named after ibv_wc_status (WCSuccess,
// WCRemAccessErr, WCRetryExcErr, ...) and print as ibv_wc_status_str does;
// QP attributes, masks and the state machine are those of ibv_modify_qp.
// The verbs types themselves live in package qp and are re-exported here.
//
// # The loop
//
// The device runs one loop that owns every QP: it reads frames from the
// link, checks them as rdma_rxe does (ICRC, destination GID, QPN, P_Key,
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
// Everything the device drops is counted under a name (Counters), using
// rdma_rxe's hw_counters names where they exist.
//
// # Differences from rdma_rxe
//
// A SEND with invalidate may name any MR of the receiving QP's PD (there
// are no fast-registration MRs or memory windows yet); invalidation
// deregisters it, and an rkey that names nothing is answered with an
// invalid request NAK. FLUSH and ATOMIC_WRITE requests are refused as
// unsupported opcodes. The responder merges the ACKs of requests taken in
// one batch into one (ACK coalescing).
package roce
