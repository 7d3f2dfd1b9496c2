package dissect

import (
	"bytes"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sroce/sroce/internal/capturetest"
)

// goldenDir holds the rdma_rxe captures committed with the repository
// (made by tests/netns, TestCaptureGoldens).
const goldenDir = "../bth/testdata/rxe"

// goldenRegenerate says how the golden captures are made.
const goldenRegenerate = "go test ./tests/netns -run TestCaptureGoldens -update -v -timeout 30m (as root)"

// goldenWant lists, per golden capture, the opcodes it must contain. Every
// capture listed must exist and every capture in goldenDir must be listed.
var goldenWant = map[string][]string{
	"rc_pingpong": {"RC_SEND_ONLY", "RC_SEND_FIRST", "RC_SEND_MIDDLE", "RC_SEND_LAST", "RC_ACKNOWLEDGE"},
	"ud_pingpong": {"UD_SEND_ONLY"},
	"send_imm": {"RC_SEND_ONLY_WITH_IMMEDIATE", "RC_SEND_FIRST", "RC_SEND_MIDDLE", "RC_SEND_LAST_WITH_IMMEDIATE",
		"RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", "RC_RDMA_WRITE_FIRST", "RC_RDMA_WRITE_MIDDLE",
		"RC_RDMA_WRITE_LAST_WITH_IMMEDIATE", "RC_ACKNOWLEDGE"},
	"write_bw": {"RC_RDMA_WRITE_FIRST", "RC_RDMA_WRITE_MIDDLE", "RC_RDMA_WRITE_LAST", "RC_ACKNOWLEDGE"},
	"read_bw": {"RC_RDMA_READ_REQUEST", "RC_RDMA_READ_RESPONSE_FIRST", "RC_RDMA_READ_RESPONSE_MIDDLE",
		"RC_RDMA_READ_RESPONSE_LAST"},
	"atomic_fadd":   {"RC_FETCH_ADD", "RC_ATOMIC_ACKNOWLEDGE"},
	"atomic_cmpswp": {"RC_COMPARE_SWAP", "RC_ATOMIC_ACKNOWLEDGE"},
}

// goldenCaptures returns the golden pcap files. It marks the test failed
// when there are none: the captures are part of the repository.
func goldenCaptures(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(goldenDir, "*.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Errorf("no golden captures in %s; they belong to the repository, regenerate them with: %s",
			goldenDir, goldenRegenerate)
	}
	return files
}

// TestDissectGoldenCaptures runs dissect over every rdma_rxe capture: every
// packet must be RoCEv2 with a correct ICRC, and each capture must contain
// the opcodes of its kind of traffic.
func TestDissectGoldenCaptures(t *testing.T) {
	files := goldenCaptures(t)
	if len(files) == 0 {
		return
	}
	have := map[string]bool{}
	for _, path := range files {
		name := strings.TrimSuffix(filepath.Base(path), ".pcap")
		have[name] = true
		t.Run(name, func(t *testing.T) {
			b := readFile(t, path)
			out, d := dissectBytes(t, b, Text)
			if !d.Tally.OK() || d.Tally.Notes() != nil {
				t.Errorf("%+v, notes %q\n%s", d.Tally, d.Tally.Notes(), out)
			}
			lines, summary := textLines(t, out)
			n := len(lines)
			if n == 0 {
				t.Fatalf("no packets")
			}
			want := fmt.Sprintf("%d packets: %d RoCEv2, 0 skipped (not RoCEv2), 0 malformed, 0 ICRC failures", n, n)
			if summary != want {
				t.Errorf("summary %q, want %q", summary, want)
			}

			out, d = dissectBytes(t, b, JSON)
			if !d.Tally.OK() {
				t.Errorf("JSON: %+v", d.Tally)
			}
			objs := jsonObjects(t, out)
			if len(objs) != n {
				t.Errorf("%d JSON objects, %d text lines", len(objs), n)
			}
			seen := map[string]bool{}
			for i, o := range objs {
				if o["icrc_ok"] != true {
					t.Errorf("frame %d: %v", i, o)
				}
				name, _ := o["opcode_name"].(string)
				seen[name] = true
			}
			wantOps, ok := goldenWant[name]
			if !ok {
				t.Errorf("no expected opcodes for %s.pcap: add it to goldenWant", name)
			}
			for _, op := range wantOps {
				if !seen[op] {
					t.Errorf("no %s packet; the capture has %s", op, strings.Join(slices.Sorted(maps.Keys(seen)), " "))
				}
			}
		})
	}
	for name := range goldenWant {
		if !have[name] {
			t.Errorf("missing golden capture %s.pcap in %s (regenerate with: %s)", name, goldenDir, goldenRegenerate)
		}
	}
}

// update rewrites the expected outputs in testdata instead of comparing.
var update = flag.Bool("update", false, "rewrite the expected outputs in testdata from what dissect prints now")

// readFile returns the contents of the file at path.
func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestDissectOutput pins the output byte for byte: text (summary line
// included, as sroce dissect prints it) and JSON for every golden capture
// (package cm's RDMA CM captures too) and for the fixture frames, against
// testdata/NAME.txt and NAME.json.
// After a deliberate change of the output, rewrite them with
// go test ./dissect -run TestDissectOutput -update and review the diff.
func TestDissectOutput(t *testing.T) {
	inputs := map[string][]byte{"fixtures": fixturePcap(t, fixtures(t))}
	for _, path := range goldenCaptures(t) {
		inputs[strings.TrimSuffix(filepath.Base(path), ".pcap")] = readFile(t, path)
	}
	for name, path := range cmCaptures(t) {
		inputs[name] = readFile(t, path)
	}
	for name, b := range inputs {
		for ext, format := range map[string]Format{".txt": Text, ".json": JSON} {
			t.Run(name+ext, func(t *testing.T) {
				got, _ := dissectBytes(t, b, format)
				file := filepath.Join("testdata", name+ext)
				if *update {
					if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
						t.Fatal(err)
					}
					return
				}
				want := string(readFile(t, file))
				if got != want {
					t.Errorf("output differs from %s (rewrite it with -update after a deliberate change):\ngot:\n%s\nwant:\n%s", file, got, want)
				}
			})
		}
	}
}

// tsharkFields are the fields compared with tshark, frame.number first.
// A REQ's primary flow label is left out: Wireshark 4.0 shows it shifted
// right by 8 bits (0x581 where the 20-bit field holds 0x581d2; rxe's RC
// packets of that connection come from UDP port 0xc1c4, which is 0x581d2
// folded as rdma_flow_label_to_udp_sport folds it).
var tsharkFields = []string{
	"frame.number", "vlan.id", "ip.src", "ip.dst", "ipv6.src", "ipv6.dst", "udp.srcport",
	"infiniband.bth.opcode", "infiniband.bth.se", "infiniband.bth.m", "infiniband.bth.padcnt",
	"infiniband.bth.tver", "infiniband.bth.p_key", "infiniband.bth.destqp", "infiniband.bth.a",
	"infiniband.bth.psn",
	"infiniband.reth.va", "infiniband.reth.r_key", "infiniband.reth.dmalen",
	"infiniband.aeth.syndrome", "infiniband.aeth.msn",
	"infiniband.atomiceth.swapdt", "infiniband.atomiceth.cmpdt", "infiniband.atomicacketh.origremdt",
	"infiniband.immdt", "infiniband.ieth", "infiniband.deth.q_key", "infiniband.deth.srcqp",
	"infiniband.mad.baseversion", "infiniband.mad.mgmtclass", "infiniband.mad.classversion", "infiniband.mad.method",
	"infiniband.mad.status", "infiniband.mad.transactionid", "infiniband.mad.attributeid",
	"infiniband.mad.attributemodifier",
	"infiniband.cm.req", "infiniband.cm.req.serviceid", "infiniband.cm.req.localcaguid", "infiniband.cm.req.localqkey",
	"infiniband.cm.req.localqpn", "infiniband.cm.req.responderres", "infiniband.cm.req.initdepth",
	"infiniband.cm.req.remoteresptout", "infiniband.cm.req.transpsvctype", "infiniband.cm.req.startpsn",
	"infiniband.cm.req.localresptout", "infiniband.cm.req.retrcount", "infiniband.cm.req.pkey",
	"infiniband.cm.req.pppmtu", "infiniband.cm.req.rnrretrcount", "infiniband.cm.req.maxcmretr",
	"infiniband.cm.req.srq", "infiniband.cm.req.prim_tfcclass",
	"infiniband.cm.req.prim_hoplim", "infiniband.cm.req.prim_sl", "infiniband.cm.req.prim_localacktout",
	"infiniband.cm.req.ip_cm.sport", "infiniband.cm.req.ip_cm.sip4", "infiniband.cm.req.ip_cm.dip4",
	"infiniband.cm.rep", "infiniband.cm.rep.remotecommid", "infiniband.cm.rep.localqkey", "infiniband.cm.rep.localqpn",
	"infiniband.cm.rep.startpsn", "infiniband.cm.rep.respres", "infiniband.cm.rep.initdepth",
	"infiniband.cm.rep.tgtackdelay", "infiniband.cm.rep.rnrretrcount", "infiniband.cm.rep.srq",
	"infiniband.cm.rep.localcaguid",
	"infiniband.cm.rtu.localcommid", "infiniband.cm.rtu.remotecommid",
	"infiniband.cm.rej.localcommid", "infiniband.cm.rej.remotecommid", "infiniband.cm.rej.msgrej",
	"infiniband.cm.rej.rejinfolen", "infiniband.cm.rej.reason",
	"infiniband.cm.dreq.localcommid", "infiniband.cm.dreq.remotecommid",
	"infiniband.cm.drsp.localcommid", "infiniband.cm.drsp.remotecommid",
	"infiniband.invariant.crc",
}

// tsharkPayloadDissectors are the protocols Wireshark tries on InfiniBand
// payloads. They are disabled for the comparison: one of them failing on
// a payload (RPC-over-RDMA on a perftest SEND, say) ends the dissection
// before the ICRC field.
var tsharkPayloadDissectors = []string{
	"rpcordma", "smc", "smb_direct", "nvme-rdma", "lnet", "iser", "infiniband_sdp", "fcoib", "infiniband.eoib",
}

// tsharkUndecoded are opcodes whose extended headers the Wireshark versions
// we test with do not decode (they postdate its dissector): only the BTH
// and what lies in front of it are compared for them.
var tsharkUndecoded = map[uint64]bool{0x1c: true, 0x1d: true, 0x81: true} // FLUSH, ATOMIC_WRITE, CNP

func init() {
	// Wireshark 4.0 has no XRCETH: of XRC packets it decodes the BTH only.
	for op := 0xa0; op <= 0xb7; op++ {
		tsharkUndecoded[uint64(op)] = true
	}
}

// TestDissectMatchesTshark compares dissect's JSON with tshark field by
// field, over the golden rxe captures and over the test frames (every
// opcode, IPv4, IPv6, 802.1Q). It is skipped when tshark is not installed.
func TestDissectMatchesTshark(t *testing.T) {
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("skipping: tshark is not on PATH (apt-get install tshark) to compare dissect with Wireshark")
	}
	fix := capturetest.WriteFile(t, "fixtures.pcap", fixturePcap(t, fixtures(t)))
	files := append([]string{fix}, goldenCaptures(t)...)
	for _, name := range sortedKeys(cmCaptures(t)) {
		files = append(files, cmCaptures(t)[name])
	}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			compareWithTshark(t, tshark, path)
		})
	}
}

// compareWithTshark checks dissect's JSON for the capture at path against
// tshark's reading of the same fields.
func compareWithTshark(t *testing.T, tshark, path string) {
	args := []string{"-r", path, "-n", "-T", "fields", "-E", "separator=,", "-E", "occurrence=f"}
	for _, p := range tsharkPayloadDissectors {
		args = append(args, "--disable-protocol", p)
	}
	for _, f := range tsharkFields {
		args = append(args, "-e", f)
	}
	cmd := exec.Command(tshark, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tshark: %v\n%s", err, stderr.String())
	}
	ours, _ := dissectBytes(t, readFile(t, path), JSON)
	objs := jsonObjects(t, ours)

	rows := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	compared, fields := 0, 0
	for _, row := range rows {
		vals := strings.Split(row, ",")
		if len(vals) != len(tsharkFields) {
			t.Fatalf("tshark row has %d fields, want %d: %q", len(vals), len(tsharkFields), row)
		}
		n, err := strconv.Atoi(vals[0])
		if err != nil {
			t.Fatalf("tshark row without a frame number: %q", row)
		}
		o, haveObj := objs[n]
		delete(objs, n)
		tsOpcode := vals[slices.Index(tsharkFields, "infiniband.bth.opcode")]
		switch {
		case !haveObj && tsOpcode == "":
			continue // neither sees RoCEv2
		case !haveObj:
			t.Errorf("frame %d: tshark decodes opcode %s, dissect prints nothing", n, tsOpcode)
			continue
		case o["error"] != nil:
			continue // malformed for dissect; tshark decodes what it can
		case tsOpcode == "":
			t.Errorf("frame %d: dissect decodes %v, tshark does not", n, o["opcode_name"])
			continue
		}
		compared++
		op, _ := strconv.ParseUint(tsOpcode, 10, 8)
		for i, f := range tsharkFields[1:] {
			tv := vals[i+1]
			ov, has := o[f]
			if !has && tv == "" {
				continue
			}
			extended := strings.HasPrefix(f, "infiniband.") && !strings.HasPrefix(f, "infiniband.bth.")
			if tv == "" && extended && tsharkUndecoded[op] {
				continue
			}
			if !has || tv == "" {
				t.Errorf("frame %d (%v): %s: dissect %v, tshark %q", n, o["opcode_name"], f, ov, tv)
				continue
			}
			want, err := tsharkValue(f, tv)
			if err != nil {
				t.Errorf("frame %d: %s: tshark value %q: %v", n, f, tv, err)
				continue
			}
			if got := fmt.Sprint(ov); got != want {
				t.Errorf("frame %d (%v): %s: dissect %s, tshark %q (%s)", n, o["opcode_name"], f, got, tv, want)
			}
			fields++
		}
	}
	for n, o := range objs {
		t.Errorf("frame %d: dissect prints %v, tshark has no such frame", n, o)
	}
	if compared == 0 {
		t.Errorf("no packet compared")
	}
	t.Logf("%d packets, %d field values equal", compared, fields)
}

// tsharkValue converts tshark's text for field f into dissect's JSON
// notation: hex ("0x000011") and byte strings ("01020304", as tshark prints
// ImmDt and IETH) become decimal, True/False become 1/0, addresses stay.
func tsharkValue(f, v string) (string, error) {
	switch {
	case strings.HasSuffix(f, ".src") || strings.HasSuffix(f, ".dst") || strings.HasSuffix(f, "ip4"):
		return v, nil
	case v == "True":
		return "1", nil
	case v == "False":
		return "0", nil
	case f == "infiniband.immdt" || f == "infiniband.ieth":
		n, err := strconv.ParseUint(strings.ReplaceAll(v, ":", ""), 16, 64)
		return strconv.FormatUint(n, 10), err
	case strings.HasPrefix(v, "0x"):
		n, err := strconv.ParseUint(v[2:], 16, 64)
		return strconv.FormatUint(n, 10), err
	}
	n, err := strconv.ParseUint(v, 10, 64)
	return strconv.FormatUint(n, 10), err
}
