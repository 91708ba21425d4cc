package redistest

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// Exclusive makes the calling test the only caller running in this
// module until it ends (a flock released at t.Cleanup).
func Exclusive(t testing.TB) {
	t.Helper()
	path := filepath.Join(os.TempDir(), "ratelimitd-exclusive-load-tests.lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		t.Fatalf("redistest: lock %s: %v", path, err)
	}
	t.Cleanup(func() { f.Close() }) // closing releases the lock
}
