package trace

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sroce/sroce/capture"
	"github.com/sroce/sroce/dissect"
)

// TestLadderNamesCMMessages runs the analysis over rdma_rxe's rping
// exchange (package cm's golden capture): the MADs to QP1 are arrows
// named by their CM message, in the JSON form too, and the RC traffic of
// the connection they set up is a QP pair of its own.
func TestLadderNamesCMMessages(t *testing.T) {
	const path = "../cm/testdata/rxe-rping.pcap"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r, err := capture.Open(bytes.NewReader(b), path)
	if err != nil {
		t.Fatal(err)
	}
	var (
		dec  dissect.Decoder
		an   Analyzer
		mads []string
		rc   int
	)
	for n := 1; ; n++ {
		data, link, wireLen, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if f := dec.Decode(data, link, wireLen); f.Kind != dissect.RoCE {
			t.Fatalf("frame %d is not RoCEv2", n)
		}
		ev := an.Add(n, time.Time{}, &dec.Packet, true)
		if ev.DestQP != 1 {
			rc++
			if ev.MAD != "" || strings.HasPrefix(ev.Label(), "CM ") {
				t.Errorf("frame %d to QP %#x is named as a MAD: %q", n, uint32(ev.DestQP), ev.Label())
			}
			continue
		}
		mads = append(mads, ev.MAD)
		if !strings.HasPrefix(ev.Label(), ev.MAD+" psn=") || !strings.Contains(ev.Arrow(), ev.MAD) {
			t.Errorf("frame %d: label %q, arrow %q do not name %q", n, ev.Label(), ev.Arrow(), ev.MAD)
		}
		var j map[string]any
		if err := json.Unmarshal(ev.AppendJSON(nil, 0), &j); err != nil || j["mad"] != ev.MAD {
			t.Errorf("frame %d: JSON %v (%v) does not name %q", n, j, err, ev.MAD)
		}
	}
	if got, want := strings.Join(mads, ","), "CM REQ,CM REP,CM RTU,CM DREQ,CM DREP"; got != want {
		t.Errorf("MADs %s, want %s", got, want)
	}
	if rc == 0 || len(an.Conns()) != 2 {
		t.Errorf("%d packets besides the MADs, %d QP pairs; want the CM's and the connection's", rc, len(an.Conns()))
	}
}
