package admin

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestAdminSocketRefusesWorldWritableDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "open")
	os.Mkdir(dir, 0o777)
	os.Chmod(dir, 0o777)
	if _, err := Listen(filepath.Join(dir, "admin.sock")); err == nil || !strings.Contains(err.Error(), "world-writable") {
		t.Fatalf("admin socket in a 0777 directory: %v", err)
	}
}
