package cli

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

// testSet is a FlagSet with one flag of each kind.
func testSet() (*FlagSet, *string, *int, *bool, *bool, *time.Duration) {
	f := NewFlagSet()
	dev := f.String("device", "", "network interface `IF`")
	f.Short('d', "device")
	f.Alias("ib-dev", "device")
	n := f.Int("iters", 10, "iterations")
	f.Short('n', "iters")
	v := f.Bool("v", false, "verbose")
	j := f.Bool("json", false, "JSON")
	f.Short('j', "json")
	d := f.Duration("for", 0, "how long")
	return f, dev, n, v, j, d
}

// TestParseForms checks the forms GNU getopt_long takes.
func TestParseForms(t *testing.T) {
	for _, c := range []struct {
		args []string
		dev  string
		n    int
		v, j bool
		d    time.Duration
		pos  string
	}{
		{[]string{"-d", "eth0"}, "eth0", 10, false, false, 0, ""},
		{[]string{"-deth0"}, "eth0", 10, false, false, 0, ""},
		{[]string{"--device=eth0"}, "eth0", 10, false, false, 0, ""},
		{[]string{"--device", "eth0"}, "eth0", 10, false, false, 0, ""},
		{[]string{"--dev", "eth0"}, "eth0", 10, false, false, 0, ""},
		{[]string{"--ib-dev", "eth0"}, "eth0", 10, false, false, 0, ""},
		{[]string{"-vjn5"}, "", 5, true, true, 0, ""},
		{[]string{"-n", "-5", "a"}, "", -5, false, false, 0, "a"},
		{[]string{"a", "--json", "b", "-"}, "", 10, false, true, 0, "a|b|-"},
		{[]string{"--json=false", "--", "-v", "--json"}, "", 10, false, false, 0, "-v|--json"},
		{[]string{"--for", "1m30s", "--iters=0x10"}, "", 16, false, false, 90 * time.Second, ""},
	} {
		f, dev, n, v, j, d := testSet()
		pos, err := f.Parse(c.args)
		if err != nil || *dev != c.dev || *n != c.n || *v != c.v || *j != c.j || *d != c.d || strings.Join(pos, "|") != c.pos {
			t.Errorf("%q: err %v, device %q, iters %d, v %v, json %v, for %v, operands %q", c.args, err, *dev, *n, *v, *j, *d, pos)
		}
	}
}

// TestParseErrors checks that every error names the flag as given.
func TestParseErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--bogus"}, "unknown flag --bogus"},
		{[]string{"-x"}, "unknown flag -x"},
		{[]string{"-vx"}, "unknown flag -x in -vx"},
		{[]string{"-json"}, "unknown flag -s in -json (long flags take two dashes: --json)"},
		{[]string{"-d"}, "flag -d needs a value"},
		{[]string{"--device"}, "flag --device needs a value"},
		{[]string{"--json=maybe"}, `invalid value "maybe" for --json: want true or false`},
		{[]string{"-n", "many"}, `invalid value "many" for -n: not a whole number`},
		{[]string{"--it=99999999999999999999"}, `invalid value "99999999999999999999" for --it: out of range`},
		{[]string{"--for", "soon"}, `invalid value "soon" for --for: not a duration (like 500ms, 2s or 1m30s)`},
		{[]string{"--i", "3"}, "flag --i is ambiguous: --ib-dev, --iters"},
	} {
		f, _, _, _, _, _ := testSet()
		_, err := f.Parse(c.args)
		var ce *Error
		if !errors.As(err, &ce) || err.Error() != c.want {
			t.Errorf("%q: %v, want %q", c.args, err, c.want)
		}
	}
	for _, c := range []struct {
		args []string
		want error
	}{
		{[]string{"-h", "--bogus"}, ErrHelp},
		{[]string{"--he"}, ErrHelp},
		{[]string{"-vh"}, ErrHelp},
		{[]string{"a", "--version"}, ErrVersion},
	} {
		f, _, _, _, _, _ := testSet()
		if _, err := f.Parse(c.args); err != c.want {
			t.Errorf("%q: %v, want %v", c.args, err, c.want)
		}
	}
	f := NewFlagSet()
	sock := f.String("socket", "", "")
	f.StopAtOperand = true
	pos, err := f.Parse([]string{"--socket", "s", "prog", "-d", "x", "--socket", "t"})
	if err != nil || *sock != "s" || strings.Join(pos, " ") != "prog -d x --socket t" {
		t.Errorf("stop at operand: %v, socket %q, operands %q", err, *sock, pos)
	}
	if !f.IsSet("socket") || NewFlagSet().IsSet("socket") {
		t.Error("IsSet")
	}
}

// TestUsageLayout checks the help text: the usage line, the description,
// the flags with their texts in one column, wrapped, and each default
// once.
func TestUsageLayout(t *testing.T) {
	f, _, _, _, _, _ := testSet()
	f.Int("queues", 0, "receive queues (default: SROCE_QUEUES, else the queue count capped by the CPUs of the host, which is a long text)")
	u := Usage{Name: "sroce x", Synopsis: "sroce x [-d IF] FILE", About: "\nX does things.\n", Flags: f.Help()}
	var b bytes.Buffer
	u.Write(&b, true)
	// The text column is the widest flag's plus three spaces.
	want := `usage: sroce x [-d IF] FILE

X does things.

flags:
  -d, --device IF      network interface IF
  -n, --iters N        iterations (default 10)
  -v                   verbose
  -j, --json           JSON
      --for DURATION   how long
      --queues N       receive queues (default: SROCE_QUEUES, else the queue
                       count capped by the CPUs of the host, which is a long
                       text)
  -h, --help           print this help and exit
      --version        print the version of sroce and exit
`
	if got := b.String(); got != want {
		t.Errorf("usage:\n%s\nwant:\n%s", got, want)
	}
	b.Reset()
	if code := u.Fail(&b, "unknown flag --bogus"); code != ExitUsage ||
		!strings.HasPrefix(b.String(), "sroce x: unknown flag --bogus\n\nusage: sroce x [-d IF] FILE\n\nflags:\n") ||
		!strings.HasSuffix(b.String(), "\nRun \"sroce help x\" for details.\n") || strings.Contains(b.String(), "does things") {
		t.Errorf("Fail: %d %q", code, b.String())
	}
}

// TestDeclarationClash checks that a flag declared twice, or a short
// form or alias given twice, is refused when the command is built.
func TestDeclarationClash(t *testing.T) {
	for name, declare := range map[string]func(f *FlagSet){
		"name twice":        func(f *FlagSet) { f.Bool("json", false, "") },
		"letter of a Short": func(f *FlagSet) { f.Bool("d", false, "") },
		"Short twice":       func(f *FlagSet) { f.Short('n', "json") },
		"Short -h":          func(f *FlagSet) { f.Short('h', "json") },
		"alias as a name":   func(f *FlagSet) { f.String("ib-dev", "", "") },
		"alias twice":       func(f *FlagSet) { f.Alias("ib-dev", "iters") },
		"help":              func(f *FlagSet) { f.Bool("help", false, "") },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: declared without a panic", name)
				}
			}()
			f, _, _, _, _, _ := testSet()
			declare(f)
		}()
	}
}
