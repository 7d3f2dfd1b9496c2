package ctl

import (
	"testing"

	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/verbs"
)

// TestConversions round-trips a QP's attributes, every field distinct,
// through the protocol's struct.
func TestConversions(t *testing.T) {
	a := verbs.QPAttr{State: verbs.QPStateRTS, CurState: verbs.QPStateRTR, PathMTU: verbs.MTU2048, QKey: 0x1234,
		RQPSN: 0x111, SQPSN: 0x222, DestQPN: 0x33, AccessFlags: mr.AccessRemoteRead | mr.AccessRemoteWrite,
		Cap:       verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 2, MaxSendSGE: 3, MaxRecvSGE: 4, MaxInlineData: 5},
		AH:        verbs.AHAttr{DGID: [16]byte{15: 9}, FlowLabel: 7, SGIDIndex: 3, HopLimit: 60, TrafficClass: 8, DMAC: [6]byte{1, 2, 3, 4, 5, 6}, PortNum: 1},
		PKeyIndex: 2, EnSQDAsyncNotify: true, SQDraining: true, MaxRdAtomic: 6, MaxDestRdAtomic: 7, MinRNRTimer: 12,
		PortNum: 1, Timeout: 14, RetryCnt: 5, RNRRetry: 6}
	q := QPAttrOf(&a)
	if got := q.Verbs(); got != a {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, a)
	}
}
