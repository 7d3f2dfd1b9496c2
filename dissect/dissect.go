// Package dissect decodes RoCEv2 packets for people: one line of text, or
// one JSON object keyed by Wireshark's field names, per packet, with the
// ICRC checked, and a count of what was seen.
//
// The pieces, each usable alone:
//
//   - Decoder turns one frame of a capture (any link type package capture
//     adapts) into a Frame: a RoCEv2 packet (left in Decoder.Packet), a
//     datagram to UDP port 4791 that is malformed or cut short by the snap
//     length, or something else to skip. PeekUDP is the look at the UDP
//     header behind that distinction.
//   - Printer appends a Frame's line, or a bth.Packet's (for packets taken
//     from a live link rather than a capture), to a byte slice, keeping the
//     text columns aligned from one line to the next.
//   - Tally counts Frames and writes the closing summary.
//   - Dissector joins the three over a capture.Reader and writes the lines
//     to an io.Writer: what `sroce dissect` runs.
//
// A UD SEND ONLY to QP1 carries a management datagram: DecodeMAD decodes
// it (a connection manager message through package cm), and the line, the
// JSON object and AppendFields name and show it.
//
// Everything is reused from one frame to the next: once its buffers have
// grown, decoding and printing a RoCEv2 packet allocates nothing (a
// management datagram aside: its message is decoded afresh), so a
// capture of any size is dissected in constant memory (package capture
// reads it one frame at a time). None of the types is safe for concurrent
// use; give each goroutine its own.
package dissect

import (
	"fmt"
	"io"

	"github.com/gopacket/gopacket/layers"
	"github.com/sroce/sroce/capture"
)

// Dissector dissects the frames of a capture: it decodes each, counts it
// and writes its line. Frames are numbered from 1, as Wireshark numbers
// them, and the number carries on from one Run to the next.
type Dissector struct {
	// Decoder decodes each frame; Decoder.Packet is the last RoCEv2 packet.
	Decoder Decoder
	// Printer formats the lines; its Format is the one given to New.
	Printer Printer
	// Tally counts the frames dissected so far.
	Tally Tally

	w    io.Writer
	line []byte // the output line being built
}

// New returns a Dissector that writes to w, in format, one line (or JSON
// object) per RoCEv2 packet and per malformed or cut-short datagram to UDP
// port 4791. Every line is one Write call, so w is best buffered (a
// bufio.Writer).
func New(w io.Writer, format Format) *Dissector {
	return &Dissector{w: w, Printer: Printer{Format: format}}
}

// ReadError reports a capture that could not be read to its end: it is
// damaged or cut short in packet Packet (numbered as frames are).
type ReadError struct {
	Packet int
	Err    error // what the capture reader returned
}

// Error returns "the capture is damaged or cut short in packet N: " and
// the reader's error.
func (e *ReadError) Error() string {
	return fmt.Sprintf("the capture is damaged or cut short in packet %d: %v", e.Packet, e.Err)
}

// Unwrap returns the reader's error.
func (e *ReadError) Unwrap() error { return e.Err }

// Run dissects every frame r yields until the end of the capture. It
// returns nil at a clean end, a *ReadError when the capture cannot be read
// further, and the writer's error when a line cannot be written. The lines
// written up to then stand, and Tally counts the frames dissected.
func (d *Dissector) Run(r capture.Reader) error {
	for {
		data, link, wireLen, err := r.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return &ReadError{Packet: d.Tally.Packets + 1, Err: err}
		}
		d.line = d.AppendFrame(d.line[:0], data, link, wireLen)
		if len(d.line) > 0 {
			if _, err := d.w.Write(d.line); err != nil {
				return err
			}
		}
	}
}

// AppendFrame dissects one frame, data as captured with its link type and
// length on the wire, counts it in Tally and appends its line to b (none
// for a frame that is not RoCEv2). It is Run's step, for callers that read
// frames themselves.
func (d *Dissector) AppendFrame(b, data []byte, link layers.LinkType, wireLen int) []byte {
	f := d.Decoder.Decode(data, link, wireLen)
	d.Tally.Add(f)
	return d.Printer.Append(b, d.Tally.Packets, f, &d.Decoder.Packet)
}
