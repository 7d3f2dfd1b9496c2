package netns

// The ladder's analysis (package trace) on real lossy traffic: RC runs
// between two rxe guests and between sroce and an rxe guest, with the
// guest's own netem and gact dropping 2% of the RoCEv2 frames each way,
// so that retransmissions, sequence NAKs, duplicates and coalesced ACKs
// happen. The capture, taken on the lossy guest's tap, goes through the
// analysis as "sroce ladder" feeds it, and the test checks it against
// the raw frames: the frames the analysis calls retransmissions must be
// exactly those an independent count finds (its own minimal parse of
// Ethernet, IPv4, UDP and the BTH: per sender address, destination QP and
// class, request or READ response, a PSN that sender already sent), every
// NAK must carry an analysis string that explains it, every READ response
// must be paired with its READ, and the run must have had loss (at least
// one retransmission).

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sroce/sroce/bth"
	pcapfile "github.com/sroce/sroce/capture"
	"github.com/sroce/sroce/dissect"
	"github.com/sroce/sroce/internal/rxeguest"
	"github.com/sroce/sroce/interop"
	"github.com/sroce/sroce/trace"
)

// ladderLossPct is the loss of the lossy guest, each way.
const ladderLossPct = 2

func TestLadderLossyCaptures(t *testing.T) {
	laneParallel(t, 16*time.Second, needPair)
	impairedTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	rig := newInteropLAN(t, ctx)
	// The other rxe guest is the shared rxe-b, at 192.0.2.2 on the rig's
	// bridge.
	_, _, other := sharedGuests(t)
	if err := rig.Guest.SetRoCELoss(ctx, ladderLossPct); err != nil {
		t.Fatal(err)
	}
	pairs, _ := interop.Select(interop.LossyCases, []string{"write-bw", "read-bw"})
	if len(pairs) != 2 {
		t.Fatalf("LossyCases has no write-bw or read-bw pair: %v", pairs)
	}
	for i, c := range pairs {
		// The lossy guest is the client of one run and the server of the
		// other; sroce is the requester of one and the responder of the
		// other.
		lossyServer := i == 1
		t.Run("rxe-rxe/"+c.Name, func(t *testing.T) {
			pcap := filepath.Join(t.TempDir(), "roce.pcap")
			rxePair(t, ctx, rig, other, c, lossyServer, pcap)
			checkAnalysis(t, pcap)
		})
		t.Run("sroce-rxe/"+c.Name, func(t *testing.T) {
			var res interop.PairResult
			for attempt := 1; ; attempt++ {
				var err error
				if res, err = rig.RunPair(ctx, c, lossyServer, nil, t.Logf); err != nil {
					t.Fatal(err)
				}
				if res.CaptureErr == nil {
					break
				}
				if attempt == captureAttempts {
					t.Fatalf("run %d: %v: the analysis cannot be checked on a capture that misses frames", attempt, res.CaptureErr)
				}
				t.Logf("run %d: %v; running the pair again", attempt, res.CaptureErr)
			}
			if res.Failed() {
				for _, v := range res.Verdicts() {
					t.Logf("%s (%s): %v", v.Who, v.Role, v.O)
				}
				t.Fatalf("the pair failed: %s", failureSummary(res))
			}
			checkAnalysis(t, res.Pcap)
		})
	}
}

// failureSummary names the failed sides of a run.
func failureSummary(res interop.PairResult) string {
	var parts []string
	for _, v := range res.Verdicts() {
		if v.Problem != "" {
			parts = append(parts, v.Who+" as "+v.Role+" "+v.Problem)
		}
	}
	return strings.Join(parts, "; ")
}

// captureAttempts bounds the runs of a pair whose capture missed frames
// (tcpdump, starved of CPU on a loaded machine, let its kernel buffer
// overflow): the analysis is checked on whole captures only.
const captureAttempts = 3

// rxePair runs the real tool of c between the rig's lossy guest and
// other (the lossy one as the server when lossyServer), capturing the
// lossy guest's tap into pcap. A run whose perftest could not calibrate
// its clock, or whose capture missed frames, is run again, three runs at
// most.
func rxePair(t *testing.T, ctx context.Context, rig *interop.Rig, other *rxeguest.Guest, c interop.Case, lossyServer bool, pcap string) {
	server, client := rig.Guest, other
	if !lossyServer {
		server, client = other, rig.Guest
	}
	tool := c.Real + " -d rxe0 " + c.Args
	for attempt := 1; ; attempt++ {
		capt, err := rxeguest.StartCapture(ctx, rig.LAN.NS, rig.Guest.Tap(), pcap, "udp port 4791")
		if err != nil {
			t.Fatal(err)
		}
		srv, cli, err := runToolPair(ctx, server, client, 18515, tool, tool)
		capt.Stop()
		if err == nil {
			cerr := capt.Complete()
			if cerr == nil {
				return
			}
			if attempt == captureAttempts {
				t.Fatalf("run %d: %v: the analysis cannot be checked on a capture that misses frames", attempt, cerr)
			}
			t.Logf("run %d: %v; running the pair again", attempt, cerr)
			continue
		}
		uncalibrated := strings.Contains(string(srv.Stderr)+string(cli.Stderr), "Correlation coefficient r^2:")
		if !uncalibrated || attempt == 3 {
			t.Fatalf("%s between two rxe guests: %v", c.Real, err)
		}
		t.Logf("run %d: %s could not calibrate its cycle counter in the guest; running the pair again", attempt, c.Real)
	}
}

// checkAnalysis runs the ladder's analysis on a capture and checks it
// against the raw frames.
func checkAnalysis(t *testing.T, pcap string) {
	t.Helper()
	if dir := os.Getenv("SROCE_CAPTURE_DIR"); dir != "" {
		if data, err := os.ReadFile(pcap); err == nil {
			os.WriteFile(filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "_")+".pcap"), data, 0o644)
		}
	}
	events := analyse(t, pcap)
	frames, _, err := rxeguest.ReadPcapFile(pcap)
	if err != nil {
		t.Fatal(err)
	}
	want := resentFrames(frames)

	var got []int
	kinds := map[string]int{}
	for _, ev := range events {
		if ev.Retransmission {
			got = append(got, ev.Frame)
		}
		for _, a := range ev.Analysis {
			for _, k := range []struct{ prefix, kind string }{
				{"retransmission", "retransmission"}, {"duplicate", "duplicate"}, {"out of sequence", "out of sequence"},
				{"NAK: ", "NAK"}, {"RNR NAK: ", "RNR NAK"}, {"implied NAK", "implied NAK"},
				{"repeats the acknowledgement", "repeated ACK"},
			} {
				if strings.HasPrefix(a, k.prefix) {
					kinds[k.kind]++
				}
			}
			if strings.HasPrefix(a, "acks PSN ") && strings.Contains(a, "..") {
				kinds["ACK of several PSNs"]++
			}
		}
		// Every request the responder answered crossed the tap (the loss
		// is inside the guest: before the tap on its way out, after it on
		// its way in), so every READ response has its READ in the capture.
		if slices.Contains(ev.Analysis, "READ response without a READ request seen") {
			t.Errorf("frame %d: %s psn=%#06x is paired with no READ request, though every READ answered is in the capture", ev.Frame, ev.Opcode, uint32(ev.PSN))
		}
		if !ev.HasAETH || ev.Syndrome.IsACK() {
			continue
		}
		// Every NAK is explained: its kind and code in words, and for a
		// sequence error the PSN the responder expects, which is the
		// NAK's own PSN.
		var explained bool
		switch {
		case ev.Syndrome.IsRNR():
			explained = hasPrefix(ev.Analysis, "RNR NAK: retry after ")
		case ev.Syndrome.Value() == bth.NAKPSNSeqError:
			explained = slices.Contains(ev.Analysis, "NAK: PSN sequence error") &&
				slices.Contains(ev.Analysis, fmt.Sprintf("expects PSN %#06x", uint32(ev.PSN)))
		default:
			explained = hasPrefix(ev.Analysis, "NAK: ") && !hasPrefix(ev.Analysis, "NAK: reserved code")
		}
		if !explained {
			t.Errorf("frame %d: %s (%v) is not explained: %q", ev.Frame, ev.Opcode, ev.Syndrome, ev.Analysis)
		}
	}
	t.Logf("%d RoCEv2 frames; the analysis says: %v; the raw count finds %d retransmissions", len(events), kinds, len(want))
	if len(want) == 0 {
		t.Fatalf("no frame was sent again: the run had no loss to analyse")
	}
	if missed, extra := setDiff(want, got), setDiff(got, want); len(missed) > 0 || len(extra) > 0 {
		t.Errorf("the analysis marks %d frames as retransmissions, the raw count %d: not marked %v, marked wrongly %v\n%s",
			len(got), len(want), missed, extra, around(events, append(missed, extra...)))
	}
	if kinds["out of sequence"] == 0 && kinds["NAK"] == 0 && kinds["duplicate"] == 0 {
		t.Errorf("the analysis saw neither a sequence gap, nor a NAK, nor a duplicate in a run with %d retransmissions", len(want))
	}
}

// hasPrefix reports whether one of ss starts with prefix.
func hasPrefix(ss []string, prefix string) bool {
	return slices.ContainsFunc(ss, func(s string) bool { return strings.HasPrefix(s, prefix) })
}

// analyse feeds the capture to the analysis as "sroce ladder" does (capture
// reader, dissect decoder, trace analyzer) and returns its events.
func analyse(t *testing.T, pcap string) []trace.Event {
	t.Helper()
	f, err := os.Open(pcap)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fr, err := pcapfile.Open(f, pcap)
	if err != nil {
		t.Fatal(err)
	}
	var (
		dec    dissect.Decoder
		tally  dissect.Tally
		an     trace.Analyzer
		events []trace.Event
	)
	for {
		data, link, wireLen, err := fr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("reading %s: %v", pcap, err)
		}
		fm := dec.Decode(data, link, wireLen)
		tally.Add(fm)
		if fm.Kind != dissect.RoCE {
			t.Fatalf("frame %d of a capture of UDP port 4791 is not a whole RoCEv2 packet (%v)", tally.Packets, fm.Err)
		}
		events = append(events, an.Add(tally.Packets, time.Time{}, &dec.Packet, fm.ICRCOK))
	}
	return events
}

// resentFrames returns the frames (numbered from 1) that repeat a PSN
// their sender already sent, by a parse of its own: Ethernet II, IPv4,
// UDP to port 4791, then the BTH's opcode, destination QP and PSN. RC
// opcodes are requests (SEND, WRITE, READ request, atomics and the rest)
// or responses; among responses only READ responses carry PSNs of their
// own, ACKs and atomic ACKs repeat the PSN they acknowledge. The key is
// the sender's address, the destination QP and the class.
func resentFrames(frames []rxeguest.Frame) []int {
	type key struct {
		src      [4]byte
		qpn      uint32
		readResp bool
	}
	seen := map[key]map[uint32]bool{}
	var resent []int
	for i, f := range frames {
		b := f.Data
		if len(b) < 14 || binary.BigEndian.Uint16(b[12:]) != 0x0800 {
			continue
		}
		ip := b[14:]
		if len(ip) < 20 || ip[0]>>4 != 4 || ip[9] != 17 {
			continue
		}
		ihl := int(ip[0]&0x0f) * 4
		if len(ip) < ihl+8 {
			continue
		}
		udp := ip[ihl:]
		if binary.BigEndian.Uint16(udp[2:]) != 4791 || len(udp) < 8+12 {
			continue
		}
		bthb := udp[8:]
		op := bthb[0]
		if op>>5 != 0 { // not RC
			continue
		}
		var readResp bool
		switch {
		case op >= 0x0d && op <= 0x10: // RDMA READ response first, middle, last, only
			readResp = true
		case op == 0x11 || op == 0x12: // ACK, atomic ACK
			continue
		}
		k := key{[4]byte(ip[12:16]), uint32(bthb[5])<<16 | uint32(bthb[6])<<8 | uint32(bthb[7]), readResp}
		psn := uint32(bthb[9])<<16 | uint32(bthb[10])<<8 | uint32(bthb[11])
		if seen[k] == nil {
			seen[k] = map[uint32]bool{}
		}
		if seen[k][psn] {
			resent = append(resent, i+1)
		}
		seen[k][psn] = true
	}
	return resent
}

// setDiff returns the elements of a that are not in b.
func setDiff(a, b []int) []int {
	in := map[int]bool{}
	for _, x := range b {
		in[x] = true
	}
	var d []int
	for _, x := range a {
		if !in[x] {
			d = append(d, x)
		}
	}
	return d
}

// around returns the events of the first few frames in which the two
// counts disagree, with the frames just before each, as ladder lines.
func around(events []trace.Event, frames []int) string {
	slices.Sort(frames)
	var b strings.Builder
	for _, fr := range frames[:min(len(frames), 5)] {
		for _, ev := range events[max(0, fr-6):min(len(events), fr)] {
			fmt.Fprintf(&b, "%6d %s %s psn=%#06x destqp=%#06x %q\n", ev.Frame, ev.Src, ev.Opcode, uint32(ev.PSN), uint32(ev.DestQP), ev.Analysis)
		}
		b.WriteString("--\n")
	}
	return b.String()
}
