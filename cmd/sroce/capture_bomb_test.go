package main

// Captures built to make dissect allocate: a record or packet block that
// claims 1 GiB, and 1 GiB of zeros behind it, gzip-compressed into about
// a megabyte. They are generated through a pipe, never on disk.

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"io"
	"runtime"
	"strings"
	"testing"

	"github.com/gopacket/gopacket/layers"
	"github.com/sroce/sroce/internal/capturetest"
)

// zeroMember returns one gzip member holding 1 MiB of zeros (about 1 KiB).
func zeroMember(t testing.TB) []byte {
	var b bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&b, gzip.BestCompression)
	zw.Write(make([]byte, 1<<20))
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// bomb streams head, then mib MiB of zeros, then tail, gzip-compressed (a
// gzip file may hold several members, read as one stream), into a pipe.
func bomb(t testing.TB, head []byte, mib int, tail []byte) *io.PipeReader {
	zero := zeroMember(t)
	h, tl := capturetest.Gzip(t, head), capturetest.Gzip(t, tail)
	pr, pw := io.Pipe()
	go func() {
		if _, err := pw.Write(h); err != nil {
			return
		}
		for i := 0; i < mib; i++ {
			if _, err := pw.Write(zero); err != nil {
				return
			}
		}
		if len(tail) > 0 {
			if _, err := pw.Write(tl); err != nil {
				return
			}
		}
		pw.Close()
	}()
	return pr
}

// dissectBounded runs "sroce dissect -" on in and fails the test if it
// allocated more than limit bytes in all (peaks included).
func dissectBounded(t *testing.T, in *io.PipeReader, limit uint64) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	code = run([]string{"dissect", "-"}, &env{Stdin: in, Stdout: &out, Stderr: &errOut})
	runtime.ReadMemStats(&after)
	in.Close()
	if got := after.TotalAlloc - before.TotalAlloc; got > limit {
		t.Errorf("dissect allocated %d MiB, more than %d MiB", got>>20, limit>>20)
	}
	t.Logf("allocated %d KiB; stderr %q", (after.TotalAlloc-before.TotalAlloc)>>10, errOut.String())
	return code, out.String(), errOut.String()
}

// pcapHeader returns a classic pcap file header with snap length snap and
// a record header claiming caplen bytes.
func pcapHeader(snap, caplen uint32) []byte {
	h := binary.LittleEndian.AppendUint32(nil, magicPcapMicro)
	h = binary.LittleEndian.AppendUint16(h, 2)
	h = binary.LittleEndian.AppendUint16(h, 4)
	h = append(h, make([]byte, 8)...)
	h = binary.LittleEndian.AppendUint32(h, snap)
	h = binary.LittleEndian.AppendUint32(h, uint32(layers.LinkTypeEthernet))
	h = append(h, make([]byte, 8)...) // timestamp
	h = binary.LittleEndian.AppendUint32(h, caplen)
	return binary.LittleEndian.AppendUint32(h, caplen)
}

// ngBlock returns a little-endian pcapng block of type typ with body.
func ngBlock(typ uint32, body []byte) []byte {
	n := uint32(12 + len(body))
	b := binary.LittleEndian.AppendUint32(nil, typ)
	b = binary.LittleEndian.AppendUint32(b, n)
	b = append(b, body...)
	return binary.LittleEndian.AppendUint32(b, n)
}

// ngStart returns a section header and one Ethernet interface.
func ngStart() []byte {
	shb := binary.LittleEndian.AppendUint32(nil, pcapngByteOrder)
	shb = append(shb, 1, 0, 0, 0)
	shb = append(shb, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff) // section length unknown
	idb := []byte{byte(layers.LinkTypeEthernet), 0, 0, 0}
	idb = binary.LittleEndian.AppendUint32(idb, 0) // no snap length
	return append(ngBlock(magicPcapngSHB, shb), ngBlock(ngBlockIDB, idb)...)
}

// epb returns an enhanced packet block of frame on interface 0.
func epb(frame []byte) []byte {
	body := make([]byte, 12)
	body = binary.LittleEndian.AppendUint32(body, uint32(len(frame)))
	body = binary.LittleEndian.AppendUint32(body, uint32(len(frame)))
	body = append(body, frame...)
	for len(body)%4 != 0 {
		body = append(body, 0)
	}
	return ngBlock(ngBlockEPB, body)
}

func TestDissectGzipBombs(t *testing.T) {
	if testing.Short() {
		t.Skip("decompresses a GiB")
	}
	const gib = 1 << 30
	const limit = 32 << 20

	t.Run("pcap record of 1 GiB", func(t *testing.T) {
		code, out, errOut := dissectBounded(t, bomb(t, pcapHeader(0xffffffff, gib), 1024, nil), limit)
		if code != exitProblem || out != "0 packets: 0 RoCEv2, 0 skipped (not RoCEv2), 0 malformed, 0 ICRC failures\n" ||
			errOut != "sroce dissect: standard input: the capture is damaged or cut short in packet 1: the record claims 1073741824 captured bytes, more than any capture holds (262144)\n" {
			t.Errorf("exit %d, stdout %q, stderr %q", code, out, errOut)
		}
	})

	t.Run("pcapng packet block of 1 GiB", func(t *testing.T) {
		head := ngStart()
		head = binary.LittleEndian.AppendUint32(head, ngBlockEPB)
		head = binary.LittleEndian.AppendUint32(head, gib+32)
		head = append(head, make([]byte, 12)...)
		head = binary.LittleEndian.AppendUint32(head, gib)
		head = binary.LittleEndian.AppendUint32(head, gib)
		code, _, errOut := dissectBounded(t, bomb(t, head, 1024, nil), limit)
		if code != exitProblem || !strings.Contains(errOut, "in packet 1: the packet block claims 1073741824 captured bytes, more than any capture holds (262144)") {
			t.Errorf("exit %d, stderr %q", code, errOut)
		}
	})

	// A block that is not a packet may be that long: it is skipped as it
	// streams by, and the packet after it is dissected.
	t.Run("pcapng block of 1 GiB before a packet", func(t *testing.T) {
		head := ngStart()
		head = binary.LittleEndian.AppendUint32(head, 0x0bad)
		head = binary.LittleEndian.AppendUint32(head, gib+12)
		tail := epb(goldenFrames(t)[0])
		code, out, errOut := dissectBounded(t, bomb(t, head, 1024, append([]byte{0, 0, 0, 0}, tail...)), limit)
		if code != exitOK || !strings.HasSuffix(out, "1 packet: 1 RoCEv2, 0 skipped (not RoCEv2), 0 malformed, 0 ICRC failures\n") {
			t.Errorf("exit %d, stdout %q, stderr %q", code, out, errOut)
		}
	})

	t.Run("zeros", func(t *testing.T) {
		code, _, errOut := dissectBounded(t, bomb(t, nil, 1024, nil), limit)
		if code != exitProblem || !strings.Contains(errOut, "is not a pcap or pcapng capture (it starts with 00 00 00 00)") {
			t.Errorf("exit %d, stderr %q", code, errOut)
		}
	})
}
