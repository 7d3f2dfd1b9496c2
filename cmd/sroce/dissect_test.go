package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gopacket/gopacket/layers"
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

// TestDissectFixtures runs dissect over the fixture frames written as classic
// pcap, pcapng and gzip-compressed pcap, in text and in JSON, and checks every
// line, the summary and the exit status.
func TestDissectFixtures(t *testing.T) {
	fs := fixtures(t)
	rs := records(frames(fs))
	pcap := pcapBytes(t, layers.LinkTypeEthernet, rs)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(pcap)
	zw.Close()
	files := map[string][]byte{
		"fixtures.pcap":    pcap,
		"fixtures.pcapng":  pcapngBytes(t, []layers.LinkType{layers.LinkTypeEthernet}, rs),
		"fixtures.pcap.gz": gz.Bytes(),
	}
	var firstText string
	for name, b := range files {
		t.Run(name, func(t *testing.T) {
			path := writeFile(t, name, b)
			code, out, errOut := runSroce(t, nil, "dissect", path)
			if code != exitProblem {
				t.Errorf("exit status %d, want %d (a bad ICRC and malformed packets)", code, exitProblem)
			}
			if errOut != "" {
				t.Errorf("stderr: %q", errOut)
			}
			checkText(t, fs, out)
			if firstText == "" {
				firstText = out
			} else if out != firstText {
				t.Errorf("output differs between file formats:\n%s\nvs\n%s", out, firstText)
			}

			code, out, errOut = runSroce(t, nil, "dissect", "--json", path)
			if code != exitProblem {
				t.Errorf("--json: exit status %d, want %d", code, exitProblem)
			}
			if want := wantSummary(fs) + "\n"; errOut != want {
				t.Errorf("--json: stderr %q, want the summary %q", errOut, want)
			}
			checkJSON(t, fs, out)
		})
	}
}

// TestDissectTextLayout pins the exact text of a few lines: the columns line
// up and nothing trails.
func TestDissectTextLayout(t *testing.T) {
	fs := fixtures(t)
	path := writeFile(t, "x.pcap", pcapBytes(t, layers.LinkTypeEthernet, records(frames(fs[:2]))))
	_, out, _ := runSroce(t, nil, "dissect", path)
	want := "" +
		"     1  192.0.2.1:49153 > 192.0.2.2  RC_SEND_ONLY                  destqp=0x000011  psn=0x5f8c2d  ackreq  payload=64    icrc=ok\n" +
		"     2  192.0.2.2:49154 > 192.0.2.1  RC_ACKNOWLEDGE                destqp=0x000012  psn=0x5f8c2d          payload=0     icrc=ok   AETH ACK credits=31 msn=1\n" +
		"2 packets: 2 RoCEv2, 0 skipped (not RoCEv2), 0 malformed, 0 ICRC failures\n"
	if out != want {
		t.Errorf("got:\n%s\nwant:\n%s", out, want)
	}
}

// TestDissectAllGood checks exit status 0 when every packet is fine, with
// non-RoCEv2 traffic mixed in.
func TestDissectAllGood(t *testing.T) {
	var good []fixture
	for _, f := range fixtures(t) {
		if f.kind == kindRoCE || f.kind == kindSkipped {
			good = append(good, f)
		}
	}
	path := writeFile(t, "good.pcap", pcapBytes(t, layers.LinkTypeEthernet, records(frames(good))))
	for _, args := range [][]string{{"dissect", path}, {"dissect", "--json", path}, {"dissect", path, "--json"}} {
		code, out, errOut := runSroce(t, nil, args...)
		if code != exitOK {
			t.Errorf("%q: exit status %d, want 0\n%s%s", args, code, out, errOut)
		}
	}
	_, out, _ := runSroce(t, nil, "dissect", path)
	checkText(t, good, out)
}

// TestDissectEmptyCapture checks a capture with no packets at all.
func TestDissectEmptyCapture(t *testing.T) {
	path := writeFile(t, "none.pcap", pcapBytes(t, layers.LinkTypeEthernet, nil))
	code, out, errOut := runSroce(t, nil, "dissect", path)
	if code != exitOK || out != "0 packets: 0 RoCEv2, 0 skipped (not RoCEv2), 0 malformed, 0 ICRC failures\n" || errOut != "" {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// TestDissectStdin reads the capture from standard input ("-").
func TestDissectStdin(t *testing.T) {
	fs := fixtures(t)
	pcap := pcapBytes(t, layers.LinkTypeEthernet, records(frames(fs)))
	code, out, _ := runSroce(t, pcap, "dissect", "-")
	if code != exitProblem {
		t.Errorf("exit status %d", code)
	}
	checkText(t, fs, out)
	code, out, _ = runSroce(t, pcap, "dissect", "--json", "--", "-")
	if code != exitProblem {
		t.Errorf("--json: exit status %d", code)
	}
	checkJSON(t, fs, out)
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
	_, want, _ := runSroce(t, nil, "dissect", "--json", writeFile(t, "eth.pcap", pcapBytes(t, layers.LinkTypeEthernet, records(eth))))

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
			code, got, errOut := runSroce(t, nil, "dissect", "--json", writeFile(t, "x.pcap", pcapBytes(t, link, records(in))))
			if code != exitOK || got != want {
				t.Errorf("exit %d, stderr %q\ngot:\n%s\nwant:\n%s", code, errOut, got, want)
			}
		})
	}

	t.Run("pcapng mixed", func(t *testing.T) {
		var rs []record
		for i, f := range eth {
			if i%2 == 0 {
				rs = append(rs, record{data: f})
			} else {
				rs = append(rs, record{data: f[14:], iface: 1})
			}
		}
		ng := pcapngBytes(t, []layers.LinkType{layers.LinkTypeEthernet, layers.LinkTypeRaw}, rs)
		code, got, errOut := runSroce(t, nil, "dissect", "--json", writeFile(t, "mixed.pcapng", ng))
		if code != exitOK || got != want {
			t.Errorf("exit %d, stderr %q\ngot:\n%s\nwant:\n%s", code, errOut, got, want)
		}
	})

	t.Run("unsupported", func(t *testing.T) {
		path := writeFile(t, "wifi.pcap", pcapBytes(t, layers.LinkTypeIEEE802_11, records(eth[:3])))
		code, out, errOut := runSroce(t, nil, "dissect", path)
		if code != exitOK {
			t.Errorf("exit status %d", code)
		}
		if want := "3 packets: 0 RoCEv2, 3 skipped (not RoCEv2), 0 malformed, 0 ICRC failures\n"; out != want {
			t.Errorf("stdout %q, want %q", out, want)
		}
		if !strings.Contains(errOut, "skipped 3 packets of link type 105") {
			t.Errorf("stderr %q does not name the link type", errOut)
		}
	})
}

// TestDissectSnapLength checks frames cut short by the capture's snap
// length: RoCEv2 ones are reported as truncated (not malformed), others are
// skipped, and the exit status stays 0.
func TestDissectSnapLength(t *testing.T) {
	fs := fixtures(t)
	roce, tcp := fs[0].frame, tcpFrame()
	rs := []record{
		{data: roce[:60], wireLen: len(roce)},
		{data: tcp[:40], wireLen: len(tcp)},
		{data: roce},
	}
	path := writeFile(t, "snap.pcap", pcapBytes(t, layers.LinkTypeEthernet, rs))
	code, out, _ := runSroce(t, nil, "dissect", path)
	if code != exitOK {
		t.Errorf("exit status %d, want 0", code)
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

// TestDissectUnreadable checks exit status 2 and a one-sentence message for
// input that is not a readable capture.
func TestDissectUnreadable(t *testing.T) {
	pcap := pcapBytes(t, layers.LinkTypeEthernet, records(frames(fixtures(t)[:3])))
	ng := pcapngBytes(t, []layers.LinkType{layers.LinkTypeEthernet}, records(frames(fixtures(t)[:3])))
	dir := t.TempDir()
	cases := []struct {
		name string
		path string // "" means write data to a file
		data []byte
		want string // in the message
	}{
		{name: "missing file", path: filepath.Join(dir, "nope.pcap"), want: "cannot open " + filepath.Join(dir, "nope.pcap") + ": no such file or directory"},
		{name: "directory", path: dir, want: "cannot read " + dir + ": is a directory"},
		{name: "empty file", data: []byte{}, want: "is empty, not a pcap or pcapng capture"},
		{name: "garbage", data: []byte("GET / HTTP/1.1\r\n\r\n"), want: "is not a pcap or pcapng capture (it starts with 47 45 54 20)"},
		{name: "three bytes", data: pcap[:3], want: "is too short to be a pcap or pcapng capture (3 bytes)"},
		{name: "truncated pcap header", data: pcap[:10], want: "the pcap file header is truncated (10 of 24 bytes)"},
		{name: "bad pcap version", data: append([]byte{0xd4, 0xc3, 0xb2, 0xa1, 9, 0}, pcap[6:]...), want: "unusable pcap file header"},
		{name: "truncated pcapng header", data: ng[:10], want: "the pcapng section header is truncated (10 bytes)"},
		{name: "truncated pcapng block", data: ng[:20], want: fmt.Sprintf("the pcapng section header is truncated (20 of %d bytes)", binary.LittleEndian.Uint32(ng[4:]))},
		{name: "bad pcapng byte order", data: append(bytes.Clone(ng[:8]), make([]byte, 40)...), want: "bad byte-order magic"},
		{name: "bad gzip", data: []byte{0x1f, 0x8b, 0, 0}, want: "looks gzip-compressed but cannot be decompressed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := c.path
			if path == "" {
				path = writeFile(t, "in", c.data)
			}
			code, out, errOut := runSroce(t, nil, "dissect", path)
			if code != exitUsage {
				t.Errorf("exit status %d, want %d", code, exitUsage)
			}
			if out != "" {
				t.Errorf("stdout %q", out)
			}
			if !strings.HasPrefix(errOut, "sroce dissect: ") || !strings.Contains(errOut, c.want) ||
				strings.Count(errOut, "\n") != 1 {
				t.Errorf("stderr %q, want one line with %q", errOut, c.want)
			}
		})
	}

	// A capture cut inside a record: what was read is printed and summed up,
	// then the damage is reported and the status is 2.
	for name, b := range map[string][]byte{"pcap": pcap, "pcapng": ng} {
		t.Run("cut "+name, func(t *testing.T) {
			path := writeFile(t, "cut", b[:len(b)-30])
			code, out, errOut := runSroce(t, nil, "dissect", path)
			if code != exitUsage {
				t.Errorf("exit status %d, want %d", code, exitUsage)
			}
			if !strings.HasSuffix(out, "2 packets: 2 RoCEv2, 0 skipped (not RoCEv2), 0 malformed, 0 ICRC failures\n") {
				t.Errorf("stdout %q", out)
			}
			if !strings.Contains(errOut, "the capture is damaged or cut short in packet 3") || strings.Count(errOut, "\n") != 1 {
				t.Errorf("stderr %q", errOut)
			}
		})
	}
}

// TestDissectUsage checks the command line of dissect.
func TestDissectUsage(t *testing.T) {
	for _, args := range [][]string{{"dissect"}, {"dissect", "a", "b"}, {"dissect", "--bogus", "x"}} {
		code, out, errOut := runSroce(t, nil, args...)
		if code != exitUsage || out != "" || !strings.Contains(errOut, "usage: sroce dissect [--json] FILE") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, code, out, errOut)
		}
	}
	code, out, errOut := runSroce(t, nil, "dissect", "-h")
	if code != exitOK || !strings.Contains(out, "usage: sroce dissect [--json] FILE") ||
		!strings.Contains(out, "--json") || !strings.Contains(out, "Exit status") || errOut != "" {
		t.Errorf("-h: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// TestDissectFrameDoesNotAllocate checks that decoding and printing a
// RoCEv2 packet allocates nothing once the buffers have grown.
func TestDissectFrameDoesNotAllocate(t *testing.T) {
	fs := fixtures(t)
	for _, asJSON := range []bool{false, true} {
		d := &dissector{out: bufio.NewWriter(io.Discard), json: asJSON}
		d.wEndpoints, d.wOpcode, d.wFlags = minEndpointsWidth, minOpcodeWidth, minFlagsWidth
		d.t.packets = 123456 // frame numbers of several digits
		var buf []byte
		for _, f := range fs {
			if f.kind != kindRoCE {
				continue
			}
			buf = d.frame(buf[:0], f.frame, layers.LinkTypeEthernet, len(f.frame))
			allocs := testing.AllocsPerRun(100, func() {
				buf = d.frame(buf[:0], f.frame, layers.LinkTypeEthernet, len(f.frame))
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
	var rs []record
	for len(rs) < 10000 {
		rs = append(rs, record{data: fs[3].frame}, record{data: fs[1].frame})
	}
	path := writeFile(b, "bench.pcap", pcapBytes(b, layers.LinkTypeEthernet, rs))
	size, _ := os.Stat(path)
	for _, mode := range []string{"text", "json"} {
		b.Run(mode, func(b *testing.B) {
			args := []string{"dissect", path}
			if mode == "json" {
				args = []string{"dissect", "--json", path}
			}
			b.SetBytes(size.Size())
			b.ReportAllocs()
			for b.Loop() {
				if code := run(args, &env{Stdout: io.Discard, Stderr: io.Discard}); code != exitOK {
					b.Fatalf("exit status %d", code)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(rs)), "ns/packet")
		})
	}
}

// Make sure the JSON output of every fixture is valid JSON as a whole
// stream, as jq would read it.
func TestDissectJSONStream(t *testing.T) {
	path := writeFile(t, "x.pcap", pcapBytes(t, layers.LinkTypeEthernet, records(frames(fixtures(t)))))
	_, out, _ := runSroce(t, nil, "dissect", "--json", path)
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
