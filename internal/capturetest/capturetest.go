// Package capturetest writes capture files for tests: classic pcap and
// pcapng through gopacket's pcapgo (a writer independent of package
// capture, so that reading what it writes tests capture's reader), gzip
// members, and files in a test's temporary directory.
//
// Records carry fixed timestamps, so the same frames always give the same
// bytes.
package capturetest

import (
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// SnapLen is the snap length written in the files' headers.
const SnapLen = 65536

// Record is one frame of a capture file to write.
type Record struct {
	Data    []byte
	WireLen int // length on the wire (0: len(Data)); more than len(Data) for a frame cut short
	Iface   int // pcapng interface, an index into Pcapng's links
}

// Records returns frames as whole-frame records on interface 0.
func Records(frames [][]byte) []Record {
	rs := make([]Record, len(frames))
	for i, f := range frames {
		rs[i] = Record{Data: f}
	}
	return rs
}

// captureInfo returns the capture info of the i-th record r: a timestamp
// i microseconds after a fixed moment.
func captureInfo(i int, r Record) gopacket.CaptureInfo {
	wl := r.WireLen
	if wl == 0 {
		wl = len(r.Data)
	}
	return gopacket.CaptureInfo{
		Timestamp:      time.Unix(1700000000, int64(i)*1000).UTC(),
		CaptureLength:  len(r.Data),
		Length:         wl,
		InterfaceIndex: r.Iface,
	}
}

// Pcap returns a classic pcap file (little-endian, microsecond timestamps)
// of link type link holding rs.
func Pcap(t testing.TB, link layers.LinkType, rs []Record) []byte {
	t.Helper()
	var b bytes.Buffer
	w := pcapgo.NewWriter(&b)
	if err := w.WriteFileHeader(SnapLen, link); err != nil {
		t.Fatal(err)
	}
	for i, r := range rs {
		if err := w.WritePacket(captureInfo(i, r), r.Data); err != nil {
			t.Fatal(err)
		}
	}
	return b.Bytes()
}

// Pcapng returns a pcapng file with one interface per link type (the
// first named eth0, the others if1, if2, ...) holding rs.
func Pcapng(t testing.TB, links []layers.LinkType, rs []Record) []byte {
	t.Helper()
	var b bytes.Buffer
	w, err := pcapgo.NewNgWriterInterface(&b, pcapgo.NgInterface{Name: "eth0", LinkType: links[0], SnapLength: SnapLen},
		pcapgo.DefaultNgWriterOptions)
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range links[1:] {
		if _, err := w.AddInterface(pcapgo.NgInterface{Name: "if" + strconv.Itoa(i+1), LinkType: l, SnapLength: SnapLen}); err != nil {
			t.Fatal(err)
		}
	}
	for i, r := range rs {
		if err := w.WritePacket(captureInfo(i, r), r.Data); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// Gzip returns p compressed as one gzip member.
func Gzip(t testing.TB, p []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	zw.Write(p)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// WriteFile writes b to a file called name in a temporary directory of t
// and returns its path.
func WriteFile(t testing.TB, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
