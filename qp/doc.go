// Package qp holds the transport state machines of sroce's queue pairs:
// the RC requester, completer and responder, UC and UD, and the verbs
// state machine that moves a QP between RESET, INIT, RTR, RTS, SQD, SQE and
// ERR. It behaves on the wire as Linux's rdma_rxe does.
//
// A QP is pure logic. It reads no clock (time is an argument: Receive,
// Pump and OnTimer take now, NextDeadline says when OnTimer is due), starts
// no goroutines and takes no locks. One goroutine, the device loop, owns
// it: packets go in through Receive, packets come out through the Env the
// device provides, and completions go to CQs. The only things other
// goroutines touch are the work queue rings (PostSend, PostRecv,
// SRQ.PostRecv), which are single-producer single-consumer rings of
// preallocated slots; the caller serializes posts to one queue.
//
// The vocabulary it speaks (QP types and states, QPAttr and QPAttrMask,
// SendWR, RecvWR, WC and their enums, MTUs, event types, counters) is
// package verbs'; scatter/gather elements and access flags are package
// mr's.
package qp
