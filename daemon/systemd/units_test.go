// Package systemd holds the daemon's systemd units (sroce.service,
// sroce@.service) and their settings file (sroce.default, installed as
// /etc/default/sroce); its test checks how exposed the units leave the
// system.
package systemd

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// maxExposure is the highest "systemd-analyze security" score the units
// may have (0 is fully sandboxed, 10 is none at all).
const maxExposure = 3.0

var exposure = regexp.MustCompile(`Overall exposure level for (\S+): ([0-9.]+)`)

// TestUnitsAreHardened rates each unit with systemd-analyze security
// --offline (no running systemd needed) and checks the score, and that
// systemd understood every setting (an unknown or misspelled one would be
// ignored with a warning, and the score would not show it).
func TestUnitsAreHardened(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("skipping: systemd-analyze is not installed (apt-get install systemd)")
	}
	dir := t.TempDir()
	for _, c := range []struct{ file, as string }{
		{"sroce.service", "sroce.service"},
		{"sroce@.service", "sroce@eth0.service"}, // a template is rated as an instance
	} {
		t.Run(c.as, func(t *testing.T) {
			b, err := os.ReadFile(c.file)
			if err != nil {
				t.Fatal(err)
			}
			unit := filepath.Join(dir, c.as)
			if err := os.WriteFile(unit, b, 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(analyze, "security", "--offline=true", "--no-pager", unit)
			var out, errOut strings.Builder
			cmd.Stdout, cmd.Stderr = &out, &errOut
			if err := cmd.Run(); err != nil {
				t.Fatalf("systemd-analyze security: %v\n%s%s", err, out.String(), errOut.String())
			}
			if strings.Contains(errOut.String(), "Unknown") || strings.Contains(errOut.String(), "Failed to parse") ||
				strings.Contains(errOut.String(), "ignoring") {
				t.Errorf("systemd did not take every setting of %s:\n%s", c.file, errOut.String())
			}
			m := exposure.FindStringSubmatch(out.String())
			if m == nil {
				t.Fatalf("no overall exposure level in:\n%s", out.String())
			}
			score, err := strconv.ParseFloat(m[2], 64)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: exposure %.1f", c.as, score)
			if score > maxExposure {
				t.Errorf("%s is rated %.1f, above %.1f:\n%s", c.file, score, maxExposure, out.String())
			}
		})
	}
}

// TestUnitsRunTheInstalledDaemon checks what the units share with the
// package and the documentation: the binary's path, the system socket,
// the settings file and the pages Documentation= names.
func TestUnitsRunTheInstalledDaemon(t *testing.T) {
	for _, file := range []string{"sroce.service", "sroce@.service"} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		s := string(b)
		for _, want := range []string{
			"Type=notify", "ExecStart=/usr/bin/sroce daemon ", "--socket /run/sroce/sroce.sock",
			"EnvironmentFile=-/etc/default/sroce", "ExecReload=kill -HUP $MAINPID", "DynamicUser=yes",
			"Documentation=man:sroce-daemon(1) man:sroce(1) file:/usr/share/doc/sroce/docs/operator-guide.md",
		} {
			if !strings.Contains(s, want) {
				t.Errorf("%s lacks %q", file, want)
			}
		}
	}
}
