package verbs

// Counter names one of the engine's packet and error counters. Where
// rdma_rxe has a hw_counter for the same event, the name is rxe's; the
// others count what the device drops or rejects for reasons rxe does not
// count.
//
// The counters are declared below by the layer that counts them, as
// gVisor groups its stats: the link and frame checks of the device, the
// checks that hand a packet to a QP, the requester and completer, the
// responder, and the completion queues. The numbers are fixed and dense
// (0 to NumCounters-1): they index Counters, and the order they give is
// the order tools print the counters in (rdma_rxe's hw_counters first,
// then sroce's own).
type Counter int

// Link and frames: what the device sends to and receives from its link
// before a packet is matched to a QP.
const (
	CntSentPkts      Counter = 0  // sent_pkts: packets handed to the link
	CntSendErr       Counter = 10 // send_err: the link refused frames
	CntLinkDowned    Counter = 11 // link_downed
	CntICRCError     Counter = 15 // icrc_error: frame with a bad invariant CRC
	CntICRCUnchecked Counter = 16 // icrc_unchecked: ICRC not checkable by a link that says so, accepted (no link in the tree)
	CntMalformed     Counter = 17 // malformed: frame the parser rejected
	CntNotRoCE       Counter = 18 // not_roce: frame that is not RoCEv2 (ignored)
	CntTxNoBuf       Counter = 33 // tx_no_buf: transmit batch full, QP deferred
)

// Dispatch: finding the QP of a packet and the checks it makes before its
// transport logic sees the packet.
const (
	CntRcvdPkts   Counter = 1  // rcvd_pkts: packets accepted for a QP
	CntBadDGID    Counter = 19 // bad_dgid: destination IP not in the GID table
	CntUnknownQPN Counter = 20 // unknown_qpn: no QP with the destination QPN
	CntBadPKey    Counter = 21 // bad_pkey: P_Key does not match
	CntBadQKey    Counter = 22 // bad_qkey: UD Q_Key does not match
	CntBadAddr    Counter = 23 // bad_addr: RC/UC IP addresses differ from the QP's path
	CntWrongType  Counter = 24 // wrong_type: opcode of another transport service
	CntWrongState Counter = 25 // wrong_state: QP state does not take the packet
)

// Requester and completer: the sending side of a QP, its retransmissions
// and the acknowledgements it receives.
const (
	CntRcvdSeqErr          Counter = 4  // rcvd_seq_err: requester got a PSN sequence error NAK
	CntRcvdRNRErr          Counter = 5  // rcvd_rnr_err: requester got an RNR NAK
	CntRetryExceededErr    Counter = 7  // retry_exceeded_err: retry_cnt exhausted
	CntRetryRNRExceededErr Counter = 8  // retry_rnr_exceeded_err: rnr_retry exhausted
	CntCompleterRetryErr   Counter = 9  // completer_retry_err: requester went back to retransmit
	CntBadResponse         Counter = 26 // bad_response: unexpected ACK, NAK or response dropped
	CntRetransmitPkts      Counter = 30 // retransmit_pkts: request packets sent again
	CntTimeouts            Counter = 31 // timeouts: retransmit timer expiries with work outstanding
	CntCwndReductions      Counter = 36 // cwnd_reductions: congestion window reduced after a loss (sequence NAK, lost response, timeout)
	CntCwndLimited         Counter = 37 // cwnd_limited: requester waited for its congestion window to open
)

// Responder: the receiving side of a QP, the requests it executes and the
// acknowledgements and NAKs it sends.
const (
	CntDuplicateRequest Counter = 2  // duplicate_request: responder saw a PSN it already took
	CntOutOfSeqRequest  Counter = 3  // out_of_seq_request: responder saw a PSN gap (NAK sent once)
	CntSendRNRErr       Counter = 6  // send_rnr_err: responder sent an RNR NAK
	CntRDMASends        Counter = 12 // rdma_sends: SEND messages received and completed
	CntRDMARecvs        Counter = 13 // rdma_recvs: receive completions
	CntAckDeferred      Counter = 14 // ack_deferred: ACKs merged into a later one
	CntRespQueueFull    Counter = 27 // resp_queue_full: responder output dropped
	CntRecvDropped      Counter = 28 // recv_dropped: UC/UD message dropped (no receive, too long, bad key)
	CntNAKSent          Counter = 29 // nak_sent: NAKs sent (not RNR)
	CntRdAtomicExceeded Counter = 34 // rd_atomic_exceeded: READ/atomic beyond the responder resources (NAKed)
	CntDupNoResource    Counter = 35 // dup_no_resource: duplicate READ/atomic matching no responder resource, dropped
	CntDupReadRequest   Counter = 38 // dup_read_request: READ request asked again (its responses were lost)
)

// Completion queues.
const (
	CntCQOverflow Counter = 32 // cq_overflow: completions lost to a full CQ
)

// NumCounters is the number of counters: every Counter is below it.
const NumCounters Counter = 39

var counterNames = [NumCounters]string{
	CntSentPkts:            "sent_pkts",
	CntRcvdPkts:            "rcvd_pkts",
	CntDuplicateRequest:    "duplicate_request",
	CntOutOfSeqRequest:     "out_of_seq_request",
	CntRcvdSeqErr:          "rcvd_seq_err",
	CntRcvdRNRErr:          "rcvd_rnr_err",
	CntSendRNRErr:          "send_rnr_err",
	CntRetryExceededErr:    "retry_exceeded_err",
	CntRetryRNRExceededErr: "retry_rnr_exceeded_err",
	CntCompleterRetryErr:   "completer_retry_err",
	CntSendErr:             "send_err",
	CntLinkDowned:          "link_downed",
	CntRDMASends:           "rdma_sends",
	CntRDMARecvs:           "rdma_recvs",
	CntAckDeferred:         "ack_deferred",
	CntICRCError:           "icrc_error",
	CntICRCUnchecked:       "icrc_unchecked",
	CntMalformed:           "malformed",
	CntNotRoCE:             "not_roce",
	CntBadDGID:             "bad_dgid",
	CntUnknownQPN:          "unknown_qpn",
	CntBadPKey:             "bad_pkey",
	CntBadQKey:             "bad_qkey",
	CntBadAddr:             "bad_addr",
	CntWrongType:           "wrong_type",
	CntWrongState:          "wrong_state",
	CntBadResponse:         "bad_response",
	CntRespQueueFull:       "resp_queue_full",
	CntRecvDropped:         "recv_dropped",
	CntNAKSent:             "nak_sent",
	CntRetransmitPkts:      "retransmit_pkts",
	CntTimeouts:            "timeouts",
	CntCQOverflow:          "cq_overflow",
	CntTxNoBuf:             "tx_no_buf",
	CntRdAtomicExceeded:    "rd_atomic_exceeded",
	CntDupNoResource:       "dup_no_resource",
	CntCwndReductions:      "cwnd_reductions",
	CntCwndLimited:         "cwnd_limited",
	CntDupReadRequest:      "dup_read_request",
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

// counterHelp says in a sentence what each counter counts, for the help
// text of metrics and tools.
var counterHelp = [NumCounters]string{
	CntSentPkts:            "Packets the device handed to its link.",
	CntRcvdPkts:            "Packets accepted for a QP.",
	CntDuplicateRequest:    "Requests the responder had already taken (a PSN seen before).",
	CntOutOfSeqRequest:     "Requests the responder saw after a PSN gap (a sequence NAK is sent once).",
	CntRcvdSeqErr:          "PSN sequence error NAKs the requester received.",
	CntRcvdRNRErr:          "RNR NAKs the requester received.",
	CntSendRNRErr:          "RNR NAKs the responder sent.",
	CntRetryExceededErr:    "Work requests failed because retry_cnt was exhausted.",
	CntRetryRNRExceededErr: "Work requests failed because rnr_retry was exhausted.",
	CntCompleterRetryErr:   "Times the requester went back to retransmit.",
	CntSendErr:             "Frames the link refused.",
	CntLinkDowned:          "Times the port went from ACTIVE to DOWN, or its link failed.",
	CntRDMASends:           "SEND messages received and completed.",
	CntRDMARecvs:           "Receive completions.",
	CntAckDeferred:         "ACKs merged into a later one.",
	CntICRCError:           "Frames dropped for a bad invariant CRC.",
	CntICRCUnchecked:       "Frames accepted whose ICRC the link could not check.",
	CntMalformed:           "Frames the parser rejected.",
	CntNotRoCE:             "Frames ignored because they are not RoCEv2.",
	CntBadDGID:             "Packets dropped because their destination IP is not in the GID table.",
	CntUnknownQPN:          "Packets dropped because no QP has their destination QPN.",
	CntBadPKey:             "Packets dropped because their P_Key does not match.",
	CntBadQKey:             "UD packets dropped because their Q_Key does not match.",
	CntBadAddr:             "RC and UC packets dropped because their IP addresses differ from the QP's path.",
	CntWrongType:           "Packets dropped because their opcode is of another transport service.",
	CntWrongState:          "Packets dropped because the QP's state does not take them.",
	CntBadResponse:         "Unexpected ACKs, NAKs or responses dropped.",
	CntRespQueueFull:       "Responder output dropped because its queue was full.",
	CntRecvDropped:         "UC and UD messages dropped (no receive posted, too long, bad key).",
	CntNAKSent:             "NAKs sent, RNR NAKs not included.",
	CntRetransmitPkts:      "Request packets sent again.",
	CntTimeouts:            "Retransmit timer expiries with work outstanding.",
	CntCQOverflow:          "Completions lost to a full CQ.",
	CntTxNoBuf:             "Times a transmit batch was full and a QP was deferred.",
	CntRdAtomicExceeded:    "READ and atomic requests beyond the responder's resources (NAKed).",
	CntDupNoResource:       "Duplicate READ and atomic requests matching no responder resource, dropped.",
	CntCwndReductions:      "Times the congestion window was reduced after a loss.",
	CntCwndLimited:         "Times the requester waited for its congestion window to open.",
	CntDupReadRequest:      "READ requests asked again because their responses were lost.",
}

// Help returns a sentence saying what the counter counts.
func (c Counter) Help() string {
	if c >= 0 && c < NumCounters {
		return counterHelp[c]
	}
	return ""
}
