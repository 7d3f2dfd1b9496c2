package bth

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// Golden packets: whole frames captured between two rdma_rxe guests (see
// testdata/rxe/README.md). golden.hex holds the frames; golden.tshark holds
// what Wireshark's dissector, an independent decoder, says of each, so the
// expectations are not our own reading of the spec.

var updateTshark = flag.Bool("update-tshark", false, "regenerate testdata/rxe/golden.tshark with tshark")

type golden struct {
	label string
	frame []byte
}

func loadGoldens(t testing.TB) []golden {
	f, err := os.Open(filepath.Join("testdata", "rxe", "golden.hex"))
	if err != nil {
		t.Fatalf("golden packets missing: %v", err)
	}
	defer f.Close()
	var out []golden
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		label, hx, ok := strings.Cut(line, " ")
		if !ok {
			t.Fatalf("bad golden line %q", line)
		}
		b, err := hex.DecodeString(strings.TrimSpace(hx))
		if err != nil {
			t.Fatalf("%s: %v", label, err)
		}
		out = append(out, golden{label, b})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatal("no golden packets in testdata/rxe/golden.hex")
	}
	return out
}

func goldenFramesForSeed() [][]byte {
	b, err := os.ReadFile(filepath.Join("testdata", "rxe", "golden.hex"))
	if err != nil {
		return nil
	}
	var out [][]byte
	for _, line := range strings.Split(string(b), "\n") {
		if _, hx, ok := strings.Cut(strings.TrimSpace(line), " "); ok && line[0] != '#' {
			if f, err := hex.DecodeString(hx); err == nil {
				out = append(out, f)
			}
		}
	}
	return out
}

// tsharkFields are the Wireshark fields compared with our decoding.
var tsharkFields = []string{
	"ip.src", "ip.dst", "ipv6.src", "ipv6.dst", "udp.srcport",
	"infiniband.bth.opcode", "infiniband.bth.se", "infiniband.bth.m", "infiniband.bth.padcnt",
	"infiniband.bth.tver", "infiniband.bth.p_key", "infiniband.bth.destqp", "infiniband.bth.a",
	"infiniband.bth.psn", "infiniband.reth.va", "infiniband.reth.r_key", "infiniband.reth.dmalen",
	"infiniband.aeth.syndrome", "infiniband.aeth.msn", "infiniband.atomiceth.swapdt", "infiniband.atomiceth.cmpdt",
	"infiniband.atomicacketh.origremdt", "infiniband.immdt", "infiniband.ieth",
	"infiniband.deth.q_key", "infiniband.deth.srcqp",
}

// ourFields decodes p into the same field names.
func ourFields(p *Packet) map[string]string {
	m := map[string]string{}
	u := func(k string, v uint64) { m[k] = strconv.FormatUint(v, 10) }
	bl := func(k string, v bool) {
		if v {
			m[k] = "1"
		} else {
			m[k] = "0"
		}
	}
	if p.IPv6 {
		m["ipv6.src"], m["ipv6.dst"] = p.SrcAddr().String(), p.DstAddr().String()
	} else {
		m["ip.src"], m["ip.dst"] = p.SrcAddr().String(), p.DstAddr().String()
	}
	u("udp.srcport", uint64(p.SrcPort()))
	b := p.BTH()
	u("infiniband.bth.opcode", uint64(b.Opcode()))
	bl("infiniband.bth.se", b.SE())
	bl("infiniband.bth.m", b.MigReq())
	u("infiniband.bth.padcnt", uint64(b.PadCnt()))
	u("infiniband.bth.tver", uint64(b.TVer()))
	u("infiniband.bth.p_key", uint64(b.PKey()))
	u("infiniband.bth.destqp", uint64(b.DestQP()))
	bl("infiniband.bth.a", b.AckReq())
	u("infiniband.bth.psn", uint64(b.PSN()))
	if r := p.RETH(); r != nil {
		u("infiniband.reth.va", r.VA())
		u("infiniband.reth.r_key", uint64(r.RKey()))
		u("infiniband.reth.dmalen", uint64(r.DMALen()))
	}
	if a := p.AETH(); a != nil {
		u("infiniband.aeth.syndrome", uint64(a.Syndrome()))
		u("infiniband.aeth.msn", uint64(a.MSN()))
	}
	if a := p.AtomicETH(); a != nil {
		// Wireshark shows the AtomicETH address and key under the RETH
		// field names (its atomiceth.va and .r_key fields are disabled).
		u("infiniband.reth.va", a.VA())
		u("infiniband.reth.r_key", uint64(a.RKey()))
		u("infiniband.atomiceth.swapdt", a.SwapAdd())
		u("infiniband.atomiceth.cmpdt", a.Compare())
	}
	if a := p.AtomicAckETH(); a != nil {
		u("infiniband.atomicacketh.origremdt", a.OrigRemDt())
	}
	if i := p.ImmDt(); i != nil {
		u("infiniband.immdt", uint64(i.Value()))
	}
	if i := p.IETH(); i != nil {
		u("infiniband.ieth", uint64(i.RKey()))
	}
	if d := p.DETH(); d != nil {
		u("infiniband.deth.q_key", uint64(d.QKey()))
		u("infiniband.deth.srcqp", uint64(d.SrcQP()))
	}
	return m
}

// normTshark turns a tshark field value into our format: numbers in
// decimal, booleans as 0/1.
func normTshark(k, v string) string {
	if strings.HasPrefix(k, "ip") && !strings.HasPrefix(k, "infiniband") {
		return v
	}
	if k == "infiniband.immdt" || k == "infiniband.ieth" {
		// Wireshark shows these as byte strings: the wire bytes in hex.
		if n, err := strconv.ParseUint(strings.ReplaceAll(v, ":", ""), 16, 32); err == nil {
			return strconv.FormatUint(n, 10)
		}
	}
	switch v {
	case "True":
		return "1"
	case "False":
		return "0"
	}
	if n, err := strconv.ParseUint(v, 0, 64); err == nil {
		return strconv.FormatUint(n, 10)
	}
	return v
}

func loadTshark(t *testing.T) map[string]map[string]string {
	b, err := os.ReadFile(filepath.Join("testdata", "rxe", "golden.tshark"))
	if err != nil {
		t.Fatalf("tshark expectations missing (go test ./bth -run TestGolden -update-tshark): %v", err)
	}
	out := map[string]map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		f := strings.Fields(line)
		m := map[string]string{}
		for _, kv := range f[1:] {
			k, v, _ := strings.Cut(kv, "=")
			m[k] = v
		}
		out[f[0]] = m
	}
	return out
}

// writePcap writes frames as a classic pcap file with Ethernet link type.
func writePcap(path string, frames [][]byte) error {
	var buf bytes.Buffer
	hdr := make([]byte, 24)
	binary.LittleEndian.PutUint32(hdr[0:], 0xa1b2c3d4)
	binary.LittleEndian.PutUint16(hdr[4:], 2)
	binary.LittleEndian.PutUint16(hdr[6:], 4)
	binary.LittleEndian.PutUint32(hdr[16:], 65535)
	binary.LittleEndian.PutUint32(hdr[20:], 1)
	buf.Write(hdr)
	for i, f := range frames {
		rec := make([]byte, 16)
		binary.LittleEndian.PutUint32(rec[0:], uint32(i))
		binary.LittleEndian.PutUint32(rec[8:], uint32(len(f)))
		binary.LittleEndian.PutUint32(rec[12:], uint32(len(f)))
		buf.Write(rec)
		buf.Write(f)
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

func regenerateTshark(t *testing.T, gs []golden) {
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Fatal("-update-tshark needs tshark (apt-get install tshark)")
	}
	dir := t.TempDir()
	var frames [][]byte
	for _, g := range gs {
		frames = append(frames, g.frame)
	}
	pcap := filepath.Join(dir, "golden.pcap")
	if err := writePcap(pcap, frames); err != nil {
		t.Fatal(err)
	}
	args := []string{"-r", pcap, "-T", "fields", "-E", "separator=\t", "-E", "occurrence=f"}
	for _, f := range tsharkFields {
		args = append(args, "-e", f)
	}
	out, err := exec.Command(tshark, args...).Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) != len(gs) {
		t.Fatalf("tshark printed %d lines for %d frames", len(lines), len(gs))
	}
	ver, _ := exec.Command(tshark, "--version").Output()
	var w bytes.Buffer
	fmt.Fprintf(&w, "# What Wireshark's InfiniBand dissector decodes from each frame of golden.hex.\n")
	fmt.Fprintf(&w, "# Generated with: go test ./bth -run TestGolden -update-tshark\n# %s\n", strings.SplitN(string(ver), "\n", 2)[0])
	for i, line := range lines {
		vals := strings.Split(line, "\t")
		fmt.Fprintf(&w, "%s", gs[i].label)
		for j, v := range vals {
			if v != "" {
				fmt.Fprintf(&w, " %s=%s", tsharkFields[j], normTshark(tsharkFields[j], v))
			}
		}
		w.WriteString("\n")
	}
	if err := os.WriteFile(filepath.Join("testdata", "rxe", "golden.tshark"), w.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestGolden(t *testing.T) {
	gs := loadGoldens(t)
	if *updateTshark {
		regenerateTshark(t, gs)
	}
	want := loadTshark(t)
	ops := map[Opcode]bool{}
	for _, g := range gs {
		t.Run(g.label, func(t *testing.T) {
			var p Packet
			if err := p.Parse(g.frame); err != nil {
				t.Fatalf("parse: %v", err)
			}
			ops[p.Opcode] = true
			if !p.VerifyICRC() {
				t.Fatalf("ICRC %#08x, computed %#08x", p.ICRC(), p.ComputeICRC())
			}
			// Decoded fields agree with Wireshark's.
			w, ok := want[g.label]
			if !ok {
				t.Fatalf("no tshark expectation for %s", g.label)
			}
			got := ourFields(&p)
			keys := make([]string, 0, len(w))
			for k := range w {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				if got[k] != w[k] {
					t.Errorf("%s = %q, Wireshark says %q", k, got[k], w[k])
				}
			}
			for k := range got {
				if _, ok := w[k]; !ok && !strings.HasPrefix(k, "ip") && k != "udp.srcport" {
					t.Errorf("we decode %s=%s, Wireshark shows no such field", k, got[k])
				}
			}
			// Encoding the decoded fields rebuilds the same bytes.
			e, h := p.Encap(), p.Headers()
			again := make([]byte, len(p.Frame))
			n, err := Build(again, &e, &h, p.PayloadBytes())
			if err != nil || n != len(p.Frame) || !bytes.Equal(again, p.Frame) {
				t.Fatalf("rebuild differs (n=%d, err=%v)\n got %x\nwant %x", n, err, again, p.Frame)
			}
			if len(g.frame) != len(p.Frame) {
				t.Errorf("%d bytes of Ethernet padding after the datagram", len(g.frame)-len(p.Frame))
			}
			checkFlips(t, g.frame)
			checkPrefixes(t, g.frame)
		})
	}
	for _, op := range []Opcode{RCSendOnly, RCAcknowledge, UDSendOnly, RCWriteFirst, RCWriteMiddle,
		RCWriteLast, RCReadRequest, RCReadResponseFirst, RCReadResponseMiddle, RCReadResponseLast,
		RCFetchAdd, RCCompareSwap, RCAtomicAcknowledge, RCSendFirst, RCSendMiddle, RCSendLast,
		RCSendOnlyImm, RCSendLastImm, RCWriteOnlyImm, RCWriteLastImm} {
		if !ops[op] {
			t.Errorf("no golden packet with opcode %v", op)
		}
	}
}
