package daemon

import (
	"runtime"
	"runtime/debug"
	"strings"
)

// BuildVersion describes this binary for --version: ReleaseVersion, the
// VCS revision and time (debug.ReadBuildInfo), "+dirty", Go.
func BuildVersion() string {
	return describeBuild(Version, readBuildInfo())
}

// ReleaseVersion is this binary's one version string (log, status,
// console, manual pages, --version): Version as linked, else the module
// version the go command stamped, else "dev".
func ReleaseVersion() string { return releaseVersion(Version, readBuildInfo()) }

func releaseVersion(linked string, bi *debug.BuildInfo) string {
	v := linked
	if bi != nil && (v == "" || v == "dev") && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		v = bi.Main.Version
	}
	if v == "" {
		v = "dev"
	}
	return v
}

func readBuildInfo() *debug.BuildInfo {
	bi, _ := debug.ReadBuildInfo()
	return bi
}

func describeBuild(linked string, bi *debug.BuildInfo) string {
	v := releaseVersion(linked, bi)
	goVersion := runtime.Version()
	var rev, when string
	dirty := false
	if bi != nil {
		goVersion = bi.GoVersion
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
