package rxeguest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeFiles(t *testing.T, files map[string]string) (list, dir string) {
	t.Helper()
	root := t.TempDir()
	dir = filepath.Join(root, "sources.list.d")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range files {
		p := filepath.Join(dir, name)
		if name == "sources.list" {
			p = filepath.Join(root, name)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(root, "sources.list"), dir
}

func TestFindMirror(t *testing.T) {
	cases := []struct {
		name  string
		files map[string]string
		want  string // "" means an error
		why   string // a part of the error
	}{
		{"deb822", map[string]string{"debian.sources": `Types: deb
# a comment
URIs: http://mirror.example/debian/
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://security.example/debian-security
Suites: bookworm-security
Components: main
`}, "http://mirror.example/debian", ""},
		{"security listed first", map[string]string{"a.sources": `Types: deb
URIs: http://security.example/debian-security
Suites: bookworm-security
Components: main
`, "b.sources": `Types: deb deb-src
URIs: https://b.example/debian
Suites: bookworm
Components: main contrib
`}, "https://b.example/debian", ""},
		{"one-line with options", map[string]string{"sources.list": `# deb http://old.example/debian bookworm main
deb-src http://src.example/debian bookworm main
deb [arch=amd64 signed-by=/k.gpg] http://one.example/debian bookworm main non-free
`}, "http://one.example/debian", ""},
		{"other release", map[string]string{"debian.sources": `Types: deb
URIs: http://trixie.example/debian
Suites: trixie trixie-updates
Components: main
`}, "http://trixie.example/debian", ""},
		{"disabled stanza", map[string]string{"debian.sources": `Types: deb
URIs: http://off.example/debian
Suites: bookworm
Components: main
Enabled: no
`}, "", "no enabled deb entry"},
		{"no main component", map[string]string{"x.list": "deb http://x.example/debian bookworm contrib\n"},
			"", "x.example"},
		{"nothing", map[string]string{}, "", "nor any"},
		{"ignored suffix", map[string]string{"debian.sources.disabled": "Types: deb\nURIs: http://d.example/debian\nSuites: bookworm\nComponents: main\n"},
			"", "nor any"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			list, dir := writeFiles(t, c.files)
			got, err := findMirror(list, dir, "bookworm")
			if c.want != "" {
				if err != nil || got != c.want {
					t.Fatalf("got %q, %v; want %q", got, err, c.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("got %q, want an error", got)
			}
			if !strings.Contains(err.Error(), c.why) || !strings.Contains(err.Error(), "SROCE_DEBIAN_MIRROR") {
				t.Fatalf("error %q does not say %q", err, c.why)
			}
		})
	}
}

// TestFindMirrorHere reads this machine's own apt configuration.
func TestFindMirrorHere(t *testing.T) {
	m, err := FindMirror(suite)
	if err != nil {
		if _, statErr := os.Stat(aptSourcesDir); statErr != nil {
			t.Skipf("no apt configuration on this machine: %v", err)
		}
		t.Fatal(err)
	}
	t.Logf("apt's mirror: %s", m)
}
