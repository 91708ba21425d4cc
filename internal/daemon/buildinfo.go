package daemon

import (
	"runtime"
	"runtime/debug"
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
	goVersion, rev := runtime.Version(), ""
	if bi != nil {
		goVersion = bi.GoVersion
		set := map[string]string{}
		for _, s := range bi.Settings {
			set[s.Key] = s.Value
		}
		if r := set["vcs.revision"]; r != "" {
			rev = "revision " + r[:min(12, len(r))]
			if set["vcs.modified"] == "true" {
				rev += "+dirty"
			}
			if t := set["vcs.time"]; t != "" {
				rev += " " + t
			}
			rev += ", "
		}
	}
	return releaseVersion(linked, bi) + " (" + rev + goVersion + ")"
}
