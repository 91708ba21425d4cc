package mtatest

import (
	"cmp"
	"os"
	"path/filepath"
	"testing"
)

// EximBinary returns $RATELIMITD_EXIM_DIR (default
// /opt/ratelimitd-test/exim)/usr/sbin/exim4; it fails the test without it.
func EximBinary(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(cmp.Or(os.Getenv("RATELIMITD_EXIM_DIR"), "/opt/ratelimitd-test/exim"), "usr/sbin/exim4")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("mtatest: no Exim binary at %s: run scripts/deps.sh (make deps) as root", bin)
	}
	return bin
}
