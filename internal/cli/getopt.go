// Package cli is the command line every sroce command shares: one parser
// with GNU getopt_long's rules (the rules of perftest's and rdma-core's
// tools, which sroce's tools mirror), typed flags over it for the
// commands of cmd/sroce, one layout of usage text and one table of exit
// statuses.
//
// The rules: flags and operands may come in any order (unless the caller
// stops at the first operand, as "sroce run" does); a short flag is one
// letter after one dash and switches bundle ("-lv"), a short flag's value
// follows it attached or as the next word ("-s1024", "-s 1024"); a long
// flag takes "--size=1024" or "--size 1024" and may be shortened to an
// unambiguous prefix ("--iter"); "--" ends the flags and a lone "-" is an
// operand. A value is taken as it is, so "--max-qps -1" gives -1 to
// --max-qps for its own check to refuse.
//
// Go's flag package and pflag were measured against these rules: Go's
// echoes "--bogus" as "-bogus" and takes "-link" for one flag; pflag
// refuses the prefixes getopt_long accepts ("--iter" for "--iters", which
// perftest's own users type) and takes "--all=3" for a switch, so neither
// could parse the tools' command lines.
package cli

import (
	"fmt"
	"strings"
)

// Exit statuses every sroce command follows (docs/cli.md has the table).
const (
	ExitOK      = 0 // all went well
	ExitProblem = 1 // the command ran and failed, or found a problem
	ExitUsage   = 2 // bad command line (or SROCE_* variable): nothing was done
)

// ArgKind says whether a flag takes a value.
type ArgKind uint8

// The kinds of flag.
const (
	// NoArg is a switch: "-a", "--all"; "--all=x" is an error.
	NoArg ArgKind = iota
	// NeedArg takes a value: "-s 64", "-s64", "--size 64", "--size=64".
	NeedArg
	// BoolArg is a switch whose long form may also say "--json=false".
	BoolArg
)

// Spec is one flag a command line may hold.
type Spec struct {
	Short byte    // the letter of "-x", 0 for a long-only flag
	Long  string  // the name of "--name", "" for a short-only flag
	Arg   ArgKind // whether it takes a value
}

// Opt is one flag found on the command line.
type Opt struct {
	*Spec
	// Flag is the flag as the user spelled it, for messages: "-s" or
	// "--size" (or the prefix typed, "--si").
	Flag string
	// Value is the value given; HasValue tells an empty value from none
	// (a BoolArg without "=").
	Value    string
	HasValue bool
}

// Error is a command-line error. Its message names the flag as given.
type Error struct{ Msg string }

// Error returns the message.
func (e *Error) Error() string { return e.Msg }

// Errorf returns an *Error.
func Errorf(format string, args ...any) error {
	return &Error{Msg: fmt.Sprintf(format, args...)}
}

// Getopt walks args (without the program name) with the rules of the
// package documentation. apply is called for each flag in order; it
// returns stop to end the walk there (help, version). With stopAtOperand
// the first operand ends the flags and it and all after it are operands.
// The operands are returned in order.
func Getopt(args []string, specs []Spec, stopAtOperand bool, apply func(o Opt) (stop bool, err error)) ([]string, error) {
	var operands []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return append(operands, args[i+1:]...), nil
		case strings.HasPrefix(a, "--"):
			name, val, hasVal := strings.Cut(a[2:], "=")
			s, err := lookupLong(specs, name)
			if err != nil {
				return nil, err
			}
			o := Opt{Spec: s, Flag: "--" + name, Value: val, HasValue: hasVal}
			switch {
			case s.Arg == NoArg && hasVal:
				return nil, Errorf("flag %s takes no value", o.Flag)
			case s.Arg == NeedArg && !hasVal:
				if i+1 >= len(args) {
					return nil, Errorf("flag %s needs a value", o.Flag)
				}
				i++
				o.Value, o.HasValue = args[i], true
			}
			if stop, err := apply(o); err != nil || stop {
				return operands, err
			}
		case len(a) > 1 && a[0] == '-':
			for j := 1; j < len(a); j++ {
				s := lookupShort(specs, a[j])
				if s == nil {
					return nil, unknownShort(specs, a, j)
				}
				o := Opt{Spec: s, Flag: "-" + string(a[j])}
				if s.Arg == NeedArg {
					o.Value, o.HasValue = a[j+1:], true
					if o.Value == "" {
						if i+1 >= len(args) {
							return nil, Errorf("flag %s needs a value", o.Flag)
						}
						i++
						o.Value = args[i]
					}
					j = len(a)
				}
				if stop, err := apply(o); err != nil || stop {
					return operands, err
				}
			}
		default:
			if stopAtOperand {
				return append(operands, args[i:]...), nil
			}
			operands = append(operands, a)
		}
	}
	return operands, nil
}

// unknownShort is the error for the letter a[j] that no flag has. When
// the word is a long flag given with one dash ("-link"), it says so.
func unknownShort(specs []Spec, a string, j int) error {
	flag := "-" + string(a[j])
	if len(a) == 2 {
		return Errorf("unknown flag %s", flag)
	}
	name, _, _ := strings.Cut(a[1:], "=")
	for _, s := range specs {
		if s.Long != "" && s.Long == name {
			return Errorf("unknown flag %s in %s (long flags take two dashes: --%s)", flag, a, name)
		}
	}
	return Errorf("unknown flag %s in %s", flag, a)
}

// lookupShort finds a short flag.
func lookupShort(specs []Spec, c byte) *Spec {
	for i := range specs {
		if specs[i].Short == c {
			return &specs[i]
		}
	}
	return nil
}

// lookupLong finds a long flag by its exact name or an unambiguous prefix.
func lookupLong(specs []Spec, name string) (*Spec, error) {
	var found []*Spec
	for i := range specs {
		s := &specs[i]
		if s.Long == "" {
			continue
		}
		if s.Long == name {
			return s, nil
		}
		if name != "" && strings.HasPrefix(s.Long, name) {
			found = append(found, s)
		}
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		return nil, Errorf("unknown flag --%s", name)
	}
	names := make([]string, len(found))
	for i, s := range found {
		names[i] = "--" + s.Long
	}
	return nil, Errorf("flag --%s is ambiguous: %s", name, strings.Join(names, ", "))
}
