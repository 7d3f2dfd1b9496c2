package main

// sroce ladder --html: the command line, and the page in a real headless
// browser (Debian's chromium): it loads without script errors, draws an
// arrow per packet, opens a burst and the hover box from its address, and
// its screenshot shows the trouble colours.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sroce/sroce/trace"
	"golang.org/x/net/html"
)

// lossyPcap is a real capture of a lossy exchange: sroce demo --mode udp
// --netem "loss 3%" between two network namespaces, captured with tcpdump
// on B's veth (so A's requests arrive with the losses' gaps), trimmed to the
// first 41 frames: SENDs with a lost packet, B's sequence NAK, A's go-back-N
// and then its timer's retransmissions, which B takes as duplicates.
const lossyPcap = "testdata/ladder/lossy.pcap"

// lossyFrames is how many RoCEv2 frames lossyPcap holds.
const lossyFrames = 41

// TestLadderHTMLCommand checks --html: the page written, stdout left
// empty (or holding the JSON lines with --json), the closing lines, and the
// errors: a bad --html-arrows, a page that cannot be created.
func TestLadderHTMLCommand(t *testing.T) {
	dir := t.TempDir()
	page := filepath.Join(dir, "lossy.html")
	code, out, errOut := runSroce(t, nil, "ladder", "--html", page, lossyPcap)
	if code != exitOK || out != "" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	for _, want := range []string{
		"41 packets: 41 RoCEv2, 0 skipped (not RoCEv2), 0 malformed, 0 ICRC failures; 1 QP pair\n",
		"sroce ladder: wrote " + page + ": 41 arrows for 1 QP pair\n",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	b, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), `id="frame-`); n != lossyFrames {
		t.Errorf("the page draws %d arrows, want %d", n, lossyFrames)
	}
	for _, want := range []string{"<title>sroce ladder lossy.pcap</title>", "9 retransmissions, 4 duplicates, 5 sequence gaps, 1 NAK"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the page lacks %q", want)
		}
	}

	// With --json the lines still stream; the page is written as well.
	page2 := filepath.Join(dir, "json.html")
	code, out, errOut = runSroce(t, nil, "ladder", "--json", "--html", page2, "--html-arrows", "5", lossyPcap)
	if code != exitOK || strings.Count(out, "\n") != lossyFrames {
		t.Fatalf("--json --html: exit %d, %d lines, stderr %q", code, strings.Count(out, "\n"), errOut)
	}
	b, err = os.ReadFile(page2)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), `id="frame-`); n != 5 || !strings.Contains(string(b), "Only the first 5 of its 41 packets are drawn") {
		t.Errorf("--html-arrows 5: %d arrows drawn", n)
	}

	for _, args := range [][]string{
		{"ladder", "--html", page, "--html-arrows", "0", lossyPcap},
		{"ladder", "--html", page, "--html-arrows", strconv.Itoa(trace.MaxHTMLArrows + 1), lossyPcap},
	} {
		code, out, errOut := runSroce(t, nil, args...)
		if code != exitUsage || out != "" || !strings.Contains(errOut, "--html-arrows must be between 1 and "+strconv.Itoa(trace.MaxHTMLArrows)) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, code, out, errOut)
		}
	}
	// The page may not overwrite the capture.
	capCopy := filepath.Join(dir, "copy.pcap")
	orig, err := os.ReadFile(lossyPcap)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(capCopy, orig, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = runSroce(t, nil, "ladder", "--html", capCopy, capCopy)
	if after, _ := os.ReadFile(capCopy); code != exitUsage || out != "" || !bytes.Equal(after, orig) ||
		!strings.Contains(errOut, "the HTML page "+capCopy+" would overwrite the capture") {
		t.Errorf("--html onto the capture: exit %d, stdout %q, stderr %q", code, out, errOut)
	}

	// The help states the page's bounds as package trace has them.
	_, help, _ := runSroce(t, nil, "ladder", "-h")
	help = strings.Join(strings.Fields(help), " ")
	for _, want := range []string{
		"runs of more than " + strconv.Itoa(trace.HTMLBurst) + " packets",
		"per QP pair and " + strconv.Itoa(trace.HTMLPageArrows) + " in all",
		"(default " + strconv.Itoa(trace.DefaultHTMLArrows) + ")",
	} {
		if !strings.Contains(help, want) {
			t.Errorf("sroce ladder -h does not say %q", want)
		}
	}

	bad := filepath.Join(dir, "no such directory", "page.html")
	code, out, errOut = runSroce(t, nil, "ladder", "--html", bad, lossyPcap)
	if code != exitProblem || out != "" || strings.Count(errOut, "\n") != 1 ||
		!strings.Contains(errOut, "sroce ladder: cannot create the HTML page "+bad+": no such file or directory") {
		t.Errorf("unwritable page: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// chromium returns the path of the headless browser, or skips the test
// when there is none (fails instead when SROCE_REQUIRE_BROWSER=1).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("SROCE_REQUIRE_BROWSER") == "1" {
		t.Fatal("SROCE_REQUIRE_BROWSER=1 but no chromium is installed (apt-get install chromium)")
	}
	t.Skip("no chromium installed (apt-get install chromium): the HTML page is not checked in a browser")
	return ""
}

// browserTimeout bounds one run of the headless browser.
const browserTimeout = 90 * time.Second

// runBrowser runs the headless browser with args after the usual flags
// and returns its standard output.
func runBrowser(t *testing.T, bin string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), browserTimeout)
	defer cancel()
	base := []string{
		"--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
		"--no-first-run", "--disable-extensions", "--disable-background-networking",
		"--user-data-dir=" + t.TempDir(),
	}
	cmd := exec.CommandContext(ctx, bin, append(base, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatalf("chromium %q did not finish within %v", args, browserTimeout)
	}
	if err != nil {
		t.Fatalf("chromium %q: %v\n%s", args, err, lastLines(stderr.String(), 20))
	}
	return stdout.Bytes()
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// writePage runs sroce ladder --html on capture and returns the page's path.
func writePage(t *testing.T, capture string) string {
	t.Helper()
	page := filepath.Join(t.TempDir(), strings.TrimSuffix(filepath.Base(capture), ".pcap")+".html")
	code, _, errOut := runSroce(t, nil, "ladder", "--html", page, capture)
	if code != exitOK {
		t.Fatalf("sroce ladder --html %s: exit %d: %s", capture, code, errOut)
	}
	return page
}

// fileURL returns the file:// URL of an absolute path.
func fileURL(t *testing.T, path string) string {
	t.Helper()
	abs, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	return "file://" + abs
}

// domState is what the page's script recorded in the DOM.
type domState struct {
	ready, scriptErrors, arrows, shown string
	errorList                          string // the text of #script-errors
	arrowNodes                         int    // g.arrow elements
	tip                                string // the text of the hover box
}

// readDOM parses a DOM dumped by the browser.
func readDOM(t *testing.T, dom []byte) domState {
	t.Helper()
	doc, err := html.Parse(bytes.NewReader(dom))
	if err != nil {
		t.Fatalf("the dumped DOM does not parse: %v", err)
	}
	var s domState
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode {
			get := func(k string) string {
				for _, a := range n.Attr {
					if a.Key == k {
						return a.Val
					}
				}
				return ""
			}
			switch {
			case n.Data == "html":
				s.ready, s.scriptErrors = get("data-ready"), get("data-script-errors")
				s.arrows, s.shown = get("data-arrows"), get("data-arrows-shown")
			case get("id") == "script-errors":
				s.errorList = nodeText(n)
			case get("id") == "tip":
				s.tip = nodeText(n)
			case n.Data == "g" && strings.Contains(" "+get("class")+" ", " arrow "):
				s.arrowNodes++
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(doc)
	return s
}

// nodeText returns the text inside n, its cells separated by spaces.
func nodeText(n *html.Node) string {
	var b strings.Builder
	var f func(*html.Node)
	f = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
		}
		if n.Type == html.ElementNode && (n.Data == "td" || n.Data == "th") {
			b.WriteByte(' ')
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			f(c)
		}
	}
	f(n)
	return b.String()
}

// TestLadderHTMLBrowser loads the page of the real lossy capture in
// headless chromium: no script error, an arrow per packet laid out, the
// address #frame-3 opens the closed burst holding frame 3 and shows that
// packet's header fields; a script error is caught (the check is not
// vacuous); the screenshot has the window's size, is not blank and shows
// the retransmission and NAK colours, which the page of a capture without
// trouble lacks (but for the legend).
func TestLadderHTMLBrowser(t *testing.T) {
	bin := chromium(t)
	page := writePage(t, lossyPcap)
	url := fileURL(t, page)

	s := readDOM(t, runBrowser(t, bin, "--dump-dom", url))
	if s.ready != "1" || s.scriptErrors != "0" || strings.TrimSpace(s.errorList) != "" {
		t.Fatalf("the page did not load cleanly: data-ready=%q data-script-errors=%q errors %q", s.ready, s.scriptErrors, s.errorList)
	}
	if s.arrows != strconv.Itoa(lossyFrames) || s.arrowNodes != lossyFrames {
		t.Errorf("data-arrows=%q with %d arrow elements, want %d", s.arrows, s.arrowNodes, lossyFrames)
	}
	shown, err := strconv.Atoi(s.shown)
	// Frames 1-8 and 10-17 are bursts without trouble: closed.
	if err != nil || shown != lossyFrames-16 {
		t.Errorf("data-arrows-shown=%q, want %d (two closed bursts of 8)", s.shown, lossyFrames-16)
	}

	s = readDOM(t, runBrowser(t, bin, "--dump-dom", url+"#frame-3"))
	if s.ready != "1" || s.scriptErrors != "0" {
		t.Fatalf("#frame-3: data-ready=%q data-script-errors=%q errors %q", s.ready, s.scriptErrors, s.errorList)
	}
	if s.shown != strconv.Itoa(lossyFrames-8) {
		t.Errorf("#frame-3: data-arrows-shown=%q, want %d (the burst of frames 1-8 opened)", s.shown, lossyFrames-8)
	}
	for _, want := range []string{
		"frame 3, 0.000078 s, A → B: SEND_MIDDLE psn=0x4191ea len=1024",
		"Ethernet", "IPv4", "source 10.47.0.1", "destination port 4791", "BTH",
		"opcode 0x01 RC_SEND_MIDDLE", "PSN 0x4191ea", "destination QP 0x000011", "Payload length 1024 bytes", "ICRC",
	} {
		if !strings.Contains(s.tip, want) {
			t.Errorf("#frame-3: the hover box lacks %q: %q", want, s.tip)
		}
	}

	// A page whose script fails must say so in the DOM.
	b, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	broken := filepath.Join(t.TempDir(), "broken.html")
	inject := "<script>noSuchFunction();</script>\n</body>"
	if err := os.WriteFile(broken, bytes.Replace(b, []byte("</body>"), []byte(inject), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	s = readDOM(t, runBrowser(t, bin, "--dump-dom", fileURL(t, broken)))
	if s.scriptErrors != "1" || !strings.Contains(s.errorList, "noSuchFunction") {
		t.Errorf("a script error was not recorded: data-script-errors=%q, list %q", s.scriptErrors, s.errorList)
	}

	// Screenshots: the lossy capture's and that of one without trouble.
	const w, h = 1200, 900
	shot := func(page string) image.Image {
		t.Helper()
		path := filepath.Join(t.TempDir(), "shot.png")
		runBrowser(t, bin, fmt.Sprintf("--window-size=%d,%d", w, h), "--screenshot="+path, fileURL(t, page))
		f, err := os.Open(path)
		if err != nil {
			t.Fatalf("no screenshot: %v", err)
		}
		defer f.Close()
		img, err := png.Decode(f)
		if err != nil {
			t.Fatalf("the screenshot is not a PNG: %v", err)
		}
		if b := img.Bounds(); b.Dx() != w || b.Dy() != h {
			t.Fatalf("screenshot of %dx%d, want %dx%d", b.Dx(), b.Dy(), w, h)
		}
		return img
	}
	lossy := shot(page)
	clean := shot(writePage(t, filepath.Join("..", "..", "bth", "testdata", "rxe", "rc_pingpong.pcap")))
	if n := countNotWhite(lossy); n < w*h/50 {
		t.Errorf("the screenshot is nearly blank: %d pixels not white", n)
	}
	for _, k := range []trace.Trouble{trace.TroubleRetransmission, trace.TroubleNAK} {
		c := trace.TroubleColor[k]
		inLossy, inClean := countColor(t, lossy, c), countColor(t, clean, c)
		t.Logf("%v colour %s: %d pixels in the lossy capture's screenshot, %d in the clean one's", k, c, inLossy, inClean)
		// An arrow is 430 pixels long and 2 thick; the legend's swatch,
		// in both, is far less.
		if inLossy < inClean+400 {
			t.Errorf("%v colour %s: %d pixels in the lossy capture's screenshot, %d in the clean one's", k, c, inLossy, inClean)
		}
	}
}

// countNotWhite counts the pixels of img that are not white.
func countNotWhite(img image.Image) int {
	n := 0
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			if r>>8 < 0xf0 || g>>8 < 0xf0 || bl>>8 < 0xf0 {
				n++
			}
		}
	}
	return n
}

// countColor counts the pixels of img of colour hex ("#rrggbb"), give or
// take 2 in each channel.
func countColor(t *testing.T, img image.Image, hex string) int {
	t.Helper()
	if !regexp.MustCompile(`^#[0-9a-f]{6}$`).MatchString(hex) {
		t.Fatalf("colour %q", hex)
	}
	v, _ := strconv.ParseUint(hex[1:], 16, 32)
	want := [3]int{int(v >> 16), int(v >> 8 & 0xff), int(v & 0xff)}
	n := 0
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			got := [3]int{int(r >> 8), int(g >> 8), int(bl >> 8)}
			ok := true
			for i := range got {
				if d := got[i] - want[i]; d < -2 || d > 2 {
					ok = false
				}
			}
			if ok {
				n++
			}
		}
	}
	return n
}
