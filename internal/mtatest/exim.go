package mtatest

import (
	"os"
	"path/filepath"
	"testing"
)

// EximBinary returns the path of the Exim binary that scripts/deps.sh
// unpacks ($RATELIMITD_EXIM_DIR, default /opt/ratelimitd-test/exim, then
// usr/sbin/exim4; Debian's exim4 package conflicts with postfix, so it is
// not installed). It fails the test (never skips it) when it is missing.
func EximBinary(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("RATELIMITD_EXIM_DIR")
	if dir == "" {
		dir = "/opt/ratelimitd-test/exim"
	}
	bin := filepath.Join(dir, "usr/sbin/exim4")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("mtatest: no Exim binary at %s: run scripts/deps.sh (make deps) as root", bin)
	}
	return bin
}
