// Package cm is the connection manager's wire layer: the InfiniBand
// management datagram (MAD) of the communication management class, the CM
// messages it carries, and RDMA CM's IP addressing on top of them.
//
// A CM message is a 256-byte MAD sent as a UD SEND ONLY to QP1 (the GSI QP)
// with Q_Key 0x80010000:
//
//	+--------------------------+----------------------------------------+
//	| common MAD header (24)   | MAD data (232): one CM message          |
//	+--------------------------+----------------------------------------+
//
// MAD is an accessor type over the 256 bytes in the style of package bth,
// and Header its decoded header; FromPacket finds the MAD in a parsed
// RoCEv2 packet. Each CM message (REQ, MRA, REJ, REP, RTU,
// DREQ, DREP, SIDR_REQ, SIDR_REP) and ClassPortInfo is a struct whose Encode
// writes every field at its IBTA position in the MAD data and whose Decode
// reads it back; Marshal and Unmarshal do the whole MAD. Nothing here panics
// on any input: lengths are checked and malformed input is reported as an
// *Error.
//
// RDMA CM (librdmacm, the kernel's rdma_cm) runs over these messages with
// IP addressing: its service ID is the port space and port of the listener
// (ServiceID), and a REQ's private data starts with the IP CM header of the
// IBTA's annex A11 (IPHeader), the source and destination addresses and the
// source port, before the application's private data.
//
// State names the states of the CM's state machine, and TimeoutDuration,
// ResponseWait and MRAWait turn the messages' 5-bit timeout fields into the
// spans a sender waits before resending; Retry is a message's resend
// schedule in the caller's (virtual) time, and Dedup the bounded memory of
// received MADs (by sender, transaction ID and attribute) that answers a
// resent request again instead of handling it twice.
//
// Manager is the connection state machine of both sides, pure like the QP
// logic: the caller feeds it received MADs, the application's calls and
// the virtual time, and takes the MADs to send, the librdmacm-style events
// (CONNECT_REQUEST, ESTABLISHED, REJECTED, DISCONNECTED, UNREACHABLE,
// TIMEWAIT_EXIT) and the next deadline. It resends REQ, REP and DREQ per
// Retry, lets an MRA extend the wait, answers duplicates through Dedup,
// rejects a REQ for a service nobody listens on with "invalid service ID"
// (as Linux's ib_cm does: cm/testdata/rxe-rping-rej.pcap), answers a
// DREQ for an unknown connection with a DREP, and bounds the passive
// connections not yet established. With Config.HoldRTU the active side
// stops at REP_RCVD (CONNECT_RESPONSE) until SendRTU, so that the caller
// moves its QP to RTR and RTS first, as the kernel's rdma_cm does for QPs
// in user space. SIDRRequest and SIDRReply resolve UD services
// (SIDR_REQ/SIDR_REP) with the same resends and duplicate answers. Counters
// tells what the Manager did.
package cm
