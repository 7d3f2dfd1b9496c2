package verbs

import (
	"testing"

	"github.com/sroce/sroce/bth"
)

// classOp is the wire operation each class sends.
var classOp = map[WRClass]bth.Op{ClassSend: bth.OpSend, ClassWrite: bth.OpWrite, ClassRead: bth.OpReadRequest, ClassAtomicWrite: bth.OpAtomicWrite}

// TestWROpTableWire checks every row against the wire opcode table: its
// opcodes exist, are requests of the right service and operation at the
// right message position, and map back to a row of the same class.
func TestWROpTableWire(t *testing.T) {
	types := []QPType{QPTypeRC, QPTypeUC, QPTypeUD, QPTypeGSI, QPTypeXRCSend}
	for o := 0; o < NumWROpcodes; o++ {
		i := WROpcode(o).Info()
		if i == nil {
			continue
		}
		if got := WROpcode(o).String(); got != i.Name {
			t.Errorf("opcode %d: String %q, table %q", o, got, i.Name)
		}
		if i.Class == ClassLocal {
			if i.Wire() || i.Payload != PayloadNone || i.RdAtomic || i.Remote != 0 {
				t.Errorf("%s: a local operation with wire properties", i.Name)
			}
			continue
		}
		if !i.Wire() {
			t.Errorf("%s: not sent", i.Name)
		}
		for _, typ := range types {
			if !i.Types.Has(typ) {
				continue
			}
			positions := [][2]bool{{true, true}}
			if i.Segmented() && typ != QPTypeUD && typ != QPTypeGSI {
				positions = append(positions, [2]bool{true, false}, [2]bool{false, false}, [2]bool{false, true})
			}
			for _, fl := range positions {
				op := i.Opcode(typ, fl[0], fl[1])
				info := op.Info()
				if !op.Valid() || !info.Request {
					t.Errorf("%s on %v first=%v last=%v: opcode %v is not a request", i.Name, typ, fl[0], fl[1], op)
					continue
				}
				if want, ok := classOp[i.Class]; ok && info.Op != want {
					t.Errorf("%s on %v: opcode %v does %v", i.Name, typ, op, info.Op)
				}
				last := fl[1]
				if last && i.Imm != (info.Headers&bth.HdrImmDt != 0) {
					t.Errorf("%s on %v: last opcode %v disagrees on immediate data", i.Name, typ, op)
				}
				if last && typ == QPTypeRC && i.Inv != (info.Headers&bth.HdrIETH != 0) {
					t.Errorf("%s: last opcode %v disagrees on IETH", i.Name, op)
				}
				back := WRInfoOfWire(op)
				if back == nil || back.Class != i.Class || back.Remote != i.Remote || back.RdAtomic != i.RdAtomic {
					t.Errorf("%s on %v: opcode %v maps back to %+v", i.Name, typ, op, back)
				}
			}
		}
	}
}

// TestWROpTableRejects: opcodes outside the table and types a row does
// not list are refused.
func TestWROpTableRejects(t *testing.T) {
	for _, c := range []struct {
		op  WROpcode
		typ QPType
		ok  bool
	}{
		{WROpSend, QPTypeUD, true}, {WROpSendWithImm, QPTypeGSI, true}, {WROpRDMARead, QPTypeUD, false},
		{WROpRDMAWrite, QPTypeUC, true}, {WROpRDMARead, QPTypeUC, false}, {WROpBindMW, QPTypeUC, true},
		{WROpLocalInv, QPTypeUC, false}, {WROpSendWithInv, QPTypeUC, false}, {WROpcode(10), QPTypeRC, false},
		{WROpcode(200), QPTypeRC, false}, {WROpSend, QPType(99), false},
		{WROpRDMARead, QPTypeXRCSend, true}, {WROpAtomicWrite, QPTypeXRCSend, false}, {WROpSend, QPTypeXRCRecv, false},
	} {
		if got := c.op.AllowedOn(c.typ); got != c.ok {
			t.Errorf("%v on %v: allowed %v, want %v", c.op, c.typ, got, c.ok)
		}
	}
	if WRInfoOfWire(bth.RCAcknowledge) != nil || WRInfoOfWire(bth.RCReadResponseOnly) != nil {
		t.Error("a response opcode maps to a work request")
	}
	if WROpcode(200).WCOpcode() != WCSend || WROpcode(200).String() != "WROpcode(200)" {
		t.Error("an opcode outside the table")
	}
}
