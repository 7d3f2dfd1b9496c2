package dissect

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/gopacket/gopacket/layers"
	"github.com/sroce/sroce/capture"
	"github.com/sroce/sroce/internal/capturetest"
)

// fixtureCounts returns the summary line dissect must print for fs.
func fixtureCounts(fs []fixture) (roce, skipped, malformed, bad int) {
	for _, f := range fs {
		switch f.kind {
		case kindRoCE:
			roce++
		case kindBadICRC:
			roce++
			bad++
		case kindSkipped:
			skipped++
		case kindMalformed:
			malformed++
		}
	}
	return
}

// wantSummary returns the summary line for fs.
func wantSummary(fs []fixture) string {
	roce, skipped, malformed, bad := fixtureCounts(fs)
	return fmt.Sprintf("%d packets: %d RoCEv2, %d skipped (not RoCEv2), %d malformed, %d ICRC %s",
		len(fs), roce, skipped, malformed, bad, plural(bad, "failure", "failures"))
}

// checkText checks dissect's text output for the fixtures fs.
func checkText(t *testing.T, fs []fixture, out string) {
	t.Helper()
	lines, summary := textLines(t, out)
	if want := wantSummary(fs); summary != want {
		t.Errorf("summary:\n got %q\nwant %q", summary, want)
	}
	for i, f := range fs {
		n := i + 1
		l, ok := lines[n]
		if f.kind == kindSkipped {
			if ok {
				t.Errorf("frame %d (%s) is not RoCEv2 but has a line: %q", n, f.name, l)
			}
			continue
		}
		if !ok {
			t.Errorf("frame %d (%s): no line", n, f.name)
			continue
		}
		for _, s := range f.text {
			if !strings.Contains(l, s) {
				t.Errorf("frame %d (%s): line lacks %q:\n%s", n, f.name, s, l)
			}
		}
		if strings.HasSuffix(l, " ") {
			t.Errorf("frame %d (%s): trailing space: %q", n, f.name, l)
		}
		if f.kind == kindRoCE && !strings.Contains(l, "icrc=ok") {
			t.Errorf("frame %d (%s): ICRC not ok: %s", n, f.name, l)
		}
	}
}

// checkJSON checks dissect's JSON output for the fixtures fs.
func checkJSON(t *testing.T, fs []fixture, out string) {
	t.Helper()
	objs := jsonObjects(t, out)
	for i, f := range fs {
		n := i + 1
		o, ok := objs[n]
		if f.kind == kindSkipped {
			if ok {
				t.Errorf("frame %d (%s) is not RoCEv2 but has an object: %v", n, f.name, o)
			}
			continue
		}
		if !ok {
			t.Errorf("frame %d (%s): no object", n, f.name)
			continue
		}
		want := f.json
		if f.kind == kindMalformed {
			if _, ok := o["error"]; !ok || len(o) != 5 {
				t.Errorf("frame %d (%s): want frame.number, addresses, port and error only, got %v", n, f.name, o)
			}
		} else if f.kind == kindRoCE && o["icrc_ok"] != true {
			t.Errorf("frame %d (%s): icrc_ok = %v", n, f.name, o["icrc_ok"])
		}
		for k, v := range want {
			got, ok := o[k]
			if !ok {
				t.Errorf("frame %d (%s): no %s", n, f.name, k)
				continue
			}
			if fmt.Sprint(got) != fmt.Sprint(v) {
				t.Errorf("frame %d (%s): %s = %v, want %v", n, f.name, k, got, v)
			}
		}
		for _, k := range f.not {
			if _, ok := o[k]; ok {
				t.Errorf("frame %d (%s): unexpected %s", n, f.name, k)
			}
		}
	}
}

// TestDissectFixtures dissects the fixture frames written as classic pcap,
// pcapng and gzip-compressed pcap, in text and in JSON, and checks every
// line, the summary and the verdict.
func TestDissectFixtures(t *testing.T) {
	fs := fixtures(t)
	rs := capturetest.Records(frames(fs))
	pcap := capturetest.Pcap(t, layers.LinkTypeEthernet, rs)
	files := map[string][]byte{
		"fixtures.pcap":    pcap,
		"fixtures.pcapng":  capturetest.Pcapng(t, []layers.LinkType{layers.LinkTypeEthernet}, rs),
		"fixtures.pcap.gz": capturetest.Gzip(t, pcap),
	}
	var firstText string
	for name, b := range files {
		t.Run(name, func(t *testing.T) {
			out, d := dissectBytes(t, b, Text)
			if d.Tally.OK() {
				t.Errorf("Tally.OK with a bad ICRC and malformed packets: %+v", d.Tally)
			}
			checkText(t, fs, out)
			if firstText == "" {
				firstText = out
			} else if out != firstText {
				t.Errorf("output differs between file formats:\n%s\nvs\n%s", out, firstText)
			}

			out, d = dissectBytes(t, b, JSON)
			if d.Tally.OK() {
				t.Errorf("JSON: Tally.OK with a bad ICRC and malformed packets: %+v", d.Tally)
			}
			if got, want := d.Tally.Summary(), wantSummary(fs); got != want {
				t.Errorf("JSON: summary %q, want %q", got, want)
			}
			checkJSON(t, fs, out)
		})
	}
}

// TestDissectTextLayout pins the exact text of a few lines: the columns line
// up and nothing trails.
func TestDissectTextLayout(t *testing.T) {
	fs := fixtures(t)
	out, _ := dissectBytes(t, fixturePcap(t, fs[:2]), Text)
	want := "" +
		"     1  192.0.2.1:49153 > 192.0.2.2  RC_SEND_ONLY                  destqp=0x000011  psn=0x5f8c2d  ackreq  payload=64    icrc=ok\n" +
		"     2  192.0.2.2:49154 > 192.0.2.1  RC_ACKNOWLEDGE                destqp=0x000012  psn=0x5f8c2d          payload=0     icrc=ok   AETH ACK credits=31 msn=1\n" +
		"2 packets: 2 RoCEv2, 0 skipped (not RoCEv2), 0 malformed, 0 ICRC failures\n"
	if out != want {
		t.Errorf("got:\n%s\nwant:\n%s", out, want)
	}
}

// TestDissectAllGood checks the verdict when every packet is fine, with
// non-RoCEv2 traffic mixed in, and when there are no packets at all.
func TestDissectAllGood(t *testing.T) {
	var good []fixture
	for _, f := range fixtures(t) {
		if f.kind == kindRoCE || f.kind == kindSkipped {
			good = append(good, f)
		}
	}
	for _, format := range []Format{Text, JSON} {
		out, d := dissectBytes(t, fixturePcap(t, good), format)
		if !d.Tally.OK() {
			t.Errorf("format %d: not OK: %+v\n%s", format, d.Tally, out)
		}
		if format == Text {
			checkText(t, good, out)
		}
	}

	out, d := dissectBytes(t, fixturePcap(t, nil), Text)
	if !d.Tally.OK() || out != "0 packets: 0 RoCEv2, 0 skipped (not RoCEv2), 0 malformed, 0 ICRC failures\n" {
		t.Errorf("empty capture: %+v, output %q", d.Tally, out)
	}
}

// TestDissectLinkTypes checks that Linux cooked captures (SLL, SLL2), raw
// IP and BSD loopback give the same JSON as Ethernet, and that a pcapng
// file mixing interfaces of different link types numbers frames as
// Wireshark does.
func TestDissectLinkTypes(t *testing.T) {
	var fs []fixture
	for _, f := range fixtures(t) {
		if f.kind == kindRoCE && binary.BigEndian.Uint16(f.frame[12:]) != 0x8100 { // untagged only
			fs = append(fs, f)
		}
	}
	eth := frames(fs)
	want, _ := dissectBytes(t, fixturePcap(t, fs), JSON)

	convert := map[layers.LinkType]func([]byte) []byte{
		layers.LinkTypeLinuxSLL: func(f []byte) []byte {
			h := make([]byte, 16)
			binary.BigEndian.PutUint16(h[0:], 0) // sent to us
			binary.BigEndian.PutUint16(h[2:], 1) // ARPHRD_ETHER
			binary.BigEndian.PutUint16(h[4:], 6) // address length
			copy(h[6:12], f[6:12])               // source MAC
			copy(h[14:16], f[12:14])             // protocol
			return append(h, f[14:]...)
		},
		layers.LinkTypeLinuxSLL2: func(f []byte) []byte {
			h := make([]byte, 20)
			copy(h[0:2], f[12:14])               // protocol
			binary.BigEndian.PutUint32(h[4:], 2) // interface index
			binary.BigEndian.PutUint16(h[8:], 1) // ARPHRD_ETHER
			h[10], h[11] = 0, 6                  // packet type, address length
			copy(h[12:18], f[6:12])
			return append(h, f[14:]...)
		},
		layers.LinkTypeRaw: func(f []byte) []byte { return bytes.Clone(f[14:]) },
		layers.LinkTypeNull: func(f []byte) []byte {
			af := uint32(2) // AF_INET
			if f[12] == 0x86 {
				af = 10 // AF_INET6 on Linux
			}
			return append(binary.LittleEndian.AppendUint32(nil, af), f[14:]...)
		},
	}
	for link, conv := range convert {
		t.Run(link.String(), func(t *testing.T) {
			var in [][]byte
			for _, f := range eth {
				in = append(in, conv(f))
			}
			got, d := dissectBytes(t, capturetest.Pcap(t, link, capturetest.Records(in)), JSON)
			if !d.Tally.OK() || got != want {
				t.Errorf("%+v\ngot:\n%s\nwant:\n%s", d.Tally, got, want)
			}
		})
	}

	t.Run("pcapng mixed", func(t *testing.T) {
		var rs []capturetest.Record
		for i, f := range eth {
			if i%2 == 0 {
				rs = append(rs, capturetest.Record{Data: f})
			} else {
				rs = append(rs, capturetest.Record{Data: f[14:], Iface: 1})
			}
		}
		ng := capturetest.Pcapng(t, []layers.LinkType{layers.LinkTypeEthernet, layers.LinkTypeRaw}, rs)
		got, d := dissectBytes(t, ng, JSON)
		if !d.Tally.OK() || got != want {
			t.Errorf("%+v\ngot:\n%s\nwant:\n%s", d.Tally, got, want)
		}
	})

	t.Run("unsupported", func(t *testing.T) {
		out, d := dissectBytes(t, capturetest.Pcap(t, layers.LinkTypeIEEE802_11, capturetest.Records(eth[:3])), Text)
		if !d.Tally.OK() {
			t.Errorf("not OK: %+v", d.Tally)
		}
		if want := "3 packets: 0 RoCEv2, 3 skipped (not RoCEv2), 0 malformed, 0 ICRC failures\n"; out != want {
			t.Errorf("output %q, want %q", out, want)
		}
		notes := d.Tally.Notes()
		if want := "skipped 3 packets of link type 105 (802.11), which dissect does not decode"; len(notes) != 1 || notes[0] != want {
			t.Errorf("notes %q, want [%q]", notes, want)
		}
	})
}

// TestDissectSnapLength checks frames cut short by the capture's snap
// length: RoCEv2 ones are reported as truncated (not malformed), others are
// skipped, and the verdict stays OK.
func TestDissectSnapLength(t *testing.T) {
	fs := fixtures(t)
	roce, tcp := fs[0].frame, tcpFrame()
	rs := []capturetest.Record{
		{Data: roce[:60], WireLen: len(roce)},
		{Data: tcp[:40], WireLen: len(tcp)},
		{Data: roce},
	}
	out, d := dissectBytes(t, capturetest.Pcap(t, layers.LinkTypeEthernet, rs), Text)
	if !d.Tally.OK() {
		t.Errorf("not OK: %+v", d.Tally)
	}
	lines, summary := textLines(t, out)
	if want := "3 packets: 1 RoCEv2, 1 skipped (not RoCEv2), 0 malformed, 0 ICRC failures, 1 cut short by the snap length"; summary != want {
		t.Errorf("summary %q, want %q", summary, want)
	}
	if l := lines[1]; !strings.Contains(l, "192.0.2.1:49153 > 192.0.2.2  TRUNCATED: ") || !strings.Contains(l, fmt.Sprintf("captured 60 of %d bytes", len(roce))) {
		t.Errorf("line 1: %q", l)
	}
	if _, ok := lines[2]; ok {
		t.Errorf("TCP frame has a line: %q", lines[2])
	}
}

// TestDissectReadError: a capture cut inside a record is dissected up to
// the cut, and Run reports where the damage is.
func TestDissectReadError(t *testing.T) {
	rs := capturetest.Records(frames(fixtures(t)[:3]))
	pcap := capturetest.Pcap(t, layers.LinkTypeEthernet, rs)
	ng := capturetest.Pcapng(t, []layers.LinkType{layers.LinkTypeEthernet}, rs)
	for name, b := range map[string][]byte{"pcap": pcap, "pcapng": ng} {
		t.Run(name, func(t *testing.T) {
			r, err := capture.Open(bytes.NewReader(b[:len(b)-30]), "cut")
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			d := New(&out, Text)
			err = d.Run(r)
			var re *ReadError
			if !errors.As(err, &re) || re.Packet != 3 || !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("Run: %v, want a ReadError in packet 3 wrapping io.ErrUnexpectedEOF", err)
			}
			if want := "the capture is damaged or cut short in packet 3: unexpected EOF"; err.Error() != want {
				t.Errorf("message %q, want %q", err, want)
			}
			if lines, _ := textLines(t, out.String()+d.Tally.Summary()); len(lines) != 2 {
				t.Errorf("%d lines before the cut, want 2:\n%s", len(lines), out.String())
			}
			if want := "2 packets: 2 RoCEv2, 0 skipped (not RoCEv2), 0 malformed, 0 ICRC failures"; d.Tally.Summary() != want {
				t.Errorf("summary %q, want %q", d.Tally.Summary(), want)
			}
		})
	}
}

// errWriter fails every write.
type errWriter struct{}

func (errWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

// TestDissectWriteError: Run stops at the first line it cannot write and
// returns the writer's error as it is.
func TestDissectWriteError(t *testing.T) {
	r, err := capture.Open(bytes.NewReader(fixturePcap(t, fixtures(t))), "x")
	if err != nil {
		t.Fatal(err)
	}
	d := New(errWriter{}, Text)
	var re *ReadError
	if err := d.Run(r); err == nil || err.Error() != "disk full" || errors.As(err, &re) {
		t.Errorf("Run: %v", err)
	}
	if d.Tally.Packets != 1 {
		t.Errorf("%d packets dissected after the failed write, want 1", d.Tally.Packets)
	}
}

// TestDissectFrameDoesNotAllocate checks that decoding and printing a
// RoCEv2 packet allocates nothing once the buffers have grown.
func TestDissectFrameDoesNotAllocate(t *testing.T) {
	fs := fixtures(t)
	for _, asJSON := range []bool{false, true} {
		format := Text
		if asJSON {
			format = JSON
		}
		d := New(io.Discard, format)
		d.Tally.Packets = 123456 // frame numbers of several digits
		var buf []byte
		for _, f := range fs {
			if f.kind != kindRoCE {
				continue
			}
			buf = d.AppendFrame(buf[:0], f.frame, layers.LinkTypeEthernet, len(f.frame))
			allocs := testing.AllocsPerRun(100, func() {
				buf = d.AppendFrame(buf[:0], f.frame, layers.LinkTypeEthernet, len(f.frame))
			})
			if allocs != 0 {
				t.Errorf("json=%v %s: %v allocations per packet", asJSON, f.name, allocs)
			}
		}
	}
}

// BenchmarkDissect measures dissect over a capture of 10,000 write packets
// (1 KiB payloads) and ACKs, text and JSON, file reading included.
func BenchmarkDissect(b *testing.B) {
	fs := fixtures(b)
	var rs []capturetest.Record
	for len(rs) < 10000 {
		rs = append(rs, capturetest.Record{Data: fs[3].frame}, capturetest.Record{Data: fs[1].frame})
	}
	path := capturetest.WriteFile(b, "bench.pcap", capturetest.Pcap(b, layers.LinkTypeEthernet, rs))
	size, _ := os.Stat(path)
	for _, format := range []Format{Text, JSON} {
		b.Run([]string{"text", "json"}[format], func(b *testing.B) {
			b.SetBytes(size.Size())
			b.ReportAllocs()
			for b.Loop() {
				f, err := os.Open(path)
				if err != nil {
					b.Fatal(err)
				}
				r, err := capture.Open(f, path)
				if err != nil {
					b.Fatal(err)
				}
				out := bufio.NewWriterSize(io.Discard, 64<<10)
				d := New(out, format)
				if err := d.Run(r); err != nil || !d.Tally.OK() {
					b.Fatalf("Run: %v, %+v", err, d.Tally)
				}
				out.Flush()
				f.Close()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(rs)), "ns/packet")
		})
	}
}

// Make sure the JSON output of every fixture is valid JSON as a whole
// stream, as jq would read it.
func TestDissectJSONStream(t *testing.T) {
	out, _ := dissectBytes(t, fixturePcap(t, fixtures(t)), JSON)
	d := json.NewDecoder(strings.NewReader(out))
	n := 0
	for d.More() {
		var v map[string]any
		if err := d.Decode(&v); err != nil {
			t.Fatalf("object %d: %v", n+1, err)
		}
		n++
	}
	roce, _, malformed, _ := fixtureCounts(fixtures(t))
	if n != roce+malformed {
		t.Errorf("%d objects, want %d", n, roce+malformed)
	}
}

// TestAppendJSONString checks string escaping against encoding/json.
func TestAppendJSONString(t *testing.T) {
	for _, s := range []string{"", "plain", `quote " and \ backslash`, "ctl \x00\x01\n\t\x1f", "utf-8 é"} {
		var got string
		if err := json.Unmarshal(appendJSONString(nil, s), &got); err != nil || got != s {
			t.Errorf("%q: got %q, %v", s, got, err)
		}
	}
}
