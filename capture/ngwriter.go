package capture

// Writing pcapng with per-packet comments (sroce trace --pcapng), through
// gopacket's pcapgo.

import (
	"fmt"
	"io"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// Direction of a frame in a pcapng record, seen from the capturing
// device.
type Direction uint8

// Directions.
const (
	DirUnknown Direction = iota
	DirInbound
	DirOutbound
)

// NgWriter writes a pcapng file with one interface; each record may carry
// a comment and its direction. Flush before closing the file.
type NgWriter struct {
	w *pcapgo.NgWriter
}

// NewNgWriter writes the section and interface headers (the interface
// named name, of link type link) to w.
func NewNgWriter(w io.Writer, link layers.LinkType, name string) (*NgWriter, error) {
	intf := pcapgo.DefaultNgInterface
	intf.LinkType = link
	intf.Name = name
	intf.SnapLength = MaxRecordLen
	nw, err := pcapgo.NewNgWriterInterface(w, intf, pcapgo.DefaultNgWriterOptions)
	if err != nil {
		return nil, err
	}
	return &NgWriter{w: nw}, nil
}

// WriteFrame writes one record: data, captured at t, of a frame wireLen
// bytes long (len(data) when smaller), in direction dir, with comment
// (none when empty).
func (w *NgWriter) WriteFrame(t time.Time, data []byte, wireLen int, dir Direction, comment string) error {
	if len(data) > MaxRecordLen {
		return fmt.Errorf("a %d-byte record is longer than a capture holds (%d)", len(data), MaxRecordLen)
	}
	var opts pcapgo.NgPacketOptions
	if comment != "" {
		opts.Comments = []string{comment}
	}
	switch dir {
	case DirInbound:
		opts.Flags = &pcapgo.NgEpbFlags{Direction: pcapgo.NgEpbFlagDirectionInbound}
	case DirOutbound:
		opts.Flags = &pcapgo.NgEpbFlags{Direction: pcapgo.NgEpbFlagDirectionOutbound}
	}
	return w.w.WritePacketWithOptions(gopacket.CaptureInfo{
		Timestamp:     t,
		CaptureLength: len(data),
		Length:        max(wireLen, len(data)),
	}, data, opts)
}

// Flush writes what is buffered.
func (w *NgWriter) Flush() error { return w.w.Flush() }
