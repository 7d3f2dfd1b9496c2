package ctl

// QUERY_RES: what "sroce resource" lists, as "rdma resource show" lists a
// kernel device's objects. The request is a fixed struct; the reply is
// JSON, one page of objects of one kind after a cursor, as large as fits
// in a datagram.

// ResKinds are the kinds by the names "sroce resource" takes, in its
// order.
var ResKinds = []struct {
	Name string
	Kind ResKind
}{{"clients", ResKindClients}, {"pd", ResKindPD}, {"mr", ResKindMR}, {"cq", ResKindCQ}, {"qp", ResKindQP}, {"srq", ResKindSRQ}, {"cm_id", ResKindCMID}}

// ResPage is QUERY_RES' reply, as JSON: objects of the kind asked for
// (ResClient, ResPD, ...) and, when More, the cursor to ask from next.
type ResPage struct {
	Items      []RawJSON `json:"items"`
	More       bool      `json:"more"`
	NextCtx    uint64    `json:"next_ctx"`
	NextHandle uint32    `json:"next_handle"`
}

// RawJSON is one encoded object of a ResPage.
type RawJSON []byte

// MarshalJSON returns the encoded object.
func (r RawJSON) MarshalJSON() ([]byte, error) {
	if len(r) == 0 {
		return []byte("null"), nil
	}
	return r, nil
}

// UnmarshalJSON keeps a copy of the encoded object.
func (r *RawJSON) UnmarshalJSON(b []byte) error {
	*r = append((*r)[:0], b...)
	return nil
}

// ResOwner is who holds an object: the context (one client connection,
// numbered by the daemon) and its process; Dev is the device the context
// opened ("" before OPEN).
type ResOwner struct {
	Dev  string `json:"dev"`
	Ctx  uint64 `json:"ctxn"`
	PID  int32  `json:"pid"`
	UID  uint32 `json:"uid"`
	Comm string `json:"comm"`
}

// ResClient is a context and what it holds.
type ResClient struct {
	ResOwner
	PDs      int    `json:"pd"`
	MRs      int    `json:"mr"`
	MWs      int    `json:"mw"`
	CQs      int    `json:"cq"`
	QPs      int    `json:"qp"`
	SRQs     int    `json:"srq"`
	AHs      int    `json:"ah"`
	CMIDs    int    `json:"cm_id"`
	RegBytes uint64 `json:"reg_bytes"`
}

// ResPD is a protection domain; Users counts the QPs, MRs, SRQs and AHs
// in it.
type ResPD struct {
	ResOwner
	PDN   uint32 `json:"pdn"`
	Users int    `json:"users"`
}

// ResMR is a memory region. LKey, RKey and IOVA are left out for a viewer
// who is not the owner's uid, root or the daemon's uid.
type ResMR struct {
	ResOwner
	MRN    uint32  `json:"mrn"`
	PDN    uint32  `json:"pdn"`
	Length uint64  `json:"mrlen"`
	Access string  `json:"access"`
	LKey   *uint32 `json:"lkey,omitempty"`
	RKey   *uint32 `json:"rkey,omitempty"`
	IOVA   *uint64 `json:"iova,omitempty"`
}

// ResCQ is a completion queue: its size (cqe), the QPs that use it
// (users), and whether it reports to a completion channel.
type ResCQ struct {
	ResOwner
	CQN     uint32 `json:"cqn"`
	CQE     int    `json:"cqe"`
	Users   int    `json:"users"`
	Channel bool   `json:"comp_channel"`
}

// ResQP is a queue pair: number, type and state, its peer's QPN, the next
// PSNs of its send queue (the requester) and receive queue (the
// responder), its path MTU, and the handles of its PD, CQs and SRQ.
type ResQP struct {
	ResOwner
	Port    int    `json:"port"`
	LQPN    uint32 `json:"lqpn"`
	RQPN    uint32 `json:"rqpn"`
	Type    string `json:"type"`
	State   string `json:"state"`
	SQPSN   uint32 `json:"sq_psn"`
	RQPSN   uint32 `json:"rq_psn"`
	PathMTU int    `json:"path_mtu"`
	PDN     uint32 `json:"pdn"`
	SendCQN uint32 `json:"send_cqn"`
	RecvCQN uint32 `json:"recv_cqn"`
	SRQN    uint32 `json:"srqn"`
	Handle  uint32 `json:"handle"`
}

// ResSRQ is a shared receive queue.
type ResSRQ struct {
	ResOwner
	SRQN   uint32 `json:"srqn"`
	Type   string `json:"type"` // BASIC or XRC
	MaxWR  uint32 `json:"max_wr"`
	MaxSGE uint32 `json:"max_sge"`
	Limit  uint32 `json:"srq_limit"`
	PDN    uint32 `json:"pdn"`
	Users  int    `json:"users"` // QPs that use it
}

// ResCMID is an RDMA CM ID: its state, port space, the QP it names and
// its addresses.
type ResCMID struct {
	ResOwner
	ID      uint32 `json:"cm_idn"`
	Port    int    `json:"port"`
	LQPN    uint32 `json:"lqpn"`
	QPType  string `json:"qp_type"`
	State   string `json:"state"`
	PS      string `json:"ps"`
	SrcAddr string `json:"src_addr"`
	DstAddr string `json:"dst_addr"`
}
