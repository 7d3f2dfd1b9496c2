package trace

// The HTML ladder: one self-contained page (inline CSS, SVG and script, no
// external resources) with a diagram per QP pair. HTML.Add keeps what each
// arrow needs (its label, analysis and header fields) up to a bound per QP
// pair and per page and only counts the packets beyond it; HTML.Write lays
// the diagrams out and renders them with html/template, which escapes every
// string taken from the capture.

import (
	"fmt"
	"html/template"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/dissect"
)

// Bounds of the HTML page.
const (
	// DefaultHTMLArrows is how many packets of one QP pair the page draws
	// unless told otherwise.
	DefaultHTMLArrows = 2000
	// HTMLPageArrows is how many arrows the page draws in all, whatever
	// the QP pairs; the packets beyond are counted, not drawn.
	HTMLPageArrows = 10000
	// MaxHTMLArrows is the most packets of one QP pair the page can be
	// told to draw: all it draws.
	MaxHTMLArrows = HTMLPageArrows
	// HTMLBurst is the length a run of consecutive packets in the same
	// direction must exceed to be drawn as a burst that collapses into
	// one arrow.
	HTMLBurst = 5
)

// Geometry of a diagram, in pixels.
const (
	hRow      = 24  // one arrow
	hHead     = 20  // a burst's heading
	hTop      = 56  // the endpoints' boxes above the first arrow
	xFrame    = 58  // right edge of the frame numbers
	xTime     = 148 // right edge of the times
	xA        = 240 // A's lifeline
	xB        = 680 // B's lifeline
	xAnalysis = xB + 16
	yArrow    = 16  // the arrow's line within its row
	boxWidth  = 170 // an endpoint's box
	charWidth = 7   // of the analysis text, for the diagram's width
)

// troubleClass is the CSS class of each kind of trouble; the page's style
// gives each its colour.
var troubleClass = map[Trouble]string{
	TroubleRetransmission: "t-retrans",
	TroubleDuplicate:      "t-dup",
	TroubleGap:            "t-gap",
	TroubleRNR:            "t-rnr",
	TroubleNAK:            "t-nak",
	TroubleICRC:           "t-icrc",
}

// TroubleColor is the colour the page draws each kind of trouble in, as
// "#rrggbb".
var TroubleColor = map[Trouble]string{
	TroubleRetransmission: "#f08c00",
	TroubleDuplicate:      "#ae3ec9",
	TroubleGap:            "#1c7ed6",
	TroubleRNR:            "#d6336c",
	TroubleNAK:            "#e03131",
	TroubleICRC:           "#212529",
}

// HTML gathers the events of a capture and writes them as an HTML page:
// Add each event with its packet, then Write. The zero value is ready to
// use. Times are relative to the
// first packet added. Memory stays bounded: at most MaxArrows packets per
// QP pair and PageArrows in all are kept (with their header fields),
// the others are only counted.
type HTML struct {
	// MaxArrows is how many packets of one QP pair are drawn (0:
	// DefaultHTMLArrows; at most MaxHTMLArrows).
	MaxArrows int
	// PageArrows is how many packets are drawn in all (0 or more than
	// HTMLPageArrows: HTMLPageArrows).
	PageArrows int

	start   time.Time
	started bool
	drawn   int // arrows kept, over every QP pair
	conns   []*htmlConn
	byConn  map[*Conn]*htmlConn
	fields  []dissect.Field // scratch for AppendFields
	names   map[[2]string]int
	keys    [][2]string // field layer and name, indexed by names
}

// htmlConn is what the page keeps of one QP pair.
type htmlConn struct {
	c       *Conn
	arrows  []htmlArrow
	packets int
	trouble map[Trouble]int // packets showing each kind, drawn or not
	omitted int
	// omittedTrouble counts the packets not drawn that show each kind.
	omittedTrouble map[Trouble]int
}

// htmlArrow is one drawn packet.
type htmlArrow struct {
	frame    int
	rel      time.Duration
	fromA    bool
	label    string
	analysis []string
	trouble  Trouble
	psn      bth.PSN
	opcode   bth.Opcode
	keys     []int    // field names, indexes into HTML.keys
	values   []string // field values
}

// NewHTML returns an empty page that draws at most maxArrows packets per
// QP pair (0: DefaultHTMLArrows).
func NewHTML(maxArrows int) *HTML {
	return &HTML{MaxArrows: maxArrows}
}

// limit returns the number of arrows drawn per QP pair.
func (h *HTML) limit() int {
	switch {
	case h.MaxArrows <= 0:
		return DefaultHTMLArrows
	case h.MaxArrows > MaxHTMLArrows:
		return MaxHTMLArrows
	}
	return h.MaxArrows
}

// pageLimit returns the number of arrows drawn in all.
func (h *HTML) pageLimit() int {
	if h.PageArrows <= 0 || h.PageArrows > HTMLPageArrows {
		return HTMLPageArrows
	}
	return h.PageArrows
}

// Add records one event; p is its decoded packet, as given to
// Analyzer.Add (it is not kept).
func (h *HTML) Add(e *Event, p *bth.Packet) {
	if !h.started {
		h.start, h.started = e.Time, true
		h.byConn, h.names = make(map[*Conn]*htmlConn), make(map[[2]string]int)
	}
	hc := h.byConn[e.Conn]
	if hc == nil {
		hc = &htmlConn{c: e.Conn, trouble: make(map[Trouble]int), omittedTrouble: make(map[Trouble]int)}
		h.byConn[e.Conn] = hc
		h.conns = append(h.conns, hc)
	}
	hc.packets++
	t := e.Trouble()
	for _, k := range Troubles {
		if t&k != 0 {
			hc.trouble[k]++
		}
	}
	if len(hc.arrows) >= h.limit() || h.drawn >= h.pageLimit() {
		hc.omitted++
		for _, k := range Troubles {
			if t&k != 0 {
				hc.omittedTrouble[k]++
			}
		}
		return
	}
	h.drawn++
	a := htmlArrow{
		frame: e.Frame, rel: e.Time.Sub(h.start), fromA: e.FromA, label: e.Label(),
		analysis: append([]string(nil), e.Analysis...), trouble: t, psn: e.PSN, opcode: e.Opcode,
	}
	h.fields = dissect.AppendFields(h.fields[:0], p, e.ICRCOK)
	a.keys = make([]int, len(h.fields))
	a.values = make([]string, len(h.fields))
	for i, f := range h.fields {
		k := [2]string{f.Layer, f.Name}
		n, ok := h.names[k]
		if !ok {
			n = len(h.keys)
			h.names[k] = n
			h.keys = append(h.keys, k)
		}
		a.keys[i], a.values[i] = n, f.Value
	}
	hc.arrows = append(hc.arrows, a)
}

// Arrows returns how many arrows the page draws.
func (h *HTML) Arrows() int { return h.drawn }

// Conns returns how many QP pairs the page shows.
func (h *HTML) Conns() int { return len(h.conns) }

// The page's view: positions computed here, strings escaped by the
// template.
type (
	pageView struct {
		Title, Summary string
		Legend         []legendView
		PerPair        int
		PageArrows     int
		Conns          []connView
		Data           pageData
	}
	legendView struct{ Class, Name, Color string }
	// pageData is the script's data: the header fields of every arrow,
	// by the arrow's data-i.
	pageData struct {
		Keys   [][2]string `json:"keys"`
		Arrows []arrowData `json:"arrows"`
	}
	arrowData struct {
		Title  string   `json:"t"`
		Keys   []int    `json:"k"`
		Values []string `json:"v"`
	}
	connView struct {
		ID                    int
		A, B                  string
		AName, BName          string
		AQP, BQP              string
		Packets, Drawn        int
		PacketsText           string // "1 packet", "41 packets"
		Omitted               int
		TroubleText           string
		OmittedTrouble        string
		Width, Height         int
		XA, XB, XFrame, XTime int
		BoxAX, BoxBX          int
		LifeTop               int
		Items                 []itemView
	}
	itemView struct {
		Y     int
		Burst *burstView
		Row   *rowView
	}
	burstView struct {
		N          int
		Collapsed  bool
		Head       string
		Class      string
		Width      int
		Rows       []rowView
		Summary    rowView
		ExpandedH  int
		CollapsedH int
	}
	rowView struct {
		Y        int
		I        int // index into pageData.Arrows; -1 for a burst's summary
		Frame    string
		Time     string
		Class    string
		X1, X2   int
		Head     string // the arrowhead's polygon points
		Label    string
		LabelX   int
		Analysis []partView
		Width    int
	}
	partView struct{ Text, Class, Sep string }
)

// Write writes the page: title names it (the capture), summary is a line
// of counts shown under the title.
func (h *HTML) Write(w io.Writer, title, summary string) error {
	v := pageView{Title: title, Summary: summary, PerPair: h.limit(), PageArrows: h.pageLimit(),
		Data: pageData{Keys: h.keys, Arrows: make([]arrowData, 0, h.drawn)}}
	if v.Data.Keys == nil {
		v.Data.Keys = [][2]string{}
	}
	for _, k := range Troubles {
		v.Legend = append(v.Legend, legendView{Class: troubleClass[k], Name: troubleNames[k], Color: TroubleColor[k]})
	}
	for _, hc := range h.conns {
		v.Conns = append(v.Conns, h.connView(hc, &v.Data))
	}
	return pageTemplate.Execute(w, &v)
}

// plural returns "1 packet" or "n packets".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

// troubleText lists counts of trouble: "3 retransmissions, 1 NAK".
func troubleText(counts map[Trouble]int) string {
	var parts []string
	for _, k := range Troubles {
		n := counts[k]
		if n == 0 {
			continue
		}
		name := troubleNames[k]
		if n > 1 {
			name += "s"
		}
		parts = append(parts, strconv.Itoa(n)+" "+name)
	}
	return strings.Join(parts, ", ")
}

// rowView returns the view of arrow a, the i-th of the page, at y within
// its parent.
func (h *HTML) rowView(a *htmlArrow, i, y int) rowView {
	r := rowView{Y: y, I: i, Frame: strconv.Itoa(a.frame), Time: relTime(a.rel), Label: a.label,
		LabelX: (xA + xB) / 2}
	r.X1, r.X2, r.Head = arrowGeometry(a.fromA, yArrow)
	if k := a.trouble.Worst(); k != 0 {
		r.Class = troubleClass[k]
	}
	for j, s := range a.analysis {
		p := partView{Text: s, Class: troubleClass[TroubleOf(s)]}
		if j > 0 {
			p.Sep = "; "
		}
		r.Analysis = append(r.Analysis, p)
	}
	return r
}

// arrowGeometry returns the line's ends and the arrowhead's points of an
// arrow at height y, from A to B or back.
func arrowGeometry(fromA bool, y int) (x1, x2 int, head string) {
	const tip, back, half = 2, 10, 5
	if fromA {
		end := xB - tip
		return xA + tip, end - back + 1, fmt.Sprintf("%d,%d %d,%d %d,%d", end, y, end-back, y-half, end-back, y+half)
	}
	end := xA + tip
	return xB - tip, end + back - 1, fmt.Sprintf("%d,%d %d,%d %d,%d", end, y, end+back, y-half, end+back, y+half)
}

// connView lays out one QP pair's diagram and adds its arrows' fields to d.
func (h *HTML) connView(hc *htmlConn, d *pageData) connView {
	c := hc.c
	cv := connView{ID: c.ID, A: c.A.String(), B: c.B.String(), Packets: hc.packets, Drawn: len(hc.arrows),
		PacketsText: plural(hc.packets, "packet"),
		Omitted:     hc.omitted, TroubleText: troubleText(hc.trouble), OmittedTrouble: troubleText(hc.omittedTrouble),
		XA: xA, XB: xB, XFrame: xFrame, XTime: xTime, BoxAX: xA - boxWidth/2, BoxBX: xB - boxWidth/2,
		LifeTop: hTop - 10, AName: "A " + c.A.Addr.String(), BName: "B " + c.B.Addr.String(),
		AQP: qpText(c.A), BQP: qpText(c.B)}
	longest := 0
	for i := range hc.arrows {
		n := 0
		for _, s := range hc.arrows[i].analysis {
			n += len(s) + 2
		}
		longest = max(longest, n)
	}
	cv.Width = max(xAnalysis+longest*charWidth+24, xB+160)
	y := hTop
	arrows := hc.arrows
	for i := 0; i < len(arrows); {
		j := i + 1
		for j < len(arrows) && arrows[j].fromA == arrows[i].fromA {
			j++
		}
		if j-i <= HTMLBurst {
			for k := i; k < j; k++ {
				r := h.rowView(&arrows[k], len(d.Arrows), y)
				r.Width = cv.Width
				d.Arrows = append(d.Arrows, h.arrowData(&arrows[k]))
				cv.Items = append(cv.Items, itemView{Y: y, Row: &r})
				y += hRow
			}
			i = j
			continue
		}
		b := h.burstView(arrows[i:j], d, cv.Width)
		cv.Items = append(cv.Items, itemView{Y: y, Burst: b})
		if b.Collapsed {
			y += b.CollapsedH
		} else {
			y += b.ExpandedH
		}
		i = j
	}
	cv.Height = y + 8
	return cv
}

// qpText returns "QP 0x000011" or "QP ?".
func qpText(e Endpoint) string {
	if !e.QPNKnown {
		return "QP ?"
	}
	return fmt.Sprintf("QP %#06x", uint32(e.QPN))
}

// arrowData returns the script's data of one arrow: its heading and fields.
func (h *HTML) arrowData(a *htmlArrow) arrowData {
	from, to := "A", "B"
	if !a.fromA {
		from, to = "B", "A"
	}
	t := fmt.Sprintf("frame %d, %s s, %s → %s: %s", a.frame, relTime(a.rel), from, to, a.label)
	return arrowData{Title: t, Keys: a.keys, Values: a.values}
}

// burstView lays out a run of packets in one direction: a heading that
// toggles it, its rows, and the one arrow it collapses into. A burst
// without trouble starts collapsed.
func (h *HTML) burstView(run []htmlArrow, d *pageData, width int) *burstView {
	first, last := &run[0], &run[len(run)-1]
	b := &burstView{N: len(run), Width: width}
	direction := "A → B"
	if !first.fromA {
		direction = "B → A"
	}
	var all Trouble
	counts := make(map[Trouble]int)
	for i := range run {
		t := run[i].trouble
		all |= t
		for _, k := range Troubles {
			if t&k != 0 {
				counts[k]++
			}
		}
	}
	if k := all.Worst(); k != 0 {
		b.Class = troubleClass[k]
	}
	text := troubleText(counts)
	b.Collapsed = all == 0
	b.Head = fmt.Sprintf("%d packets %s, frames %d–%d", b.N, direction, first.frame, last.frame)
	if text != "" {
		b.Head += ": " + text
	}
	y := hHead
	for i := range run {
		r := h.rowView(&run[i], len(d.Arrows), y)
		r.Width = width
		d.Arrows = append(d.Arrows, h.arrowData(&run[i]))
		b.Rows = append(b.Rows, r)
		y += hRow
	}
	b.ExpandedH = y
	b.CollapsedH = hHead + hRow
	s := rowView{Y: hHead, I: -1, Class: b.Class, Width: width, LabelX: (xA + xB) / 2,
		Frame: strconv.Itoa(first.frame), Time: relTime(first.rel)}
	s.X1, s.X2, s.Head = arrowGeometry(first.fromA, yArrow)
	firstOp := strings.TrimPrefix(first.opcode.String(), "RC_")
	lastOp := strings.TrimPrefix(last.opcode.String(), "RC_")
	s.Label = fmt.Sprintf("%d packets: %s … %s psn=%s..%s", b.N, firstOp, lastOp, psnText(first.psn), psnText(last.psn))
	if text != "" {
		s.Analysis = []partView{{Text: text, Class: b.Class}}
	}
	b.Summary = s
	return b
}

// pageTemplate renders the page. Everything is inline: no URL is fetched.
var pageTemplate = template.Must(template.New("page").Parse(strings.NewReplacer(
	"@hRow@", strconv.Itoa(hRow), "@xFrame@", strconv.Itoa(xFrame), "@xTime@", strconv.Itoa(xTime),
	"@yArrow@", strconv.Itoa(yArrow), "@boxWidth@", strconv.Itoa(boxWidth), "@xAnalysis@", strconv.Itoa(xAnalysis),
).Replace(pageHTML)))

// pageHTML is the page's template; @name@ stands for the geometry constant
// name. The first script records any script
// error in the DOM (data-script-errors on <html> and the #script-errors
// list); the last lays the diagrams out, wires the bursts' toggles and the
// hover box, and marks success: data-ready="1", data-arrows (arrows in the
// page) and data-arrows-shown (arrows laid out visibly).
const pageHTML = `<!DOCTYPE html>
<html lang="en" data-ready="0" data-script-errors="0">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}}</title>
<script>
window.onerror = function (msg, src, line, col) {
  var root = document.documentElement;
  root.setAttribute('data-script-errors', String(Number(root.getAttribute('data-script-errors') || 0) + 1));
  var add = function () {
    var list = document.getElementById('script-errors');
    if (!list) { return; }
    var li = document.createElement('li');
    li.textContent = String(msg) + ' (line ' + line + ':' + col + ')';
    list.appendChild(li);
    list.hidden = false;
  };
  if (document.readyState === 'loading') { document.addEventListener('DOMContentLoaded', add); } else { add(); }
  return false;
};
</script>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 16px 24px; color: #212529; background: #fff; }
h1 { font-size: 20px; margin: 0 0 4px; }
h2 { font-size: 16px; margin: 24px 0 4px; font-family: ui-monospace, monospace; }
p { margin: 4px 0; }
.summary, .note { color: #495057; }
.cap { color: #c92a2a; }
#script-errors { color: #c92a2a; font-family: monospace; }
.legend { display: flex; flex-wrap: wrap; gap: 6px 18px; margin: 8px 0; align-items: center; }
.legend span { display: inline-flex; align-items: center; gap: 6px; }
.legend i { display: inline-block; width: 28px; height: 4px; }
.legend .t-icrc i { background: repeating-linear-gradient(90deg, #212529 0 6px, transparent 6px 9px); }
.controls button { font: inherit; font-size: 12px; margin-right: 6px; }
.diagram { overflow-x: auto; }
svg.ladder { display: block; font: 11px ui-monospace, 'DejaVu Sans Mono', monospace; }
svg.ladder text { fill: #212529; white-space: pre; }
svg.ladder .lifeline { stroke: #adb5bd; stroke-width: 2; }
svg.ladder .box { fill: #f1f3f5; stroke: #868e96; }
svg.ladder .ep { font-weight: bold; }
svg.ladder .num { fill: #868e96; }
svg.ladder line.shaft { stroke: #495057; stroke-width: 2; }
svg.ladder polygon.tip { fill: #495057; }
svg.ladder .sum line.shaft { stroke-width: 4; }
svg.ladder .hit { fill: transparent; }
svg.ladder .arrow:hover .hit, svg.ladder .arrow.linked .hit { fill: #e7f5ff; }
svg.ladder .head { cursor: pointer; }
svg.ladder .head rect { fill: #f8f9fa; }
svg.ladder .head:hover rect { fill: #e9ecef; }
svg.ladder .head text { fill: #495057; }
svg.ladder .bracket { stroke: #ced4da; stroke-width: 2; }
svg.ladder .burst.collapsed .body, svg.ladder .burst:not(.collapsed) .sum { display: none; }
svg.ladder .burst.collapsed .open, svg.ladder .burst:not(.collapsed) .closed { display: none; }
{{range .Legend}}svg.ladder g.{{.Class}} > line.shaft { stroke: {{.Color}}; }
svg.ladder g.{{.Class}} > polygon.tip { fill: {{.Color}}; }
svg.ladder tspan.{{.Class}} { fill: {{.Color}}; font-weight: bold; }
.legend .{{.Class}} i { background-color: {{.Color}}; }
{{end}}svg.ladder g.t-icrc > line.shaft { stroke-dasharray: 6 3; }
.legend .t-icrc i { background-color: transparent; }
#tip { position: fixed; display: none; z-index: 10; background: #fff; border: 1px solid #868e96; box-shadow: 0 2px 8px rgba(0,0,0,.25); padding: 6px 8px; font: 12px ui-monospace, monospace; max-width: 560px; pointer-events: none; }
#tip table { border-collapse: collapse; }
#tip th { text-align: left; padding-top: 4px; color: #1864ab; }
#tip td { padding: 0 10px 0 0; vertical-align: top; }
#tip .t { font-weight: bold; margin-bottom: 2px; }
</style>
</head>
<body>
<h1>{{.Title}}</h1>
<p class="summary">{{.Summary}}</p>
<ol id="script-errors" hidden></ol>
<div class="legend"><span><i style="background-color:#495057"></i>no trouble</span>{{range .Legend}}<span class="{{.Class}}"><i></i>{{.Name}}</span>{{end}}</div>
<p class="note">One arrow per packet, time going down. Hover over an arrow for every header field of its packet (the address #frame-N shows packet N's); click a burst's heading to open or close it (bursts without trouble start closed). At most {{.PerPair}} packets per QP pair and {{.PageArrows}} in all are drawn.</p>
<p class="controls"><button type="button" id="open-all">open every burst</button><button type="button" id="close-all">close every burst</button></p>
{{if not .Conns}}<p>No RoCEv2 packets in this capture.</p>{{end}}
{{range .Conns}}<section class="conn" id="qp-pair-{{.ID}}">
<h2>QP pair {{.ID}}: A {{.A}} ⇄ B {{.B}}</h2>
<p class="summary">{{.PacketsText}}{{if .TroubleText}}: {{.TroubleText}}{{else}}, no trouble{{end}}</p>
{{if .Omitted}}<p class="cap">{{if .Drawn}}Only the first {{.Drawn}} of its {{.PacketsText}} are drawn (the page's limit); the other {{.Omitted}}{{else}}Not drawn: the page reached its limit of {{$.PageArrows}} arrows before this QP pair began. Its {{.PacketsText}}{{end}}{{if .OmittedTrouble}} ({{.OmittedTrouble}}){{end}} can be read in the text ladder: sroce ladder CAPTURE.</p>{{end}}
<div class="diagram">
<svg class="ladder" xmlns="http://www.w3.org/2000/svg" width="{{.Width}}" height="{{.Height}}" data-top="{{.LifeTop}}">
<rect x="{{.BoxAX}}" y="2" width="@boxWidth@" height="38" rx="4" class="box"/>
<rect x="{{.BoxBX}}" y="2" width="@boxWidth@" height="38" rx="4" class="box"/>
<text x="{{.XA}}" y="17" text-anchor="middle" class="ep">{{.AName}}</text>
<text x="{{.XA}}" y="33" text-anchor="middle">{{.AQP}}</text>
<text x="{{.XB}}" y="17" text-anchor="middle" class="ep">{{.BName}}</text>
<text x="{{.XB}}" y="33" text-anchor="middle">{{.BQP}}</text>
<text x="{{.XFrame}}" y="33" text-anchor="end" class="num">frame</text>
<text x="{{.XTime}}" y="33" text-anchor="end" class="num">time (s)</text>
<line class="lifeline" x1="{{.XA}}" y1="{{.LifeTop}}" x2="{{.XA}}" y2="{{.Height}}"/>
<line class="lifeline" x1="{{.XB}}" y1="{{.LifeTop}}" x2="{{.XB}}" y2="{{.Height}}"/>
<g class="rows">
{{range .Items}}{{$y := .Y}}{{if .Row}}{{with .Row}}<g class="item arrow{{if .Class}} {{.Class}}{{end}}" data-i="{{.I}}" id="frame-{{.Frame}}" transform="translate(0,{{$y}})">{{template "row" .}}</g>
{{end}}{{else}}{{with .Burst}}<g class="item burst{{if .Collapsed}} collapsed{{end}}" data-n="{{.N}}" data-expanded="{{.ExpandedH}}" data-collapsed="{{.CollapsedH}}" transform="translate(0,{{$y}})">
<g class="head" role="button" tabindex="0"><rect x="0" y="0" width="{{.Width}}" height="18" rx="3"/><text x="8" y="13"><tspan class="closed">▸ </tspan><tspan class="open">▾ </tspan>{{.Head}}</text></g>
<g class="body"><line class="bracket" x1="3" y1="20" x2="3" y2="{{.ExpandedH}}"/>
{{range .Rows}}<g class="arrow{{if .Class}} {{.Class}}{{end}}" data-i="{{.I}}" id="frame-{{.Frame}}" transform="translate(0,{{.Y}})">{{template "row" .}}</g>
{{end}}</g>
{{with .Summary}}<g class="sum{{if .Class}} {{.Class}}{{end}}" transform="translate(0,{{.Y}})">{{template "row" .}}</g>{{end}}
</g>
{{end}}{{end}}{{end}}</g>
</svg>
</div>
</section>
{{end}}
<div id="tip"></div>
<script type="application/json" id="ladder-data">{{.Data}}</script>
<script>
(function () {
  'use strict';
  var data = JSON.parse(document.getElementById('ladder-data').textContent);
  var ROW = @hRow@;

  function layout(svg) {
    var y = Number(svg.getAttribute('data-top')) + 10;
    var items = svg.querySelector('g.rows').children;
    for (var i = 0; i < items.length; i++) {
      var it = items[i];
      it.setAttribute('transform', 'translate(0,' + y + ')');
      if (it.classList.contains('burst')) {
        y += Number(it.getAttribute(it.classList.contains('collapsed') ? 'data-collapsed' : 'data-expanded'));
      } else {
        y += ROW;
      }
    }
    var h = y + 8;
    svg.setAttribute('height', String(h));
    var lines = svg.querySelectorAll('line.lifeline');
    for (var j = 0; j < lines.length; j++) { lines[j].setAttribute('y2', String(h)); }
  }

  function layoutAll() {
    var svgs = document.querySelectorAll('svg.ladder');
    for (var i = 0; i < svgs.length; i++) { layout(svgs[i]); }
    mark();
  }

  function mark() {
    var arrows = document.querySelectorAll('svg.ladder g.arrow');
    var shown = 0;
    for (var i = 0; i < arrows.length; i++) {
      var r = arrows[i].querySelector('line.shaft').getBoundingClientRect();
      if (r.width > 0) { shown++; }
    }
    var root = document.documentElement;
    root.setAttribute('data-arrows', String(arrows.length));
    root.setAttribute('data-arrows-shown', String(shown));
  }

  function toggle(burst, open) {
    if (open === undefined) { open = burst.classList.contains('collapsed'); }
    burst.classList.toggle('collapsed', !open);
  }

  var heads = document.querySelectorAll('svg.ladder g.burst > g.head');
  for (var i = 0; i < heads.length; i++) {
    heads[i].addEventListener('click', function (ev) {
      toggle(ev.currentTarget.parentNode);
      layoutAll();
    });
    heads[i].addEventListener('keydown', function (ev) {
      if (ev.key === 'Enter' || ev.key === ' ') {
        ev.preventDefault();
        toggle(ev.currentTarget.parentNode);
        layoutAll();
      }
    });
  }
  function all(open) {
    var bursts = document.querySelectorAll('svg.ladder g.burst');
    for (var i = 0; i < bursts.length; i++) { toggle(bursts[i], open); }
    layoutAll();
  }
  document.getElementById('open-all').addEventListener('click', function () { all(true); });
  document.getElementById('close-all').addEventListener('click', function () { all(false); });

  var tip = document.getElementById('tip');
  // fill puts arrow g's heading and header fields into the hover box.
  function fill(g) {
    var a = data.arrows[Number(g.getAttribute('data-i'))];
    if (!a) { return false; }
    if (tip.getAttribute('data-i') === g.getAttribute('data-i')) { return true; }
    tip.setAttribute('data-i', g.getAttribute('data-i'));
    tip.textContent = '';
    var t = document.createElement('div');
    t.className = 't';
    t.textContent = a.t;
    tip.appendChild(t);
    var table = document.createElement('table');
    var layer = '';
    for (var i = 0; i < a.k.length; i++) {
      var key = data.keys[a.k[i]];
      if (key[0] !== layer) {
        layer = key[0];
        var th = document.createElement('th');
        th.colSpan = 2;
        th.textContent = layer;
        table.insertRow().appendChild(th);
      }
      var row = table.insertRow();
      row.insertCell().textContent = key[1];
      row.insertCell().textContent = a.v[i];
    }
    tip.appendChild(table);
    return true;
  }
  // place shows the hover box near the point (x, y) of the window.
  function place(x, y) {
    tip.style.display = 'block';
    var w = tip.offsetWidth, h = tip.offsetHeight;
    var left = x + 16, top = y + 12;
    if (left + w > window.innerWidth - 4) { left = Math.max(4, x - w - 16); }
    if (top + h > window.innerHeight - 4) { top = Math.max(4, window.innerHeight - h - 4); }
    tip.style.left = left + 'px';
    tip.style.top = top + 'px';
  }
  var pinned = null; // the arrow named by the address's #frame-N, until the mouse moves
  function show(ev) {
    var g = ev.target.closest ? ev.target.closest('g.arrow') : null;
    if (!g) {
      if (pinned) { return; }
      tip.style.display = 'none';
      return;
    }
    pinned = null;
    if (!fill(g)) { tip.style.display = 'none'; return; }
    place(ev.clientX, ev.clientY);
  }
  // showFrame opens the burst of the arrow of frame n, scrolls to it and
  // shows its hover box: the address #frame-N links to a packet.
  function showFrame() {
    var m = /^#frame-([0-9]+)$/.exec(window.location.hash);
    var g = m ? document.getElementById('frame-' + m[1]) : null;
    if (!g) { return; }
    var burst = g.parentNode.parentNode;
    if (burst.classList && burst.classList.contains('burst') && burst.classList.contains('collapsed')) {
      toggle(burst, true);
      layoutAll();
    }
    g.classList.add('linked');
    g.scrollIntoView({block: 'center'});
    if (fill(g)) {
      var r = g.querySelector('line.shaft').getBoundingClientRect();
      pinned = g;
      place(r.left + r.width / 2, r.bottom);
    }
  }
  window.addEventListener('hashchange', showFrame);
  document.addEventListener('mousemove', show);
  document.addEventListener('mouseleave', function () { tip.style.display = 'none'; });

  layoutAll();
  showFrame();
  document.documentElement.setAttribute('data-ready', '1');
})();
</script>
</body>
</html>
{{define "row"}}<rect class="hit" x="0" y="0" width="{{.Width}}" height="@hRow@"/><text x="@xFrame@" y="20" text-anchor="end" class="num">{{.Frame}}</text><text x="@xTime@" y="20" text-anchor="end" class="num">{{.Time}}</text><line class="shaft" x1="{{.X1}}" y1="@yArrow@" x2="{{.X2}}" y2="@yArrow@"/><polygon class="tip" points="{{.Head}}"/><text x="{{.LabelX}}" y="11" text-anchor="middle">{{.Label}}</text>{{if .Analysis}}<text x="@xAnalysis@" y="20">{{range .Analysis}}{{.Sep}}<tspan{{if .Class}} class="{{.Class}}"{{end}}>{{.Text}}</tspan>{{end}}</text>{{end}}{{end}}`
