package ratestore

import (
	"os"
	"testing"
)

// TestMain runs the child processes of TestPersistentCrashBound and
// BenchmarkPersist2M when the test binary is re-executed for them.
func TestMain(m *testing.M) {
	if path := os.Getenv(crashEnv); path != "" {
		crashChild(path) // never returns
	}
	if path := os.Getenv(rssEnv); path != "" {
		rssChild(path)
		os.Exit(0)
	}
	os.Exit(m.Run())
}
