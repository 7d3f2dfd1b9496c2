package main

// sroce ladder: golden outputs for committed rdma_rxe captures, the
// retransmission count checked against an independent count over the raw
// packets, and the command line's statuses and messages.

import (
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/capture"
	"github.com/sroce/sroce/internal/capturetest"
)

// update rewrites the expected outputs in testdata instead of comparing.
var update = flag.Bool("update", false, "rewrite the expected outputs in testdata from what the commands print now")

// ladderCaptures are the committed rdma_rxe captures with golden ladders.
var ladderCaptures = []string{"read_bw", "rc_pingpong", "atomic_fadd", "send_imm"}

// TestLadderGolden compares the text and JSON ladders of committed rxe
// captures, and of the lossy capture in testdata/ladder, with
// testdata/ladder; rewrite them with
// go test ./cmd/sroce -run TestLadderGolden -update and review the diff.
func TestLadderGolden(t *testing.T) {
	for _, name := range append(ladderCaptures, "lossy") {
		path := filepath.Join("..", "..", "bth", "testdata", "rxe", name+".pcap")
		if name == "lossy" {
			path = lossyPcap
		}
		for _, c := range []struct {
			args []string
			file string
		}{
			{[]string{"ladder", path}, name + ".txt"},
			{[]string{"ladder", "--json", path}, name + ".jsonl"},
		} {
			code, out, errOut := runSroce(t, nil, c.args...)
			if code != exitOK || !strings.Contains(errOut, "0 malformed, 0 ICRC failures") {
				t.Fatalf("%q: exit %d, stderr %q", c.args, code, errOut)
			}
			file := filepath.Join("testdata", "ladder", c.file)
			if *update {
				if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(file, []byte(out), 0o644); err != nil {
					t.Fatal(err)
				}
				continue
			}
			want, err := os.ReadFile(file)
			if err != nil {
				t.Fatalf("%v (write it with -update)", err)
			}
			if out != string(want) {
				t.Errorf("%q: output differs from %s (rewrite it with -update after a deliberate change):\ngot:\n%s\nwant:\n%s", c.args, file, out, want)
			}
		}
	}
}

// synthFrame builds an RC frame from src to dst's QP qpn.
func synthFrame(t *testing.T, src, dst string, qpn bth.QPN, op bth.Opcode, psn bth.PSN, syn bth.Syndrome, dmaLen uint32, payload int) []byte {
	t.Helper()
	e := bth.Encap{Src: netip.MustParseAddr(src), Dst: netip.MustParseAddr(dst), TTL: 64, SrcPort: 50000}
	h := bth.Headers{
		BTH:  bth.BTHFields{Opcode: op, PKey: 0xffff, DestQP: qpn, PSN: psn, AckReq: true},
		AETH: bth.AETHFields{Syndrome: syn, MSN: 1},
		RETH: bth.RETHFields{VA: 0x1000, RKey: 7, DMALen: dmaLen},
	}
	b := make([]byte, e.Len()+h.TransportLen(payload))
	n, err := bth.Build(b, &e, &h, make([]byte, payload))
	if err != nil {
		t.Fatal(err)
	}
	return b[:n]
}

// lossyCapture is a capture with retransmissions of requests (go-back-N
// after a sequence NAK, an RNR retry) and of READ responses.
func lossyCapture(t *testing.T) [][]byte {
	const a, b = "192.0.2.1", "192.0.2.2"
	const qa, qb = 0x31, 0x32
	ack := bth.SyndromeACKUnlimited
	f := func(from string, op bth.Opcode, psn bth.PSN, syn bth.Syndrome, dmaLen uint32, payload int) []byte {
		if from == a {
			return synthFrame(t, a, b, qb, op, psn, syn, dmaLen, payload)
		}
		return synthFrame(t, b, a, qa, op, psn, syn, dmaLen, payload)
	}
	return [][]byte{
		f(a, bth.RCSendOnly, 0xfffffe, 0, 0, 16),
		f(a, bth.RCSendOnly, 0x000000, 0, 0, 16), // 0xffffff was lost
		f(b, bth.RCAcknowledge, 0xffffff, bth.NAKSyndrome(bth.NAKPSNSeqError), 0, 0),
		f(a, bth.RCSendOnly, 0xffffff, 0, 0, 16),
		f(a, bth.RCSendOnly, 0x000000, 0, 0, 16), // retransmission
		f(b, bth.RCAcknowledge, 0x000000, ack, 0, 0),
		f(a, bth.RCSendOnly, 0x000001, 0, 0, 16),
		f(b, bth.RCAcknowledge, 0x000001, bth.RNRSyndrome(1), 0, 0),
		f(a, bth.RCSendOnly, 0x000001, 0, 0, 16), // retransmission
		f(b, bth.RCAcknowledge, 0x000001, ack, 0, 0),
		f(a, bth.RCReadRequest, 0x000002, 0, 2048, 0),
		f(b, bth.RCReadResponseFirst, 0x000002, ack, 0, 1024),
		f(a, bth.RCReadRequest, 0x000002, 0, 2048, 0),         // retransmission
		f(b, bth.RCReadResponseFirst, 0x000002, ack, 0, 1024), // retransmission
		f(b, bth.RCReadResponseLast, 0x000003, ack, 0, 1024),
		f(b, bth.RCSendOnly, 0x500000, 0, 0, 16), // B's own requests
		f(b, bth.RCSendOnly, 0x500000, 0, 0, 16), // retransmission
		f(a, bth.RCAcknowledge, 0x500000, ack, 0, 0),
	}
}

// independentRetransmissions counts, straight from the raw frames, the RC
// requests and READ responses whose sender already sent the same PSN to
// the same QP (the same kind of packet: request or READ response).
func independentRetransmissions(t *testing.T, frames [][]byte) int {
	type key struct {
		src, dst netip.Addr
		qpn      bth.QPN
		request  bool
		psn      bth.PSN
	}
	seen := make(map[key]bool)
	n := 0
	for _, fr := range frames {
		p, err := bth.Parse(fr)
		if err != nil {
			continue
		}
		info := p.Info()
		if info.Service != bth.ServiceRC || !(info.Request || info.Op == bth.OpReadResponse) {
			continue
		}
		k := key{p.SrcAddr(), p.DstAddr(), p.BTH().DestQP(), info.Request, p.BTH().PSN()}
		if seen[k] {
			n++
		}
		seen[k] = true
	}
	return n
}

// TestLadderRetransmissionCount checks that the packets --json marks as
// retransmissions are as many as an independent count finds, for a capture
// with retransmissions and for every committed rxe capture.
func TestLadderRetransmissionCount(t *testing.T) {
	captures := map[string][][]byte{"lossy": lossyCapture(t), "lossy.pcap": readFrames(t, lossyPcap)}
	for _, name := range ladderCaptures {
		captures[name] = readFrames(t, filepath.Join("..", "..", "bth", "testdata", "rxe", name+".pcap"))
	}
	for name, frames := range captures {
		path := capturetest.WriteFile(t, name+".pcap", goldenPcap(t, capturetest.Records(frames)))
		code, out, errOut := runSroce(t, nil, "ladder", "--json", path)
		if code != exitOK {
			t.Fatalf("%s: exit %d: %s", name, code, errOut)
		}
		marked := 0
		for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
			var obj struct {
				Frame          int      `json:"frame"`
				Retransmission bool     `json:"retransmission"`
				Analysis       []string `json:"analysis"`
			}
			if err := json.Unmarshal([]byte(line), &obj); err != nil {
				t.Fatalf("%s: %v in %q", name, err, line)
			}
			if obj.Retransmission {
				marked++
			}
		}
		want := independentRetransmissions(t, frames)
		if marked != want {
			t.Errorf("%s: %d packets marked retransmission, independent count %d", name, marked, want)
		}
		if name == "lossy" && want != 5 {
			t.Errorf("lossy: independent count %d, want 5", want)
		}
	}
}

// readFrames returns the frames of a committed capture.
func readFrames(t *testing.T, path string) [][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := capture.Open(f, path)
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

// TestLadderCommandLine checks the statuses and messages: usage errors
// exit 2 with the usage on stderr, an unreadable capture exits 1 with one
// clear sentence, frames that are not RoCEv2 are counted, malformed and
// cut-short RoCEv2 frames get a note, and "-" reads standard input.
func TestLadderCommandLine(t *testing.T) {
	frames := lossyCapture(t)
	good := goldenPcap(t, capturetest.Records(frames[:3]))
	goodPath := capturetest.WriteFile(t, "good.pcap", good)
	for _, args := range [][]string{
		{"ladder"},
		{"ladder", "--bogus", goodPath},
		{"ladder", goodPath, goodPath},
		{"ladder", "--json=maybe", goodPath},
	} {
		code, out, errOut := runSroce(t, nil, args...)
		if code != exitUsage || out != "" || !strings.Contains(errOut, "usage: sroce ladder [--json] [--html FILE [--html-arrows N]] CAPTURE") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, code, out, errOut)
		}
	}
	code, out, _ := runSroce(t, nil, "ladder", "-h")
	if code != exitOK || !strings.Contains(out, "usage: sroce ladder") {
		t.Errorf("-h: exit %d, stdout %q", code, out)
	}

	notCapture := capturetest.WriteFile(t, "notes.txt", []byte("hello, this is text\n"))
	for _, c := range []struct{ path, msg string }{
		{filepath.Join(t.TempDir(), "missing.pcap"), "cannot open"},
		{notCapture, "is not a pcap or pcapng capture"},
	} {
		code, out, errOut := runSroce(t, nil, "ladder", c.path)
		if code != exitProblem || out != "" || !strings.Contains(errOut, c.msg) || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%s: exit %d, stdout %q, stderr %q", c.path, code, out, errOut)
		}
	}

	// Not RoCEv2: the same frame sent to another UDP port.
	other := bytes.Clone(frames[0])
	p, err := bth.Parse(other)
	if err != nil {
		t.Fatal(err)
	}
	p.UDP().SetDstPort(9999)
	malformed := bytes.Clone(frames[1])
	pm, err := bth.Parse(malformed)
	if err != nil {
		t.Fatal(err)
	}
	bf := pm.BTH().Fields()
	bf.Opcode = 0x1f // a reserved RC opcode
	if err := bf.Encode(pm.BTH()); err != nil {
		t.Fatal(err)
	}
	rs := []capturetest.Record{
		{Data: frames[0]},
		{Data: other},
		{Data: malformed},
		{Data: frames[1][:50], WireLen: len(frames[1])},
		{Data: frames[2]},
	}
	pcap := goldenPcap(t, rs)
	code, out, errOut := runSroce(t, pcap, "ladder", "-")
	if code != exitOK {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	for _, want := range []string{
		"5 packets: 2 RoCEv2, 1 skipped (not RoCEv2), 1 malformed",
		"1 cut short by the snap length",
		"frame 3: malformed RoCEv2 packet from 192.0.2.1 to 192.0.2.2",
		"frame 4: RoCEv2 packet from 192.0.2.1 to 192.0.2.2 cut short by the snap length",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	if !strings.Contains(out, "QP pair 1: A 192.0.2.1 QP 0x000031 <-> B 192.0.2.2 QP 0x000032") ||
		strings.Count(out, "\n") != 4 {
		t.Errorf("stdout:\n%s", out)
	}
}
