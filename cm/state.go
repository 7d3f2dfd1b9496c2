package cm

import (
	"strconv"
	"time"
)

// State is a communication's state in the CM's state machine (IBTA volume
// 1, chapter 12), for the active side (the REQ's sender), the passive side
// (its receiver) and the SIDR exchange of UD services.
type State uint8

// CM states.
const (
	StateIdle        State = iota // no communication
	StateListen                   // passive side waiting for REQs (or SIDR_REQs) for a service ID
	StateREQSent                  // active: REQ sent, waiting for REP, REJ or MRA
	StateREQRcvd                  // passive: REQ received, the consumer deciding
	StateMRAREQSent               // passive: MRA sent for the REQ, REP or REJ still to come
	StateMRAREQRcvd               // active: the peer MRAed the REQ, waiting longer for REP or REJ
	StateREPSent                  // passive: REP sent, waiting for RTU, REJ or MRA
	StateREPRcvd                  // active: REP received, RTU (or REJ) to send
	StateMRAREPSent               // active: MRA sent for the REP
	StateMRAREPRcvd               // passive: the peer MRAed the REP, waiting longer for RTU
	StateEstablished              // connected
	StateDREQSent                 // DREQ sent, waiting for DREP
	StateDREQRcvd                 // DREQ received, DREP to send
	StateTimeWait                 // disconnected; the QP is not reused until stale packets have left the network
	StateSIDRREQSent              // SIDR_REQ sent, waiting for SIDR_REP
	StateSIDRREQRcvd              // SIDR_REQ received, SIDR_REP to send
)

var stateText = [...]string{
	StateIdle: "IDLE", StateListen: "LISTEN", StateREQSent: "REQ_SENT", StateREQRcvd: "REQ_RCVD",
	StateMRAREQSent: "MRA_REQ_SENT", StateMRAREQRcvd: "MRA_REQ_RCVD", StateREPSent: "REP_SENT",
	StateREPRcvd: "REP_RCVD", StateMRAREPSent: "MRA_REP_SENT", StateMRAREPRcvd: "MRA_REP_RCVD",
	StateEstablished: "ESTABLISHED", StateDREQSent: "DREQ_SENT", StateDREQRcvd: "DREQ_RCVD",
	StateTimeWait: "TIMEWAIT", StateSIDRREQSent: "SIDR_REQ_SENT", StateSIDRREQRcvd: "SIDR_REQ_RCVD",
}

// String names the state as Linux's ib_cm does ("REQ_SENT").
func (s State) String() string {
	if int(s) < len(stateText) {
		return stateText[s]
	}
	return "state " + strconv.Itoa(int(s))
}

// MaxTimeoutExp is the largest exponent a 5-bit timeout field holds.
const MaxTimeoutExp = 31

// TimeoutDuration returns the span a 5-bit IBTA timeout field stands for,
// 4.096 µs × 2^t: CM response timeouts, MRA service timeouts, local ACK
// timeouts and packet lifetimes. t above MaxTimeoutExp is taken as
// MaxTimeoutExp (about 2.4 hours).
func TimeoutDuration(t uint8) time.Duration {
	t = min(t, MaxTimeoutExp)
	return 4096 * time.Nanosecond << t
}

// ResponseWait returns how long the sender of a REQ, REP or DREQ waits for
// the answer before sending it again: the path's round trip (twice the
// packet lifetime pktLife) plus the time the peer said it needs to answer
// (its CM response timeout, respTimeout).
func ResponseWait(pktLife, respTimeout uint8) time.Duration {
	return 2*TimeoutDuration(pktLife) + TimeoutDuration(respTimeout)
}

// MRAWait returns how long to wait for the answer once the peer has sent an
// MRA with service timeout serviceTimeout: that time plus the path's packet
// lifetime pktLife.
func MRAWait(pktLife, serviceTimeout uint8) time.Duration {
	return TimeoutDuration(serviceTimeout) + TimeoutDuration(pktLife)
}
