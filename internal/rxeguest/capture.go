package rxeguest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/gopacket/gopacket/layers"
	"github.com/sroce/sroce/capture"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Capture is a tcpdump process writing a classic pcap file.
type Capture struct {
	Path   string
	cmd    *exec.Cmd
	mu     sync.Mutex
	stderr bytes.Buffer
	done   chan struct{}
	err    error
}

// StartCapture runs tcpdump on ifname inside ns, writing frames (whole, up
// to 64 KiB) that match the pcap filter (e.g. "udp port 4791") to path, and returns once
// tcpdump is listening. Stop ends it. On a bridge, capture on a guest's tap
// (Guest.Tap): the bridge device itself does not see forwarded frames.
func StartCapture(ctx context.Context, ns *Netns, ifname, path, filter string) (*Capture, error) {
	c := &Capture{Path: path, done: make(chan struct{})}
	// A 64 KiB snap length holds any frame rxe sends (path MTU <= 4096);
	// with the default of 256 KiB, libpcap's ring has room for so few
	// frames that a burst of 40 can overflow it. Each slot of the ring
	// is a snap length: -B 65536 (64 MiB) holds about 950 frames. 16 MiB
	// (about 240) overflowed while tcpdump waited for a CPU on a busy
	// two-CPU machine: 52 to 241 frames dropped by the kernel in three
	// runs of a lossy READ pair in a row.
	// --immediate-mode: without it libpcap uses TPACKET_V3 and hands a
	// block of frames to tcpdump only when the block fills or its timer
	// runs out, and the frames of a block still open when tcpdump is
	// stopped are counted as received but never written (a burst of 200
	// frames sent before Stop left 14 of them out, every time). With it,
	// every frame is handed over as it arrives and -U writes it at once.
	args := []string{"netns", "exec", ns.Name, "tcpdump", "-i", ifname, "-n", "-U", "--immediate-mode",
		"-Z", "root", "-s", "65535", "-B", "65536", "-w", path}
	if filter != "" {
		args = append(args, filter)
	}
	// -Z root: tcpdump must not switch to its own user, which would also
	// clear the parent-death signal that stops it if the test dies.
	c.cmd = exec.Command("ip", args...)
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	pr, pw := io.Pipe()
	c.cmd.Stderr = pw
	if err := startCmd(c.cmd); err != nil {
		return nil, err
	}
	listening := make(chan struct{})
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		sc := bufio.NewScanner(pr)
		once := false
		for sc.Scan() {
			c.mu.Lock()
			c.stderr.WriteString(sc.Text() + "\n")
			c.mu.Unlock()
			if !once && strings.Contains(sc.Text(), "listening on") {
				once = true
				close(listening)
			}
		}
		io.Copy(io.Discard, pr)
	}()
	go func() {
		c.err = c.cmd.Wait()
		pw.Close()
		<-readerDone
		close(c.done)
	}()
	select {
	case <-listening:
		return c, nil
	case <-c.done:
		c.mu.Lock()
		defer c.mu.Unlock()
		return nil, fmt.Errorf("tcpdump exited: %w: %s", c.err, strings.TrimSpace(c.stderr.String()))
	case <-ctx.Done():
		c.Stop()
		return nil, ctx.Err()
	case <-time.After(30 * time.Second):
		c.Stop()
		return nil, errors.New("tcpdump did not start listening")
	}
}

// Stop waits until the file has stopped growing (no new frame for 300 ms,
// at most 10 s), then ends tcpdump (SIGINT, so the file is complete) and
// waits for it. Complete then says whether the file holds every frame.
func (c *Capture) Stop() error {
	c.settle(300*time.Millisecond, 10*time.Second)
	syscall.Kill(-c.cmd.Process.Pid, syscall.SIGINT)
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
		<-c.done
	}
	var ee *exec.ExitError
	if c.err != nil && !errors.As(c.err, &ee) {
		return c.err
	}
	return nil
}

// Summary returns what tcpdump printed when it ended, such as
// "40 packets captured, 40 packets received by filter, 0 packets dropped
// by kernel" (valid after Stop).
func (c *Capture) Summary() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var parts []string
	for _, l := range strings.Split(c.stderr.String(), "\n") {
		if strings.Contains(l, "packets") {
			parts = append(parts, strings.TrimSpace(l))
		}
	}
	return strings.Join(parts, ", ")
}

// settle waits until the capture file's size has not changed for quiet,
// or until limit has passed.
func (c *Capture) settle(quiet, limit time.Duration) {
	size := int64(-1)
	stable := time.Now()
	for start := time.Now(); time.Since(start) < limit; time.Sleep(50 * time.Millisecond) {
		st, err := os.Stat(c.Path)
		if err != nil {
			return
		}
		if st.Size() != size {
			size, stable = st.Size(), time.Now()
		} else if time.Since(stable) >= quiet {
			return
		}
	}
}

// Stats are tcpdump's closing statistics.
type Stats struct {
	Captured int // frames written to the file
	Received int // frames that passed the filter
	Dropped  int // frames the kernel dropped for lack of ring space
}

// Stats parses what tcpdump printed when it ended (valid after Stop).
func (c *Capture) Stats() (Stats, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var s Stats
	found := 0
	for _, l := range strings.Split(c.stderr.String(), "\n") {
		l = strings.TrimSpace(l)
		for _, f := range []struct {
			suffix string
			dst    *int
		}{
			{" captured", &s.Captured}, {" received by filter", &s.Received}, {" dropped by kernel", &s.Dropped},
		} {
			rest, ok := strings.CutSuffix(l, f.suffix)
			if !ok {
				continue
			}
			num, _, _ := strings.Cut(rest, " ")
			n, err := strconv.Atoi(num)
			if err != nil {
				return s, fmt.Errorf("tcpdump statistics: %q", l)
			}
			*f.dst = n
			found++
		}
	}
	if found < 3 {
		return s, fmt.Errorf("tcpdump reported no statistics: %s", strings.TrimSpace(c.stderr.String()))
	}
	return s, nil
}

// ErrIncomplete is returned by Complete for a capture that misses frames.
var ErrIncomplete = errors.New("capture incomplete")

// Complete reports, after Stop, whether the file holds every frame the
// filter received: none dropped by the kernel, and as many written as
// received. The error wraps ErrIncomplete and gives tcpdump's figures.
func (c *Capture) Complete() error {
	s, err := c.Stats()
	if err != nil {
		return err
	}
	if s.Dropped > 0 || s.Captured != s.Received {
		return fmt.Errorf("%w: tcpdump wrote %d frames of the %d its filter received, %d dropped by the kernel",
			ErrIncomplete, s.Captured, s.Received, s.Dropped)
	}
	return nil
}

// Frame is one captured frame.
type Frame struct {
	Time    time.Time // when it was captured (written by AppendPcap; not read back)
	Data    []byte    // the captured bytes
	OrigLen int       // length on the wire
}

// Pcap link types.
const LinkTypeEthernet = 1

// ReadPcapFile reads a capture file (pcap or pcapng, through package
// capture) and returns its frames and the link type of the last one.
func ReadPcapFile(path string) ([]Frame, uint32, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	return readPcap(f, path)
}

// ParsePcap parses a capture held in memory.
func ParsePcap(b []byte) ([]Frame, uint32, error) {
	return readPcap(bytes.NewReader(b), "the capture")
}

func readPcap(r io.Reader, name string) ([]Frame, uint32, error) {
	cr, err := capture.Open(r, name)
	if err != nil {
		return nil, 0, err
	}
	var frames []Frame
	var link uint32
	for {
		data, lt, wire, err := cr.Next()
		if err == io.EOF {
			return frames, link, nil
		}
		if err != nil {
			return frames, link, err
		}
		link = uint32(lt)
		frames = append(frames, Frame{Data: append([]byte(nil), data...), OrigLen: wire})
	}
}

// AppendPcap encodes frames as a classic pcap file (through package
// capture's writer) and appends it to dst.
func AppendPcap(dst []byte, link uint32, frames []Frame) []byte {
	buf := bytes.NewBuffer(dst)
	w, err := capture.NewWriter(buf, layers.LinkType(link), 0)
	if err != nil {
		panic(err) // a bytes.Buffer does not fail
	}
	for _, f := range frames {
		if err := w.WriteFrame(f.Time, f.Data, f.OrigLen); err != nil {
			panic(err)
		}
	}
	return buf.Bytes()
}
