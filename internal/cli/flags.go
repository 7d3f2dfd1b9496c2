package cli

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Value is a flag's value, as in Go's flag package: String returns it
// (the default's String is printed in the usage), Set parses one
// occurrence.
type Value interface {
	String() string
	Set(string) error
}

// boolValue is a Value that is a switch.
type boolValue interface {
	Value
	IsBoolFlag() bool
}

// Flag is one flag of a FlagSet.
type Flag struct {
	Name     string // the name it was declared with: its long name, or its letter
	Short    byte   // letter of the short form, 0 if none
	Long     string // long name, "" for a short-only flag
	Usage    string // text for the usage, with the value's name in `backquotes`
	Value    Value
	DefValue string // the default, as Value.String gave it
	aliases  []string
	set      bool
}

// ErrHelp and ErrVersion are what Parse returns for -h/--help and
// --version: the caller prints the usage or the version and exits 0.
var (
	ErrHelp    = errors.New("help requested")
	ErrVersion = errors.New("version requested")
)

// FlagSet is a command's typed flags. A flag is declared with its long
// name (String("device", ...)), or with one letter for a short-only flag
// (Bool("v", ...)); Short gives a declared flag a one-letter form and
// Alias a second long name. Every FlagSet knows -h/--help and --version.
type FlagSet struct {
	flags []*Flag
	// StopAtOperand makes the first operand end the flags (a command that
	// runs another program with the rest of the line).
	StopAtOperand bool
}

// NewFlagSet returns an empty FlagSet.
func NewFlagSet() *FlagSet { return &FlagSet{} }

// Lookup returns the flag declared as name, or nil.
func (f *FlagSet) Lookup(name string) *Flag {
	for _, fl := range f.flags {
		if fl.Name == name {
			return fl
		}
	}
	return nil
}

// Var declares a flag with the given Value; its current String is the
// default.
func (f *FlagSet) Var(v Value, name, usage string) {
	if name == "" || f.Lookup(name) != nil || name == "help" || name == "version" || name == "h" ||
		len(name) == 1 && f.byShort(name[0]) != nil || f.byAlias(name) != nil {
		panic("cli: bad or repeated flag name " + strconv.Quote(name))
	}
	fl := &Flag{Name: name, Usage: usage, Value: v, DefValue: v.String()}
	if len(name) == 1 {
		fl.Short = name[0]
	} else {
		fl.Long = name
	}
	f.flags = append(f.flags, fl)
}

// Short gives the flag declared as name the one-letter form -letter.
func (f *FlagSet) Short(letter byte, name string) {
	fl := f.Lookup(name)
	if fl == nil || f.byShort(letter) != nil || letter == 'h' {
		panic(fmt.Sprintf("cli: cannot give %q the short form -%c", name, letter))
	}
	fl.Short = letter
}

// Alias makes --alias a second long name of the flag declared as name
// (the usage does not list it).
func (f *FlagSet) Alias(alias, name string) {
	fl := f.Lookup(name)
	if fl == nil || len(alias) < 2 || f.Lookup(alias) != nil || f.byAlias(alias) != nil {
		panic(fmt.Sprintf("cli: cannot make %q an alias of %q", alias, name))
	}
	fl.aliases = append(fl.aliases, alias)
}

// IsSet reports whether the flag declared as name was given.
func (f *FlagSet) IsSet(name string) bool {
	fl := f.Lookup(name)
	return fl != nil && fl.set
}

// byAlias returns the flag with the long alias name, or nil.
func (f *FlagSet) byAlias(name string) *Flag {
	for _, fl := range f.flags {
		if slices.Contains(fl.aliases, name) {
			return fl
		}
	}
	return nil
}

// byShort returns the flag with the short form -c, or nil.
func (f *FlagSet) byShort(c byte) *Flag {
	for _, fl := range f.flags {
		if fl.Short == c {
			return fl
		}
	}
	return nil
}

// Parse parses args and returns the operands. It returns ErrHelp or
// ErrVersion when asked for them, and an *Error for a bad command line.
func (f *FlagSet) Parse(args []string) ([]string, error) {
	specs := make([]Spec, 0, len(f.flags)+2)
	owner := make([]*Flag, 0, len(f.flags)+2)
	for _, fl := range f.flags {
		kind := NeedArg
		if bv, ok := fl.Value.(boolValue); ok && bv.IsBoolFlag() {
			kind = BoolArg
		}
		specs = append(specs, Spec{Short: fl.Short, Long: fl.Long, Arg: kind})
		owner = append(owner, fl)
		for _, a := range fl.aliases {
			specs = append(specs, Spec{Long: a, Arg: kind})
			owner = append(owner, fl)
		}
	}
	specs = append(specs, Spec{Short: 'h', Long: "help"}, Spec{Long: "version"})
	return Getopt(args, specs, f.StopAtOperand, func(o Opt) (bool, error) {
		i := 0
		for &specs[i] != o.Spec {
			i++
		}
		if i >= len(owner) {
			if o.Short == 'h' {
				return true, ErrHelp
			}
			return true, ErrVersion
		}
		fl := owner[i]
		val := o.Value
		if o.Arg == BoolArg && !o.HasValue {
			val = "true"
		}
		if err := fl.Value.Set(val); err != nil {
			return false, Errorf("invalid value %q for %s: %v", val, o.Flag, err)
		}
		fl.set = true
		return false, nil
	})
}

// Help returns the flags section: every flag in the order declared, then
// -h/--help and --version.
func (f *FlagSet) Help() []Help {
	var hs []Help
	for _, fl := range f.flags {
		arg, text := argName(fl)
		h := Help{Short: fl.Short, Long: fl.Long, Arg: arg, Text: text}
		if !isZero(fl) && !strings.Contains(text, "default") {
			h.Default = fl.DefValue
		}
		hs = append(hs, h)
	}
	return append(hs, HelpFlag, VersionFlag)
}

// argName returns the name of fl's value, the first `quoted` word of its
// usage in capitals, else one after its type (N, DURATION, NUMBER) or, for
// a string, its name in capitals ("" for a switch); and the usage without
// the quotes.
func argName(fl *Flag) (arg, text string) {
	text = fl.Usage
	if i := strings.IndexByte(text, '`'); i >= 0 {
		if j := strings.IndexByte(text[i+1:], '`'); j >= 0 {
			arg = strings.ToUpper(text[i+1 : i+1+j])
			text = text[:i] + text[i+1:i+1+j] + text[i+1+j+1:]
		}
	}
	if bv, ok := fl.Value.(boolValue); ok && bv.IsBoolFlag() {
		return "", text
	}
	if arg != "" {
		return arg, text
	}
	switch fl.Value.(type) {
	case *intValue, *uint64Value:
		arg = "N"
	case *durationValue:
		arg = "DURATION"
	case *float64Value:
		arg = "NUMBER"
	default: // a string or a Value of its own: named after the flag
		arg = strings.ToUpper(fl.Name)
	}
	return arg, text
}

// isZero reports whether fl's default is its type's zero value, which the
// usage does not print.
func isZero(fl *Flag) bool {
	switch fl.DefValue {
	case "", "0", "0s", "false":
		return true
	}
	return false
}

// declare sets *p to value and declares the flag v, which stores in p.
func declare[T any](f *FlagSet, p *T, value T, v Value, name, usage string) *T {
	*p = value
	f.Var(v, name, usage)
	return p
}

// String declares a string flag.
func (f *FlagSet) String(name string, value string, usage string) *string {
	p := new(string)
	return declare(f, p, value, (*stringValue)(p), name, usage)
}

// StringVar declares a string flag stored in p.
func (f *FlagSet) StringVar(p *string, name string, value string, usage string) {
	declare(f, p, value, (*stringValue)(p), name, usage)
}

// Int declares an int flag (decimal, or 0x hex, 0o octal, 0b binary).
func (f *FlagSet) Int(name string, value int, usage string) *int {
	p := new(int)
	return declare(f, p, value, (*intValue)(p), name, usage)
}

// IntVar declares an int flag (decimal, or 0x hex, 0o octal, 0b binary) stored in p.
func (f *FlagSet) IntVar(p *int, name string, value int, usage string) {
	declare(f, p, value, (*intValue)(p), name, usage)
}

// Uint64 declares a uint64 flag.
func (f *FlagSet) Uint64(name string, value uint64, usage string) *uint64 {
	p := new(uint64)
	return declare(f, p, value, (*uint64Value)(p), name, usage)
}

// Uint64Var declares a uint64 flag stored in p.
func (f *FlagSet) Uint64Var(p *uint64, name string, value uint64, usage string) {
	declare(f, p, value, (*uint64Value)(p), name, usage)
}

// Bool declares a switch.
func (f *FlagSet) Bool(name string, value bool, usage string) *bool {
	p := new(bool)
	return declare(f, p, value, (*boolFlag)(p), name, usage)
}

// BoolVar declares a switch stored in p.
func (f *FlagSet) BoolVar(p *bool, name string, value bool, usage string) {
	declare(f, p, value, (*boolFlag)(p), name, usage)
}

// Duration declares a duration flag ("500ms", "2s", "1m30s").
func (f *FlagSet) Duration(name string, value time.Duration, usage string) *time.Duration {
	p := new(time.Duration)
	return declare(f, p, value, (*durationValue)(p), name, usage)
}

// DurationVar declares a duration flag ("500ms", "2s", "1m30s") stored in p.
func (f *FlagSet) DurationVar(p *time.Duration, name string, value time.Duration, usage string) {
	declare(f, p, value, (*durationValue)(p), name, usage)
}

// Float64 declares a float64 flag.
func (f *FlagSet) Float64(name string, value float64, usage string) *float64 {
	p := new(float64)
	return declare(f, p, value, (*float64Value)(p), name, usage)
}

// Float64Var declares a float64 flag stored in p.
func (f *FlagSet) Float64Var(p *float64, name string, value float64, usage string) {
	declare(f, p, value, (*float64Value)(p), name, usage)
}

type stringValue string

func (v *stringValue) String() string     { return string(*v) }
func (v *stringValue) Set(s string) error { *v = stringValue(s); return nil }

type intValue int

func (v *intValue) String() string { return strconv.Itoa(int(*v)) }
func (v *intValue) Set(s string) error {
	n, err := strconv.ParseInt(s, 0, strconv.IntSize)
	if err != nil {
		return numErr(err, "not a whole number")
	}
	*v = intValue(n)
	return nil
}

type uint64Value uint64

func (v *uint64Value) String() string { return strconv.FormatUint(uint64(*v), 10) }
func (v *uint64Value) Set(s string) error {
	n, err := strconv.ParseUint(s, 0, 64)
	if err != nil {
		return numErr(err, "not a whole number of zero or more")
	}
	*v = uint64Value(n)
	return nil
}

type boolFlag bool

func (v *boolFlag) String() string   { return strconv.FormatBool(bool(*v)) }
func (v *boolFlag) IsBoolFlag() bool { return true }
func (v *boolFlag) Set(s string) error {
	b, err := strconv.ParseBool(s)
	if err != nil {
		return errors.New("want true or false")
	}
	*v = boolFlag(b)
	return nil
}

type durationValue time.Duration

func (v *durationValue) String() string { return time.Duration(*v).String() }
func (v *durationValue) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return errors.New("not a duration (like 500ms, 2s or 1m30s)")
	}
	*v = durationValue(d)
	return nil
}

type float64Value float64

func (v *float64Value) String() string { return strconv.FormatFloat(float64(*v), 'g', -1, 64) }
func (v *float64Value) Set(s string) error {
	x, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
		return numErr(err, "not a number")
	}
	*v = float64Value(x)
	return nil
}

// numErr words a strconv error: out of range, or not a number of the kind
// wanted.
func numErr(err error, what string) error {
	if errors.Is(err, strconv.ErrRange) {
		return errors.New("out of range")
	}
	return errors.New(what)
}
