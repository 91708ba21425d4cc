package daemon

import (
	"runtime/debug"
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
