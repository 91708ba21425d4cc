package daemon

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestDescribeBuild(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/ratelimitd/ratelimitd", Version: "v1.4.0"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.time", Value: "2026-11-23T10:00:00Z"},
			{Key: "vcs.modified", Value: "true"}}}
	if got, want := describeBuild("dev", bi), "v1.4.0 (revision 0123456789ab+dirty 2026-11-23T10:00:00Z, go1.26.8)"; got != want {
		t.Errorf("module version: %q, want %q", got, want)
	}
	if got, want := describeBuild("v1.4.0-3-gabc", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}}), "v1.4.0-3-gabc (go1.26.8)"; got != want {
		t.Errorf("linked version: %q, want %q", got, want)
	}
}

// TestOneVersionString: --version (describeBuild) begins with the version
// status, the log and the console show (releaseVersion), whether it was
// linked or stamped by the go command as a module pseudo-version; a running
// daemon's status and start-up log line carry ReleaseVersion.
func TestOneVersionString(t *testing.T) {
	pseudo := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.0.0-20261201101500-0123456789ab+dirty"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef"}}}
	for _, tc := range []struct {
		linked string
		bi     *debug.BuildInfo
		want   string
	}{
		{"dev", pseudo, "v0.0.0-20261201101500-0123456789ab+dirty"},
		{"v1.2.0-3-gabc", pseudo, "v1.2.0-3-gabc"},
		{"dev", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}}, "dev"},
		{"", nil, "dev"},
	} {
		if got := releaseVersion(tc.linked, tc.bi); got != tc.want {
			t.Errorf("releaseVersion(%q) = %q, want %q", tc.linked, got, tc.want)
		}
		if got := describeBuild(tc.linked, tc.bi); !strings.HasPrefix(got, tc.want+" (") {
			t.Errorf("describeBuild(%q) = %q, want it to begin with %q", tc.linked, got, tc.want)
		}
	}
	td := startTestDaemon(t, testConfig(t, t.TempDir(), loopback(t), ""))
	if st := td.adminStatus(); st.Version != ReleaseVersion() {
		t.Errorf("status version %q, want %q", st.Version, ReleaseVersion())
	}
	if !strings.Contains(td.logs.String(), "version="+ReleaseVersion()+" ") {
		t.Errorf("start-up log lacks version=%s:\n%s", ReleaseVersion(), td.logs.String())
	}
	if !strings.HasPrefix(BuildVersion(), ReleaseVersion()+" (") {
		t.Errorf("BuildVersion %q does not begin with %q", BuildVersion(), ReleaseVersion())
	}
}
