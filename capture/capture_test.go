package capture

// Reading every format back, every prefix of a capture, and a fuzz target
// over the readers.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"
	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/internal/capturetest"
)

// readAll returns the frames of a capture (copied) and the error that
// ended it (nil at a clean end).
func readAll(b []byte) (frames [][]byte, links []layers.LinkType, err error) {
	fr, err := Open(bytes.NewReader(b), "x")
	if err != nil {
		return nil, nil, err
	}
	for {
		data, link, wireLen, err := fr.Next()
		if err == io.EOF {
			return frames, links, nil
		}
		if err != nil {
			return frames, links, err
		}
		if len(data) > MaxRecordLen || len(data) > wireLen {
			return frames, links, errors.New("a frame longer than a record may be")
		}
		frames = append(frames, bytes.Clone(data))
		links = append(links, link)
	}
}

// captures returns the same frames as classic pcap (both byte orders) and
// pcapng (with two interfaces), and the frames with their link types.
func captures(t testing.TB) (map[string][]byte, [][]byte) {
	fs := testFrames()
	le := capturetest.Pcap(t, layers.LinkTypeEthernet, capturetest.Records(fs))
	be := bytes.Clone(le)
	for off := 0; off < len(be); {
		if off == 0 {
			swap32(be[0:])
			binary.BigEndian.PutUint16(be[4:], 2)
			binary.BigEndian.PutUint16(be[6:], 4)
			for _, o := range []int{8, 12, 16, 20} {
				swap32(be[o:])
			}
			off = pcapFileHeaderLen
			continue
		}
		for _, o := range []int{0, 4, 8, 12} {
			swap32(be[off+o:])
		}
		off += pcapRecordHdrLen + int(binary.BigEndian.Uint32(be[off+8:]))
	}
	var ngRecs []capturetest.Record
	for i, f := range fs {
		if i%2 == 1 {
			ngRecs = append(ngRecs, capturetest.Record{Data: f[14:], Iface: 1})
		} else {
			ngRecs = append(ngRecs, capturetest.Record{Data: f})
		}
	}
	ng := capturetest.Pcapng(t, []layers.LinkType{layers.LinkTypeEthernet, layers.LinkTypeRaw}, ngRecs)
	return map[string][]byte{"pcap": le, "pcap big-endian": be, "pcapng": ng, "pcapng twice": append(bytes.Clone(ng), ng...)}, fs
}

func swap32(b []byte) { binary.BigEndian.PutUint32(b, binary.LittleEndian.Uint32(b)) }

// TestCaptureReaders checks that every format yields the frames written
// into it, with their link types.
func TestCaptureReaders(t *testing.T) {
	cs, fs := captures(t)
	for name, b := range cs {
		got, links, err := readAll(b)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		want := len(fs)
		if name == "pcapng twice" {
			want *= 2
		}
		if len(got) != want {
			t.Fatalf("%s: %d frames, want %d", name, len(got), want)
		}
		for i, f := range got {
			w := fs[i%len(fs)]
			if links[i] == layers.LinkTypeRaw {
				w = w[14:]
			}
			if !bytes.Equal(f, w) {
				t.Errorf("%s: frame %d differs", name, i)
			}
		}
	}
}

// TestCaptureTruncation: every prefix of a capture is refused at the start
// or yields whole frames and then a cut-short error (or a clean end
// exactly between records), never a partial frame.
func TestCaptureTruncation(t *testing.T) {
	cs, _ := captures(t)
	for name, b := range cs {
		full, _, _ := readAll(b)
		for n := 0; n < len(b); n++ {
			got, _, err := readAll(b[:n])
			if len(got) > len(full) {
				t.Fatalf("%s, %d bytes: %d frames", name, n, len(got))
			}
			for i := range got {
				if !bytes.Equal(got[i], full[i]) {
					t.Fatalf("%s, %d bytes: frame %d differs", name, n, i)
				}
			}
			var ie *InputError
			if err != nil && !errors.As(err, &ie) && !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("%s, %d bytes: %v", name, n, err)
			}
		}
	}
}

// FuzzCapture feeds arbitrary bytes to the capture readers: no panic, and
// no frame longer than MaxRecordLen.
func FuzzCapture(f *testing.F) {
	cs, _ := captures(f)
	for _, b := range cs {
		f.Add(b)
		f.Add(capturetest.Gzip(f, b))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := Open(bytes.NewReader(b), "x")
		if err != nil {
			return
		}
		for i := 0; i < 1000; i++ {
			data, _, _, err := fr.Next()
			if err != nil {
				return
			}
			if len(data) > MaxRecordLen {
				t.Fatalf("a %d-byte frame", len(data))
			}
		}
	})
}

// testFrames returns four frames of different lengths: an Ethernet header
// (IPv4) and a payload that numbers its bytes.
func testFrames() [][]byte {
	var fs [][]byte
	for i, n := range []int{60, 1078, 14, 300} {
		f := make([]byte, n)
		for j := range f {
			f[j] = byte(i + j)
		}
		f[12], f[13] = 0x08, 0x00
		fs = append(fs, f)
	}
	return fs
}

// TestWriter: what Writer writes reads back, and an oversized record is
// refused.
func TestWriter(t *testing.T) {
	var b bytes.Buffer
	w, err := NewWriter(&b, layers.LinkTypeEthernet, 0)
	if err != nil {
		t.Fatal(err)
	}
	fs := testFrames()
	for i, f := range fs {
		if err := w.WriteFrame(time.Unix(1700000000, int64(i)), f, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.WriteFrame(time.Now(), make([]byte, MaxRecordLen+1), 0); err == nil {
		t.Fatal("an oversized record was written")
	}
	got, links, err := readAll(b.Bytes())
	if err != nil || len(got) != len(fs) {
		t.Fatalf("%d frames, %v", len(got), err)
	}
	for i := range fs {
		if !bytes.Equal(got[i], fs[i]) || links[i] != layers.LinkTypeEthernet {
			t.Errorf("frame %d differs", i)
		}
	}
}

// TestLinkAdapterShortFrames checks that frames too short for their link
// header reach bth.Parse (which rejects them) without a panic.
func TestLinkAdapterShortFrames(t *testing.T) {
	var a LinkAdapter
	var p bth.Packet
	for _, link := range []layers.LinkType{layers.LinkTypeEthernet, layers.LinkTypeLinuxSLL, layers.LinkTypeLinuxSLL2,
		layers.LinkTypeRaw, layers.LinkTypeNull, layers.LinkTypeLoop} {
		for n := 0; n < 24; n++ {
			f, ok := a.Ethernet(make([]byte, n), link)
			if !ok {
				t.Fatalf("link %v refused", link)
			}
			if err := p.Parse(f); err == nil {
				t.Errorf("link %v: %d-byte frame accepted", link, n)
			}
		}
	}
	if _, ok := a.Ethernet([]byte{1, 2, 3}, layers.LinkTypeIEEE802_11); ok {
		t.Errorf("802.11 accepted")
	}
}
