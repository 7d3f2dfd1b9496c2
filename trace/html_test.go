package trace

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sroce/sroce/bth"
	"golang.org/x/net/html"
)

// renderHTML feeds ps to a new Analyzer and to an HTML page drawing at
// most maxArrows per QP pair, and returns the page written with title and
// summary, and the page itself.
func renderHTML(t *testing.T, ps []pkt, maxArrows int, title, summary string) (string, *HTML) {
	t.Helper()
	var a Analyzer
	page := NewHTML(maxArrows)
	t0 := time.Unix(1700000000, 0)
	for i, p := range ps {
		var bp bth.Packet
		if err := bp.Parse(build(t, p)); err != nil {
			t.Fatalf("packet %d: %v", i+1, err)
		}
		ev := a.Add(i+1, t0.Add(time.Duration(i)*time.Millisecond), &bp, bp.VerifyICRC())
		page.Add(&ev, &bp)
	}
	var b bytes.Buffer
	if err := page.Write(&b, title, summary); err != nil {
		t.Fatal(err)
	}
	return b.String(), page
}

// lossyExchange is a go-back-N after a lost SEND, a NAK, an RNR NAK, a
// duplicate and a bad ICRC: every kind of trouble, and a burst of 6 SENDs.
func lossyExchange() []pkt {
	bad := send(108, true)
	bad.badICRC = true
	return []pkt{
		send(100, false), // 1
		send(101, false),
		send(103, false), // 3: 102 lost
		send(104, false),
		send(105, false),
		send(106, true), // 6
		{fromB: true, op: bth.RCAcknowledge, psn: 102, syndrome: bth.NAKSyndrome(bth.NAKPSNSeqError), msn: 2}, // 7
		send(102, false), // 8
		send(103, false), // 9: retransmission
		send(104, true),  // 10
		ack(104, 5),      // 11
		send(105, true),  // 12
		{fromB: true, op: bth.RCAcknowledge, psn: 105, syndrome: bth.RNRSyndrome(12)}, // 13
		send(105, true), // 14
		ack(106, 6),     // 15
		send(104, true), // 16: retransmission, duplicate
		bad,             // 17: bad ICRC
	}
}

// elements parses page and returns its document node.
func elements(t *testing.T, page string) *html.Node {
	t.Helper()
	doc, err := html.Parse(strings.NewReader(page))
	if err != nil {
		t.Fatalf("the page does not parse: %v", err)
	}
	return doc
}

// walk calls f for every element of n.
func walk(n *html.Node, f func(*html.Node)) {
	if n.Type == html.ElementNode {
		f(n)
	}
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		walk(c, f)
	}
}

// attr returns n's attribute key ("" when absent).
func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

// hasClass reports whether n's class attribute lists c.
func hasClass(n *html.Node, c string) bool {
	for _, f := range strings.Fields(attr(n, "class")) {
		if f == c {
			return true
		}
	}
	return false
}

// text returns the text inside n.
func text(n *html.Node) string {
	var b strings.Builder
	var f func(*html.Node)
	f = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			f(c)
		}
	}
	f(n)
	return b.String()
}

// TestHTMLStructure checks the page of a lossy exchange: one arrow per
// packet with its frame, label and analysis, the trouble classes on the
// right arrows, the burst, the fields of every arrow in the script's data,
// and nothing fetched from anywhere.
func TestHTMLStructure(t *testing.T) {
	ps := lossyExchange()
	page, h := renderHTML(t, ps, 0, "sroce ladder lossy.pcap", "17 packets")
	if h.Arrows() != len(ps) || h.Conns() != 1 {
		t.Fatalf("%d arrows for %d QP pairs, want %d for 1", h.Arrows(), h.Conns(), len(ps))
	}
	doc := elements(t, page)
	arrows := map[int]*html.Node{}
	var bursts []*html.Node
	var data pageData
	walk(doc, func(n *html.Node) {
		switch {
		case n.Data == "g" && hasClass(n, "arrow"):
			f, err := strconv.Atoi(strings.TrimPrefix(attr(n, "id"), "frame-"))
			if err != nil {
				t.Errorf("arrow without a frame id: %v", n.Attr)
			}
			if arrows[f] != nil {
				t.Errorf("two arrows for frame %d", f)
			}
			arrows[f] = n
		case n.Data == "g" && hasClass(n, "burst"):
			bursts = append(bursts, n)
		case n.Data == "script" && attr(n, "id") == "ladder-data":
			if err := json.Unmarshal([]byte(text(n)), &data); err != nil {
				t.Errorf("the script's data is not JSON: %v", err)
			}
		}
	})
	if len(arrows) != len(ps) {
		t.Fatalf("%d arrows, want %d", len(arrows), len(ps))
	}
	wantClass := map[int]string{
		3: "t-gap", 6: "t-gap", 7: "t-nak", 9: "t-retrans", 13: "t-rnr", 14: "t-retrans",
		16: "t-dup", 17: "t-icrc", 1: "", 11: "",
	}
	for f, want := range wantClass {
		n := arrows[f]
		got := ""
		for _, c := range strings.Fields(attr(n, "class")) {
			if strings.HasPrefix(c, "t-") {
				got = c
			}
		}
		if got != want {
			t.Errorf("frame %d: trouble class %q, want %q (%s)", f, got, want, text(n))
		}
	}
	if s := text(arrows[7]); !strings.Contains(s, "ACKNOWLEDGE psn=0x000066 NAK msn=2") ||
		!strings.Contains(s, "NAK: PSN sequence error; expects PSN 0x000066") {
		t.Errorf("frame 7's arrow reads %q", s)
	}
	if s := text(arrows[13]); !strings.Contains(s, "RNR NAK: retry after 0.64 ms") {
		t.Errorf("frame 13's arrow reads %q", s)
	}
	// Frames 1-6 are six SENDs in a row: one burst, open (it has gaps).
	if len(bursts) != 1 || attr(bursts[0], "data-n") != "6" || hasClass(bursts[0], "collapsed") {
		t.Fatalf("bursts %v", bursts)
	}
	if s := text(bursts[0]); !strings.Contains(s, "6 packets A → B, frames 1–6: 4 sequence gaps") {
		t.Errorf("burst heading %q", s)
	}
	// Every arrow's fields, from Ethernet to the ICRC.
	if len(data.Arrows) != len(ps) {
		t.Fatalf("fields of %d arrows, want %d", len(data.Arrows), len(ps))
	}
	for f, n := range arrows {
		i, err := strconv.Atoi(attr(n, "data-i"))
		if err != nil || i < 0 || i >= len(data.Arrows) {
			t.Fatalf("frame %d: data-i %q", f, attr(n, "data-i"))
		}
		a := data.Arrows[i]
		if !strings.HasPrefix(a.Title, "frame "+strconv.Itoa(f)+",") || len(a.Keys) != len(a.Values) {
			t.Errorf("frame %d: data %+v", f, a)
		}
		fields := map[string]string{}
		for j, k := range a.Keys {
			fields[data.Keys[k][0]+"."+data.Keys[k][1]] = a.Values[j]
		}
		for _, k := range []string{"Ethernet.source", "IPv4.TTL", "UDP.destination port", "BTH.opcode", "BTH.PSN", "ICRC.value"} {
			if fields[k] == "" {
				t.Errorf("frame %d: no field %s in %v", f, k, fields)
			}
		}
		if f == 7 && fields["AETH.syndrome"] != "0x60 NAK PSN sequence error" {
			t.Errorf("frame 7: AETH syndrome %q", fields["AETH.syndrome"])
		}
		if f == 17 && (!strings.HasSuffix(fields["ICRC.value"], "(BAD)") || fields["ICRC.computed"] == "") {
			t.Errorf("frame 17: ICRC fields %q, %q", fields["ICRC.value"], fields["ICRC.computed"])
		}
		if fields["UDP.destination port"] != "4791" {
			t.Errorf("frame %d: UDP destination port %q", f, fields["UDP.destination port"])
		}
	}
	// Self-contained: nothing to fetch. The only URL is the SVG namespace.
	walk(doc, func(n *html.Node) {
		for _, a := range n.Attr {
			if a.Key == "src" || a.Key == "href" || a.Key == "xlink:href" || a.Key == "action" {
				t.Errorf("<%s %s=%q> would fetch something", n.Data, a.Key, a.Val)
			}
		}
		if n.Data == "link" || n.Data == "img" || n.Data == "iframe" {
			t.Errorf("<%s> in the page", n.Data)
		}
	})
	rest := strings.ReplaceAll(page, `xmlns="http://www.w3.org/2000/svg"`, "")
	for _, s := range []string{"http:", "https:", "url(", "@import"} {
		if strings.Contains(rest, s) {
			t.Errorf("the page contains %q", s)
		}
	}
	if u := regexp.MustCompile(`[a-z]+://\S*`).FindString(rest); u != "" {
		t.Errorf("the page names a URL: %q", u)
	}
	for _, s := range []string{"window.onerror", "data-script-errors", "data-arrows", "data-ready"} {
		if !strings.Contains(page, s) {
			t.Errorf("the page lacks %q", s)
		}
	}
}

// TestHTMLBurstCollapsed checks that a burst without trouble starts
// collapsed into one summary arrow, and that one with trouble starts open.
func TestHTMLBurstCollapsed(t *testing.T) {
	var ps []pkt
	for i := range 8 {
		ps = append(ps, send(bth.PSN(100+i), i == 7))
	}
	ps = append(ps, ack(107, 8))
	page, _ := renderHTML(t, ps, 0, "t", "s")
	doc := elements(t, page)
	n := 0
	walk(doc, func(g *html.Node) {
		if g.Data != "g" || !hasClass(g, "burst") {
			return
		}
		n++
		if attr(g, "data-n") != "8" || !hasClass(g, "collapsed") {
			t.Errorf("burst %v", g.Attr)
		}
		if s := text(g); !strings.Contains(s, "8 packets: SEND_ONLY … SEND_ONLY psn=0x000064..0x00006b") {
			t.Errorf("burst summary %q", s)
		}
	})
	if n != 1 {
		t.Errorf("%d bursts, want 1", n)
	}
}

// TestHTMLEscaping checks that hostile strings in everything the page
// shows (title, summary, arrow labels, analysis, field values) come out as
// text, never as markup or script.
func TestHTMLEscaping(t *testing.T) {
	const hostile = `</script><script>alert(1)</script><img src=x onerror=alert(2)>"'&<!--`
	h := NewHTML(0)
	c := &Conn{ID: 1, A: Endpoint{Addr: netip.MustParseAddr("10.0.0.1")}, B: Endpoint{Addr: netip.MustParseAddr("10.0.0.2"), QPNKnown: true}}
	hc := &htmlConn{c: c, packets: 1, trouble: map[Trouble]int{}, omittedTrouble: map[Trouble]int{}}
	hc.arrows = []htmlArrow{{frame: 1, fromA: true, label: hostile, analysis: []string{hostile, "retransmission"},
		trouble: TroubleRetransmission, keys: []int{0}, values: []string{hostile}}}
	h.conns, h.drawn = []*htmlConn{hc}, 1
	h.keys = [][2]string{{hostile, hostile}}
	var b bytes.Buffer
	if err := h.Write(&b, hostile, hostile); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	for _, s := range []string{"<script>alert", "<img", "</script><"} {
		if strings.Contains(page, s) {
			t.Errorf("the page holds %q unescaped", s)
		}
	}
	doc := elements(t, page)
	var title, h1, label string
	scripts := 0
	var data pageData
	walk(doc, func(n *html.Node) {
		switch {
		case n.Data == "title":
			title = text(n)
		case n.Data == "h1":
			h1 = text(n)
		case n.Data == "img":
			t.Error("an <img> element got into the page")
		case n.Data == "script":
			scripts++
			if attr(n, "id") == "ladder-data" {
				if err := json.Unmarshal([]byte(text(n)), &data); err != nil {
					t.Errorf("the script's data is not JSON: %v", err)
				}
			}
		case n.Data == "g" && hasClass(n, "arrow"):
			label = text(n)
		}
	})
	if title != hostile || h1 != hostile {
		t.Errorf("title %q, heading %q, want %q", title, h1, hostile)
	}
	if !strings.Contains(label, hostile+"; retransmission") {
		t.Errorf("arrow text %q", label)
	}
	if scripts != 3 {
		t.Errorf("%d script elements, want the page's 3", scripts)
	}
	if len(data.Arrows) != 1 || data.Arrows[0].Values[0] != hostile || data.Keys[0][1] != hostile {
		t.Errorf("the script's data %+v", data)
	}
}

// TestHTMLBounds checks that the page keeps at most MaxArrows packets per
// QP pair and PageArrows in all, says how many it left out and what trouble
// they had, and still counts every packet.
func TestHTMLBounds(t *testing.T) {
	var ps []pkt
	for i := range 40 {
		ps = append(ps, send(bth.PSN(100+i), true), ack(bth.PSN(100+i), bth.MSN(i+1)))
	}
	ps = append(ps, send(100, true)) // a retransmission beyond the limit
	page, h := renderHTML(t, ps, 10, "t", "s")
	if h.Arrows() != 10 {
		t.Errorf("%d arrows kept, want 10", h.Arrows())
	}
	hc := h.conns[0]
	if len(hc.arrows) != 10 || hc.packets != len(ps) || hc.omitted != len(ps)-10 {
		t.Errorf("kept %d, counted %d, omitted %d", len(hc.arrows), hc.packets, hc.omitted)
	}
	if n := strings.Count(page, `id="frame-`); n != 10 {
		t.Errorf("%d arrows drawn, want 10", n)
	}
	want := "Only the first 10 of its 81 packets are drawn (the page's limit); the other 71 (1 retransmission, 1 duplicate) can be read in the text ladder"
	if !strings.Contains(page, want) {
		t.Errorf("the page does not say %q", want)
	}
	if !strings.Contains(page, "81 packets: 1 retransmission, 1 duplicate") {
		t.Error("the QP pair's counts are not over all its packets")
	}

	// The page-wide bound, over several QP pairs.
	page2 := NewHTML(0)
	page2.PageArrows = 25
	var a Analyzer
	for i := range 100 {
		p := send(bth.PSN(i), true)
		fr := build(t, p)
		var bp bth.Packet
		if err := bp.Parse(fr); err != nil {
			t.Fatal(err)
		}
		// A QP pair per packet: a new destination QP each time.
		bp.BTH().SetDestQP(bth.QPN(0x100 + i))
		ev := a.Add(i+1, time.Unix(0, 0), &bp, true)
		page2.Add(&ev, &bp)
	}
	if page2.Arrows() != 25 || page2.Conns() != 100 {
		t.Errorf("%d arrows for %d QP pairs, want 25 for 100", page2.Arrows(), page2.Conns())
	}
	kept := 0
	for _, hc := range page2.conns {
		kept += len(hc.arrows)
	}
	if kept != 25 {
		t.Errorf("%d arrows kept in all, want 25", kept)
	}
	var b bytes.Buffer
	if err := page2.Write(&b, "t", "s"); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(b.String(), "Not drawn: the page reached its limit of 25 arrows before this QP pair began. Its 1 packet can be read in the text ladder"); n != 75 {
		t.Errorf("%d QP pairs say they were left out, want 75", n)
	}
}

// TestHTMLEmpty checks the page of a capture without RoCEv2 packets.
func TestHTMLEmpty(t *testing.T) {
	var b bytes.Buffer
	if err := NewHTML(0).Write(&b, "empty.pcap", "0 packets"); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	elements(t, page)
	if !strings.Contains(page, "No RoCEv2 packets in this capture.") || strings.Contains(page, "<svg") {
		t.Errorf("the empty page:\n%s", page)
	}
}

// TestTroubleOf checks the classification of the analysis strings against
// the strings the analysis writes.
func TestTroubleOf(t *testing.T) {
	for s, want := range map[string]Trouble{
		"retransmission":                         TroubleRetransmission,
		"duplicate":                              TroubleDuplicate,
		"out of sequence: expected PSN 0x00000a": TroubleGap,
		"RNR NAK: retry after 0.64 ms":           TroubleRNR,
		"NAK: remote access error":               TroubleNAK,
		"implied NAK: no response to the READ request at frame 3": TroubleNAK,
		"ICRC bad":                   TroubleICRC,
		"acks PSN 0x000001":          0,
		"expects PSN 0x000001":       0,
		"READ/atomic outstanding: 1": 0,
	} {
		if got := TroubleOf(s); got != want {
			t.Errorf("TroubleOf(%q) = %v, want %v", s, got, want)
		}
	}
	if got := (TroubleRetransmission | TroubleNAK).Worst(); got != TroubleNAK {
		t.Errorf("worst of retransmission+NAK: %v", got)
	}
	if got := (TroubleGap | TroubleDuplicate).String(); got != "duplicate+sequence gap" {
		t.Errorf("String %q", got)
	}
}
