package roce

import (
	"fmt"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/verbs"
)

// ConnectAttr is what a QP needs to move from RESET or INIT to RTS: the
// attributes ibv_modify_qp takes on the way, for every transport. Fields a
// transport does not use are ignored: UD takes none of the path fields and
// UC none of the READ/atomic, RNR and retry ones.
type ConnectAttr struct {
	// INIT (a QP already in INIT keeps its own).
	Access    mr.Access
	PKeyIndex uint16
	// QKey is the UD QP's own Q_Key.
	QKey uint32

	// RTR: the path to the peer and what the responder allows.
	AH              verbs.AHAttr
	PathMTU         verbs.MTU
	DestQPN         bth.QPN
	RQPSN           bth.PSN
	MaxDestRdAtomic uint8
	MinRNRTimer     uint8

	// RTS: the requester.
	SQPSN       bth.PSN
	Timeout     uint8
	RetryCnt    uint8
	RNRRetry    uint8
	MaxRdAtomic uint8

	// StayRTR leaves the QP in RTR, as a side that only receives may.
	StayRTR bool
}

// ConnectError is the error of Connect: the state the QP was refused.
type ConnectError struct {
	QPN   bth.QPN
	State verbs.QPState
	Err   error
}

func (e *ConnectError) Error() string {
	return fmt.Sprintf("cannot move QP %v to %v: %v", e.QPN, e.State, e.Err)
}

func (e *ConnectError) Unwrap() error { return e.Err }

// Connect moves q through INIT, RTR and RTS with the attributes each
// transition requires for q's transport (one ibv_modify_qp per state, as
// verbs programs do). The error is a *ConnectError naming the state that
// was refused.
func (q *QP) Connect(c *ConnectAttr) error { return ConnectQP(q, c) }

// Connectable is a QP that ConnectQP can move through INIT, RTR and RTS:
// a roce.QP, or a QP of another implementation of the verbs (the daemon's
// Go client).
type Connectable interface {
	Type() verbs.QPType
	State() verbs.QPState
	QPN() bth.QPN
	Modify(attr *verbs.QPAttr, mask verbs.QPAttrMask) error
}

// ConnectQP is QP.Connect for any Connectable.
func ConnectQP(q Connectable, c *ConnectAttr) error {
	typ := q.Type()
	datagram := typ == verbs.QPTypeUD || typ == verbs.QPTypeGSI
	if q.State() == verbs.QPStateReset {
		init := verbs.QPAttr{State: verbs.QPStateInit, PKeyIndex: c.PKeyIndex, PortNum: 1}
		mask := verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort
		if datagram {
			init.QKey = c.QKey
			mask |= verbs.AttrQKey
		} else {
			init.AccessFlags = c.Access
			mask |= verbs.AttrAccessFlags
		}
		if err := q.Modify(&init, mask); err != nil {
			return &ConnectError{q.QPN(), verbs.QPStateInit, err}
		}
	}
	rtr := verbs.QPAttr{State: verbs.QPStateRTR}
	mask := verbs.AttrState
	if !datagram {
		rtr.AH, rtr.PathMTU, rtr.DestQPN, rtr.RQPSN = c.AH, c.PathMTU, c.DestQPN, c.RQPSN
		mask |= verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN
		if typ == verbs.QPTypeRC || typ == verbs.QPTypeXRCRecv {
			rtr.MaxDestRdAtomic, rtr.MinRNRTimer = c.MaxDestRdAtomic, c.MinRNRTimer
			mask |= verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer
		}
	}
	if err := q.Modify(&rtr, mask); err != nil {
		return &ConnectError{q.QPN(), verbs.QPStateRTR, err}
	}
	if c.StayRTR {
		return nil
	}
	rts := verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: c.SQPSN}
	mask = verbs.AttrState | verbs.AttrSQPSN
	if typ.Reliable() {
		rts.Timeout, rts.RetryCnt, rts.RNRRetry, rts.MaxRdAtomic = c.Timeout, c.RetryCnt, c.RNRRetry, c.MaxRdAtomic
		mask |= verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrMaxQPRdAtomic
	}
	if err := q.Modify(&rts, mask); err != nil {
		return &ConnectError{q.QPN(), verbs.QPStateRTS, err}
	}
	return nil
}
