package qp

// Counter names one of the engine's packet and error counters. Where
// rdma_rxe has a hw_counter for the same event, the name is rxe's.
type Counter int

// Counters. The first group carries rdma_rxe's hw_counters names; the rest
// count what the device drops or rejects for reasons rxe does not count.
const (
	CntSentPkts            Counter = iota // sent_pkts: packets handed to the link
	CntRcvdPkts                           // rcvd_pkts: packets accepted for a QP
	CntDuplicateRequest                   // duplicate_request: responder saw a PSN it already took
	CntOutOfSeqRequest                    // out_of_seq_request: responder saw a PSN gap (NAK sent once)
	CntRcvdSeqErr                         // rcvd_seq_err: requester got a PSN sequence error NAK
	CntRcvdRNRErr                         // rcvd_rnr_err: requester got an RNR NAK
	CntSendRNRErr                         // send_rnr_err: responder sent an RNR NAK
	CntRetryExceededErr                   // retry_exceeded_err: retry_cnt exhausted
	CntRetryRNRExceededErr                // retry_rnr_exceeded_err: rnr_retry exhausted
	CntCompleterRetryErr                  // completer_retry_err: requester went back to retransmit
	CntSendErr                            // send_err: the link refused frames
	CntLinkDowned                         // link_downed
	CntRDMASends                          // rdma_sends: SEND messages received and completed
	CntRDMARecvs                          // rdma_recvs: receive completions
	CntAckDeferred                        // ack_deferred: ACKs merged into a later one
	CntICRCError                          // icrc_error: frame with a bad invariant CRC
	CntICRCUnchecked                      // icrc_unchecked: ICRC not checkable by a link that says so, accepted (no link in the tree)
	CntMalformed                          // malformed: frame the parser rejected
	CntNotRoCE                            // not_roce: frame that is not RoCEv2 (ignored)
	CntBadDGID                            // bad_dgid: destination IP not in the GID table
	CntUnknownQPN                         // unknown_qpn: no QP with the destination QPN
	CntBadPKey                            // bad_pkey: P_Key does not match
	CntBadQKey                            // bad_qkey: UD Q_Key does not match
	CntBadAddr                            // bad_addr: RC/UC IP addresses differ from the QP's path
	CntWrongType                          // wrong_type: opcode of another transport service
	CntWrongState                         // wrong_state: QP state does not take the packet
	CntBadResponse                        // bad_response: unexpected ACK, NAK or response dropped
	CntRespQueueFull                      // resp_queue_full: responder output dropped
	CntRecvDropped                        // recv_dropped: UC/UD message dropped (no receive, too long, bad key)
	CntNAKSent                            // nak_sent: NAKs sent (not RNR)
	CntRetransmitPkts                     // retransmit_pkts: request packets sent again
	CntTimeouts                           // timeouts: retransmit timer expiries with work outstanding
	CntCQOverflow                         // cq_overflow: completions lost to a full CQ
	CntTxNoBuf                            // tx_no_buf: transmit batch full, QP deferred
	CntRdAtomicExceeded                   // rd_atomic_exceeded: READ/atomic beyond the responder resources (NAKed)
	CntDupNoResource                      // dup_no_resource: duplicate READ/atomic matching no responder resource, dropped
	NumCounters
)

var counterNames = [NumCounters]string{
	"sent_pkts", "rcvd_pkts", "duplicate_request", "out_of_seq_request",
	"rcvd_seq_err", "rcvd_rnr_err", "send_rnr_err", "retry_exceeded_err",
	"retry_rnr_exceeded_err", "completer_retry_err", "send_err", "link_downed",
	"rdma_sends", "rdma_recvs", "ack_deferred",
	"icrc_error", "icrc_unchecked", "malformed", "not_roce", "bad_dgid", "unknown_qpn", "bad_pkey",
	"bad_qkey", "bad_addr", "wrong_type", "wrong_state", "bad_response",
	"resp_queue_full", "recv_dropped", "nak_sent", "retransmit_pkts", "timeouts",
	"cq_overflow", "tx_no_buf", "rd_atomic_exceeded", "dup_no_resource",
}

// String returns the counter's name.
func (c Counter) String() string {
	if c >= 0 && c < NumCounters {
		return counterNames[c]
	}
	return "unknown"
}

// Counters is a set of counter values indexed by Counter. The device owns
// one; its loop goroutine increments it through the QPs it drives.
type Counters [NumCounters]uint64

// Map returns the counters by name.
func (c *Counters) Map() map[string]uint64 {
	m := make(map[string]uint64, NumCounters)
	for i, v := range c {
		m[counterNames[i]] = v
	}
	return m
}
