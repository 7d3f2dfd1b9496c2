package main

// sroce trace: attaches to a running device's trace socket (package
// roce/tracesock) and prints its engine events and packets on one
// timeline, the packets analysed by package trace as sroce ladder does.

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/gopacket/gopacket/layers"

	"github.com/sroce/sroce/capture"
	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/roce/tracesock"
	"github.com/sroce/sroce/trace"
)

// traceAbout is the description printed by "sroce trace -h".
const traceAbout = `
Trace attaches to a sroce device that is running in another process (the
tools, such as write-bw or rc-pingpong, sroce demo and sroce daemon serve
their devices' traces while they run) and prints what its engine does, live, on one
timeline: the work requests posted (wr_id, opcode, length), every packet
sent and received as a ladder line with the analysis of sroce ladder
(retransmission, duplicate, out of sequence, what an ACK acknowledges, NAKs
in words, ...), the timers armed, fired and stopped, retransmissions and
why (timeout, sequence NAK, RNR NAK, implied NAK), completions with their
status, and QP state changes. Times are seconds since the first event.

-d picks the device by name (sroce_veth0, or the interface name veth0),
by NAME.PID, or by the name "sroce trace" lists when several devices serve
their trace. --json prints one JSON object per line instead. --pcapng FILE
also writes the packets to a pcapng capture whose per-packet comments carry
the analysis, which Wireshark shows (Packet comments). --for stops after
that long; Ctrl-C stops at once.

The devices serve their traces on unix sockets in the runtime directory
($SROCE_RUNTIME_DIR, $XDG_RUNTIME_DIR/sroce, or /run/sroce as root). The
device never waits for the trace: when it is not read fast enough, events
are dropped and the trace says how many. When the device goes away, the
trace ends with a sentence saying so.

Exit status: 0 when the trace ran (until the device went away, --for or
Ctrl-C), 1 when there is no device to attach to or the trace could not be
read, 2 for a bad command line.`

// runTrace implements "sroce trace".
func runTrace(e *env, args []string) int {
	f := newFlags(e, "trace", "sroce trace [-d DEVICE] [--json] [--pcapng FILE] [--for DURATION]", traceAbout)
	dev := f.String("device", "", "the `DEVICE` to trace (see above)")
	f.Short('d', "device")
	asJSON := f.Bool("json", false, "print one JSON object per event")
	pcapng := f.String("pcapng", "", "also write the packets, with the analysis as comments, to pcapng `FILE`")
	dur := f.Duration("for", 0, "stop after this long (default: until the device goes away or Ctrl-C)")
	pos, status, ok := f.parse(args)
	if !ok {
		return status
	}
	if len(pos) != 0 {
		return f.usageError("trace takes no arguments")
	}
	if *dur < 0 {
		return f.usageError(badValue("--for", *dur, "must not be negative"))
	}
	cands, err := tracesock.List()
	if err != nil {
		fmt.Fprintf(e.Stderr, "sroce trace: %v\n", err)
		return exitProblem
	}
	pick := matchCandidates(cands, *dev)
	switch {
	case len(pick) == 0 && *dev != "":
		fmt.Fprintf(e.Stderr, "sroce trace: no device named %q serves its trace in %s%s\n", *dev, tracesock.Dir(), candidateList(cands))
		return exitProblem
	case len(pick) == 0:
		fmt.Fprintf(e.Stderr, "sroce trace: no sroce device serves its trace in %s (the sroce tools, sroce demo and sroce daemon serve their devices' traces while they run)\n", tracesock.Dir())
		return exitProblem
	case len(pick) > 1:
		fmt.Fprintf(e.Stderr, "sroce trace: %d devices serve their trace; pick one with -d%s\n", len(pick), candidateList(pick))
		return exitProblem
	}
	var pw *capture.NgWriter
	if *pcapng != "" {
		file, err := os.Create(*pcapng)
		if err != nil {
			fmt.Fprintf(e.Stderr, "sroce trace: cannot create the capture: %s\n", errText(err))
			return exitProblem
		}
		defer file.Close()
		if pw, err = capture.NewNgWriter(file, layers.LinkTypeEthernet, pick[0].Device); err != nil {
			fmt.Fprintf(e.Stderr, "sroce trace: cannot write the capture: %v\n", err)
			return exitProblem
		}
	}
	cl, err := tracesock.Dial(pick[0].Path, 5*time.Second)
	if err != nil {
		fmt.Fprintf(e.Stderr, "sroce trace: %s: %v\n", pick[0], err)
		return exitProblem
	}
	defer cl.Close()
	who := fmt.Sprintf("%s (pid %d)", cl.Device(), cl.PID())
	fmt.Fprintf(e.Stderr, "sroce trace: tracing %s; Ctrl-C stops\n", who)

	// Ctrl-C and --for end the trace by closing the connection under
	// the reading loop.
	stopped := make(chan string, 1)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	done := make(chan struct{})
	defer close(done)
	var timer <-chan time.Time
	if *dur > 0 {
		timer = time.After(*dur)
	}
	go func() {
		select {
		case s := <-sigs:
			stopped <- fmt.Sprintf("stopped by %v", s)
		case <-timer:
			stopped <- fmt.Sprintf("stopped after %v", *dur)
		case <-done:
			return
		}
		cl.Close()
	}()

	out := bufio.NewWriterSize(e.Stdout, 64<<10)
	var (
		tl                    trace.Timeline
		line                  []byte
		packets, events, lost uint64
		end                   string
		failed                error
	)
	for {
		ev, err := cl.Next()
		if err != nil {
			var ee *tracesock.EndError
			select {
			case s := <-stopped:
				end = s
			default:
				switch {
				case errors.As(err, &ee):
					end = fmt.Sprintf("%s went away: %s", who, ee.Reason)
				case errors.Is(err, io.ErrUnexpectedEOF):
					end = fmt.Sprintf("%s went away: its process closed the connection", who)
				default:
					failed = err
				}
			}
			break
		}
		wall := cl.Wall(ev.Time)
		entry, ok := tl.Add("", &ev, wall)
		switch ev.Kind {
		case roce.TraceTx, roce.TraceRx:
			packets++
			if pw != nil {
				dir, comment := capture.DirOutbound, ""
				if ev.Kind == roce.TraceRx {
					dir = capture.DirInbound
				}
				if ok && entry.Packet != nil {
					comment = "sroce: " + trace.Comment(&entry)
				}
				if err := pw.WriteFrame(wall, ev.Frame, ev.FrameLen, dir, comment); err != nil {
					failed = fmt.Errorf("writing the capture: %w", err)
				}
			}
		case roce.TraceLost:
			lost += ev.Lost
		default:
			events++
		}
		if failed != nil {
			break
		}
		if !ok {
			continue
		}
		if *asJSON {
			line = tl.AppendJSON(line[:0], &entry)
			out.Write(line)
		} else {
			if entry.NewPair {
				fmt.Fprintf(out, "%s\n", trace.PairHeader(entry.Packet.Conn))
			}
			out.WriteString(tl.Line(&entry))
			out.WriteByte('\n')
		}
		if cl.Buffered() == 0 {
			out.Flush()
		}
	}
	werr := out.Flush()
	if pw != nil {
		if err := pw.Flush(); err != nil && failed == nil {
			failed = fmt.Errorf("writing the capture: %w", err)
		}
	}
	if failed != nil {
		fmt.Fprintf(e.Stderr, "sroce trace: %s: %v\n", who, failed)
		return exitProblem
	}
	if werr != nil {
		fmt.Fprintf(e.Stderr, "sroce trace: writing the output: %s\n", errText(werr))
		return exitProblem
	}
	summary := fmt.Sprintf("%d packets, %d engine events", packets, events)
	if lost > 0 {
		summary += fmt.Sprintf(", %d events lost (the trace was not read fast enough)", lost)
	}
	if *pcapng != "" {
		summary += "; packets written to " + *pcapng
	}
	fmt.Fprintf(e.Stderr, "sroce trace: %s; %s.\n", end, summary)
	return exitOK
}

// matchCandidates returns the candidates -d names: by device name, by
// "sroce_" + interface, by NAME.PID or by socket name; all of them when
// -d is empty.
func matchCandidates(cands []tracesock.Candidate, d string) []tracesock.Candidate {
	if d == "" {
		return cands
	}
	var out []tracesock.Candidate
	for _, c := range cands {
		base := strings.TrimSuffix(filepath.Base(c.Path), ".sock")
		if base == d || c.Path == d {
			return []tracesock.Candidate{c}
		}
		if c.Device == d || c.Device == "sroce_"+d || fmt.Sprintf("%s.%d", c.Device, c.PID) == d {
			out = append(out, c)
		}
	}
	return out
}

// candidateList lists candidates for an error message, one a line, by
// the name -d takes.
func candidateList(cands []tracesock.Candidate) string {
	if len(cands) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString(":")
	for _, c := range cands {
		fmt.Fprintf(&b, "\n  %-24s %s", strings.TrimSuffix(filepath.Base(c.Path), ".sock"), c)
	}
	return b.String()
}
