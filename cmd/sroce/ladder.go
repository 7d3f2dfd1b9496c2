package main

// sroce ladder: the command line over package trace. Frames are read from
// the capture by package capture, decoded by dissect.Decoder and fed to
// trace.Analyzer; the events come out as a text ladder per QP pair or as
// JSON lines, and with --html as an HTML page (trace.HTML).

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
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

With --html FILE the ladder is written to FILE as a self-contained HTML page
(inline SVG, style and script; it fetches nothing) instead of the text on
standard output; --json still prints its lines. The page has a diagram per QP
pair with an arrow per packet, labelled as in the text ladder and followed by
its analysis; runs of more than 5 packets in one direction are bursts that
open and close (those without trouble start closed); hovering over an arrow
shows every header field of the packet (Ethernet, IP, UDP, BTH, extended
headers, ICRC); retransmissions, duplicates, sequence gaps, RNR NAKs, NAKs
and bad ICRCs are drawn in colour, with a legend. The page draws at most
--html-arrows packets per QP pair and 10000 in all; it says how many more
there were and what trouble they showed.

Frames that are not RoCEv2 are skipped and counted in the summary line on
standard error; RoCEv2 frames that cannot be decoded get a note there. The
text ladder holds each QP pair's lines until the end of the capture; the
analysis itself keeps a bounded state per QP pair, and the HTML page what it
draws.

Exit status: 0 when the capture was read, 1 when it could not be read (no
such file, not a capture, damaged) or the page could not be written, 2 for
a bad command line.`

// runLadder implements "sroce ladder".
func runLadder(e *env, args []string) int {
	f := newFlags(e, "ladder", "sroce ladder [--json] [--html FILE [--html-arrows N]] CAPTURE", ladderAbout)
	asJSON := f.Bool("json", false, "print one JSON object per RoCEv2 packet")
	htmlPath := f.String("html", "", "write the ladder as an HTML page to `FILE` instead of the text ladder")
	htmlArrows := f.Int("html-arrows", trace.DefaultHTMLArrows, "draw at most `N` packets per QP pair in the HTML page")
	pos, status, ok := f.parse(args)
	if !ok {
		return status
	}
	if len(pos) != 1 {
		return f.usageError("expected one capture file (or - for standard input)")
	}
	if *htmlArrows < 1 || *htmlArrows > trace.MaxHTMLArrows {
		return f.usageError("--html-arrows must be between 1 and " + strconv.Itoa(trace.MaxHTMLArrows))
	}
	if *htmlPath != "" && pos[0] != "-" {
		in, err1 := os.Stat(pos[0])
		out, err2 := os.Stat(*htmlPath)
		if err1 == nil && err2 == nil && os.SameFile(in, out) {
			return f.usageError("the HTML page " + *htmlPath + " would overwrite the capture")
		}
	}
	fr, name, closeIn, ok := openCapture(e, "ladder", pos[0])
	if !ok {
		return exitProblem
	}
	defer closeIn()
	var page *trace.HTML
	var pageFile *os.File
	if *htmlPath != "" {
		// Created before the capture is read, so that a page that cannot
		// be written is said at once.
		pf, err := os.Create(*htmlPath)
		if err != nil {
			fmt.Fprintf(e.Stderr, "sroce ladder: cannot create the HTML page %s: %s\n", *htmlPath, errText(err))
			return exitProblem
		}
		defer pf.Close()
		page, pageFile = trace.NewHTML(*htmlArrows), pf
	}
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
		if page != nil {
			page.Add(&ev, &dec.Packet)
		}
		if *asJSON {
			line = ev.AppendJSON(line[:0], t.Sub(start))
			if _, err := out.Write(line); err != nil {
				break
			}
			continue
		}
		if page == nil {
			ladder.Add(&ev)
		}
	}
	if !*asJSON && page == nil {
		ladder.Flush(out)
	}
	if err := out.Flush(); err != nil {
		fmt.Fprintf(e.Stderr, "sroce ladder: writing the output: %s\n", errText(err))
		return exitProblem
	}
	pairs := "QP pairs"
	if an.Seen() == 1 {
		pairs = "QP pair"
	}
	summary := fmt.Sprintf("%s; %d %s", tally.Summary(), an.Seen(), pairs)
	if n := an.Forgotten(); n > 0 {
		summary += fmt.Sprintf(" (%d forgotten along the way: the analysis follows %d at once)", n, trace.MaxConns)
	}
	if page != nil {
		title := "sroce ladder " + filepath.Base(name)
		w := bufio.NewWriterSize(pageFile, 64<<10)
		err := page.Write(w, title, summary)
		if err == nil {
			err = w.Flush()
		}
		if err == nil {
			err = pageFile.Close()
		}
		if err != nil {
			fmt.Fprintf(e.Stderr, "sroce ladder: writing the HTML page %s: %s\n", *htmlPath, errText(err))
			return exitProblem
		}
	}
	fmt.Fprintln(e.Stderr, summary)
	if page != nil {
		fmt.Fprintf(e.Stderr, "sroce ladder: wrote %s: %d arrows for %d %s\n", *htmlPath, page.Arrows(), page.Conns(), pairs)
	}
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
