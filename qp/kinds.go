package qp

import "github.com/sroce/sroce/verbs"

// Classifications of the verbs types that the transport logic branches on.

// numStates is the number of QP states: the size of the modify table.
const numStates = verbs.QPStateErr + 1

// datagram reports whether t is UD or GSI.
func datagram(t verbs.QPType) bool { return t == verbs.QPTypeUD || t == verbs.QPTypeGSI }

// isSend reports whether o is a SEND (with or without immediate or
// invalidate).
func isSend(o verbs.WROpcode) bool {
	return o == verbs.WROpSend || o == verbs.WROpSendWithImm || o == verbs.WROpSendWithInv
}

// isWrite reports whether o is an RDMA WRITE (with or without immediate).
func isWrite(o verbs.WROpcode) bool {
	return o == verbs.WROpRDMAWrite || o == verbs.WROpRDMAWriteWithImm
}

// isAtomic reports whether o is COMPARE_SWAP or FETCH_ADD.
func isAtomic(o verbs.WROpcode) bool {
	return o == verbs.WROpAtomicCmpSwp || o == verbs.WROpAtomicFetchAdd
}

// isRdAtomic reports whether o needs a responder resource (READ, atomics).
func isRdAtomic(o verbs.WROpcode) bool { return o == verbs.WROpRDMARead || isAtomic(o) }

// hasImm reports whether o carries immediate data.
func hasImm(o verbs.WROpcode) bool {
	return o == verbs.WROpSendWithImm || o == verbs.WROpRDMAWriteWithImm
}

// isLocal reports whether o is a local operation (BIND_MW, REG_MR,
// LOCAL_INV).
func isLocal(o verbs.WROpcode) bool {
	return o == verbs.WROpLocalInv || o == verbs.WROpBindMW || o == verbs.WROpRegMR
}
