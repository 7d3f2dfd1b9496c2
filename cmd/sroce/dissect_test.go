package main

// The command line of sroce dissect: arguments, standard input, what goes
// to stdout and stderr, exit statuses and messages. What the lines say is
// package dissect's, and tested there; here the command must print exactly
// what the package writes.

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gopacket/gopacket/layers"
	"github.com/sroce/sroce/capture"
	"github.com/sroce/sroce/dissect"
	"github.com/sroce/sroce/internal/capturetest"
)

// goldenCapture is an rdma_rxe capture committed with the repository:
// IPv4 RoCEv2 frames without a VLAN tag.
const goldenCapture = "../../bth/testdata/rxe/read_bw.pcap"

// goldenFrames returns the frames of goldenCapture.
func goldenFrames(t testing.TB) [][]byte {
	t.Helper()
	f, err := os.Open(goldenCapture)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := capture.Open(f, goldenCapture)
	if err != nil {
		t.Fatal(err)
	}
	var frames [][]byte
	for {
		data, _, _, err := r.Next()
		if err == io.EOF {
			return frames
		}
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, bytes.Clone(data))
	}
}

// goldenPcap returns rs as a classic pcap file.
func goldenPcap(t testing.TB, rs []capturetest.Record) []byte {
	t.Helper()
	return capturetest.Pcap(t, layers.LinkTypeEthernet, rs)
}

// packageOutput returns what package dissect writes for the capture b in
// format, and its summary line.
func packageOutput(t *testing.T, b []byte, format dissect.Format) (out, summary string) {
	t.Helper()
	r, err := capture.Open(bytes.NewReader(b), "x")
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	d := dissect.New(&buf, format)
	if err := d.Run(r); err != nil {
		t.Fatal(err)
	}
	return buf.String(), d.Tally.Summary()
}

// TestDissectOutputs checks where the lines and the summary go: in text
// both to stdout, the summary last; with --json the objects to stdout and
// the summary to stderr. The capture comes from a file or, as "-", from
// standard input, and the exit status says whether every packet was fine:
// 1 for a bad ICRC or a malformed packet, 0 otherwise (a packet cut short
// by the snap length included).
func TestDissectOutputs(t *testing.T) {
	frames := goldenFrames(t)
	badICRC := bytes.Clone(frames[1])
	badICRC[len(badICRC)-1] ^= 0xff
	malformed := bytes.Clone(frames[1])
	malformed[14+20+8] = 0x1f // the BTH opcode (IPv4, no tag): a reserved RC opcode
	captures := []struct {
		name string
		rs   []capturetest.Record
		want int
	}{
		{"good", capturetest.Records(frames), exitOK},
		{"bad icrc", capturetest.Records([][]byte{frames[0], badICRC, frames[2]}), exitProblem},
		{"malformed", capturetest.Records([][]byte{frames[0], malformed}), exitProblem},
		{"cut by the snap length", []capturetest.Record{{Data: frames[0][:60], WireLen: len(frames[0])}, {Data: frames[1]}}, exitOK},
	}
	for _, c := range captures {
		t.Run(c.name, func(t *testing.T) {
			pcap := goldenPcap(t, c.rs)
			path := capturetest.WriteFile(t, "x.pcap", pcap)
			text, summary := packageOutput(t, pcap, dissect.Text)
			objs, _ := packageOutput(t, pcap, dissect.JSON)
			runs := []struct {
				stdin          []byte
				args           []string
				stdout, stderr string
			}{
				{nil, []string{"dissect", path}, text + summary + "\n", ""},
				{pcap, []string{"dissect", "-"}, text + summary + "\n", ""},
				{nil, []string{"dissect", "--json", path}, objs, summary + "\n"},
				{nil, []string{"dissect", path, "--json"}, objs, summary + "\n"},
				{pcap, []string{"dissect", "--json", "--", "-"}, objs, summary + "\n"},
			}
			for _, r := range runs {
				code, out, errOut := runSroce(t, r.stdin, r.args...)
				if code != c.want || out != r.stdout || errOut != r.stderr {
					t.Errorf("%q: exit %d (want %d)\nstdout:\n%s\nwant:\n%s\nstderr %q, want %q",
						r.args, code, c.want, out, r.stdout, errOut, r.stderr)
				}
			}
		})
	}
}

// TestDissectEmptyCapture checks a capture with no packets at all.
func TestDissectEmptyCapture(t *testing.T) {
	path := capturetest.WriteFile(t, "none.pcap", goldenPcap(t, nil))
	code, out, errOut := runSroce(t, nil, "dissect", path)
	if code != exitOK || out != "0 packets: 0 RoCEv2, 0 skipped (not RoCEv2), 0 malformed, 0 ICRC failures\n" || errOut != "" {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// TestDissectUnsupportedLink checks the note on stderr about frames of a
// link type dissect does not decode.
func TestDissectUnsupportedLink(t *testing.T) {
	pcap := capturetest.Pcap(t, layers.LinkTypeIEEE802_11, capturetest.Records(goldenFrames(t)[:3]))
	code, out, errOut := runSroce(t, nil, "dissect", capturetest.WriteFile(t, "wifi.pcap", pcap))
	if code != exitOK {
		t.Errorf("exit status %d", code)
	}
	if want := "3 packets: 0 RoCEv2, 3 skipped (not RoCEv2), 0 malformed, 0 ICRC failures\n"; out != want {
		t.Errorf("stdout %q, want %q", out, want)
	}
	if want := "sroce dissect: note: skipped 3 packets of link type 105 (802.11), which dissect does not decode\n"; errOut != want {
		t.Errorf("stderr %q, want %q", errOut, want)
	}
}

// TestDissectUnreadable checks exit status 2 and a one-sentence message for
// input that is not a readable capture.
func TestDissectUnreadable(t *testing.T) {
	rs := capturetest.Records(goldenFrames(t)[:3])
	pcap := goldenPcap(t, rs)
	ng := capturetest.Pcapng(t, []layers.LinkType{layers.LinkTypeEthernet}, rs)
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
				path = capturetest.WriteFile(t, "in", c.data)
			}
			code, out, errOut := runSroce(t, nil, "dissect", path)
			if code != exitProblem {
				t.Errorf("exit status %d, want %d", code, exitProblem)
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
	// then the damage is reported and the status is 1.
	for name, b := range map[string][]byte{"pcap": pcap, "pcapng": ng} {
		t.Run("cut "+name, func(t *testing.T) {
			path := capturetest.WriteFile(t, "cut", b[:len(b)-30])
			code, out, errOut := runSroce(t, nil, "dissect", path)
			if code != exitProblem {
				t.Errorf("exit status %d, want %d", code, exitProblem)
			}
			if !strings.HasSuffix(out, "2 packets: 2 RoCEv2, 0 skipped (not RoCEv2), 0 malformed, 0 ICRC failures\n") {
				t.Errorf("stdout %q", out)
			}
			if want := "sroce dissect: " + path + ": the capture is damaged or cut short in packet 3: unexpected EOF\n"; errOut != want {
				t.Errorf("stderr %q, want %q", errOut, want)
			}
		})
	}
}

// failingWriter fails every write, as a full disk or a closed pipe does.
type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, os.ErrClosed }

// TestDissectWriteError checks exit status 1 and one message when the
// output cannot be written.
func TestDissectWriteError(t *testing.T) {
	path := capturetest.WriteFile(t, "x.pcap", goldenPcap(t, capturetest.Records(goldenFrames(t))))
	var errOut bytes.Buffer
	code := run([]string{"dissect", path}, &env{Stdout: failingWriter{}, Stderr: &errOut})
	if want := "sroce dissect: writing the output: " + os.ErrClosed.Error() + "\n"; code != exitProblem || errOut.String() != want {
		t.Errorf("exit %d, stderr %q, want %d and %q", code, errOut.String(), exitProblem, want)
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
