package rxeguest

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Where apt keeps its sources on a Debian machine.
const (
	aptSourcesList = "/etc/apt/sources.list"
	aptSourcesDir  = "/etc/apt/sources.list.d"
)

// aptSource is one "deb" entry of apt's configuration.
type aptSource struct {
	file       string
	uris       []string
	suites     []string
	components []string
}

// FindMirror returns the Debian archive that this machine's apt uses, so
// the guest image is fetched from wherever apt itself fetches packages. It
// reads the deb822 files /etc/apt/sources.list.d/*.sources and the
// one-line files /etc/apt/sources.list and /etc/apt/sources.list.d/*.list,
// and takes the first enabled "deb" entry for suite with the main
// component; failing that, the first for another release of the main
// archive (a suite without a "-security"/"-updates"-style suffix), since
// every Debian mirror carries every release. The error lists every entry
// it looked at and why none would do.
func FindMirror(suite string) (string, error) {
	return findMirror(aptSourcesList, aptSourcesDir, suite)
}

func findMirror(list, dir, suite string) (string, error) {
	var files []string
	if _, err := os.Stat(list); err == nil {
		files = append(files, list)
	}
	for _, pat := range []string{"*.list", "*.sources"} {
		m, _ := filepath.Glob(filepath.Join(dir, pat))
		sort.Strings(m)
		files = append(files, m...)
	}
	var all []aptSource
	var tried []string
	for _, f := range files {
		var srcs []aptSource
		var err error
		if strings.HasSuffix(f, ".sources") {
			srcs, err = readDeb822(f)
		} else {
			srcs, err = readOneLine(f)
		}
		if err != nil {
			tried = append(tried, fmt.Sprintf("%s: %v", f, err))
			continue
		}
		if len(srcs) == 0 {
			tried = append(tried, fmt.Sprintf("%s: no enabled deb entry", f))
		}
		all = append(all, srcs...)
	}
	usable := func(s aptSource, u string) bool {
		return (strings.HasPrefix(u, "http://") || strings.HasPrefix(u, "https://") ||
			strings.HasPrefix(u, "file:/")) && contains(s.components, "main")
	}
	// Exact suite first, then any main-archive release.
	for _, exact := range []bool{true, false} {
		for _, s := range all {
			for _, su := range s.suites {
				if exact && su != suite || !exact && strings.Contains(su, "-") {
					continue
				}
				for _, u := range s.uris {
					if usable(s, u) {
						return strings.TrimSuffix(u, "/"), nil
					}
				}
			}
		}
	}
	for _, s := range all {
		tried = append(tried, fmt.Sprintf("%s: %s suites %s components %s: not the main archive of a release with main over http(s) or file",
			s.file, strings.Join(s.uris, " "), strings.Join(s.suites, " "), strings.Join(s.components, " ")))
	}
	if len(files) == 0 {
		tried = append(tried, fmt.Sprintf("neither %s nor any %s/*.sources or *.list exists", list, dir))
	}
	return "", fmt.Errorf("no Debian mirror for %s in apt's configuration (set SROCE_DEBIAN_MIRROR to choose one); looked at:\n  %s",
		suite, strings.Join(tried, "\n  "))
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// readOneLine parses the one-line format:
//
//	deb [ option=value ... ] uri suite [component ...]
func readOneLine(path string) ([]aptSource, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []aptSource
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(line)
		if len(fields) < 3 || fields[0] != "deb" {
			continue
		}
		fields = fields[1:]
		if strings.HasPrefix(fields[0], "[") {
			// options, possibly spread over several fields
			i := 0
			for i < len(fields) && !strings.HasSuffix(fields[i], "]") {
				i++
			}
			if i == len(fields) {
				continue
			}
			fields = fields[i+1:]
		}
		if len(fields) < 2 {
			continue
		}
		out = append(out, aptSource{file: path, uris: fields[:1], suites: fields[1:2], components: fields[2:]})
	}
	return out, sc.Err()
}

// readDeb822 parses the deb822 format: stanzas of "Field: value" lines
// separated by blank lines; a value may continue on indented lines.
func readDeb822(path string) ([]aptSource, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []aptSource
	fields := map[string]string{}
	last := ""
	flush := func() {
		defer func() { fields, last = map[string]string{}, "" }()
		if len(fields) == 0 {
			return
		}
		if !contains(strings.Fields(fields["types"]), "deb") {
			return
		}
		if e := strings.ToLower(strings.TrimSpace(fields["enabled"])); e == "no" || e == "false" {
			return
		}
		out = append(out, aptSource{file: path, uris: strings.Fields(fields["uris"]),
			suites: strings.Fields(fields["suites"]), components: strings.Fields(fields["components"])})
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		if strings.TrimSpace(line) == "" {
			flush()
			continue
		}
		if line[0] == ' ' || line[0] == '\t' {
			if last != "" {
				fields[last] += " " + strings.TrimSpace(line)
			}
			continue
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			return nil, errors.New("a line that is neither a field nor a continuation: " + line)
		}
		last = strings.ToLower(strings.TrimSpace(k))
		fields[last] = strings.TrimSpace(v)
	}
	flush()
	return out, nil
}
