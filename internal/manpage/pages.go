package manpage

import (
	"bytes"
	"fmt"
	"strings"
)

// Pages runs help for the program's own help text and for that of each
// command its COMMANDS section lists, and returns the pages by file name:
// PROG.1 and PROG-CMD.1. help(args...) returns what "PROG help ARGS"
// prints. base gives the date, source and manual of every page; each
// command's page refers back to PROG(1) and PROG(1) lists them all.
func Pages(prog string, help func(args ...string) (string, error), base Meta) (map[string][]byte, error) {
	top, err := help()
	if err != nil {
		return nil, fmt.Errorf("%s help: %w", prog, err)
	}
	th := Parse(top)
	var cmds []Entry
	for _, s := range th.Sections {
		if s.Title == "COMMANDS" {
			cmds = append(cmds, s.Entries...)
		}
	}
	if len(cmds) == 0 {
		return nil, fmt.Errorf("%s help lists no commands (no \"commands:\" section):\n%s", prog, top)
	}
	section := base.Section
	if section == "" {
		section = "1"
	}
	pages := map[string][]byte{}
	ref := func(cmd string) string { return prog + "-" + cmd }
	m := base
	m.Name, m.Section, m.Command = prog, section, ref
	if m.Summary == "" {
		m.Summary = summary(prog, th)
	}
	var all []string
	for _, c := range cmds {
		all = append(all, ref(c.Term)+"("+section+")")
	}
	m.SeeAlso = append(append([]string{}, base.SeeAlso...), all...)
	var b bytes.Buffer
	if err := Render(&b, m, th); err != nil {
		return nil, err
	}
	pages[prog+"."+section] = b.Bytes()
	for _, c := range cmds {
		text, err := help(c.Term)
		if err != nil {
			return nil, fmt.Errorf("%s help %s: %w", prog, c.Term, err)
		}
		m := base
		m.Name, m.Section, m.Summary, m.Files = ref(c.Term), section, c.Desc, nil
		m.SeeAlso = append([]string{prog + "(" + section + ")"}, base.SeeAlso...)
		var b bytes.Buffer
		if err := Render(&b, m, Parse(text)); err != nil {
			return nil, err
		}
		pages[ref(c.Term)+"."+section] = b.Bytes()
	}
	return pages, nil
}

// summary takes the NAME line of the program's page from the first
// sentence of its description ("sroce is a user-space RoCEv2 engine.").
func summary(prog string, h Help) string {
	for _, p := range h.Description {
		if p.Literal || len(p.Lines) == 0 {
			continue
		}
		s := strings.Join(p.Lines, " ")
		if i := strings.Index(s, ". "); i > 0 {
			s = s[:i]
		}
		s = strings.TrimSuffix(strings.TrimPrefix(s, prog+" is "), ".")
		return s
	}
	return prog
}
