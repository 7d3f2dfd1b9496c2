package cmirror

import (
	"fmt"
	"regexp"
	"strings"
	"unicode"
)

// The C subset the headers are written in: object-like #defines of
// integer constant expressions, enums with explicit values, and structs
// whose members are fixed-width integers, char, other structs of the same
// header, or one-dimensional arrays of those. Everything else at the top
// level (includes, include guards, function-like macros, static inline
// functions) is skipped. A member the subset does not cover (a pointer, a
// bit-field, a union, a float) is an error: memory that crosses a process
// boundary holds plain fixed-size values only.

// header is what the generator read from one C header.
type header struct {
	defines []*define
	enums   []*enum
	structs []*cstruct
	byName  map[string]*cstruct
}

type define struct {
	name, expr, comment string
}

type enum struct {
	name   string
	doc    string
	values []*enumValue
}

type enumValue struct {
	name, expr, comment string
}

type cstruct struct {
	name    string
	doc     string
	members []*member
}

type member struct {
	name    string
	ctype   string // "uint32_t", "char", "struct sroce_ctl_qp_cap"
	array   string // the array length expression, "" for a scalar
	comment string
}

// token kinds.
const (
	tIdent = iota
	tNumber
	tPunct
	tComment
)

type token struct {
	kind int
	text string
	line int // the line the token starts on
}

// lex splits the text of a header (without its directives) into tokens.
func lex(src string, firstLine int) ([]token, error) {
	var toks []token
	line := firstLine
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == '\n':
			line++
			i++
		case c == ' ' || c == '\t' || c == '\r' || c == '\f':
			i++
		case strings.HasPrefix(src[i:], "/*"):
			end := strings.Index(src[i+2:], "*/")
			if end < 0 {
				return nil, fmt.Errorf("line %d: unterminated comment", line)
			}
			text := src[i : i+2+end+2]
			toks = append(toks, token{tComment, text, line})
			line += strings.Count(text, "\n")
			i += len(text)
		case strings.HasPrefix(src[i:], "//"):
			end := strings.IndexByte(src[i:], '\n')
			if end < 0 {
				end = len(src) - i
			}
			toks = append(toks, token{tComment, src[i : i+end], line})
			i += end
		case c == '_' || unicode.IsLetter(rune(c)):
			j := i
			for j < len(src) && (src[j] == '_' || unicode.IsLetter(rune(src[j])) || unicode.IsDigit(rune(src[j]))) {
				j++
			}
			toks = append(toks, token{tIdent, src[i:j], line})
			i = j
		case unicode.IsDigit(rune(c)):
			j := i
			for j < len(src) && (unicode.IsLetter(rune(src[j])) || unicode.IsDigit(rune(src[j]))) {
				j++
			}
			toks = append(toks, token{tNumber, src[i:j], line})
			i = j
		case c == '"' || c == '\'':
			j := i + 1
			for j < len(src) && src[j] != c {
				if src[j] == '\\' {
					j++
				}
				j++
			}
			if j >= len(src) {
				return nil, fmt.Errorf("line %d: unterminated literal", line)
			}
			toks = append(toks, token{tPunct, src[i : j+1], line})
			i = j + 1
		default:
			toks = append(toks, token{tPunct, string(c), line})
			i++
		}
	}
	return toks, nil
}

var defineRE = regexp.MustCompile(`^#\s*define\s+([A-Za-z_]\w*)(\(?)(.*)$`)

// parse reads a header in the subset above.
func parse(src string) (*header, error) {
	h := &header{byName: map[string]*cstruct{}}
	// Directives first, line by line (with continuations); the rest of
	// the text keeps its line numbers so that trailing comments can be
	// told from the next item's doc comment.
	lines := strings.Split(src, "\n")
	var body strings.Builder
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			body.WriteString(l)
			body.WriteByte('\n')
			continue
		}
		d := strings.TrimSpace(l)
		for strings.HasSuffix(d, "\\") && i+1 < len(lines) {
			i++
			d = strings.TrimSuffix(d, "\\") + " " + strings.TrimSpace(lines[i])
			body.WriteByte('\n')
		}
		body.WriteByte('\n')
		m := defineRE.FindStringSubmatch(d)
		if m == nil || m[2] == "(" {
			continue // not a define, or a function-like macro
		}
		toks, err := lex(m[3], i+1)
		if err != nil {
			return nil, err
		}
		var expr []string
		var comment []string
		for _, t := range toks {
			if t.kind == tComment {
				comment = append(comment, commentText(t.text))
			} else {
				expr = append(expr, t.text)
			}
		}
		if len(expr) == 0 {
			continue // an include guard
		}
		h.defines = append(h.defines, &define{m[1], strings.Join(expr, " "), strings.Join(comment, " ")})
	}
	toks, err := lex(body.String(), 1)
	if err != nil {
		return nil, err
	}
	p := &parser{toks: toks, h: h}
	if err := p.top(); err != nil {
		return nil, err
	}
	return h, nil
}

type parser struct {
	toks []token
	pos  int
	h    *header
	doc  string // the comment just before the current item
	last int    // the line the previous non-comment token ended on
}

func (p *parser) peek(k int) token {
	// k-th non-comment token from pos.
	for i := p.pos; i < len(p.toks); i++ {
		if p.toks[i].kind == tComment {
			continue
		}
		if k == 0 {
			return p.toks[i]
		}
		k--
	}
	return token{kind: tPunct, text: "", line: -1}
}

// next returns the next non-comment token; comments on its way become
// the pending doc comment.
func (p *parser) next() token {
	for p.pos < len(p.toks) {
		t := p.toks[p.pos]
		p.pos++
		if t.kind == tComment {
			p.doc = commentText(t.text)
			continue
		}
		p.last = t.line
		return t
	}
	return token{kind: tPunct, text: "", line: -1}
}

// trailing returns the comments that start on line, from pos on.
func (p *parser) trailing(line int) string {
	var parts []string
	for p.pos < len(p.toks) && p.toks[p.pos].kind == tComment && p.toks[p.pos].line == line {
		parts = append(parts, commentText(p.toks[p.pos].text))
		p.pos++
	}
	return strings.Join(parts, " ")
}

func (p *parser) expect(s string) error {
	t := p.next()
	if t.text != s {
		return fmt.Errorf("line %d: %q where %q was expected", t.line, t.text, s)
	}
	return nil
}

func (p *parser) top() error {
	for {
		// The doc comment of an item is the last comment before it that
		// does not trail the previous item's line.
		p.doc = ""
		t := p.peek(0)
		if t.line < 0 {
			return nil
		}
		if t.kind == tIdent && (t.text == "struct" || t.text == "enum") && p.peek(1).kind == tIdent && p.peek(2).text == "{" {
			// Take the comments before it: the last one is its doc.
			for p.pos < len(p.toks) && p.toks[p.pos].kind == tComment {
				c := p.toks[p.pos]
				p.doc = ""
				if c.line+strings.Count(c.text, "\n") == t.line-1 {
					p.doc = commentText(c.text)
				}
				p.pos++
			}
			var err error
			if t.text == "struct" {
				err = p.structDef()
			} else {
				err = p.enumDef()
			}
			if err != nil {
				return err
			}
			continue
		}
		p.skip()
	}
}

// skip passes over one top-level construct it does not read: up to a ';'
// at depth 0 or the '}' that closes a body.
func (p *parser) skip() {
	depth := 0
	for {
		t := p.next()
		switch t.text {
		case "":
			return
		case "{", "(", "[":
			depth++
		case "}", ")", "]":
			depth--
			if depth == 0 && t.text == "}" && p.peek(0).text != ";" {
				return
			}
		case ";":
			if depth == 0 {
				return
			}
		}
	}
}

func (p *parser) structDef() error {
	p.next() // struct
	doc := p.doc
	name := p.next().text
	if _, dup := p.h.byName[name]; dup {
		return fmt.Errorf("struct %s defined twice", name)
	}
	s := &cstruct{name: name, doc: doc}
	p.next() // {
	for {
		t := p.next()
		if t.text == "}" {
			break
		}
		if t.line < 0 {
			return fmt.Errorf("struct %s: no closing brace", name)
		}
		m := &member{ctype: t.text}
		if t.text == "struct" {
			m.ctype = "struct " + p.next().text
		} else if t.kind != tIdent {
			return fmt.Errorf("line %d: struct %s: %q where a member's type was expected", t.line, name, t.text)
		}
		switch t.text {
		case "union", "enum", "const", "volatile", "unsigned", "signed", "float", "double", "long", "short", "int", "_Atomic":
			return fmt.Errorf("line %d: struct %s: type %q is outside the header subset (fixed-width integers, char, structs)", t.line, name, t.text)
		}
		n := p.next()
		if n.kind != tIdent {
			return fmt.Errorf("line %d: struct %s: %q where a member's name was expected (no pointers or bit-fields in shared memory)", n.line, name, n.text)
		}
		m.name = n.text
		if p.peek(0).text == "[" {
			p.next()
			var expr []string
			for {
				e := p.next()
				if e.text == "]" {
					break
				}
				if e.line < 0 || e.text == ";" {
					return fmt.Errorf("line %d: struct %s: member %s: unterminated array length", n.line, name, m.name)
				}
				expr = append(expr, e.text)
			}
			if len(expr) == 0 {
				return fmt.Errorf("line %d: struct %s: member %s: flexible array members are outside the subset", n.line, name, m.name)
			}
			m.array = strings.Join(expr, " ")
		}
		end := p.next()
		if end.text != ";" {
			return fmt.Errorf("line %d: struct %s: member %s: %q where ';' was expected (one member per declaration, one array dimension)", end.line, name, m.name, end.text)
		}
		m.comment = p.trailing(end.line)
		s.members = append(s.members, m)
	}
	if err := p.expect(";"); err != nil {
		return fmt.Errorf("struct %s: %w", name, err)
	}
	if len(s.members) == 0 {
		return fmt.Errorf("struct %s has no members", name)
	}
	p.h.structs = append(p.h.structs, s)
	p.h.byName[name] = s
	return nil
}

func (p *parser) enumDef() error {
	p.next() // enum
	doc := p.doc
	e := &enum{name: p.next().text, doc: doc}
	p.next() // {
	for {
		t := p.next()
		if t.text == "}" {
			break
		}
		if t.kind != tIdent {
			return fmt.Errorf("line %d: enum %s: %q where a name was expected", t.line, e.name, t.text)
		}
		v := &enumValue{name: t.text}
		if p.peek(0).text == "=" {
			p.next()
			var expr []string
			for p.peek(0).text != "," && p.peek(0).text != "}" && p.peek(0).line >= 0 {
				expr = append(expr, p.next().text)
			}
			v.expr = strings.Join(expr, " ")
		}
		line := p.last
		if p.peek(0).text == "," {
			p.next()
			line = p.last
		}
		v.comment = p.trailing(line)
		e.values = append(e.values, v)
	}
	if err := p.expect(";"); err != nil {
		return fmt.Errorf("enum %s: %w", e.name, err)
	}
	p.h.enums = append(p.h.enums, e)
	return nil
}

// commentText returns a comment's words: the markers and the leading
// asterisks of a block comment's lines removed, lines kept.
func commentText(c string) string {
	if strings.HasPrefix(c, "//") {
		return strings.TrimSpace(strings.TrimPrefix(c, "//"))
	}
	c = strings.TrimSuffix(strings.TrimPrefix(c, "/*"), "*/")
	var out []string
	for _, l := range strings.Split(c, "\n") {
		l = strings.TrimSpace(l)
		l = strings.TrimPrefix(l, "*")
		out = append(out, strings.TrimSpace(l))
	}
	for len(out) > 0 && out[0] == "" {
		out = out[1:]
	}
	for len(out) > 0 && out[len(out)-1] == "" {
		out = out[:len(out)-1]
	}
	return strings.Join(out, "\n")
}
