package capture

import (
	"bytes"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
	"github.com/sroce/sroce/internal/capturetest"
)

// TestTimestamps checks that the readers give each frame's capture time:
// classic pcap in microseconds, pcapng with the default resolution and
// with if_tsresol set to nanoseconds.
func TestTimestamps(t *testing.T) {
	frames := [][]byte{make([]byte, 60), make([]byte, 60), make([]byte, 60)}
	base := time.Unix(1700000000, 0).UTC()
	check := func(name string, file []byte, want func(i int) time.Time) {
		t.Helper()
		r, err := Open(bytes.NewReader(file), name)
		if err != nil {
			t.Fatal(err)
		}
		ts, ok := r.(Timestamper)
		if !ok {
			t.Fatalf("%s: the reader has no Timestamp", name)
		}
		for i := range frames {
			if _, _, _, err := r.Next(); err != nil {
				t.Fatal(err)
			}
			if got := ts.Timestamp(); !got.Equal(want(i)) {
				t.Errorf("%s: frame %d at %v, want %v", name, i+1, got, want(i))
			}
		}
	}
	micro := func(i int) time.Time { return base.Add(time.Duration(i) * time.Microsecond) }
	check("pcap", capturetest.Pcap(t, layers.LinkTypeEthernet, capturetest.Records(frames)), micro)
	check("pcapng", capturetest.Pcapng(t, []layers.LinkType{layers.LinkTypeEthernet}, capturetest.Records(frames)), micro)

	{
		res := pcapgo.NgResolution(9)
		var b bytes.Buffer
		w, err := pcapgo.NewNgWriterInterface(&b, pcapgo.NgInterface{Name: "eth0", LinkType: layers.LinkTypeEthernet,
			SnapLength: 65536, TimestampResolution: res}, pcapgo.DefaultNgWriterOptions)
		if err != nil {
			t.Fatal(err)
		}
		step := 1500 * time.Nanosecond
		for i, f := range frames {
			ci := gopacket.CaptureInfo{Timestamp: base.Add(time.Duration(i) * step), CaptureLength: len(f), Length: len(f)}
			if err := w.WritePacket(ci, f); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		check("pcapng in nanoseconds", b.Bytes(), func(i int) time.Time {
			return base.Add(time.Duration(i) * step)
		})
	}
}

// TestNgTime checks the conversion of pcapng timestamps for resolutions
// that are powers of ten and of two.
func TestNgTime(t *testing.T) {
	for _, c := range []struct {
		ts   uint64
		res  uint8
		want time.Time
	}{
		{1_700_000_000_000_001, 6, time.Unix(1700000000, 1000)},
		{1_700_000_000_123_456_789, 9, time.Unix(1700000000, 123456789)},
		{17_000_000_001, 1, time.Unix(1700000000, 100_000_000)},
		{1700000000<<20 | 1<<19, 0x80 | 20, time.Unix(1700000000, 500_000_000)},
		{1_700_000_000_000_000_000_0, 10, time.Unix(1700000000, 0)},
	} {
		if got := ngTime(c.ts, c.res); !got.Equal(c.want) {
			t.Errorf("ngTime(%d, %#x) = %v, want %v", c.ts, c.res, got, c.want)
		}
	}
}
