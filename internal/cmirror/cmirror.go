// Package cmirror makes the Go mirrors of the C headers that describe
// memory and messages shared with C (daemon/ctl/sroce_ctl.h, the control
// protocol; ring/sroce_ring.h, the shared rings): each header's #defines
// become Go constants, its enums typed constants, its structs Go structs
// with the same layout, written to a generated file of the header's
// package, with a generated table of every size, offset and constant for
// that package's layout test.
//
// The headers are the source: the C library compiles against them as
// they are, and the Go side is regenerated from them with
//
//	go generate ./daemon/ctl ./ring
//
// (or go run ./internal/cmirror/gen from the module root). Each package's
// test regenerates and fails when the checked-in files differ, so an edit
// of a header without regenerating, or of a generated file by hand, fails.
//
// The generator reads the restricted C the headers are written in (see
// parse.go), then compiles a probe against the header with the system C
// compiler and refuses to write anything unless every offset and size it
// derived agrees with the compiler's, and no struct has padding the header
// does not spell out (a reserved member), so the Go layout is the C layout
// on every architecture. Go names follow a rule (prefixes dropped, words
// capitalized, the verbs vocabulary's initialisms: qp_num is QPNum) with
// exceptions listed per header in mirrors.go; hand-written methods and
// helpers stay in the packages' own files.
package cmirror

import (
	"bytes"
	"errors"
	"fmt"
	"go/format"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Mirror says how one C header becomes Go.
type Mirror struct {
	Name     string   // the generator's name for it ("ctl")
	Dir      string   // the package's directory, from the module root
	Header   string   // the header's file name in Dir
	Package  string   // the Go package
	Out      string   // the generated Go file, in Dir
	TestOut  string   // the generated layout table (a _test.go file), in Dir
	Prefixes []string // prefixes dropped from C names of structs and defines, tried in order

	// Names gives the Go name where the rule does not: keys are
	// "struct NAME", "STRUCT.member", a define's or an enum constant's
	// name.
	Names map[string]string
	// Types gives a member a Go type other than its C type's mirror
	// (a named enum type, an atomic); it must have the C type's size
	// and alignment (the layout test checks).
	Types map[string]string
	// Comments replaces the C comment of a member ("STRUCT.member") in Go.
	Comments map[string]string
	// Docs are the Go doc comments of "struct NAME", "enum NAME" (the
	// type) and "defines" (the constants' block). Without one a struct's
	// doc says what it mirrors and repeats the C comment before it.
	Docs map[string]string
	// Enums says which Go type each enum's constants get.
	Enums map[string]Enum
	// External lists structs of the header whose Go type lives elsewhere
	// (mr.SGE): not generated, but in the layout table.
	External map[string]string
	// Imports maps the package names of Types and External to their
	// import paths.
	Imports map[string]string
}

// Enum is how one C enum becomes Go.
type Enum struct {
	Type       string // the Go type ("Op")
	Underlying string // its underlying type ("uint16")
	CPrefix    string // dropped from the constants' C names ("SROCE_OP_")
	GoPrefix   string // put before their Go names ("Op")
	GroupDoc   string // the doc of the constants' block
	// NamesVar, if set, is an unexported map from each constant to its C
	// name without CPrefix ("CREATE_QP"), for a hand-written String.
	NamesVar string
}

// Check is one size, offset or constant of a header with Go's value of it.
type Check struct {
	C  string // a C expression: sizeof(struct x), offsetof(struct x, m), a constant
	Go int64
}

// ErrNoCompiler reports that there is no C compiler to check the headers with.
var ErrNoCompiler = errors.New("no C compiler (gcc, cc or $CC) found")

// generatedBy is the command the generated files name.
const generatedBy = "go run github.com/sroce/sroce/internal/cmirror/gen"

// Generate reads m's header in dir and returns the generated files, by
// name, gofmt'ed.
func Generate(m Mirror, dir string) (map[string][]byte, error) {
	src, err := os.ReadFile(filepath.Join(dir, m.Header))
	if err != nil {
		return nil, err
	}
	h, err := parse(string(src))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", m.Header, err)
	}
	g := &gen{m: m, h: h, types: map[string]goStruct{}}
	if err := g.model(); err != nil {
		return nil, fmt.Errorf("%s: %w", m.Header, err)
	}
	if err := g.probe(dir); err != nil {
		return nil, fmt.Errorf("%s: %w", m.Header, err)
	}
	out := map[string][]byte{}
	for name, text := range map[string]string{m.Out: g.mainFile(), m.TestOut: g.testFile()} {
		b, err := format.Source([]byte(text))
		if err != nil {
			return nil, fmt.Errorf("%s: gofmt: %w\n%s", name, err, text)
		}
		out[name] = b
	}
	return out, nil
}

// Write generates m's files and writes them into dir.
func Write(m Mirror, dir string) error {
	files, err := Generate(m, dir)
	if err != nil {
		return err
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// goStruct is a generated (or external) struct.
type goStruct struct {
	c      *cstruct
	name   string // Go type name
	fields []goField
	size   int64
	align  int64
	extern bool
}

type goField struct {
	m       *member
	name    string // "_" for reserved members
	typ     string // Go type, arrays included
	comment string
	elem    string // the C element type
}

type gen struct {
	m       Mirror
	h       *header
	types   map[string]goStruct // by C struct name
	order   []string
	defines map[string]string // C define -> Go name
	values  map[string]int64  // constant values, from the probe
}

// goName applies the naming rule to a C name (after any prefix).
func goName(c string) string {
	var b strings.Builder
	for _, w := range strings.Split(strings.ToLower(c), "_") {
		if w == "" {
			continue
		}
		if s, ok := initialisms[w]; ok {
			b.WriteString(s)
			continue
		}
		b.WriteString(strings.ToUpper(w[:1]) + w[1:])
	}
	return b.String()
}

func (g *gen) strip(c string) string {
	for _, p := range g.m.Prefixes {
		if strings.HasPrefix(c, p) && len(c) > len(p) {
			return c[len(p):]
		}
	}
	return c
}

var scalars = map[string]struct {
	goType string
	size   int64
}{
	"uint8_t": {"uint8", 1}, "int8_t": {"int8", 1}, "char": {"byte", 1},
	"uint16_t": {"uint16", 2}, "int16_t": {"int16", 2},
	"uint32_t": {"uint32", 4}, "int32_t": {"int32", 4},
	"uint64_t": {"uint64", 8}, "int64_t": {"int64", 8},
}

// model names everything and builds the Go structs.
func (g *gen) model() error {
	g.defines = map[string]string{}
	for _, d := range g.h.defines {
		g.defines[d.name] = g.name(d.name, goName(g.strip(d.name)))
	}
	for _, d := range g.h.defines {
		if _, err := g.goExpr(d.expr); err != nil {
			return fmt.Errorf("#define %s: %w (only integer constant expressions are mirrored)", d.name, err)
		}
	}
	for _, e := range g.h.enums {
		if _, ok := g.m.Enums[e.name]; !ok {
			return fmt.Errorf("enum %s has no entry in the Enums of mirror %q (internal/cmirror/mirrors.go): give its Go type", e.name, g.m.Name)
		}
	}
	for _, s := range g.h.structs {
		gs := goStruct{c: s, name: g.name("struct "+s.name, goName(g.strip(s.name)))}
		if ext, ok := g.m.External[s.name]; ok {
			gs.name, gs.extern = ext, true
		}
		seen := map[string]bool{}
		for _, mem := range s.members {
			f := goField{m: mem, elem: mem.ctype, comment: oneLine(mem.comment)}
			key := s.name + "." + mem.name
			if c, ok := g.m.Comments[key]; ok {
				f.comment = c
			}
			if strings.HasPrefix(mem.name, "reserved") {
				f.name = "_"
			} else {
				f.name = g.name(key, goName(mem.name))
				if seen[f.name] {
					return fmt.Errorf("struct %s: two members named %s in Go: give one a name in Names", s.name, f.name)
				}
				seen[f.name] = true
			}
			elem := ""
			if sc, ok := scalars[mem.ctype]; ok {
				elem = sc.goType
				if mem.array != "" && mem.ctype == "uint8_t" {
					elem = "byte"
				}
			} else if strings.HasPrefix(mem.ctype, "struct ") {
				inner, ok := g.types[strings.TrimPrefix(mem.ctype, "struct ")]
				if !ok {
					return fmt.Errorf("struct %s: member %s: %s is not a struct defined before it in the header", s.name, mem.name, mem.ctype)
				}
				elem = inner.name
			} else {
				return fmt.Errorf("struct %s: member %s: type %s is outside the header subset (fixed-width integers, char, structs)", s.name, mem.name, mem.ctype)
			}
			if t, ok := g.m.Types[key]; ok {
				if mem.array != "" {
					return fmt.Errorf("%s: Types gives an array member a Go type", key)
				}
				elem = t
			}
			f.typ = elem
			if mem.array != "" {
				n, err := g.goExpr(mem.array)
				if err != nil {
					return fmt.Errorf("struct %s: member %s: array length: %w", s.name, mem.name, err)
				}
				f.typ = "[" + n + "]" + elem
			}
			gs.fields = append(gs.fields, f)
		}
		g.types[s.name] = gs
		g.order = append(g.order, s.name)
	}
	for k := range g.m.Names {
		if !g.known(k) {
			return fmt.Errorf("mirror %q: Names has %q, which the header does not have", g.m.Name, k)
		}
	}
	for _, mp := range []map[string]string{g.m.Types, g.m.Comments} {
		for k := range mp {
			if !g.known(k) {
				return fmt.Errorf("mirror %q: %q is not a member of the header's structs", g.m.Name, k)
			}
		}
	}
	return nil
}

// known says whether k names something of the header (a key of Names,
// Types or Comments), so that stale exceptions are found.
func (g *gen) known(k string) bool {
	if s, ok := strings.CutPrefix(k, "struct "); ok {
		return g.h.byName[s] != nil
	}
	if s, mem, ok := strings.Cut(k, "."); ok {
		if cs := g.h.byName[s]; cs != nil {
			for _, m := range cs.members {
				if m.name == mem {
					return true
				}
			}
		}
		return false
	}
	if _, ok := g.defines[k]; ok {
		return true
	}
	for _, e := range g.h.enums {
		for _, v := range e.values {
			if v.name == k {
				return true
			}
		}
	}
	return false
}

func (g *gen) name(key, def string) string {
	if n, ok := g.m.Names[key]; ok {
		return n
	}
	return def
}

// goExpr translates an integer constant expression of the header into
// Go: defines become their Go constants, suffixes of literals go.
func (g *gen) goExpr(expr string) (string, error) {
	var out []string
	for _, t := range strings.Fields(expr) {
		switch {
		case t == "+" || t == "-" || t == "*" || t == "/" || t == "(" || t == ")" || t == "<<" || t == "|":
			out = append(out, t)
		case t[0] >= '0' && t[0] <= '9':
			lit := strings.TrimRight(t, "uUlL")
			if _, err := strconv.ParseInt(lit, 0, 64); err != nil {
				return "", fmt.Errorf("literal %s is not an integer", t)
			}
			out = append(out, lit)
		default:
			n, ok := g.defines[t]
			if !ok {
				return "", fmt.Errorf("%s is not a #define of the header", t)
			}
			out = append(out, n)
		}
	}
	return strings.Join(out, " "), nil
}

// probe compiles a C program against the header that prints every
// constant, size and offset, and checks the Go layout against it.
func (g *gen) probe(dir string) error {
	var exprs []string
	for _, d := range g.h.defines {
		exprs = append(exprs, d.name)
	}
	for _, e := range g.h.enums {
		for _, v := range e.values {
			exprs = append(exprs, v.name)
		}
	}
	for _, s := range g.h.structs {
		exprs = append(exprs, "sizeof(struct "+s.name+")")
		for _, m := range s.members {
			exprs = append(exprs, fmt.Sprintf("offsetof(struct %s, %s)", s.name, m.name),
				fmt.Sprintf("sizeof(((struct %s *)0)->%s)", s.name, m.name))
		}
	}
	vals, err := evalC(dir, g.m.Header, exprs)
	if err != nil {
		return err
	}
	g.values = map[string]int64{}
	for i, e := range exprs {
		g.values[e] = vals[i]
	}
	// The layout Go gives the structs, member by member, with natural
	// alignment: it must be C's with no padding the header leaves unsaid.
	for _, name := range g.order {
		gs := g.types[name]
		var off, align int64 = 0, 1
		for _, f := range gs.fields {
			m := f.m
			var esize, ealign int64
			if sc, ok := scalars[m.ctype]; ok {
				esize, ealign = sc.size, sc.size
			} else {
				inner := g.types[strings.TrimPrefix(m.ctype, "struct ")]
				esize, ealign = inner.size, inner.align
			}
			size := g.values[fmt.Sprintf("sizeof(((struct %s *)0)->%s)", name, m.name)]
			if m.array == "" && size != esize || m.array != "" && (esize == 0 || size%esize != 0) {
				return fmt.Errorf("struct %s: member %s: C says %d bytes, the generator reads %s of %d", name, m.name, size, m.ctype, esize)
			}
			cOff := g.values[fmt.Sprintf("offsetof(struct %s, %s)", name, m.name)]
			if cOff != off {
				return fmt.Errorf("struct %s: member %s at offset %d in C after %d bytes of members: make the %d bytes of padding a reserved member", name, m.name, cOff, off, cOff-off)
			}
			if off%ealign != 0 {
				return fmt.Errorf("struct %s: member %s at offset %d, not a multiple of its alignment %d (packed?)", name, m.name, off, ealign)
			}
			align = max(align, ealign)
			off += size
		}
		cSize := g.values["sizeof(struct "+name+")"]
		if cSize != off {
			return fmt.Errorf("struct %s: %d bytes in C, %d of members: make the %d bytes of tail padding a reserved member", name, cSize, off, cSize-off)
		}
		if off%align != 0 {
			return fmt.Errorf("struct %s: size %d is not a multiple of its alignment %d", name, off, align)
		}
		gs.size, gs.align = off, align
		g.types[name] = gs
	}
	return nil
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// comment writes text as a Go comment block, one "//" line per line.
func comment(b *bytes.Buffer, text string) {
	for _, l := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		if l == "" {
			b.WriteString("//\n")
		} else {
			b.WriteString("// " + l + "\n")
		}
	}
}

func (g *gen) preamble(b *bytes.Buffer, imports map[string]bool) {
	fmt.Fprintf(b, "// Code generated by \"%s %s\" from %s; DO NOT EDIT.\n\n", generatedBy, g.m.Name, g.m.Header)
	fmt.Fprintf(b, "package %s\n\n", g.m.Package)
	if len(imports) > 0 {
		// The standard library's first, then the module's.
		var std, mod []string
		for p := range imports {
			if strings.Contains(p, ".") {
				mod = append(mod, p)
			} else {
				std = append(std, p)
			}
		}
		sort.Strings(std)
		sort.Strings(mod)
		b.WriteString("import (\n")
		for _, p := range std {
			fmt.Fprintf(b, "\t%q\n", p)
		}
		if len(std) > 0 && len(mod) > 0 {
			b.WriteString("\n")
		}
		for _, p := range mod {
			fmt.Fprintf(b, "\t%q\n", p)
		}
		b.WriteString(")\n\n")
	}
}

// imports returns the import paths the Go types in typs need.
func (g *gen) imports(typs []string) map[string]bool {
	out := map[string]bool{}
	for _, t := range typs {
		t = strings.TrimLeft(t, "[]0123456789 ")
		if i := strings.Index(t, "]"); i >= 0 {
			t = t[i+1:]
		}
		if pkg, _, ok := strings.Cut(t, "."); ok {
			out[g.m.Imports[pkg]] = true
		}
	}
	return out
}

func (g *gen) mainFile() string {
	var typs []string
	for _, name := range g.order {
		if gs := g.types[name]; !gs.extern {
			for _, f := range gs.fields {
				typs = append(typs, f.typ)
			}
		}
	}
	var b bytes.Buffer
	g.preamble(&b, g.imports(typs))
	if len(g.h.defines) > 0 {
		doc := g.m.Docs["defines"]
		if doc == "" {
			doc = "Constants of " + g.m.Header + "."
		}
		comment(&b, doc)
		b.WriteString("const (\n")
		for _, d := range g.h.defines {
			v, _ := g.goExpr(d.expr)
			fmt.Fprintf(&b, "\t%s = %s", g.defines[d.name], v)
			if c := oneLine(d.comment); c != "" {
				b.WriteString(" // " + c)
			}
			b.WriteString("\n")
		}
		b.WriteString(")\n\n")
	}
	for _, e := range g.h.enums {
		ec := g.m.Enums[e.name]
		doc := g.m.Docs["enum "+e.name]
		if doc == "" {
			doc = fmt.Sprintf("%s mirrors enum %s.", ec.Type, e.name)
		}
		comment(&b, doc)
		fmt.Fprintf(&b, "type %s %s\n\n", ec.Type, ec.Underlying)
		gd := ec.GroupDoc
		if gd == "" {
			gd = fmt.Sprintf("The values of %s (enum %s).", ec.Type, e.name)
		}
		comment(&b, gd)
		b.WriteString("const (\n")
		for _, v := range e.values {
			val := strconv.FormatInt(g.values[v.name], 10)
			if v.expr != "" {
				if x, err := g.goExpr(v.expr); err == nil {
					val = x
				}
			}
			fmt.Fprintf(&b, "\t%s %s = %s", g.enumName(ec, v.name), ec.Type, val)
			if c := oneLine(v.comment); c != "" {
				b.WriteString(" // " + c)
			}
			b.WriteString("\n")
		}
		b.WriteString(")\n\n")
		if ec.NamesVar != "" {
			fmt.Fprintf(&b, "// %s holds the C name of each %s, without %s.\n", ec.NamesVar, ec.Type, ec.CPrefix)
			fmt.Fprintf(&b, "var %s = map[%s]string{\n", ec.NamesVar, ec.Type)
			for _, v := range e.values {
				fmt.Fprintf(&b, "\t%s: %q,\n", g.enumName(ec, v.name), strings.TrimPrefix(v.name, ec.CPrefix))
			}
			b.WriteString("}\n\n")
		}
	}
	for _, name := range g.order {
		gs := g.types[name]
		if gs.extern {
			continue
		}
		doc := g.m.Docs["struct "+name]
		if doc == "" {
			doc = fmt.Sprintf("%s mirrors struct %s.", gs.name, name)
			if gs.c.doc != "" {
				doc += "\n\n" + gs.c.doc
			}
		}
		comment(&b, doc)
		fmt.Fprintf(&b, "type %s struct {\n", gs.name)
		for _, f := range gs.fields {
			fmt.Fprintf(&b, "\t%s %s", f.name, f.typ)
			if f.comment != "" {
				b.WriteString(" // " + f.comment)
			}
			b.WriteString("\n")
		}
		b.WriteString("}\n\n")
	}
	return b.String()
}

func (g *gen) enumName(ec Enum, c string) string {
	return g.name(c, ec.GoPrefix+goName(strings.TrimPrefix(c, ec.CPrefix)))
}

func (g *gen) testFile() string {
	var typs []string
	for _, name := range g.order {
		typs = append(typs, g.types[name].name)
	}
	imp := g.imports(typs)
	imp["unsafe"] = true
	imp["github.com/sroce/sroce/internal/cmirror"] = true
	var b bytes.Buffer
	g.preamble(&b, imp)
	fmt.Fprintf(&b, "// cLayout returns every constant, struct size and member offset of\n// %s with Go's value of it, for the layout test to compare with C's.\n", g.m.Header)
	b.WriteString("func cLayout() []cmirror.Check {\n")
	b.WriteString("\tvar (\n")
	for i, name := range g.order {
		fmt.Fprintf(&b, "\t\tv%d %s\n", i, g.types[name].name)
	}
	b.WriteString("\t)\n\treturn []cmirror.Check{\n")
	for _, d := range g.h.defines {
		fmt.Fprintf(&b, "\t\t{C: %q, Go: int64(%s)},\n", d.name, g.defines[d.name])
	}
	for _, e := range g.h.enums {
		ec := g.m.Enums[e.name]
		for _, v := range e.values {
			fmt.Fprintf(&b, "\t\t{C: %q, Go: int64(%s)},\n", v.name, g.enumName(ec, v.name))
		}
	}
	for i, name := range g.order {
		gs := g.types[name]
		fmt.Fprintf(&b, "\t\t{C: %q, Go: int64(unsafe.Sizeof(v%d))},\n", "sizeof(struct "+name+")", i)
		for _, f := range gs.fields {
			if f.name == "_" {
				continue
			}
			fmt.Fprintf(&b, "\t\t{C: %q, Go: int64(unsafe.Offsetof(v%d.%s))},\n", fmt.Sprintf("offsetof(struct %s, %s)", name, f.m.name), i, f.name)
		}
	}
	b.WriteString("\t}\n}\n")
	return b.String()
}
