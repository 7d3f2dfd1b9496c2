package dissect

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/capture"
	"github.com/sroce/sroce/cm"
)

// cmGoldenDir holds the captures of rdma_rxe's RDMA CM committed with
// package cm (made by tests/netns, TestCMGoldenCaptures).
const cmGoldenDir = "../cm/testdata"

// cmGoldenWant lists, per CM capture, the MAD names its lines must show.
var cmGoldenWant = map[string][]string{
	"rxe-rping":            {"CM REQ", "CM REP", "CM RTU", "CM DREQ", "CM DREP"},
	"rxe-ucmatose":         {"CM REQ", "CM REP", "CM RTU", "CM DREQ", "CM DREP"},
	"rxe-udaddy":           {"CM SIDR_REQ", "CM SIDR_REP"},
	"rxe-perftest-R":       {"CM REQ", "CM REP", "CM RTU", "CM DREQ", "CM DREP"},
	"rxe-rping-rej":        {"CM REQ", "CM REJ"},
	"rxe-rping-unanswered": {"CM REQ"},
	"rxe-rping-mra":        {"CM REQ", "CM MRA", "CM REP", "CM RTU", "CM DREQ", "CM DREP"},
}

// cmCaptures returns the CM captures by name.
func cmCaptures(t *testing.T) map[string]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(cmGoldenDir, "*.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Errorf("no CM captures in %s: they belong to the repository", cmGoldenDir)
	}
	m := map[string]string{}
	for _, f := range files {
		m[strings.TrimSuffix(filepath.Base(f), ".pcap")] = f
	}
	return m
}

// forEachMAD calls fn for every packet of the capture at path that
// DecodeMAD takes, numbered from 1 as frames are.
func forEachMAD(t *testing.T, path string, fn func(n int, p *bth.Packet, icrcOK bool, m MAD)) {
	t.Helper()
	r, err := capture.Open(bytes.NewReader(readFile(t, path)), path)
	if err != nil {
		t.Fatal(err)
	}
	var d Decoder
	for n := 1; ; n++ {
		data, link, wireLen, err := r.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		f := d.Decode(data, link, wireLen)
		if f.Kind != RoCE {
			t.Fatalf("%s frame %d: not a RoCEv2 packet (%v)", path, n, f.Err)
		}
		if m, ok := DecodeMAD(&d.Packet); ok {
			fn(n, &d.Packet, f.ICRCOK, m)
		}
	}
}

// TestDissectCMCaptures checks every MAD of rdma_rxe's RDMA CM captures:
// each is a CM message that decodes, its line names it, its JSON object
// says the same and its fields list the message's layer; the lines of
// each capture show the messages of its exchange. The field views of all
// the MADs are pinned in testdata/cm_fields.txt (rewrite with -update).
func TestDissectCMCaptures(t *testing.T) {
	var golden strings.Builder
	caps := cmCaptures(t)
	for _, name := range sortedKeys(caps) {
		t.Run(name, func(t *testing.T) {
			seen := map[string]bool{}
			var pr Printer
			fmt.Fprintf(&golden, "== %s\n", name)
			forEachMAD(t, caps[name], func(n int, p *bth.Packet, icrcOK bool, m MAD) {
				if m.Err != nil || m.Msg == nil {
					t.Errorf("frame %d: %s: %v", n, m.Name(), m.Err)
					return
				}
				line := string(pr.AppendPacket(nil, n, p, icrcOK))
				want := "  " + m.Name() + " "
				if !strings.Contains(line, want) || strings.Contains(line, "MALFORMED") {
					t.Errorf("frame %d: line does not name %q:\n%s", n, m.Name(), line)
				}
				seen[m.Name()] = true
				var obj map[string]any
				if err := json.Unmarshal(appendJSON(nil, n, p, icrcOK), &obj); err != nil {
					t.Fatalf("frame %d: JSON: %v", n, err)
				}
				if obj["mad_name"] != m.Name() || obj["infiniband.mad.attributeid"] != float64(m.Header.AttrID) {
					t.Errorf("frame %d: JSON names %v (attribute %v), the line %q", n, obj["mad_name"], obj["infiniband.mad.attributeid"], m.Name())
				}
				var layer bool
				fmt.Fprintf(&golden, "frame %d\n", n)
				for _, f := range AppendFields(nil, p, icrcOK) {
					if f.Layer == "MAD" || strings.HasPrefix(f.Layer, "CM ") {
						fmt.Fprintf(&golden, "  %s.%s = %s\n", f.Layer, f.Name, f.Value)
						layer = layer || f.Layer == "CM "+m.Header.AttrID.String()
					}
				}
				if !layer {
					t.Errorf("frame %d: the fields have no %q layer", n, "CM "+m.Header.AttrID.String())
				}
			})
			want, ok := cmGoldenWant[name]
			if !ok {
				t.Errorf("no expected messages for %s.pcap: add it to cmGoldenWant", name)
			}
			for _, w := range want {
				if !seen[w] {
					t.Errorf("no %s line; the capture shows %v", w, sortedKeys(seen))
				}
			}
		})
	}
	checkGolden(t, filepath.Join("testdata", "cm_fields.txt"), golden.String())
}

// checkGolden compares got with the file at path, or rewrites the file
// with -update.
func checkGolden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if want := string(readFile(t, path)); got != want {
		t.Errorf("output differs from %s (rewrite it with -update after a deliberate change):\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// gsiFrame builds a UD SEND ONLY to QP1 carrying payload.
func gsiFrame(t testing.TB, payload []byte) []byte {
	t.Helper()
	e := bth.Encap{
		DstMAC: [6]byte{2, 0, 0, 0, 0, 2}, SrcMAC: [6]byte{2, 0, 0, 0, 0, 1},
		Src: netip.MustParseAddr("192.0.2.1"), Dst: netip.MustParseAddr("192.0.2.2"), TTL: 64, SrcPort: 0xc000,
	}
	h := bth.Headers{
		BTH:  bth.BTHFields{Opcode: bth.UDSendOnly, PKey: 0xffff, DestQP: cm.GSIQPN, PSN: 1},
		DETH: bth.DETHFields{QKey: cm.GSIQKey, SrcQP: cm.GSIQPN},
	}
	frame := make([]byte, e.Len()+h.TransportLen(len(payload)))
	n, err := bth.Build(frame, &e, &h, payload)
	if err != nil {
		t.Fatal(err)
	}
	return frame[:n]
}

// TestDissectMalformedMAD checks that MADs to QP1 that do not decode are
// shown as malformed, with the reason, in the line, the JSON object and the
// fields, that a MAD of another class is named by its header, and how a
// REJ shows its reason in words and a ClassPortInfo answer its method.
func TestDissectMalformedMAD(t *testing.T) {
	req, err := cm.Send(0x1234, &cm.REQ{LocalCommID: 7, ServiceID: cm.ServiceID(cm.PortSpaceTCP, 7174)})
	if err != nil {
		t.Fatal(err)
	}
	rej, err := cm.Send(0x99, &cm.REJ{LocalCommID: 1, RemoteCommID: 2, MessageRejected: cm.MsgREQ, Reason: cm.RejInvalidServiceID})
	if err != nil {
		t.Fatal(err)
	}
	cpi := make([]byte, cm.MADLen)
	if err := cm.Marshal(cpi, cm.CMHeader(cm.MethodGetResp, 5, cm.AttrClassPortInfo), &cm.ClassPortInfo{BaseVersion: 1, ClassVersion: 2, CapabilityMask: 0x0100}); err != nil {
		t.Fatal(err)
	}
	badVersion := bytes.Clone(req)
	badVersion[2] = 9 // class version
	sa := bytes.Clone(req)
	sa[1] = 0x03 // subnet administration
	for _, c := range []struct {
		name    string
		payload []byte
		text    string
		err     bool
	}{
		{"short", req[:20], "MAD MALFORMED: 20 bytes, shorter than a MAD header (24)", true},
		{"cut", req[:100], "CM MALFORMED: ", true},
		{"class version", badVersion, "CM MALFORMED: ", true},
		{"other class", sa, "MAD class 0x03 Send attr 0x0010 tid=0x0000000000001234", false},
		{"reject", rej, "CM REJ comm=0x00000001 remote=0x00000002 rejects=REQ reason=8 (" + cm.RejInvalidServiceID.String() + ") tid=", false},
		{"class port info", cpi, "CM ClassPortInfo GetResp version=2 cap=0x0100 tid=0x0000000000000005", false},
		{"whole", req, "CM REQ comm=0x00000007 svc=0x0000000001060000+7174", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			var p bth.Packet
			if err := p.Parse(gsiFrame(t, c.payload)); err != nil {
				t.Fatal(err)
			}
			var pr Printer
			line := string(pr.AppendPacket(nil, 1, &p, p.VerifyICRC()))
			if !strings.Contains(line, "  "+c.text) {
				t.Errorf("line %q does not contain %q", line, c.text)
			}
			var obj map[string]any
			if err := json.Unmarshal(appendJSON(nil, 1, &p, true), &obj); err != nil {
				t.Fatalf("JSON: %v", err)
			}
			if _, has := obj["mad_error"]; has != c.err {
				t.Errorf("JSON mad_error %v, want it %v: %v", obj["mad_error"], c.err, obj)
			}
			var malformed bool
			for _, f := range AppendFields(nil, &p, true) {
				malformed = malformed || f.Layer == "MAD" && f.Name == "malformed"
			}
			if malformed != c.err {
				t.Errorf("fields say malformed %v, want %v", malformed, c.err)
			}
		})
	}
}

// FuzzDecodeMAD: whatever a UD SEND ONLY to QP1 carries, its line, JSON
// object and fields are made without a panic and the JSON is valid. The
// seeds are the MADs of the CM captures.
func FuzzDecodeMAD(f *testing.F) {
	for _, path := range []string{"rxe-rping", "rxe-udaddy", "rxe-rping-rej", "rxe-rping-mra"} {
		b, err := os.ReadFile(filepath.Join(cmGoldenDir, path+".pcap"))
		if err != nil {
			continue
		}
		r, err := capture.Open(bytes.NewReader(b), path)
		if err != nil {
			f.Fatal(err)
		}
		var p bth.Packet
		for {
			data, _, _, err := r.Next()
			if err != nil {
				break
			}
			if p.Parse(data) == nil && p.Opcode == bth.UDSendOnly && p.BTH().DestQP() == cm.GSIQPN {
				f.Add(bytes.Clone(p.PayloadBytes()))
			}
		}
	}
	f.Add([]byte{1, 7, 2, 3})
	f.Fuzz(func(t *testing.T, payload []byte) {
		if len(payload) > 1024 {
			return
		}
		var p bth.Packet
		if err := p.Parse(gsiFrame(t, payload)); err != nil {
			t.Fatal(err)
		}
		var pr Printer
		line := pr.AppendPacket(nil, 1, &p, true)
		if m, ok := DecodeMAD(&p); !ok || !bytes.Contains(line, []byte(m.Name())) {
			t.Fatalf("the line does not name the MAD: %q", line)
		}
		if !json.Valid(appendJSON(nil, 1, &p, true)) {
			t.Fatalf("invalid JSON: %s", appendJSON(nil, 1, &p, true))
		}
		AppendFields(nil, &p, true)
	})
}
