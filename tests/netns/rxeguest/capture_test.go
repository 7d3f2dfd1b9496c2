package rxeguest

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"
)

func TestPcapRoundTrip(t *testing.T) {
	frames := []Frame{
		{Time: time.Unix(1700000000, 123456000).UTC(), Data: []byte{1, 2, 3, 4}, OrigLen: 4},
		{Time: time.Unix(1700000001, 0).UTC(), Data: bytes.Repeat([]byte{0xab}, 1082), OrigLen: 1082},
	}
	b := AppendPcap(nil, LinkTypeEthernet, frames)
	got, link, err := ParsePcap(b)
	if err != nil {
		t.Fatal(err)
	}
	if link != LinkTypeEthernet || len(got) != len(frames) {
		t.Fatalf("link %d, %d frames", link, len(got))
	}
	for i := range frames {
		if !got[i].Time.Equal(frames[i].Time) || !bytes.Equal(got[i].Data, frames[i].Data) || got[i].OrigLen != frames[i].OrigLen {
			t.Errorf("frame %d: got %+v", i, got[i])
		}
	}
	// A prefix that does not end at a record boundary is rejected.
	for n := 0; n < len(b); n++ {
		fs, _, err := ParsePcap(b[:n])
		if err == nil && n != 24 && n != 24+16+4 { // header only; first record only
			t.Errorf("prefix %d: no error (%d frames)", n, len(fs))
		}
	}
	// Big-endian, nanosecond files parse too.
	be := binary.BigEndian
	var h []byte
	h = be.AppendUint32(h, 0xa1b23c4d)
	h = be.AppendUint16(h, 2)
	h = be.AppendUint16(h, 4)
	h = append(h, make([]byte, 8)...)
	h = be.AppendUint32(h, 65535)
	h = be.AppendUint32(h, 1)
	h = be.AppendUint32(h, 10)
	h = be.AppendUint32(h, 7)
	h = be.AppendUint32(h, 2)
	h = be.AppendUint32(h, 2)
	h = append(h, 0xde, 0xad)
	got, _, err = ParsePcap(h)
	if err != nil || len(got) != 1 || got[0].Time.Nanosecond() != 7 || !bytes.Equal(got[0].Data, []byte{0xde, 0xad}) {
		t.Errorf("big-endian nanosecond file: %+v, %v", got, err)
	}
}

func TestRecipeKeyStable(t *testing.T) {
	if a, b := RecipeKey(), RecipeKey(); a != b || len(a) < 10 {
		t.Errorf("RecipeKey: %q, %q", a, b)
	}
}
