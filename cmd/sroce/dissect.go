package main

// sroce dissect: the command line over package dissect, which decodes the
// RoCEv2 packets of a capture file (read by package capture as a stream),
// one line (or one JSON object) per packet, with the ICRC checked.

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/sroce/sroce/capture"
	"github.com/sroce/sroce/dissect"
)

// dissectAbout is the description printed by "sroce dissect -h".
const dissectAbout = `
Dissect reads a classic pcap or pcapng capture (gzip-compressed or not; FILE
"-" is standard input) and prints one line per RoCEv2 packet: the frame
number, IP source:UDP source port > IP destination, the opcode, the
destination QP (destqp) and the PSN (both in hex, as ibv_rc_pingpong and
perftest print them), the AckReq flag (and SE, FECN, BECN when set), the
payload length, whether the ICRC is correct, and the key fields of the
extended headers: RETH, AETH (ACK, RNR NAK or NAK, and MSN), AtomicETH,
AtomicAckETH, ImmDt, IETH, DETH and FETH. A management datagram to QP1
is named: a connection manager message (CM REQ, REP, RTU, REJ with its
reason, MRA, DREQ, DREP, SIDR_REQ, SIDR_REP, ClassPortInfo) with its
communication IDs, service ID (an RDMA CM one as its port space and port),
QPN, PSN and transaction ID; a MAD that does not decode says why. Frames
that are not RoCEv2 are counted as skipped; RoCEv2 frames that cannot be
decoded are printed with the reason. The last line sums up.

Link types: Ethernet (with at most one 802.1Q tag), Linux cooked capture
(SLL and SLL2, as written by tcpdump -i any), raw IP and BSD loopback.

With --json each RoCEv2 packet is a JSON object on a line of its own, keyed
by Wireshark's field names (infiniband.bth.psn, infiniband.reth.va, ...) so
that it can be compared with tshark's output; the summary goes to standard
error.

Exit status: 0 when every RoCEv2 packet decoded and its ICRC verified; 1
when an ICRC was wrong or a RoCEv2 packet was malformed, or when the input
could not be read (no such file, not a capture, a damaged file, a record
longer than 262144 bytes), with a sentence saying which; 2 for a bad
command line. The capture is read as a stream, so memory stays small
whatever its size or compression ratio.`

// openCapture opens the capture file path ("-": standard input) for the
// command cmd, and returns its reader, its name for messages and the
// function that closes it; on failure it says why on standard error and
// reports false.
func openCapture(e *env, cmd, path string) (capture.Reader, string, func() error, bool) {
	in, name, err := openInput(e, path)
	if err != nil {
		fmt.Fprintf(e.Stderr, "sroce %s: %v\n", cmd, err)
		return nil, "", nil, false
	}
	fr, err := capture.Open(in, name)
	if err != nil {
		in.Close()
		fmt.Fprintf(e.Stderr, "sroce %s: %s\n", cmd, errText(err))
		return nil, "", nil, false
	}
	return fr, name, in.Close, true
}

// runDissect implements "sroce dissect".
func runDissect(e *env, args []string) int {
	f := newFlags(e, "dissect", "sroce dissect [--json] FILE", dissectAbout)
	asJSON := f.Bool("json", false, "print one JSON object per packet, keyed by Wireshark field names")
	pos, status, ok := f.parse(args)
	if !ok {
		return status
	}
	if len(pos) != 1 {
		return f.usageError("expected one capture file (or - for standard input)")
	}
	fr, name, closeIn, ok := openCapture(e, "dissect", pos[0])
	if !ok {
		return exitProblem
	}
	defer closeIn()

	out := bufio.NewWriterSize(e.Stdout, 64<<10)
	format := dissect.Text
	if *asJSON {
		format = dissect.JSON
	}
	d := dissect.New(out, format)
	writeErr := d.Run(fr)
	var readErr *dissect.ReadError
	if errors.As(writeErr, &readErr) {
		writeErr = nil
	}
	summary := d.Tally.Summary()
	if format == dissect.Text {
		out.WriteString(summary)
		out.WriteByte('\n')
	}
	if err := out.Flush(); err != nil && writeErr == nil {
		writeErr = err
	}
	if format == dissect.JSON {
		fmt.Fprintln(e.Stderr, summary)
	}
	for _, note := range d.Tally.Notes() {
		fmt.Fprintf(e.Stderr, "sroce dissect: note: %s\n", note)
	}
	switch {
	case writeErr != nil:
		fmt.Fprintf(e.Stderr, "sroce dissect: writing the output: %s\n", errText(writeErr))
		return exitProblem
	case readErr != nil:
		fmt.Fprintf(e.Stderr, "sroce dissect: %s: the capture is damaged or cut short in packet %d: %s\n",
			name, readErr.Packet, errText(readErr.Err))
		return exitProblem
	case !d.Tally.OK():
		return exitProblem
	}
	return exitOK
}

// openInput opens the capture named by arg ("-" is standard input) and
// returns it with the name to use in messages.
func openInput(e *env, arg string) (io.ReadCloser, string, error) {
	if arg == "-" {
		return io.NopCloser(e.Stdin), "standard input", nil
	}
	f, err := os.Open(arg)
	if err != nil {
		return nil, arg, fmt.Errorf("cannot open %s: %s", arg, errText(err))
	}
	return f, arg, nil
}

// errText returns err's message without the "op path:" prefix of an
// fs.PathError, whose path the caller's sentence already names.
func errText(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}
