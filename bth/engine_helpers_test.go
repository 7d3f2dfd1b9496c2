package bth

import (
	"bytes"
	"testing"
)

// EncodeHeaders followed by a copy of the payload must give the same bytes
// as Encode, for every opcode and every pad count.
func TestEncodeHeadersMatchesEncode(t *testing.T) {
	for op := 0; op < 256; op++ {
		o := Opcode(op)
		if !o.Valid() {
			continue
		}
		info := o.Info()
		sizes := []int{0, 1, 2, 3, 4, 5, 64}
		if info.FixedPayload >= 0 {
			sizes = []int{info.FixedPayload}
		}
		for _, n := range sizes {
			h := Headers{
				BTH:    BTHFields{Opcode: o, SE: true, PKey: 0xffff, DestQP: 0x123456, AckReq: true, PSN: 0xabcdef},
				RETH:   RETHFields{VA: 0x1122334455667788, RKey: 0x99aabbcc, DMALen: 4096},
				AETH:   AETHFields{Syndrome: SyndromeACKUnlimited, MSN: 7},
				Atomic: AtomicETHFields{VA: 8, RKey: 9, SwapAdd: 10, Compare: 11},
				Imm:    0xdeadbeef, IETH: 0x01020304,
				DETH: DETHFields{QKey: 0x11111111, SrcQP: 5},
			}
			payload := bytes.Repeat([]byte{0xa5}, n)
			want := make([]byte, h.TransportLen(n))
			if _, err := h.Encode(want, payload); err != nil {
				t.Fatalf("%v/%d: Encode: %v", o, n, err)
			}
			got := bytes.Repeat([]byte{0x5a}, len(want))
			off, err := h.EncodeHeaders(got, n)
			if err != nil {
				t.Fatalf("%v/%d: EncodeHeaders: %v", o, n, err)
			}
			copy(got[off:], payload)
			// The ICRC field is left alone by both.
			if !bytes.Equal(got[:len(got)-ICRCLen], want[:len(want)-ICRCLen]) {
				t.Fatalf("%v/%d: got %x want %x", o, n, got, want)
			}
		}
	}
	if _, err := (&Headers{BTH: BTHFields{Opcode: RCAcknowledge}}).EncodeHeaders(make([]byte, 64), 4); err == nil {
		t.Fatal("payload on an ACK accepted")
	}
}
