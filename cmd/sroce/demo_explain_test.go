package main

import (
	"strings"
	"testing"

	"github.com/sroce/sroce/roce/tracesock"
)

// runExplain runs "sroce demo --explain" with extra flags and returns its
// output, skipping when loopback's port 4791 is taken.
func runExplain(t *testing.T, extra ...string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("runs two engines")
	}
	t.Setenv(tracesock.EnvDir, t.TempDir())
	code, out, errOut := runSroce(t, nil, append([]string{"demo", "--explain"}, extra...)...)
	if code != exitOK {
		if strings.Contains(errOut, "address already in use") {
			t.Skipf("port 4791 is taken on loopback: %s", errOut)
		}
		t.Fatalf("demo --explain %q: exit %d\n%s\n%s", extra, code, out, errOut)
	}
	return out
}

// lacks reports the strings of want that out does not contain.
func lacks(out string, want ...string) []string {
	var miss []string
	for _, w := range want {
		if !strings.Contains(out, w) {
			miss = append(miss, w)
		}
	}
	return miss
}

// TestDemoExplain: a lossless run shows every operation with its ladder
// (posts, packets with their PSNs, the ACK and what it covers, timers,
// completions) and the plain-language lines, and nothing sent twice.
func TestDemoExplain(t *testing.T) {
	out := runExplain(t)
	if miss := lacks(out,
		"== connecting", "RESET -> INIT", "Ready To Send",
		"== SEND A->B", "posts a receive wr_id=0 room=2500", "posts SEND wr_id=0 length=2500",
		"3 packets of at most 1024 bytes, the path MTU",
		"---- SEND_FIRST psn=", "---- SEND_MIDDLE psn=", "---- SEND_LAST psn=", "every packet carries the next PSN",
		"ACKNOWLEDGE psn=", "acks PSN", "ACKs are cumulative",
		"retransmit timer armed: fires in", "A starts its retransmit timer",
		"completion wr_id=0 RECV success length=2500", "completion wr_id=0 SEND success",
		"retransmit timer stopped", "everything A sent is acknowledged",
		"== RDMA WRITE A->B", "B's memory holds the data",
		"== RDMA WRITE+imm A->B", "RDMA_WRITE_LAST_WITH_IMMEDIATE",
		"== RDMA READ A<-B", "RDMA_READ_REQUEST", "READ response 3/3", "the responses are the acknowledgement",
		"== FETCH_ADD on B", "== COMPARE_SWAP on B", "ATOMIC_ACKNOWLEDGE",
		"No packet was lost", "every byte was verified",
	); len(miss) > 0 {
		t.Errorf("the explained demo lacks %q:\n%s", miss, out)
	}
	for _, bad := range []string{"retransmission", "RETRANSMISSION", "LOST", "timer fired", "events lost"} {
		if strings.Contains(out, bad) {
			t.Errorf("a lossless run shows %q:\n%s", bad, out)
		}
	}
}

// TestDemoExplainLoss: with the engines' own loss, the ladders show the
// lost packets, the timer or NAK that noticed, the retransmission with
// its reason and explanation, and every operation still verified.
func TestDemoExplainLoss(t *testing.T) {
	out := runExplain(t, "--loss", "20", "--seed", "1")
	if miss := lacks(out,
		"both engines drop 20% of the frames they send",
		"lost on the way (dropped by the impairment)", "LOST on the way",
		"goes back to PSN", "sends again (",
		"RETRANSMISSION after", "this PSN again: a retransmission",
		"packet(s) were lost on the way", "every byte was verified",
	); len(miss) > 0 {
		t.Errorf("the lossy explained demo lacks %q:\n%s", miss, out)
	}
	// The loss of the seeded run shows both ways of noticing it.
	if !strings.Contains(out, "retransmit timer fired") && !strings.Contains(out, "sequence NAK") {
		t.Errorf("no timeout and no NAK in a lossy run:\n%s", out)
	}
	if strings.Contains(out, "No packet was lost") {
		t.Errorf("the lossy run says nothing was lost:\n%s", out)
	}
}

// TestDemoLossFlags: --loss must be a percentage below 100.
func TestDemoLossFlags(t *testing.T) {
	for _, v := range []string{"-1", "100", "x"} {
		code, out, errOut := runSroce(t, nil, "demo", "--loss", v)
		if code != exitUsage || out != "" || !strings.Contains(errOut, "usage: sroce demo") {
			t.Errorf("demo --loss %s: exit %d, stdout %q, stderr %q", v, code, out, errOut)
		}
	}
}
