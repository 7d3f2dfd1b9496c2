package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/sroce/sroce/internal/buildinfo"
)

// Help is one line of a flags section.
type Help struct {
	Short   byte   // letter of the short form, 0 if none
	Long    string // name of the long form, "" if none
	Arg     string // the value's name ("IF", "N"), "" for a switch
	Text    string // what the flag does
	Default string // printed as " (default X)" when not ""
}

// Usage is a command's usage text: a "usage:" line, the description, and
// a "flags:" section. Every sroce command prints its help in this shape
// (the manual pages are made from it).
type Usage struct {
	Name     string // the command as typed: "sroce dissect"
	Synopsis string // after "usage: ", e.g. "sroce dissect [--json] FILE"
	About    string // a paragraph or more on what the command does
	Flags    []Help
}

// Common lines of every command's flags section.
var (
	HelpFlag    = Help{Short: 'h', Long: "help", Text: "print this help and exit"}
	VersionFlag = Help{Long: "version", Text: "print the version of sroce and exit"}
)

// lineWidth is where flag texts are wrapped.
const lineWidth = 79

// maxLeft is the widest flag column: a longer flag puts its text on the
// next line.
const maxLeft = 30

// Write writes the usage to w: with long, the description too; without,
// a line that says where the details are.
func (u *Usage) Write(w io.Writer, long bool) {
	var b strings.Builder
	fmt.Fprintf(&b, "usage: %s\n", u.Synopsis)
	if about := strings.TrimSpace(u.About); long && about != "" {
		fmt.Fprintf(&b, "\n%s\n", about)
	}
	if len(u.Flags) > 0 {
		b.WriteString("\nflags:\n")
		WriteFlags(&b, u.Flags)
	}
	if !long {
		fmt.Fprintf(&b, "\nRun \"sroce help %s\" for details.\n", strings.TrimPrefix(u.Name, "sroce "))
	}
	io.WriteString(w, b.String())
}

// Fail reports a command-line error: "NAME: msg", then the short usage,
// on w. It returns ExitUsage.
func (u *Usage) Fail(w io.Writer, msg string) int {
	fmt.Fprintf(w, "%s: %s\n\n", u.Name, msg)
	u.Write(w, false)
	return ExitUsage
}

// Version writes the one line of "--version" to w and returns ExitOK.
func Version(w io.Writer) int {
	fmt.Fprintln(w, buildinfo.Get().String())
	return ExitOK
}

// left returns the flag column of h: "-d, --device IF", "    --link MODE".
func (h *Help) left() string {
	var s string
	switch {
	case h.Short != 0 && h.Long != "":
		s = "-" + string(h.Short) + ", --" + h.Long
	case h.Short != 0:
		s = "-" + string(h.Short)
	default:
		s = "    --" + h.Long
	}
	if h.Arg != "" {
		s += " " + h.Arg
	}
	return s
}

// WriteFlags writes one entry per flag: the flag column, then its text
// and default, wrapped, in a column of their own.
func WriteFlags(b *strings.Builder, hs []Help) {
	width := 0
	for i := range hs {
		if l := len(hs[i].left()); l <= maxLeft {
			width = max(width, l)
		}
	}
	indent := strings.Repeat(" ", 2+width+3)
	for i := range hs {
		h := &hs[i]
		l := h.left()
		text := h.Text
		if h.Default != "" {
			text += " (default " + h.Default + ")"
		}
		b.WriteString("  " + l)
		if len(l) > width {
			b.WriteString("\n" + indent)
		} else {
			b.WriteString(strings.Repeat(" ", width-len(l)+3))
		}
		col := len(indent)
		for j, word := range strings.Fields(text) {
			if j > 0 && col+1+len(word) > lineWidth {
				b.WriteString("\n" + indent)
				col = len(indent)
			} else if j > 0 {
				b.WriteByte(' ')
				col++
			}
			b.WriteString(word)
			col += len(word)
		}
		b.WriteByte('\n')
	}
}
