package verbs

import "testing"

// TestCounterNames pins the names and their order: tools print the
// counters by number, and rdma_rxe's names are what tests and scripts
// look for.
func TestCounterNames(t *testing.T) {
	want := []string{
		"sent_pkts", "rcvd_pkts", "duplicate_request", "out_of_seq_request",
		"rcvd_seq_err", "rcvd_rnr_err", "send_rnr_err", "retry_exceeded_err",
		"retry_rnr_exceeded_err", "completer_retry_err", "send_err", "link_downed",
		"rdma_sends", "rdma_recvs", "ack_deferred",
		"icrc_error", "icrc_unchecked", "malformed", "not_roce", "bad_dgid", "unknown_qpn", "bad_pkey",
		"bad_qkey", "bad_addr", "wrong_type", "wrong_state", "bad_response",
		"resp_queue_full", "recv_dropped", "nak_sent", "retransmit_pkts", "timeouts",
		"cq_overflow", "tx_no_buf", "rd_atomic_exceeded", "dup_no_resource",
		"cwnd_reductions", "cwnd_limited", "dup_read_request",
	}
	if int(NumCounters) != len(want) {
		t.Fatalf("NumCounters = %d, want %d", NumCounters, len(want))
	}
	for c := Counter(0); c < NumCounters; c++ {
		if c.String() != want[c] {
			t.Errorf("Counter(%d) = %q, want %q", c, c.String(), want[c])
		}
	}
	if NumCounters.String() != "unknown" || Counter(-1).String() != "unknown" {
		t.Error("out-of-range counters have names")
	}
	var cs Counters
	cs[CntTimeouts] = 3
	m := cs.Map()
	if len(m) != len(want) || m["timeouts"] != 3 || m["sent_pkts"] != 0 {
		t.Errorf("Map = %v", m)
	}
}

func TestWCStatusStrings(t *testing.T) {
	for s, want := range map[WCStatus]string{
		WCSuccess: "success", WCLocLenErr: "local length error", WCLocProtErr: "local protection error",
		WCWRFlushErr: "Work Request Flushed Error", WCRemAccessErr: "remote access error",
		WCRetryExcErr: "transport retry counter exceeded", WCRNRRetryExcErr: "RNR retry counter exceeded",
		WCRemInvReqErr: "remote invalid request error", WCGeneralErr: "general error",
		WCTMRndvIncomplete: "TM software rendezvous", 200: "unknown",
	} {
		if s.String() != want {
			t.Errorf("%d: %q want %q", s, s.String(), want)
		}
	}
}

func TestNames(t *testing.T) {
	for _, c := range []struct {
		got  interface{ String() string }
		want string
	}{
		{QPTypeRC, "RC"}, {QPTypeGSI, "GSI"}, {QPType(7), "Type(7)"}, {QPTypeXRCRecv, "XRC_RECV"},
		{QPStateRTS, "RTS"}, {QPStateErr, "ERR"}, {QPState(7), "State(7)"},
		{AttrState | AttrAV | AttrPathMTU, "STATE|AV|PATH_MTU"}, {QPAttrMask(0), "0"},
		{AttrDestQPN | 1<<22, "DEST_QPN|0x400000"},
		{WROpAtomicCmpSwp, "ATOMIC_CMP_AND_SWP"}, {WROpRegMR, "REG_MR"}, {WROpcode(99), "WROpcode(99)"},
		{WCRecvRDMAWithImm, "RECV_RDMA_WITH_IMM"}, {WCOpcode(99), "WCOpcode(99)"},
		{EventSRQLimitReached, "SRQ limit reached"}, {EventType(6), "unknown"},
	} {
		if s := c.got.String(); s != c.want {
			t.Errorf("%q, want %q", s, c.want)
		}
	}
}

func TestWRToWCOpcode(t *testing.T) {
	for wr, wc := range map[WROpcode]WCOpcode{
		WROpSend: WCSend, WROpSendWithImm: WCSend, WROpSendWithInv: WCSend,
		WROpRDMAWrite: WCRDMAWrite, WROpRDMAWriteWithImm: WCRDMAWrite, WROpRDMARead: WCRDMARead,
		WROpAtomicCmpSwp: WCCompSwap, WROpAtomicFetchAdd: WCFetchAdd,
		WROpBindMW: WCBindMW, WROpLocalInv: WCLocalInv, WROpRegMR: WCRegMR,
	} {
		if got := wr.WCOpcode(); got != wc {
			t.Errorf("%v.WCOpcode() = %v, want %v", wr, got, wc)
		}
	}
}
