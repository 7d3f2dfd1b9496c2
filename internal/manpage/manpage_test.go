package manpage

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func fixture(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name+".txt"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestParseShapes checks the parts Parse finds in the help texts as they
// are (Go flag package style, perftest style, the command list) and in
// the GNU style: the usage, description, and each section's entries.
func TestParseShapes(t *testing.T) {
	for _, c := range []struct {
		name, usage, section string
		entries              int
		term, desc           string // an entry that must be there
	}{
		{"sroce", "sroce <command> [flags] [arguments]", "COMMANDS", 20, "dissect", "decode the RoCEv2 packets of a pcap or pcapng capture"},
		{"daemon", "sroce daemon -d IF", "OPTIONS", 15, "--socket string", "unix socket to listen on (default: SROCE_SOCKET, or the place for this user)"},
		{"write-bw", "sroce write-bw [options]", "OPTIONS", 32, "--queues=<n>", "receive queues of the interface the device uses, one engine each (default: SROCE_QUEUES, else the queue count capped by the CPUs)"},
		{"demo", "sroce demo", "OPTIONS", 11, "--netem OPTIONS", `impair the veth with netem OPTIONS, e.g. "loss 2%" (root)`},
		{"gnu", "sroce stat [-d IF] [--socket PATH] [--json]", "OPTIONS", 4, "--socket=PATH", "the daemon's socket (default: SROCE_SOCKET, else the user's daemon, else /run/sroce/sroce.sock)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := Parse(fixture(t, c.name))
			if len(h.Usage) == 0 || !strings.HasPrefix(h.Usage[0], c.usage) {
				t.Errorf("usage %q, want it to start with %q", h.Usage, c.usage)
			}
			if len(h.Description) == 0 {
				t.Error("no description")
			}
			var sec *Section
			for i := range h.Sections {
				if h.Sections[i].Title == c.section {
					sec = &h.Sections[i]
				}
			}
			if sec == nil {
				t.Fatalf("no %s section in %+v", c.section, h.Sections)
			}
			if len(sec.Entries) < c.entries {
				t.Errorf("%d entries, want at least %d: %+v", len(sec.Entries), c.entries, sec.Entries)
			}
			found := false
			for _, e := range sec.Entries {
				if e.Term == c.term {
					found = true
					if e.Desc != c.desc {
						t.Errorf("entry %q: description %q, want %q", e.Term, e.Desc, c.desc)
					}
				}
			}
			if !found {
				t.Errorf("no entry %q in %+v", c.term, sec.Entries)
			}
		})
	}
	h := Parse(fixture(t, "write-bw"))
	if len(h.Usage) != 2 || !strings.Contains(h.Usage[1], "<host>") {
		t.Errorf("write-bw: usage %q, want both lines", h.Usage)
	}
	h = Parse(fixture(t, "gnu"))
	if len(h.Description) < 3 || !h.Description[2].Literal {
		t.Errorf("gnu: the example is not a literal paragraph: %+v", h.Description)
	}
	if s := h.Sections[0]; len(s.Outro) != 1 || !strings.HasPrefix(s.Outro[0].Lines[0], "Exit status") {
		t.Errorf("gnu: the text after the flags is lost: %+v", s.Outro)
	}
}

// TestPagesRenderCleanly renders the pages of the fixtures and formats
// each with groff (-ww: every warning), which must print nothing on its
// error stream; the text it prints must carry the flags and the
// description.
func TestPagesRenderCleanly(t *testing.T) {
	groff, err := exec.LookPath("groff")
	if err != nil {
		t.Skip("skipping: groff is not installed (apt-get install groff-base)")
	}
	top := "sroce is a user-space RoCEv2 engine.\n\nusage: sroce <command> [flags]\n\ncommands:\n" +
		"  daemon    serve sroce devices\n  run       run a program\n  write-bw  perftest's ib_write_bw\n" +
		"  demo      the demo\n  dissect   decode packets\n  stat      counters\n\nRun \"sroce help <command>\".\n"
	help := func(args ...string) (string, error) {
		if len(args) == 0 {
			return top, nil
		}
		name := args[0]
		if name == "stat" {
			name = "gnu"
		}
		return fixture(t, name), nil
	}
	pages, err := Pages("sroce", help, Meta{Date: "2026-11-29", Source: "sroce v0.0.0", Manual: "sroce manual"})
	if err != nil {
		t.Fatal(err)
	}
	if len(pages) != 7 {
		t.Errorf("%d pages, want 7", len(pages))
	}
	for name, page := range pages {
		cmd := exec.Command(groff, "-man", "-Tutf8", "-ww", "-P-cbou")
		cmd.Stdin = bytes.NewReader(page)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		cmd.Env = append(os.Environ(), "LC_ALL=C.UTF-8")
		if err := cmd.Run(); err != nil || errOut.Len() > 0 {
			t.Errorf("%s: groff: %v\n%s\npage:\n%s", name, err, errOut.String(), page)
		}
		text := out.String()
		for _, want := range []string{"NAME", "SYNOPSIS", "DESCRIPTION"} {
			if !strings.Contains(text, want) {
				t.Errorf("%s has no %s section:\n%s", name, want, text)
			}
		}
		if name == "sroce-stat.1" {
			for _, want := range []string{"--socket=PATH", ".like this one, a backslash \\ and a quote '", "50µs", "sroce stat -d eth0 --json | jq .", "Exit status: 0 ok"} {
				if !strings.Contains(strings.ReplaceAll(text, "‐", "-"), want) {
					t.Errorf("sroce-stat.1 as formatted lacks %q:\n%s", want, text)
				}
			}
		}
		if name == "sroce.1" && (!strings.Contains(text, "sroce-dissect(1)") || !strings.Contains(text, "a user-space RoCEv2 engine")) {
			t.Errorf("sroce.1 does not list the commands' pages or its summary:\n%s", text)
		}
	}
}
