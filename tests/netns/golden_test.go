package netns

import (
	"bufio"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sroce/sroce/internal/rxeguest"
)

// TestGoldenFiles checks the committed golden files without privileges:
// every frame is a whole RoCEv2 frame with a correct ICRC, every label
// names the frame's opcode, and every capture has a pcap.
func TestGoldenFiles(t *testing.T) {
	f, err := os.Open(filepath.Join(goldenDir, "golden.hex"))
	if os.IsNotExist(err) {
		t.Skipf("no golden files yet; generate them as root with: %s", regenerate)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	labels := map[string]bool{}
	perCapture := map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		label, hx, ok := strings.Cut(line, " ")
		if !ok {
			t.Fatalf("line %d: no label", n)
		}
		if labels[label] {
			t.Errorf("line %d: duplicate label %s", n, label)
		}
		labels[label] = true
		capName, rest, ok := strings.Cut(label, "/")
		opName, _, ok2 := strings.Cut(rest, ".")
		if !ok || !ok2 {
			t.Fatalf("line %d: label %q is not capture/opcode.n", n, label)
		}
		frame, err := hex.DecodeString(hx)
		if err != nil {
			t.Fatalf("line %d: %v", n, err)
		}
		r, err := parseRoCE(frame)
		if err != nil {
			t.Errorf("%s: %v", label, err)
			continue
		}
		if !r.icrcOK {
			t.Errorf("%s: bad ICRC", label)
		}
		if got := opcodeName(r.opcode); got != opName {
			t.Errorf("%s: opcode is %s", label, got)
		}
		perCapture[capName]++
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	for _, k := range captureKinds {
		if perCapture[k.name] == 0 {
			t.Errorf("golden.hex has no %s frame", k.name)
		}
		frames, link, err := rxeguest.ReadPcapFile(filepath.Join(goldenDir, k.name+".pcap"))
		if err != nil {
			t.Errorf("%s.pcap: %v", k.name, err)
			continue
		}
		if link != rxeguest.LinkTypeEthernet || len(frames) == 0 {
			t.Errorf("%s.pcap: link type %d, %d frames", k.name, link, len(frames))
		}
		seen := map[byte]bool{}
		for i, fr := range frames {
			r, err := parseRoCE(fr.Data)
			if err != nil || !r.icrcOK || len(fr.Data) != fr.OrigLen {
				t.Errorf("%s.pcap frame %d: %v (ICRC ok %v, %d of %d bytes)", k.name, i, err, r.icrcOK, len(fr.Data), fr.OrigLen)
				continue
			}
			seen[r.opcode] = true
		}
		for _, op := range k.want {
			if !seen[op] {
				t.Errorf("%s.pcap: no %s frame", k.name, opcodeName(op))
			}
		}
	}
}
