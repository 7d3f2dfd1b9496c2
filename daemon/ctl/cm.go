package ctl

// The CM's messages (CMAddr, CMConn, CMEvent, ...) are generated from
// sroce_ctl.h into header_gen.go.

// Join flags of CMMcast (enum rdma_cm_join_mc_flags).
const (
	JoinFullMember         = 0
	JoinSendOnlyFullMember = 1
)
