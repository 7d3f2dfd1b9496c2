package netns

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sroce/sroce/internal/rxeguest"
)

var update = flag.Bool("update", false, "capture fresh rxe traffic and rewrite the golden files in "+goldenDir)

// goldenDir is where -update writes, relative to this package.
const goldenDir = "../../bth/testdata/rxe"

// regenerate is the one command that rewrites the golden files.
const regenerate = "go test ./tests/netns -run 'TestCaptureGoldens' -update -v -timeout 30m"

// A captureStep runs a reference tool pair: server on guest A, client on
// guest B with A's address appended.
type captureStep struct {
	port           int
	server, client string
}

// A captureKind is one golden capture.
type captureKind struct {
	name  string // file name without .pcap, label prefix in golden.hex
	about string
	steps []captureStep
	want  []byte // BTH opcodes that must appear
}

// same returns a step whose server and client run the same command line.
func same(port int, format string) captureStep {
	cmd := fmt.Sprintf(format, port)
	return captureStep{port: port, server: cmd, client: cmd}
}

var captureKinds = []captureKind{
	{
		name:  "rc_pingpong",
		about: "ibv_rc_pingpong (rdma-core), RC SEND: 64-byte messages (SEND ONLY), then 4096-byte ones (SEND FIRST/MIDDLE/LAST)",
		steps: []captureStep{
			same(18601, "ibv_rc_pingpong -d rxe0 -g 1 -p %d -n 3 -s 64"),
			same(18602, "ibv_rc_pingpong -d rxe0 -g 1 -p %d -n 3 -s 4096"),
		},
		want: []byte{0x04, 0x00, 0x01, 0x02, 0x11},
	},
	{
		name:  "ud_pingpong",
		about: "ibv_ud_pingpong (rdma-core), UD SEND ONLY with DETH",
		steps: []captureStep{same(18603, "ibv_ud_pingpong -d rxe0 -g 1 -p %d -n 3 -s 512")},
		want:  []byte{0x64},
	},
	{
		name: "send_imm",
		about: "sroce-imm (internal/rxeguest/guest/sroce-imm.c): RC SEND with immediate and RDMA WRITE with immediate, " +
			"64-byte (ONLY) and 4096-byte (FIRST/MIDDLE/LAST) messages; perftest 4.5 has no immediate-data option",
		steps: []captureStep{same(18604, rxeguest.ImmTool+" -d rxe0 -g 1 -p %d -n 4 -s 4096")},
		want:  []byte{0x05, 0x00, 0x01, 0x03, 0x0b, 0x06, 0x07, 0x09, 0x11},
	},
	{
		name:  "write_bw",
		about: "ib_write_bw (perftest), RC RDMA WRITE of 8192 bytes with path MTU 1024",
		steps: []captureStep{same(18605, "ib_write_bw -d rxe0 -x 1 -F -m 1024 -s 8192 -n 5 -p %d")},
		want:  []byte{0x06, 0x07, 0x08, 0x11},
	},
	{
		name:  "read_bw",
		about: "ib_read_bw (perftest), RC RDMA READ of 8192 bytes with path MTU 1024",
		steps: []captureStep{same(18606, "ib_read_bw -d rxe0 -x 1 -F -m 1024 -s 8192 -n 5 -p %d")},
		want:  []byte{0x0c, 0x0d, 0x0e, 0x0f},
	},
	{
		name:  "atomic_fadd",
		about: "ib_atomic_bw (perftest) -A FETCH_AND_ADD",
		steps: []captureStep{same(18607, "ib_atomic_bw -d rxe0 -x 1 -F -A FETCH_AND_ADD -n 5 -p %d")},
		want:  []byte{0x14, 0x12},
	},
	{
		name:  "atomic_cmpswp",
		about: "ib_atomic_bw (perftest) -A CMP_AND_SWAP",
		steps: []captureStep{same(18608, "ib_atomic_bw -d rxe0 -x 1 -F -A CMP_AND_SWAP -n 5 -p %d")},
		want:  []byte{0x13, 0x12},
	},
}

// captured is the outcome of one captureKind.
type captured struct {
	kind   captureKind
	frames []rxeguest.Frame
	roce   []roceFrame
}

// TestCaptureGoldens runs every reference tool pair between the two rxe
// guests while tcpdump captures RoCEv2 frames on guest A's tap, and checks
// that each capture holds whole, ICRC-correct frames with the expected
// opcodes. With -update it also rewrites the golden files.
func TestCaptureGoldens(t *testing.T) {
	laneParallel(t, 35*time.Second, needPair)
	p := sharedPair(t)
	ctx := testContext(t, 10*time.Minute)
	dir := t.TempDir()
	var all []captured
	for _, k := range captureKinds {
		t.Run(k.name, func(t *testing.T) {
			start := time.Now()
			var c captured
			var err error
			// A capture that lost frames is retried: it would not show
			// what rxe sent.
			for try := 1; ; try++ {
				c, err = capture(ctx, t, p, k, filepath.Join(dir, k.name+".pcap"))
				if !errors.Is(err, rxeguest.ErrIncomplete) || try == 3 {
					break
				}
				t.Logf("try %d: %v; again", try, err)
			}
			if err != nil {
				t.Fatal(err)
			}
			counts := map[byte]int{}
			for i, r := range c.roce {
				counts[r.opcode]++
				if !r.icrcOK {
					t.Errorf("frame %d (%s): bad ICRC", i, opcodeName(r.opcode))
				}
			}
			for _, op := range k.want {
				if counts[op] == 0 {
					t.Errorf("no %s (%#02x) frame", opcodeName(op), op)
				}
			}
			t.Logf("%d frames in %v: %s", len(c.frames), time.Since(start).Round(time.Millisecond), opcodeSummary(counts))
			all = append(all, c)
		})
	}
	if t.Failed() || !*update {
		return
	}
	if err := writeGoldens(goldenDir, shared.img, all); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote golden files to %s", goldenDir)
}

// capture runs k's steps under tcpdump and returns the parsed frames.
func capture(ctx context.Context, t *testing.T, p *rxeguest.Pair, k captureKind, path string) (captured, error) {
	c := captured{kind: k}
	tc, err := rxeguest.StartCapture(ctx, p.LAN.NS, p.A.Tap(), path, fmt.Sprintf("udp port %d", roceUDPPort))
	if err != nil {
		return c, err
	}
	stopped := false
	defer func() {
		if !stopped {
			tc.Stop()
		}
	}()
	for _, s := range k.steps {
		srv, cli, err := runToolPair(ctx, p.A, p.B, s.port, s.server, s.client)
		if err != nil {
			return c, err
		}
		t.Logf("server: %s", lastLines(srv.Stdout, 3))
		t.Logf("client: %s", lastLines(cli.Stdout, 3))
	}
	// Stop waits for the last ACK on its way through the bridge.
	stopped = true
	if err := tc.Stop(); err != nil {
		return c, err
	}
	t.Logf("tcpdump: %s", tc.Summary())
	if err := tc.Complete(); err != nil {
		return c, err
	}
	if keep := os.Getenv("SROCE_CAPTURE_DIR"); keep != "" {
		if b, err := os.ReadFile(path); err == nil {
			os.WriteFile(filepath.Join(keep, filepath.Base(path)), b, 0o644)
		}
	}
	frames, link, err := rxeguest.ReadPcapFile(path)
	if err != nil {
		return c, err
	}
	if link != rxeguest.LinkTypeEthernet {
		return c, fmt.Errorf("link type %d, want Ethernet", link)
	}
	if len(frames) == 0 {
		return c, fmt.Errorf("no RoCEv2 frame captured")
	}
	for i, f := range frames {
		if len(f.Data) != f.OrigLen {
			return c, fmt.Errorf("frame %d truncated: %d of %d bytes", i, len(f.Data), f.OrigLen)
		}
		r, err := parseRoCE(f.Data)
		if err != nil {
			return c, fmt.Errorf("frame %d: %v", i, err)
		}
		c.roce = append(c.roce, r)
	}
	c.frames = frames
	return c, nil
}

func lastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

func opcodeSummary(counts map[byte]int) string {
	ops := make([]byte, 0, len(counts))
	for op := range counts {
		ops = append(ops, op)
	}
	slices.Sort(ops)
	var parts []string
	for _, op := range ops {
		parts = append(parts, fmt.Sprintf("%s(%#02x)x%d", opcodeName(op), op, counts[op]))
	}
	return strings.Join(parts, " ")
}

// Trimming: a golden pcap keeps the first keepFirst frames and the first
// perOpcode frames of every opcode; golden.hex gets hexPerOpcode frames of
// every opcode.
const (
	keepFirst    = 6
	perOpcode    = 2
	hexPerOpcode = 2
)

// pick returns the indexes of the frames to keep, in capture order.
func pick(c captured, first, each int) []int {
	keep := map[int]bool{}
	for i := 0; i < first && i < len(c.frames); i++ {
		keep[i] = true
	}
	seen := map[byte]int{}
	for i, r := range c.roce {
		if seen[r.opcode] < each {
			seen[r.opcode]++
			keep[i] = true
		}
	}
	idx := make([]int, 0, len(keep))
	for i := range keep {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	return idx
}

func writeGoldens(dir string, img *rxeguest.Image, all []captured) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	date := time.Now().UTC().Format("2006-01-02")
	var hx bytes.Buffer
	fmt.Fprintf(&hx, `# Golden RoCEv2 frames sent by rdma_rxe, captured %s.
# Two qemu (TCG) guests running Debian bookworm, kernel %s,
# %s,
# on one Linux bridge; eth0 MTU 1500, so rxe's path MTU is 1024. Captured
# with tcpdump -s 65535 'udp port %d' on the host side of guest A's tap: both
# directions, whole Ethernet frames (no FCS), ICRC included, bytes as
# captured. Guest A (server) is 192.0.2.1, guest B (client) 192.0.2.2.
# Regenerate everything in this folder with:
#   %s
# Format: <capture>/<opcode name>.<n> <hex of the whole Ethernet frame>
# where n counts frames of that opcode within the capture.
`, date, img.KernelRelease, img.PackageList(), roceUDPPort, regenerate)

	var readme bytes.Buffer
	fmt.Fprintf(&readme, "# rdma_rxe golden captures\n\n"+
		"Real RoCEv2 traffic between two rdma_rxe devices (Linux %s in qemu\n"+
		"guests, Debian bookworm: %s), captured %s with\n"+
		"`tcpdump -s 65535 'udp port %d'` on the host side of one guest's tap, so both\n"+
		"directions are present. Frames are whole Ethernet frames including the 4-byte\n"+
		"ICRC, exactly as captured (the pcaps are trimmed copies of the full captures:\n"+
		"the first %d frames and the first %d of every opcode, timestamps kept).\n\n"+
		"Regenerate everything here (root, qemu-system-x86, debootstrap, e2fsprogs,\n"+
		"tcpdump; see tests/netns/README.md):\n\n    %s\n\n"+
		"- `golden.hex`: %d frames of every opcode of every capture, one per line,\n"+
		"  `<capture>/<opcode name>.<n> <hex>`; `#` lines say where they came from.\n"+
		"- `<capture>.pcap`: classic pcap, link type Ethernet.\n"+
		"- `golden.tshark` (not written by the command above): tshark's decoding of\n"+
		"  `golden.hex`, kept by the bth tests; after regenerating, refresh it with\n"+
		"  `go test ./bth -run TestGolden -update-tshark`.\n\n"+
		"Guest A (server side of each tool) is 192.0.2.1, guest B (client) 192.0.2.2;\n"+
		"path MTU 1024 (eth0 MTU 1500); GID index 1 (IPv4-mapped RoCEv2 GID).\n\n"+
		"| capture | what ran | frames kept / captured | opcodes (count in full capture) |\n"+
		"| --- | --- | --- | --- |\n",
		img.KernelRelease, img.PackageList(), date, roceUDPPort, keepFirst, perOpcode, regenerate, hexPerOpcode)

	for _, c := range all {
		idx := pick(c, keepFirst, perOpcode)
		frames := make([]rxeguest.Frame, len(idx))
		for i, j := range idx {
			frames[i] = c.frames[j]
		}
		if err := os.WriteFile(filepath.Join(dir, c.kind.name+".pcap"),
			rxeguest.AppendPcap(nil, rxeguest.LinkTypeEthernet, frames), 0o644); err != nil {
			return err
		}

		fmt.Fprintf(&hx, "#\n# %s: %s\n", c.kind.name, c.kind.about)
		var cmds []string
		for _, s := range c.kind.steps {
			fmt.Fprintf(&hx, "#   server (A): %s\n#   client (B): %s 192.0.2.1\n", s.server, s.client)
			cmds = append(cmds, fmt.Sprintf("`%s` / `%s 192.0.2.1`", s.server, s.client))
		}
		counts := map[byte]int{}
		for _, i := range pick(c, 0, hexPerOpcode) {
			r := c.roce[i]
			fmt.Fprintf(&hx, "%s/%s.%d %s\n", c.kind.name, opcodeName(r.opcode), counts[r.opcode], hex.EncodeToString(c.frames[i].Data))
			counts[r.opcode]++
		}
		full := map[byte]int{}
		for _, r := range c.roce {
			full[r.opcode]++
		}
		fmt.Fprintf(&readme, "| `%s.pcap` | %s: %s | %d / %d | %s |\n", c.kind.name, c.kind.about,
			strings.Join(cmds, ", then "), len(idx), len(c.frames), opcodeSummary(full))
	}
	if err := os.WriteFile(filepath.Join(dir, "golden.hex"), hx.Bytes(), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "README.md"), readme.Bytes(), 0o644)
}
