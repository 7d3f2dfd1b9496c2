package qp

import (
	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/verbs"
)

// Classifications of the verbs types that the transport logic branches on.

// numStates is the number of QP states: the size of the modify table.
const numStates = verbs.QPStateErr + 1

// xrcShift turns an RC opcode into the XRC one of the same operation.
const xrcShift = bth.XRCSendFirst - bth.RCSendFirst

// datagram reports whether t is UD or GSI.
func datagram(t verbs.QPType) bool { return t == verbs.QPTypeUD || t == verbs.QPTypeGSI }

// op returns the row of the work-request opcode table of w's request
// (never nil: PostSend admits only opcodes of the table).
func (w *sendWQE) op() *verbs.WROpInfo { return w.wr.Opcode.Info() }
