// Package manpage turns sroce's help text into man pages, so the pages
// say what --help says: "sroce help" becomes sroce(1) and "sroce help CMD"
// sroce-CMD(1). The package build (dist/deb) runs the built binary and
// writes the pages; nothing here runs at the user's.
//
// The help text has a shape rather than a grammar, and Parse reads it
// loosely: a "usage:" line (indented lines after it continue it), the
// description in paragraphs (indented lines in it are kept as they are),
// then sections, each a line at the left margin ending with ':' ("flags:",
// "commands:", "Options (as in perftest's ib_write_bw):") followed by
// indented entries: a term (a flag with its argument, a command name) and
// its description, separated by two or more spaces; lines indented deeper
// continue the entry before them.
package manpage

import (
	"fmt"
	"io"
	"strings"
	"unicode"
)

// Para is a paragraph of text: filled (Lines joined by the formatter) or
// literal (kept line by line, as an example is).
type Para struct {
	Lines   []string
	Literal bool
}

// Entry is one item of a section: a flag or a command and what it does.
type Entry struct {
	Term, Desc string
}

// Section is a titled part of the help text after the description.
type Section struct {
	Title   string
	Intro   []Para // text before the entries (from the title's parenthesis)
	Entries []Entry
	Outro   []Para // text after the entries
}

// Help is a parsed help text.
type Help struct {
	Usage       []string // the usage line and its continuations, "usage:" removed
	Description []Para
	Sections    []Section
}

// Parse reads help text of the shape the package comment describes.
// Text it does not recognise becomes description: nothing is dropped.
func Parse(text string) Help {
	lines := strings.Split(strings.ReplaceAll(text, "\t", "        "), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " \r")
	}
	var h Help
	var para *Para
	var sec *Section
	// The indentation of a section's entries, and the column where the
	// first entry's description starts: a line starting with '-' left of
	// it is an entry ("      --json" under "  -d, --device=IF  ...").
	entryIndent, descCol := -1, -1
	flush := func() { para = nil }
	addLine := func(dst *[]Para, line string, literal bool) {
		if para == nil || para.Literal != literal {
			*dst = append(*dst, Para{Literal: literal})
			para = &(*dst)[len(*dst)-1]
		}
		if !literal {
			line = strings.TrimSpace(line)
		}
		para.Lines = append(para.Lines, line)
	}
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		ind := indent(l)
		switch {
		case l == "":
			flush()
		case h.Usage == nil && ind == 0 && strings.HasPrefix(strings.ToLower(l), "usage:"):
			flush()
			h.Usage = []string{strings.TrimSpace(l[len("usage:"):])}
			for i+1 < len(lines) && lines[i+1] != "" && indent(lines[i+1]) > 0 {
				i++
				h.Usage = append(h.Usage, strings.TrimSpace(lines[i]))
			}
		case ind == 0 && isHeader(lines, i):
			flush()
			h.Sections = append(h.Sections, Section{})
			sec = &h.Sections[len(h.Sections)-1]
			sec.Title, sec.Intro = title(l)
			entryIndent, descCol = -1, -1
		case sec != nil && ind > 0 && len(sec.Outro) == 0 && (entryIndent < 0 || ind <= entryIndent ||
			strings.HasPrefix(strings.TrimSpace(l), "-") && ind < descCol):
			flush()
			if entryIndent < 0 {
				entryIndent = ind
			}
			term, desc := splitEntry(strings.TrimSpace(l))
			if desc != "" && descCol < 0 {
				descCol = strings.Index(l, desc)
			}
			sec.Entries = append(sec.Entries, Entry{Term: term, Desc: desc})
		case sec != nil && ind > entryIndent && len(sec.Entries) > 0 && len(sec.Outro) == 0:
			e := &sec.Entries[len(sec.Entries)-1]
			e.Desc = strings.TrimSpace(e.Desc + " " + strings.TrimSpace(l))
		case sec != nil:
			addLine(&sec.Outro, l, ind > 0)
		default:
			addLine(&h.Description, l, ind > 0)
		}
	}
	return h
}

// indent is the number of leading spaces of l.
func indent(l string) int { return len(l) - len(strings.TrimLeft(l, " ")) }

// isHeader reports whether lines[i] starts a section: a short line at the
// left margin ending with ':' whose next non-blank line is an indented
// entry (a flag, or a term and its description two spaces apart), not an
// example.
func isHeader(lines []string, i int) bool {
	l := lines[i]
	if !strings.HasSuffix(l, ":") || len(l) > 60 || strings.Count(l, " ") > 6 {
		return false
	}
	for _, next := range lines[i+1:] {
		if next != "" {
			t := strings.TrimSpace(next)
			return indent(next) > 0 && (strings.HasPrefix(t, "-") || strings.Contains(t, "  "))
		}
	}
	return false
}

// title splits a header line into the section's title and, from a
// parenthesis in it, an introductory paragraph: "Options (as in
// perftest's ib_write_bw):" is OPTIONS with "As in perftest's
// ib_write_bw."
func title(l string) (string, []Para) {
	l = strings.TrimSuffix(l, ":")
	var intro []Para
	if open := strings.Index(l, "("); open > 0 && strings.HasSuffix(l, ")") {
		note := strings.TrimSpace(l[open+1 : len(l)-1])
		if note != "" {
			r := []rune(note)
			r[0] = unicode.ToUpper(r[0])
			intro = []Para{{Lines: []string{string(r) + "."}}}
		}
		l = strings.TrimSpace(l[:open])
	}
	t := strings.ToUpper(l)
	if t == "FLAGS" {
		t = "OPTIONS"
	}
	return t, intro
}

// splitEntry splits an entry's first line into its term and description:
// at the first run of two or more spaces; without one, a flag's term is
// the flag and its argument ("--socket string the daemon's socket"), any
// other the first word.
func splitEntry(l string) (string, string) {
	if i := strings.Index(l, "  "); i > 0 {
		return l[:i], strings.TrimSpace(l[i:])
	}
	f := strings.Fields(l)
	switch {
	case len(f) >= 3 && strings.HasPrefix(f[0], "-"):
		return f[0] + " " + f[1], strings.Join(f[2:], " ")
	case len(f) >= 2:
		return f[0], strings.Join(f[1:], " ")
	}
	return l, ""
}

// Meta is what a page says besides the help text.
type Meta struct {
	Name    string // the page's name: "sroce" or "sroce-dissect"
	Section string // "1"
	Summary string // the NAME line's description
	Date    string // of the .TH line, e.g. 2026-11-29
	Source  string // e.g. "sroce v1.2.0"
	Manual  string // e.g. "sroce manual"
	// Command turns the terms of a COMMANDS section into page
	// references: Command("dissect") = "sroce-dissect".
	Command func(term string) string
	SeeAlso []string // page references, "sroce(1)"
	Files   []Entry  // a FILES section
}

// Render writes h as a man page (man(7) macros) to w.
func Render(w io.Writer, m Meta, h Help) error {
	var b strings.Builder
	fmt.Fprintf(&b, ".\\\" Generated from sroce's help text (internal/manpage); do not edit.\n")
	fmt.Fprintf(&b, ".TH %s %s %s %s %s\n", quote(strings.ToUpper(m.Name)), m.Section, quote(m.Date), quote(m.Source), quote(m.Manual))
	// Ragged right and no hyphenation: lists, paths and library names
	// are wider than a line or must not be split.
	b.WriteString(".ad l\n.nh\n.SH NAME\n")
	fmt.Fprintf(&b, "%s \\- %s\n", escWords(m.Name), escText(m.Summary))
	if len(h.Usage) > 0 {
		b.WriteString(".SH SYNOPSIS\n.nf\n")
		for _, u := range h.Usage {
			fmt.Fprintf(&b, "%s\n", escLine(escWords(u)))
		}
		b.WriteString(".fi\n")
	}
	if len(h.Description) > 0 {
		b.WriteString(".SH DESCRIPTION\n")
		paras(&b, h.Description)
	}
	for _, s := range h.Sections {
		fmt.Fprintf(&b, ".SH %s\n", quote(s.Title))
		paras(&b, s.Intro)
		isCommands := s.Title == "COMMANDS" && m.Command != nil
		for _, e := range s.Entries {
			if isCommands {
				fmt.Fprintf(&b, ".TP\n.BR %s (%s)\n", escWords(m.Command(e.Term)), m.Section)
			} else {
				fmt.Fprintf(&b, ".TP\n\\fB%s\\fR\n", escWords(e.Term))
			}
			if e.Desc != "" {
				fmt.Fprintf(&b, "%s\n", escLine(escText(e.Desc)))
			}
		}
		if len(s.Outro) > 0 {
			b.WriteString(".PP\n")
			paras(&b, s.Outro)
		}
	}
	if len(m.Files) > 0 {
		b.WriteString(".SH FILES\n")
		for _, f := range m.Files {
			fmt.Fprintf(&b, ".TP\n.I %s\n%s\n", escWords(f.Term), escLine(escText(f.Desc)))
		}
	}
	if len(m.SeeAlso) > 0 {
		b.WriteString(".SH SEE ALSO\n")
		for i, ref := range m.SeeAlso {
			name, sect, ok := strings.Cut(strings.TrimSuffix(ref, ")"), "(")
			sep := ","
			if i == len(m.SeeAlso)-1 {
				sep = ""
			}
			if ok {
				fmt.Fprintf(&b, ".BR %s (%s)%s\n", escWords(name), sect, sep)
			} else {
				fmt.Fprintf(&b, "%s%s\n", escLine(escText(ref)), sep)
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// paras writes paragraphs, .PP between them.
func paras(b *strings.Builder, ps []Para) {
	for i, p := range ps {
		if i > 0 {
			b.WriteString(".PP\n")
		}
		if p.Literal {
			b.WriteString(".RS 4\n.nf\n")
			base := -1
			for _, l := range p.Lines {
				if base < 0 || indent(l) < base {
					base = indent(l)
				}
			}
			for _, l := range p.Lines {
				fmt.Fprintf(b, "%s\n", escLine(escWords(l[base:])))
			}
			b.WriteString(".fi\n.RE\n")
			continue
		}
		for _, l := range p.Lines {
			fmt.Fprintf(b, "%s\n", escLine(escText(l)))
		}
	}
}

// quote makes s one argument of a macro.
func quote(s string) string {
	return `"` + strings.ReplaceAll(escText(s), `"`, `\(dq`) + `"`
}

// escLine keeps a line from being read as a request: one starting with
// '.' or '\” gets a zero-width character in front.
func escLine(s string) string {
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "'") {
		return `\&` + s
	}
	return s
}

// escText escapes prose: backslashes, every '-' that starts a word or
// follows another (flags: --socket, -d) as a minus sign, hyphens inside
// words left as they are, other characters beyond ASCII by code point.
func escText(s string) string { return esc(s, false) }

// escWords escapes a command line or a term: every '-' is a minus sign.
func escWords(s string) string { return esc(s, true) }

func esc(s string, allMinus bool) string {
	var b strings.Builder
	prev := ' '
	rs := []rune(s)
	for i, r := range rs {
		switch {
		case r == '\\':
			b.WriteString(`\e`)
		case r == '-' && (allMinus || prev == '-' || unicode.IsSpace(prev) || strings.ContainsRune("([|=\"'`", prev)):
			b.WriteString(`\-`)
		case r == ',' && !allMinus && i+1 < len(rs) && !unicode.IsSpace(rs[i+1]):
			// A break point after a comma inside a word: lists such as
			// "a=1,b=2,c=3" are wider than a line.
			b.WriteString(`,\:`)
		case r > unicode.MaxASCII:
			fmt.Fprintf(&b, `\[u%04X]`, r)
		default:
			b.WriteRune(r)
		}
		prev = r
	}
	return b.String()
}
