package daemon

import (
	"runtime"
	"runtime/debug"
	"strings"
)

// BuildVersion describes this binary for --version: Version or the module
// version, the VCS revision and time (debug.ReadBuildInfo), "+dirty", Go.
func BuildVersion() string {
	return describeBuild(Version, readBuildInfo())
}

func readBuildInfo() *debug.BuildInfo {
	bi, _ := debug.ReadBuildInfo()
	return bi
}

func describeBuild(linked string, bi *debug.BuildInfo) string {
	v := linked
	goVersion := runtime.Version()
	var rev, when string
	dirty := false
	if bi != nil {
		goVersion = bi.GoVersion
		if (v == "" || v == "dev") && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.time":
				when = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	if v == "" {
		v = "dev"
	}
	var extra []string
	if rev != "" {
		r := rev[:min(12, len(rev))]
		if dirty {
			r += "+dirty"
		}
		if when != "" {
			r += " " + when
		}
		extra = append(extra, "revision "+r)
	}
	extra = append(extra, goVersion)
	return v + " (" + strings.Join(extra, ", ") + ")"
}
