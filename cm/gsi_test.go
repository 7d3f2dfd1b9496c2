package cm

import (
	"errors"
	"reflect"
	"testing"

	"github.com/sroce/sroce/bth"
)

func TestFromPacket(t *testing.T) {
	want := samples()[0]
	mad, err := Send(42, want)
	if err != nil {
		t.Fatal(err)
	}
	for _, ipv6 := range []bool{false, true} {
		p, err := bth.Parse(udFrame(t, mad, 3, ipv6))
		if err != nil {
			t.Fatal(err)
		}
		if !p.VerifyICRC() {
			t.Error("frame's ICRC does not verify")
		}
		m, err := FromPacket(p)
		if err != nil {
			t.Fatal(err)
		}
		_, got, err := Unmarshal(m)
		if err != nil || !reflect.DeepEqual(got, want) || m.TID() != 42 {
			t.Errorf("IPv6 %v: %v %v", ipv6, got, err)
		}
	}
	// The wrong QP, Q_Key or opcode, and a short payload, are not CM MADs.
	frame := udFrame(t, mad, 3, false)
	p, _ := bth.Parse(frame)
	for _, c := range []struct {
		name   string
		mutate func(f []byte)
		want   error
	}{
		{"destination QP 2", func(f []byte) { f[p.BTHOff+7] = 2 }, ErrNotGSI},
		{"Q_Key 0x80010001", func(f []byte) { f[p.BTHOff+bth.BTHLen+3] = 1 }, ErrNotGSI},
		{"management class 0x01", func(f []byte) { f[p.Payload+1] = 1 }, ErrNotCM},
	} {
		f := append([]byte(nil), frame...)
		c.mutate(f)
		q, err := bth.Parse(f)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if _, err := FromPacket(q); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	short := udFrame(t, mad[:100], 3, false)
	q, err := bth.Parse(short)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := FromPacket(q); !errors.Is(err, ErrTooShort) {
		t.Errorf("100-byte payload: %v", err)
	}
	rc := udFrame(t, mad, 3, false)
	q, _ = bth.Parse(rc)
	rcHdr := bth.Headers{BTH: bth.BTHFields{Opcode: bth.RCSendOnly, PKey: 0xffff, DestQP: GSIQPN}}
	e := q.Encap()
	f := make([]byte, e.Len()+rcHdr.TransportLen(len(mad)))
	n, err := bth.Build(f, &e, &rcHdr, mad)
	if err != nil {
		t.Fatal(err)
	}
	if q, err = bth.Parse(f[:n]); err != nil {
		t.Fatal(err)
	}
	if _, err := FromPacket(q); !errors.Is(err, ErrNotGSI) {
		t.Errorf("RC SEND ONLY: %v", err)
	}
}
