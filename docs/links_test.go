// Package docs is sroce's documentation (Markdown); its test checks that
// the relative links between README.md, the files here and the rest of
// the repository lead somewhere.
package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// link matches an inline Markdown link or image: [text](target) with an
// optional "title".
var link = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// heading matches an ATX heading.
var heading = regexp.MustCompile(`(?m)^#{1,6}\s+(.+?)\s*#*\s*$`)

// fence matches a fenced code block, which holds no links.
var fence = regexp.MustCompile("(?ms)^```.*?^```")

// slug is the anchor GitHub gives a heading: lower case, spaces to '-',
// punctuation other than '-' and '_' dropped.
func slug(h string) string {
	h = strings.ToLower(strings.TrimSpace(h))
	var b strings.Builder
	for _, r := range h {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors returns the anchors of the headings of a Markdown file, with
// GitHub's -1, -2 suffixes for repeated ones.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, m := range heading.FindAllStringSubmatch(fence.ReplaceAllString(text, ""), -1) {
		h := strings.NewReplacer("`", "", "*", "").Replace(m[1])
		s := slug(h)
		if n := seen[s]; n > 0 {
			out[s+"-"+itoa(n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

func itoa(n int) string {
	const digits = "0123456789"
	if n < 10 {
		return digits[n : n+1]
	}
	return itoa(n/10) + digits[n%10:n%10+1]
}

// TestRelativeLinksResolve follows every relative link of README.md and
// docs/*.md: the file must exist and, for a link with #anchor into a
// Markdown file, a heading of the file must have that anchor.
func TestRelativeLinksResolve(t *testing.T) {
	files, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, filepath.Join("..", "README.md"))
	checked := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		text := fence.ReplaceAllString(string(b), "")
		for _, m := range link.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			dest := f
			if path != "" {
				dest = filepath.Join(filepath.Dir(f), path)
			}
			checked++
			b, err := os.ReadFile(dest)
			if err != nil {
				if st, serr := os.Stat(dest); serr == nil && st.IsDir() && anchor == "" {
					continue
				}
				t.Errorf("%s: link %s: %v", f, target, err)
				continue
			}
			if anchor != "" && strings.HasSuffix(dest, ".md") && !anchors(string(b))[anchor] {
				t.Errorf("%s: link %s: %s has no heading with anchor #%s", f, target, dest, anchor)
			}
		}
	}
	if checked < 10 {
		t.Errorf("only %d relative links found: the pattern misses them", checked)
	}
	t.Logf("%d relative links checked", checked)
}

// TestSlug checks the anchors against headings of these documents as
// GitHub renders them.
func TestSlug(t *testing.T) {
	for h, want := range map[string]string{
		"Security: what the daemon defends against": "security-what-the-daemon-defends-against",
		"Against rdma_rxe":                          "against-rdma_rxe",
		"sroce run: unmodified verbs programs":      "sroce-run-unmodified-verbs-programs",
		"sroce demo --explain":                      "sroce-demo---explain",
	} {
		if got := slug(h); got != want {
			t.Errorf("slug(%q) = %q, want %q", h, got, want)
		}
	}
}
