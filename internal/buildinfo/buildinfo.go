// Package buildinfo tells which sroce this is: the module version and the
// VCS revision the Go toolchain recorded in the binary. Every command's
// --version, the daemon's first log line and the sroce_build_info metric
// read it from here, so they always agree.
package buildinfo

import (
	"runtime"
	"runtime/debug"
	"sync"
)

// Info is what the binary knows about its own build.
type Info struct {
	Version   string // module version ("v1.2.3", or "(devel)" for a work tree build)
	Revision  string // VCS revision, "" when the build recorded none
	Time      string // commit time (RFC 3339), "" when unknown
	Modified  bool   // the work tree had uncommitted changes
	GoVersion string // the Go toolchain that built it
}

var (
	once sync.Once
	info Info
)

// Get returns the build information of the running binary.
func Get() Info {
	once.Do(func() {
		info = Info{Version: "(devel)", GoVersion: runtime.Version()}
		bi, ok := debug.ReadBuildInfo()
		if !ok {
			return
		}
		if v := bi.Main.Version; v != "" {
			info.Version = v
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				info.Revision = s.Value
			case "vcs.time":
				info.Time = s.Value
			case "vcs.modified":
				info.Modified = s.Value == "true"
			}
		}
	})
	return info
}

// ShortRevision is the first 12 characters of the revision, with "+dirty"
// when the work tree was modified; "unknown" when none was recorded.
func (i Info) ShortRevision() string {
	r := i.Revision
	if r == "" {
		return "unknown"
	}
	if len(r) > 12 {
		r = r[:12]
	}
	if i.Modified {
		r += "+dirty"
	}
	return r
}

// String is the one line "sroce version" prints.
func (i Info) String() string {
	s := "sroce " + i.Version + " (revision " + i.ShortRevision()
	if i.Time != "" {
		s += ", " + i.Time
	}
	return s + ", " + i.GoVersion + ")"
}
