package main

// sroce ladder: the command line over package trace. Frames are read from
// the capture by package capture, decoded by dissect.Decoder and fed to
// trace.Analyzer; the events come out as a text ladder per QP pair or as
// JSON lines.

import (
	"bufio"
	"fmt"
	"io"
	"time"

	"github.com/sroce/sroce/capture"
	"github.com/sroce/sroce/dissect"
	"github.com/sroce/sroce/trace"
)

// ladderAbout is the description printed by "sroce ladder -h".
const ladderAbout = `
Ladder reads a classic pcap or pcapng capture (gzip-compressed or not; FILE
"-" is standard input) and explains its reliable-connected RoCEv2 traffic as
a ladder diagram per QP pair: a header naming the two endpoints (IP address
and QPN; A is the side that sent first), then one line per packet with its
frame number, its time since the first RoCEv2 packet in seconds, an arrow
from the sender's column to the receiver's with the opcode, PSN and key
fields, and the analysis: retransmission, duplicate, out of sequence
(expected PSN), the PSNs an ACK acknowledges, RNR NAK with its timer, NAK
with its code, READ responses paired with their request, READ and atomic
requests outstanding, implied NAKs, bad ICRCs.

With --json each RoCEv2 packet is a JSON object on a line of its own, in
capture order (frame, time, qp_pair, src, dst, destqp, opcode, psn, ackreq,
aeth, msn, dmalen, len, icrc_ok, retransmission, analysis).

Frames that are not RoCEv2 are skipped and counted in the summary line on
standard error; RoCEv2 frames that cannot be decoded get a note there. The
text ladder holds each QP pair's lines until the end of the capture; the
analysis itself keeps a bounded state per QP pair.

Exit status: 0 when the capture was read, 1 when it could not be read (no
such file, not a capture, damaged), 2 for a bad command line.`

// runLadder implements "sroce ladder".
func runLadder(e *env, args []string) int {
	f := newFlags(e, "ladder", "sroce ladder [--json] CAPTURE", ladderAbout)
	asJSON := f.Bool("json", false, "print one JSON object per RoCEv2 packet")
	pos, status, ok := f.parse(args)
	if !ok {
		return status
	}
	if len(pos) != 1 {
		return f.usageError("expected one capture file (or - for standard input)")
	}
	fr, name, closeIn, ok := openCapture(e, "ladder", pos[0])
	if !ok {
		return exitProblem
	}
	defer closeIn()
	ts, _ := fr.(capture.Timestamper)

	out := bufio.NewWriterSize(e.Stdout, 64<<10)
	var (
		dec     dissect.Decoder
		tally   dissect.Tally
		an      trace.Analyzer
		ladder  = trace.NewLadder()
		line    []byte
		start   time.Time
		started bool
		readErr error
	)
	for {
		data, link, wireLen, err := fr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			readErr = err
			break
		}
		var t time.Time
		if ts != nil {
			t = ts.Timestamp()
		}
		fm := dec.Decode(data, link, wireLen)
		tally.Add(fm)
		frame := tally.Packets
		switch fm.Kind {
		case dissect.Malformed:
			fmt.Fprintf(e.Stderr, "sroce ladder: note: frame %d: malformed RoCEv2 packet from %s to %s, left out: %v\n",
				frame, fm.UDP.Src, fm.UDP.Dst, fm.Err)
			continue
		case dissect.Truncated:
			fmt.Fprintf(e.Stderr, "sroce ladder: note: frame %d: RoCEv2 packet from %s to %s cut short by the snap length, left out\n",
				frame, fm.UDP.Src, fm.UDP.Dst)
			continue
		case dissect.RoCE:
		default:
			continue
		}
		ev := an.Add(frame, t, &dec.Packet, fm.ICRCOK)
		if !started {
			start, started = t, true
		}
		if *asJSON {
			line = ev.AppendJSON(line[:0], t.Sub(start))
			if _, err := out.Write(line); err != nil {
				break
			}
			continue
		}
		ladder.Add(&ev)
	}
	if !*asJSON {
		ladder.Flush(out)
	}
	if err := out.Flush(); err != nil {
		fmt.Fprintf(e.Stderr, "sroce ladder: writing the output: %s\n", errText(err))
		return exitProblem
	}
	pairs := "QP pairs"
	if len(an.Conns()) == 1 {
		pairs = "QP pair"
	}
	fmt.Fprintf(e.Stderr, "%s; %d %s\n", tally.Summary(), len(an.Conns()), pairs)
	for _, note := range tally.Notes() {
		fmt.Fprintf(e.Stderr, "sroce ladder: note: %s\n", note)
	}
	if readErr != nil {
		fmt.Fprintf(e.Stderr, "sroce ladder: %s: the capture is damaged or cut short in packet %d: %s\n",
			name, tally.Packets+1, errText(readErr))
		return exitProblem
	}
	return exitOK
}
