package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sroce/sroce/internal/buildinfo"
)

// flagLine is one entry of a flags section: "  -d, --device IF   text",
// "      --json   text" or "  -v   text".
var flagLine = regexp.MustCompile(`^  (-[0-9A-Za-z], --[0-9A-Za-z][-_0-9A-Za-z]+|    --[0-9A-Za-z][-_0-9A-Za-z]+|-[0-9A-Za-z])( [^ ]+)?(?:( {3,})(\S.*))?$`)

// checkHelpShape checks a command's --help text: the usage line, the
// description, and a flags section whose texts start in one column, with
// no one-letter long flag (--d) and no default given twice.
func checkHelpShape(t *testing.T, cmd, out string) {
	t.Helper()
	if !strings.HasPrefix(out, "usage: sroce "+cmd) {
		t.Errorf("%s --help does not start with its usage line: %q", cmd, out)
		return
	}
	usageLine, rest, _ := strings.Cut(out, "\n")
	about, flags, ok := strings.Cut(rest, "\nflags:\n")
	if !ok || strings.TrimSpace(about) == "" || !strings.HasPrefix(rest, "\n") {
		t.Errorf("%s --help: want the usage line, a blank line, the description, then flags:\n%s", cmd, out)
		return
	}
	if strings.Contains(usageLine, " -bogus") || regexp.MustCompile(` --[A-Za-z]\b`).MatchString(out) {
		t.Errorf("%s --help names a one-letter flag with two dashes:\n%s", cmd, out)
	}
	col, entries := -1, 0
	var entry string
	check := func() {
		if strings.Count(entry, "(default") > 1 {
			t.Errorf("%s --help gives a default twice: %q", cmd, entry)
		}
	}
	for _, line := range strings.Split(strings.TrimRight(flags, "\n"), "\n") {
		if line == "" {
			break // the flags section ends
		}
		m := flagLine.FindStringSubmatch(line)
		if m == nil {
			if strings.TrimSpace(line) == "" || !strings.HasPrefix(line, "    ") {
				t.Errorf("%s --help: %q is neither a flag nor a continuation", cmd, line)
			}
			entry += " " + strings.TrimSpace(line)
			continue
		}
		check()
		entries++
		entry = line
		// A long flag column pushes its text to the next line, which
		// is then the continuation.
		if m[4] == "" {
			continue
		}
		if c := len(line) - len(m[4]); col == -1 {
			col = c
		} else if c != col {
			t.Errorf("%s --help: %q starts its text at column %d, the others at %d", cmd, line, c, col)
		}
	}
	check()
	if entries < 2 || !strings.Contains(flags, "  -h, --help ") || !strings.Contains(flags, "--version ") {
		t.Errorf("%s --help lists %d flags, or not -h/--help and --version:\n%s", cmd, entries, flags)
	}
}

// TestEveryCommandLine runs every command with --bogus, --help and
// --version and checks its answers: the flag named as given with the
// usage on stderr and status 2; the help on stdout in its shape; the one
// version line.
func TestEveryCommandLine(t *testing.T) {
	version := buildinfo.Get().String() + "\n"
	for _, c := range commands {
		code, out, errOut := runSroce(t, nil, c.name, "--bogus")
		if code != exitUsage || out != "" || !strings.HasPrefix(errOut, "sroce "+c.name+": unknown flag --bogus\n\nusage: sroce "+c.name) {
			t.Errorf("%s --bogus: exit %d, stdout %q, stderr %q", c.name, code, out, errOut)
		}
		code, out, errOut = runSroce(t, nil, c.name, "-9")
		if code != exitUsage || out != "" || !strings.HasPrefix(errOut, "sroce "+c.name+": unknown flag -9\n") {
			t.Errorf("%s -9: exit %d, stdout %q, stderr %q", c.name, code, out, errOut)
		}
		code, out, errOut = runSroce(t, nil, c.name, "--help")
		if code != exitOK || errOut != "" {
			t.Errorf("%s --help: exit %d, stderr %q", c.name, code, errOut)
		}
		checkHelpShape(t, c.name, out)
		if _, short, _ := runSroce(t, nil, c.name, "-h"); short != out {
			t.Errorf("%s -h differs from --help", c.name)
		}
		if _, viaHelp, _ := runSroce(t, nil, "help", c.name); viaHelp != out {
			t.Errorf("sroce help %s differs from %s --help", c.name, c.name)
		}
		code, out, errOut = runSroce(t, nil, c.name, "--version")
		if code != exitOK || out != version || errOut != "" {
			t.Errorf("%s --version: exit %d, stdout %q (want %q), stderr %q", c.name, code, out, version, errOut)
		}
	}
}

// TestTopLevel checks sroce without a command, with --version and with
// the version command.
func TestTopLevel(t *testing.T) {
	version := buildinfo.Get().String() + "\n"
	if !strings.HasPrefix(version, "sroce ") || strings.Count(version, "\n") != 1 {
		t.Fatalf("version line %q", version)
	}
	code, out, errOut := runSroce(t, nil)
	if code != exitUsage || out != "" || !strings.HasPrefix(errOut, "sroce: no command given\n") || !strings.Contains(errOut, "usage: sroce <command>") {
		t.Errorf("sroce: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	for _, args := range [][]string{{"--version"}, {"version"}} {
		code, out, errOut := runSroce(t, nil, args...)
		if code != exitOK || out != version || errOut != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, code, out, errOut)
		}
	}
	code, out, errOut = runSroce(t, nil, "version", "extra")
	if code != exitUsage || out != "" || !strings.Contains(errOut, "version takes no arguments") {
		t.Errorf("version extra: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// TestBadValues gives each validated flag a value it refuses: status 2,
// the flag named (not an environment variable), the usage, and nothing
// opened or logged before (the daemon's first log line never shows).
func TestBadValues(t *testing.T) {
	t.Setenv("SROCE_ENGINE", "")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"daemon", "-d", "lo", "--max-qps", "-1"}, `invalid value "-1" for --max-qps: want a positive number`},
		{[]string{"daemon", "-d", "lo", "--max-qps=-1"}, `invalid value "-1" for --max-qps: want a positive number`},
		{[]string{"daemon", "-d", "lo", "--max-mrs", "0"}, `invalid value "0" for --max-mrs`},
		{[]string{"daemon", "-d", "lo", "--max-reg", "0"}, `invalid value "0" for --max-reg`},
		{[]string{"daemon", "-d", "lo", "--max-reg", "-5"}, `invalid value "-5" for --max-reg: not a whole number of zero or more`},
		{[]string{"daemon", "-d", "lo", "--max-qps", "many"}, `invalid value "many" for --max-qps: not a whole number`},
		{[]string{"daemon", "-d", "lo", "--engine", "turbo"}, `invalid value "turbo" for --engine: want auto, sleep, spin, adaptive or inline`},
		{[]string{"daemon", "-d", "lo", "--eng=turbo"}, `invalid value "turbo" for --engine`},
		{[]string{"daemon", "-d", "lo", "--link", "tcp"}, `invalid value "tcp" for --link: want auto, xdp or udp`},
		{[]string{"daemon", "-d", "lo", "--queues", "-1"}, `invalid value "-1" for --queues: want a positive number`},
		{[]string{"daemon", "-d", "lo", "--metrics", "nonsense"}, `invalid value "nonsense" for --metrics: want HOST:PORT`},
		{[]string{"daemon", "-d", "lo", "--metrics", "127.0.0.1:99999"}, `invalid value "127.0.0.1:99999" for --metrics: the port is not a number from 0 to 65535`},
		{[]string{"daemon", "-d", "lo", "--metrics", ":nosuchservice"}, `invalid value ":nosuchservice" for --metrics`},
		{[]string{"daemon", "-d", "lo", "--log-format", "xml"}, `invalid value "xml" for --log-format: want text or json`},
		{[]string{"daemon", "-d", "lo", "--spin", "5parsecs"}, `invalid value "5parsecs" for --spin: not a duration`},
		{[]string{"daemon", "-d", "lo", "--limit-total", "bogus=1"}, `invalid value "bogus=1" for --limit-total`},
		{[]string{"daemon", "-d", "lo", "--verbose=maybe"}, `invalid value "maybe" for --verbose: want true or false`},
		{[]string{"daemon", "--device", "lo@notanip"}, `invalid value "lo@notanip" for --device`},
		{[]string{"daemon", "-d", "lo", "-d", "lo"}, `interface lo is given twice`},
		{[]string{"daemon", "-link", "xdp"}, "unknown flag -l in -link (long flags take two dashes: --link)"},
		{[]string{"daemon", "--socket"}, "flag --socket needs a value"},
		{[]string{"daemon", "--m", "x"}, "flag --m is ambiguous: --metrics, --metrics-clients, --max-qps, --max-mrs, --max-reg"},
		{[]string{"daemon"}, "give at least one interface with -d"},
		{[]string{"devinfo", "--mode", "tcp"}, `invalid value "tcp" for --mode: want auto, xdp or udp`},
		{[]string{"devinfo", "-d"}, "flag -d needs a value"},
		{[]string{"stat", "--for", "-1s"}, `invalid value "-1s" for --for: must not be negative`},
		{[]string{"stat", "--for", "soon"}, `invalid value "soon" for --for: not a duration`},
		{[]string{"stat", "--mode=tcp"}, `invalid value "tcp" for --mode`},
		{[]string{"trace", "--for", "-1s"}, `invalid value "-1s" for --for: must not be negative`},
		{[]string{"demo", "--size", "0"}, "--size must be between 1 and 1073741824 bytes"},
		{[]string{"demo", "--mtu", "abc"}, `invalid value "abc" for --mtu: not a whole number`},
		{[]string{"demo", "--loss", "1e999"}, `invalid value "1e999" for --loss: out of range`},
		{[]string{"demo", "--mode", "tcp"}, `invalid value "tcp" for --mode`},
		{[]string{"interop", "--engine", "turbo"}, `invalid value "turbo" for --engine`},
		{[]string{"interop", "--timeout", "0s"}, `invalid value "0s" for --timeout: must be positive`},
		{[]string{"ladder", "--html-arrows", "0", "x.pcap"}, "--html-arrows must be between 1 and"},
		{[]string{"dissect", "a", "b"}, "expected one capture file"},
		{[]string{"run", "--socket"}, "flag --socket needs a value"},
		{[]string{"run"}, "give the program to run"},
		{[]string{"write-bw", "-n", "2"}, "-n 2: Iteration num should be between 5 and 100000000"},
		{[]string{"write-bw", "--size=0"}, "--size 0: Message Size should be between 1 and"},
		{[]string{"write-bw", "--queues", "0"}, "--queues 0: The number of queues must be at least 1"},
		{[]string{"rc-pingpong", "--mtu", "1000"}, "--mtu 1000: the MTU is not 256, 512, 1024, 2048 or 4096"},
		{[]string{"ud-pingpong", "--queues", "-2"}, "--queues -2: not a positive number"},
		{[]string{"rping", "-c", "-S", "10"}, `invalid value "10" for -S`},
	} {
		code, out, errOut := runSroce(t, nil, c.args...)
		if code != exitUsage || out != "" || !strings.HasPrefix(errOut, "sroce "+c.args[0]+": ") ||
			!strings.Contains(errOut, c.want) || !strings.Contains(errOut, "usage: sroce "+c.args[0]) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2 and %q with the usage", c.args, code, out, errOut, c.want)
		}
		if strings.Contains(errOut, "level=") {
			t.Errorf("%q: something ran before the command line was refused: %q", c.args, errOut)
		}
	}

	// SROCE_ENGINE is blamed when it, not --engine, is bad.
	t.Setenv("SROCE_ENGINE", "turbo")
	code, _, errOut := runSroce(t, nil, "daemon", "-d", "lo")
	if code != exitUsage || !strings.HasPrefix(errOut, "sroce daemon: SROCE_ENGINE: ") {
		t.Errorf("SROCE_ENGINE=turbo: exit %d, stderr %q", code, errOut)
	}
}

// TestFileExitStatus checks that the commands that read or write files
// agree: a file that cannot be opened is exit status 1 and one sentence.
func TestFileExitStatus(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.pcap")
	empty := filepath.Join(dir, "empty.pcap")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"dissect", missing}, "sroce dissect: cannot open " + missing + ": no such file or directory\n"},
		{[]string{"ladder", missing}, "sroce ladder: cannot open " + missing + ": no such file or directory\n"},
		{[]string{"ladder", "--json", missing}, "sroce ladder: cannot open " + missing + ": no such file or directory\n"},
		{[]string{"dissect", "--json", empty}, "sroce dissect: " + empty + " is empty, not a pcap or pcapng capture\n"},
		{[]string{"ladder", empty}, "sroce ladder: " + empty + " is empty, not a pcap or pcapng capture\n"},
		{[]string{"ladder", "--html", filepath.Join(dir, "no", "such", "dir.html"), goldenCapture},
			"sroce ladder: cannot create the HTML page " + filepath.Join(dir, "no", "such", "dir.html") + ": no such file or directory\n"},
	} {
		code, out, errOut := runSroce(t, nil, c.args...)
		if code != exitProblem || out != "" || !strings.HasPrefix(errOut, c.want) || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 1 and %q", c.args, code, out, errOut, c.want)
		}
	}
}
