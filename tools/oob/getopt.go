package oob

import "strings"

// option describes one command line option of a reference tool.
type option struct {
	short byte   // 0 if long only
	long  string // "" if short only
	arg   bool   // takes an argument
}

// getoptLong walks args with GNU getopt_long's rules, as the reference
// tools parse their command lines: options and operands may come in any
// order, short options cluster ("-aF", "-s1024", "-s 1024"), long ones take
// "--size=1024" or "--size 1024" and may be abbreviated to an unambiguous
// prefix, and "--" ends the options. apply is called for each option in
// order; it returns stop to end parsing early (-h, -V). The operands are
// returned in order.
func getoptLong(args []string, opts []option, apply func(o option, val string) (stop bool, err error)) ([]string, error) {
	var operands []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return append(operands, args[i+1:]...), nil
		case strings.HasPrefix(a, "--"):
			name, val, hasVal := strings.Cut(a[2:], "=")
			o, err := lookupLong(opts, name)
			if err != nil {
				return nil, err
			}
			if !o.arg && hasVal {
				return nil, usageErr("option '--%s' doesn't allow an argument", o.long)
			}
			if o.arg && !hasVal {
				if i+1 >= len(args) {
					return nil, usageErr("option '--%s' requires an argument", o.long)
				}
				i++
				val = args[i]
			}
			if stop, err := apply(o, val); err != nil || stop {
				return operands, err
			}
		case len(a) > 1 && a[0] == '-':
			for j := 1; j < len(a); j++ {
				o, ok := lookupShort(opts, a[j])
				if !ok {
					return nil, usageErr("invalid option -- '%c'", a[j])
				}
				val := ""
				if o.arg {
					val = a[j+1:]
					if val == "" {
						if i+1 >= len(args) {
							return nil, usageErr("option requires an argument -- '%c'", a[j])
						}
						i++
						val = args[i]
					}
					j = len(a)
				}
				if stop, err := apply(o, val); err != nil || stop {
					return operands, err
				}
			}
		default:
			operands = append(operands, a)
		}
	}
	return operands, nil
}

// lookupShort finds a short option.
func lookupShort(opts []option, c byte) (option, bool) {
	for _, o := range opts {
		if o.short == c {
			return o, true
		}
	}
	return option{}, false
}

// lookupLong finds a long option by exact name or unambiguous prefix.
func lookupLong(opts []option, name string) (option, error) {
	var found []option
	for _, o := range opts {
		if o.long == "" {
			continue
		}
		if o.long == name {
			return o, nil
		}
		if name != "" && strings.HasPrefix(o.long, name) {
			found = append(found, o)
		}
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		return option{}, usageErr("unrecognized option '--%s'", name)
	}
	return option{}, usageErr("option '--%s' is ambiguous", name)
}
