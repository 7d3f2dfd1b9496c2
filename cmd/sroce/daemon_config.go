package main

// The daemon's configuration file (--config) and what SIGHUP may change
// of it. The format is in docs/operating.md.

import (
	"bufio"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
)

// configKeys are the keys of the configuration file: the daemon's long
// flag names ("interface" is -d), with whether SIGHUP applies a change
// (live) or the daemon must restart.
var configKeys = map[string]bool{
	"interface":       true,
	"log-level":       true,
	"log-format":      true,
	"log-file":        true,
	"max-qps":         true,
	"max-mrs":         true,
	"max-reg":         true,
	"link":            false,
	"socket":          false,
	"socket-group":    false,
	"socket-mode":     false,
	"metrics":         false,
	"metrics-clients": false,
	"engine":          false,
	"queues":          false,
	"spin":            false,
	"limit-user":      false,
	"limit-total":     false,
}

// flagOfKey is the command-line flag of a configuration key, where its
// name differs.
var flagOfKey = map[string][]string{"interface": {"device"}, "log-level": {"log-level", "verbose"}}

// daemonConfig is a parsed configuration file: each key's value (the
// last given wins, except "interface", which accumulates).
type daemonConfig struct {
	path string
	vals map[string]string
	ifs  []string
}

// readDaemonConfig reads the configuration file at path. An empty path is
// an empty configuration.
func readDaemonConfig(path string) (*daemonConfig, error) {
	c := &daemonConfig{path: path, vals: map[string]string{}}
	if path == "" {
		return c, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--config: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || k == "" {
			return nil, fmt.Errorf("%s:%d: want KEY = VALUE, not %q", path, n, line)
		}
		if _, known := configKeys[k]; !known {
			return nil, fmt.Errorf("%s:%d: unknown key %q (the keys are the daemon's long flag names: %s)", path, n, k, strings.Join(sortedKeys(), ", "))
		}
		if v == "" {
			return nil, fmt.Errorf("%s:%d: %s has no value", path, n, k)
		}
		if k == "interface" {
			c.ifs = append(c.ifs, strings.Fields(strings.ReplaceAll(v, ",", " "))...)
			continue
		}
		c.vals[k] = v
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

func sortedKeys() []string {
	ks := make([]string, 0, len(configKeys))
	for k := range configKeys {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// str is the value of key, or def.
func (c *daemonConfig) str(key, def string) string {
	if v, ok := c.vals[key]; ok {
		return v
	}
	return def
}

// num is the integer value of key, or def; a malformed value is recorded
// in *bad (the first only).
func (c *daemonConfig) num(key string, def int, bad *error) int {
	v, ok := c.vals[key]
	if !ok {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil && *bad == nil {
		*bad = fmt.Errorf("%s: %s = %q: want a number", c.path, key, v)
	}
	return n
}

// configFlag finds --config FILE (or --config=FILE) in the daemon's
// arguments, before the flags are parsed: its values are the flags'
// defaults, which the command line overrides.
func configFlag(args []string) string {
	for i, a := range args {
		if a == "--" {
			break
		}
		for _, p := range []string{"--config", "-config"} {
			if a == p && i+1 < len(args) {
				return args[i+1]
			}
			if v, ok := strings.CutPrefix(a, p+"="); ok {
				return v
			}
		}
	}
	return ""
}

// givenKeys returns the configuration keys the command line set, as the
// parser saw them (isSet: by the flag's declared name): those stay as
// given when the file changes.
func givenKeys(isSet func(string) bool) map[string]bool {
	given := map[string]bool{}
	for k := range configKeys {
		flags := flagOfKey[k]
		if flags == nil {
			flags = []string{k}
		}
		for _, name := range flags {
			if isSet(name) {
				given[k] = true
			}
		}
	}
	return given
}

// changedKeys lists the keys whose values differ between two
// configurations ("interface" when the interface lists differ).
func changedKeys(old, new *daemonConfig) []string {
	var out []string
	for _, k := range sortedKeys() {
		if k == "interface" {
			if !slices.Equal(old.ifs, new.ifs) {
				out = append(out, k)
			}
			continue
		}
		if old.vals[k] != new.vals[k] {
			out = append(out, k)
		}
	}
	return out
}
