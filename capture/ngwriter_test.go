package capture

import (
	"bytes"
	"io"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// TestNgWriterComments writes records with comments and directions and
// reads them back with pcapgo's reader and with this package's.
func TestNgWriterComments(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewNgWriter(&buf, layers.LinkTypeEthernet, "sroce_lo")
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1700000000, 123456789)
	frames := [][]byte{bytes.Repeat([]byte{1}, 60), bytes.Repeat([]byte{2}, 80)}
	comments := []string{"SEND_ONLY psn=0x000001: retransmission", ""}
	for i, f := range frames {
		if err := w.WriteFrame(t0.Add(time.Duration(i)*time.Millisecond), f, len(f), Direction(i+1), comments[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	r, err := pcapgo.NewNgReader(bytes.NewReader(buf.Bytes()), pcapgo.DefaultNgReaderOptions)
	if err != nil {
		t.Fatal(err)
	}
	for i := range frames {
		data, ci, opts, err := r.ReadPacketDataWithOptions()
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if !bytes.Equal(data, frames[i]) || !ci.Timestamp.Equal(t0.Add(time.Duration(i)*time.Millisecond)) {
			t.Errorf("record %d: %d bytes at %v", i, len(data), ci.Timestamp)
		}
		var got []string
		got = append(got, opts.Comments...)
		if comments[i] == "" && len(got) != 0 || comments[i] != "" && (len(got) != 1 || got[0] != comments[i]) {
			t.Errorf("record %d comments %q, want %q", i, got, comments[i])
		}
		if opts.Flags == nil || int(opts.Flags.Direction) != i+1 {
			t.Errorf("record %d direction flags %+v", i, opts.Flags)
		}
	}
	if _, _, _, err := r.ReadPacketDataWithOptions(); err != io.EOF {
		t.Errorf("after the records: %v, want EOF", err)
	}
	// The package's own reader takes the file too.
	fr, err := Open(bytes.NewReader(buf.Bytes()), "trace.pcapng")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		if _, _, _, err := fr.Next(); err != nil {
			break
		}
		n++
	}
	if n != 2 {
		t.Errorf("capture's reader read %d records, want 2", n)
	}
}
