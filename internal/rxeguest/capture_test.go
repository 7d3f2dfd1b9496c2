package rxeguest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestPcapRoundTrip(t *testing.T) {
	frames := []Frame{
		{Time: time.Unix(1700000000, 123456000).UTC(), Data: []byte{1, 2, 3, 4}, OrigLen: 4},
		{Time: time.Unix(1700000001, 0).UTC(), Data: bytes.Repeat([]byte{0xab}, 1082), OrigLen: 1082},
	}
	b := AppendPcap(nil, LinkTypeEthernet, frames)
	got, link, err := ParsePcap(b)
	if err != nil {
		t.Fatal(err)
	}
	if link != LinkTypeEthernet || len(got) != len(frames) {
		t.Fatalf("link %d, %d frames", link, len(got))
	}
	for i := range frames {
		if !bytes.Equal(got[i].Data, frames[i].Data) || got[i].OrigLen != frames[i].OrigLen {
			t.Errorf("frame %d: got %+v", i, got[i])
		}
	}
	// A prefix that does not end at a record boundary is rejected.
	for n := 0; n < len(b); n++ {
		fs, _, err := ParsePcap(b[:n])
		if err == nil && n != 24 && n != 24+16+4 { // header only; first record only
			t.Errorf("prefix %d: no error (%d frames)", n, len(fs))
		}
	}
	// Big-endian, nanosecond files parse too.
	be := binary.BigEndian
	var h []byte
	h = be.AppendUint32(h, 0xa1b23c4d)
	h = be.AppendUint16(h, 2)
	h = be.AppendUint16(h, 4)
	h = append(h, make([]byte, 8)...)
	h = be.AppendUint32(h, 65535)
	h = be.AppendUint32(h, 1)
	h = be.AppendUint32(h, 10)
	h = be.AppendUint32(h, 7)
	h = be.AppendUint32(h, 2)
	h = be.AppendUint32(h, 2)
	h = append(h, 0xde, 0xad)
	got, _, err = ParsePcap(h)
	if err != nil || len(got) != 1 || !bytes.Equal(got[0].Data, []byte{0xde, 0xad}) {
		t.Errorf("big-endian nanosecond file: %+v, %v", got, err)
	}
}

func TestRecipeKeyStable(t *testing.T) {
	if a, b := RecipeKey(), RecipeKey(); a != b || len(a) < 10 {
		t.Errorf("RecipeKey: %q, %q", a, b)
	}
}

func TestCaptureStats(t *testing.T) {
	c := &Capture{}
	c.stderr.WriteString("tcpdump: listening on tap0, link-type EN10MB (Ethernet), snapshot length 65535 bytes\n" +
		"12 packets captured\n42 packets received by filter\n0 packets dropped by kernel\n")
	s, err := c.Stats()
	if err != nil || s != (Stats{Captured: 12, Received: 42}) {
		t.Fatalf("got %+v, %v", s, err)
	}
	if err := c.Complete(); !errors.Is(err, ErrIncomplete) || !strings.Contains(err.Error(), "12 frames of the 42") {
		t.Fatalf("a capture that wrote 12 of 42 frames: %v", err)
	}
	c.stderr.Reset()
	c.stderr.WriteString("1 packet captured\n1 packet received by filter\n0 packets dropped by kernel\n")
	if err := c.Complete(); err != nil {
		t.Fatalf("a whole capture: %v", err)
	}
	c.stderr.Reset()
	c.stderr.WriteString("40 packets captured\n41 packets received by filter\n1 packet dropped by kernel\n")
	if err := c.Complete(); !errors.Is(err, ErrIncomplete) {
		t.Fatalf("a capture with a kernel drop: %v", err)
	}
	c.stderr.Reset()
	c.stderr.WriteString("tcpdump: bad filter\n")
	if err := c.Complete(); err == nil || errors.Is(err, ErrIncomplete) {
		t.Fatalf("no statistics: %v", err)
	}
}

// TestCaptureBurst captures a burst sent the moment before Stop: every
// frame the filter received must be in the file, whatever the speed of the
// machine.
func TestCaptureBurst(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates a network namespace and runs tcpdump")
	}
	if _, err := exec.LookPath("tcpdump"); err != nil {
		t.Skip("needs tcpdump (apt-get install tcpdump)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns, err := NewNetns(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	// A veth pair: each frame sent on v0 arrives once on v1 (on lo the
	// filter would see every packet twice, going out and coming in).
	for _, args := range [][]string{
		{"link", "add", "v0", "mtu", "9000", "type", "veth", "peer", "name", "v1", "mtu", "9000"},
		{"link", "set", "v0", "up"}, {"link", "set", "v1", "up"},
	} {
		if out, err := ns.IP(ctx, args...); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	for round := 0; round < 3; round++ {
		path := filepath.Join(t.TempDir(), "burst.pcap")
		c, err := StartCapture(ctx, ns, "v1", path, "udp dst port 4791")
		if err != nil {
			t.Fatal(err)
		}
		const n = 200
		// 4 KiB frames, the size of the frames that went missing, sent
		// raw out of v0 as fast as the socket takes them.
		script := fmt.Sprintf(`import socket,struct
s=socket.socket(socket.AF_PACKET,socket.SOCK_RAW)
s.bind(("v0",0))
pay=bytes(4096)
udp=struct.pack("!HHHH",49152,4791,8+len(pay),0)
ip=struct.pack("!BBHHHBBH4s4s",0x45,0,20+len(udp)+len(pay),0,0x4000,64,17,0,bytes([10,9,0,1]),bytes([10,9,0,2]))
eth=bytes([2,0,0,0,0,2,2,0,0,0,0,1,8,0])
for i in range(%d): s.send(eth+ip+udp+pay)`, n)
		if out, err := ns.Exec(ctx, "python3", "-c", script); err != nil {
			c.Stop()
			t.Fatalf("sending: %v: %s", err, out)
		}
		if err := c.Stop(); err != nil {
			t.Fatal(err)
		}
		if err := c.Complete(); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		frames, _, err := ReadPcapFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if len(frames) != n {
			t.Fatalf("round %d: %d frames in the file, sent %d (%s)", round, len(frames), n, c.Summary())
		}
	}
}
