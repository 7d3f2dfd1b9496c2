package ctl

import (
	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/verbs"
)

// The conversions between the protocol's structs and package verbs', one
// set for both sides (the daemon and the Go client).

// CapOf returns q as a QPCap.
func CapOf(q verbs.QPCap) QPCap {
	return QPCap{MaxSendWR: q.MaxSendWR, MaxRecvWR: q.MaxRecvWR, MaxSendSGE: q.MaxSendSGE,
		MaxRecvSGE: q.MaxRecvSGE, MaxInlineData: q.MaxInlineData}
}

// Verbs returns the capacities as a verbs.QPCap.
func (q QPCap) Verbs() verbs.QPCap {
	return verbs.QPCap{MaxSendWR: q.MaxSendWR, MaxRecvWR: q.MaxRecvWR, MaxSendSGE: q.MaxSendSGE,
		MaxRecvSGE: q.MaxRecvSGE, MaxInlineData: q.MaxInlineData}
}

// AHOf returns a as an AHAttr (with a GRH, on port 1, as RoCE has them).
func AHOf(a *verbs.AHAttr) AHAttr {
	return AHAttr{DGID: a.DGID, FlowLabel: a.FlowLabel, SGIDIndex: a.SGIDIndex, HopLimit: a.HopLimit,
		TrafficClass: a.TrafficClass, IsGlobal: 1, PortNum: 1, DMAC: a.DMAC}
}

// Verbs returns the path as a verbs.AHAttr.
func (a *AHAttr) Verbs() verbs.AHAttr {
	return verbs.AHAttr{DGID: a.DGID, FlowLabel: a.FlowLabel, SGIDIndex: a.SGIDIndex, HopLimit: a.HopLimit,
		TrafficClass: a.TrafficClass, DMAC: a.DMAC, PortNum: 1}
}

// QPAttrOf returns a as a QPAttr.
func QPAttrOf(a *verbs.QPAttr) QPAttr {
	q := QPAttr{QPState: uint32(a.State), CurQPState: uint32(a.CurState), PathMTU: uint32(a.PathMTU), QKey: a.QKey,
		RQPSN: uint32(a.RQPSN), SQPSN: uint32(a.SQPSN), DestQPNum: uint32(a.DestQPN),
		QPAccessFlags: uint32(a.AccessFlags), Cap: CapOf(a.Cap), AHAttr: AHOf(&a.AH), PKeyIndex: a.PKeyIndex,
		MaxRdAtomic: a.MaxRdAtomic, MaxDestRdAtomic: a.MaxDestRdAtomic, MinRNRTimer: a.MinRNRTimer,
		PortNum: a.PortNum, Timeout: a.Timeout, RetryCnt: a.RetryCnt, RNRRetry: a.RNRRetry}
	if a.EnSQDAsyncNotify {
		q.EnSQDAsyncNotify = 1
	}
	if a.SQDraining {
		q.SQDraining = 1
	}
	return q
}

// Verbs returns the attributes as a verbs.QPAttr.
func (q *QPAttr) Verbs() verbs.QPAttr {
	return verbs.QPAttr{State: verbs.QPState(q.QPState), CurState: verbs.QPState(q.CurQPState),
		PathMTU: verbs.MTU(q.PathMTU), QKey: q.QKey, RQPSN: bth.PSN(q.RQPSN), SQPSN: bth.PSN(q.SQPSN),
		DestQPN: bth.QPN(q.DestQPNum), AccessFlags: mr.Access(q.QPAccessFlags), Cap: q.Cap.Verbs(),
		AH: q.AHAttr.Verbs(), PKeyIndex: q.PKeyIndex, EnSQDAsyncNotify: q.EnSQDAsyncNotify != 0,
		SQDraining: q.SQDraining != 0, MaxRdAtomic: q.MaxRdAtomic, MaxDestRdAtomic: q.MaxDestRdAtomic,
		MinRNRTimer: q.MinRNRTimer, PortNum: q.PortNum, Timeout: q.Timeout, RetryCnt: q.RetryCnt, RNRRetry: q.RNRRetry}
}
