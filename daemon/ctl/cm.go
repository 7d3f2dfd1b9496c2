package ctl

// CMPrivate is the most private data one CM message carries here
// (SROCE_CTL_CM_PRIVATE).
const CMPrivate = 224

// CMAddr is a socket address as the CM takes and gives it (struct
// sroce_ctl_cm_addr): family AF_INET or AF_INET6 (0: none), the port in
// host order, and the address (IPv4 in the first 4 bytes).
type CMAddr struct {
	Family  uint16
	Port    uint16
	ScopeID uint32
	Addr    [16]byte
}

// CMCreateID is CM_CREATE_ID's request (struct sroce_ctl_cm_create_id).
type CMCreateID struct {
	Channel uint32
	PS      uint16 // enum rdma_port_space
	QPType  uint8  // IBV_QPT_RC or IBV_QPT_UD
	_       uint8
}

// CMIDArg is an ID and one number (struct sroce_ctl_cm_id_arg): the
// request of DESTROY_ID, RESOLVE_ROUTE, QUERY, LISTEN, DISCONNECT,
// INIT_QP_ATTR, NOTIFY and MIGRATE_ID.
type CMIDArg struct {
	ID  uint32
	Arg uint32
}

// CMAddrReq is BIND's and RESOLVE_ADDR's request (struct
// sroce_ctl_cm_addr_req).
type CMAddrReq struct {
	ID        uint32
	TimeoutMS uint32
	Src       CMAddr
	Dst       CMAddr
}

// CMIDInfo is what an ID is bound to and connected with (struct
// sroce_ctl_cm_id_info).
type CMIDInfo struct {
	Handle       uint32
	PathMTU      uint32
	Src          CMAddr
	Dst          CMAddr
	SGID         [16]byte
	DGID         [16]byte
	PKey         uint16
	PortNum      uint8
	NumPaths     uint8
	HopLimit     uint8
	TrafficClass uint8
	SGIDIndex    uint8
	_            uint8
	Device       [NameLen]byte
}

// CMConn is CONNECT's, ACCEPT's and REJECT's request and an event's
// parameters (struct sroce_ctl_cm_conn).
type CMConn struct {
	ID                 uint32
	QPNum              uint32
	QKey               uint32
	PrivateDataLen     uint8
	ResponderResources uint8
	InitiatorDepth     uint8
	FlowControl        uint8
	RetryCount         uint8
	RNRRetryCount      uint8
	SRQ                uint8
	_                  uint8
	PrivateData        [CMPrivate]byte
}

// CMOption is SET_OPTION's request (struct sroce_ctl_cm_option).
type CMOption struct {
	ID      uint32
	Level   uint32
	OptName uint32
	_       uint32
	Value   uint64
}

// CMMcast is JOIN_MCAST's and LEAVE_MCAST's request (struct
// sroce_ctl_cm_mcast).
type CMMcast struct {
	ID        uint32
	UID       uint32 // JOIN: the client's name for the join, echoed in its events (LEAVE: not read)
	JoinFlags uint32 // 0: full member, 1: send-only full member
	_         uint32
	Addr      CMAddr
}

// Join flags of CMMcast (enum rdma_cm_join_mc_flags).
const (
	JoinFullMember         = 0
	JoinSendOnlyFullMember = 1
)

// CMEvent is one event on a CM channel's socket (struct
// sroce_ctl_cm_event).
type CMEvent struct {
	Event    uint32 // enum rdma_cm_event_type
	Status   int32
	ListenID uint32
	McastUID uint32 // MULTICAST_JOIN, MULTICAST_ERROR: CMMcast.UID
	Info     CMIDInfo
	Conn     CMConn
	AHAttr   AHAttr
}
