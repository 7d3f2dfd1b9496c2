package ctl

// Join flags of CMMcast (enum rdma_cm_join_mc_flags).
const (
	JoinFullMember         = 0
	JoinSendOnlyFullMember = 1
)
