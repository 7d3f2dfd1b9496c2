package qp

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/verbs"
)

// TestAtomicWrite: an ATOMIC_WRITE goes out as one RC_ATOMIC_WRITE packet
// with a RETH of length 8 and the 8 bytes, is stored once, and a duplicate
// is answered again (a zero-length READ RESPONSE ONLY, as rxe answers it)
// without a second store; the completion is ATOMIC_WRITE with 8 bytes.
func TestAtomicWrite(t *testing.T) {
	a, b := pair(t, verbs.MTU1024)
	v := []byte{1, 2, 3, 4, 5, 6, 7, 8}
	if err := a.q.PostSend(&verbs.SendWR{WRID: 7, Opcode: verbs.WROpAtomicWrite, Flags: verbs.Signaled | verbs.Inline,
		InlineData: v, RemoteAddr: b.mr.IOVA() + 64, RKey: b.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	req := pump(a, 0)
	if len(req) != 1 {
		t.Fatalf("%d packets for an ATOMIC_WRITE, want 1", len(req))
	}
	p := parse(t, req[0])
	if p.Opcode != bth.RCAtomicWrite || p.RETH().DMALen() != 8 || p.RETH().VA() != b.mr.IOVA()+64 ||
		string(p.PayloadBytes()) != string(v) || !p.BTH().AckReq() {
		t.Fatalf("%v len %d payload %x", p.Opcode, p.RETH().DMALen(), p.PayloadBytes())
	}
	deliver(t, b, 0, req[0])
	resp := pump(b, 0)
	if string(b.mem[64:72]) != string(v) {
		t.Fatalf("memory %x, want %x", b.mem[64:72], v)
	}
	// The memory changes; a duplicate is answered without storing again.
	binary.NativeEndian.PutUint64(b.mem[64:], 99)
	deliver(t, b, 0, req[0])
	resp = append(resp, pump(b, 0)...)
	if len(resp) != 2 {
		t.Fatalf("%d answers to a request and its duplicate, want 2", len(resp))
	}
	for _, f := range resp {
		r := parse(t, f)
		if r.Opcode != bth.RCReadResponseOnly || r.PayLen != 0 || !r.AETH().Syndrome().IsACK() {
			t.Fatalf("answer %v with %d bytes", r.Opcode, r.PayLen)
		}
	}
	if binary.NativeEndian.Uint64(b.mem[64:]) != 99 {
		t.Fatal("the duplicate was stored again")
	}
	deliver(t, a, 0, resp...)
	if len(a.cq.wcs) != 1 || a.cq.wcs[0].Status != verbs.WCSuccess || a.cq.wcs[0].Opcode != verbs.WCAtomicWrite ||
		a.cq.wcs[0].ByteLen != 8 || a.cq.wcs[0].WRID != 7 {
		t.Fatalf("%+v", a.cq.wcs)
	}
}

// TestAtomicWriteChecks: the post-time rules of the table (8 bytes, an
// aligned address, RC only, the 8 bytes inline whatever max_inline_data),
// and the responder's: a misaligned address is an invalid request.
func TestAtomicWriteChecks(t *testing.T) {
	cap := verbs.QPCap{MaxSendSGE: 1}
	v := make([]byte, 8)
	for _, c := range []struct {
		typ  verbs.QPType
		wr   verbs.SendWR
		want error
	}{
		{verbs.QPTypeRC, verbs.SendWR{Opcode: verbs.WROpAtomicWrite, Flags: verbs.Inline, InlineData: v}, nil},
		{verbs.QPTypeRC, verbs.SendWR{Opcode: verbs.WROpAtomicWrite, SGL: []mr.SGE{{Length: 8}}, RemoteAddr: 16}, nil},
		{verbs.QPTypeRC, verbs.SendWR{Opcode: verbs.WROpAtomicWrite, Flags: verbs.Inline, InlineData: v[:4]}, ErrAtomicWR},
		{verbs.QPTypeRC, verbs.SendWR{Opcode: verbs.WROpAtomicWrite, Flags: verbs.Inline, InlineData: v, RemoteAddr: 4}, ErrAtomicWR},
		{verbs.QPTypeUC, verbs.SendWR{Opcode: verbs.WROpAtomicWrite, Flags: verbs.Inline, InlineData: v}, ErrOpcode},
		{verbs.QPTypeRC, verbs.SendWR{Opcode: verbs.WROpSend, Flags: verbs.Inline, InlineData: v}, ErrInlineTooBig},
	} {
		if err := CheckSendWR(c.typ, &cap, &c.wr); !errors.Is(err, c.want) {
			t.Errorf("%v %+v: %v, want %v", c.typ, c.wr, err, c.want)
		}
	}

	a, b := pair(t, verbs.MTU1024)
	h := bth.Headers{BTH: bth.BTHFields{Opcode: bth.RCAtomicWrite, PKey: 0xffff, DestQP: 30, PSN: 100, AckReq: true},
		RETH: bth.RETHFields{VA: b.mr.IOVA() + 4, RKey: b.mr.RKey(), DMALen: 8}}
	f := make([]byte, 200)
	e := a.q.AH().Encap
	n, err := bth.Build(f, &e, &h, []byte{9, 9, 9, 9, 9, 9, 9, 9})
	if err != nil {
		t.Fatal(err)
	}
	before := string(b.mem[:16])
	deliver(t, b, 0, f[:n])
	resp := pump(b, 0)
	if len(resp) != 1 || !parse(t, resp[0]).AETH().Syndrome().IsNAK() ||
		parse(t, resp[0]).AETH().Syndrome().Value() != bth.NAKInvalidRequest {
		t.Fatalf("misaligned ATOMIC_WRITE answered %v", opcodes(t, resp))
	}
	if string(b.mem[:16]) != before {
		t.Fatal("a misaligned ATOMIC_WRITE was stored")
	}
}
