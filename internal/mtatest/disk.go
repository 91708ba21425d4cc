package mtatest

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// MountTmpfs mounts a 1 MiB tmpfs at dir (created), unmounted at cleanup;
// it needs root.
func MountTmpfs(t testing.TB, dir string) {
	t.Helper()
	must(t, os.MkdirAll(dir, 0o750))
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m,mode=0750", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mtatest: mount a tmpfs (this test runs as root): %v %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Errorf("mtatest: umount %s: %v %s", dir, err, out)
		}
	})
}

// FillFileSystem writes dir/filler until the file system is full
// (ENOSPC) and returns its path.
func FillFileSystem(t testing.TB, dir string) string {
	t.Helper()
	filler, err := os.Create(filepath.Join(dir, "filler"))
	must(t, err)
	defer filler.Close()
	chunk := make([]byte, 4096)
	for {
		if _, err := filler.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			return filler.Name()
		}
	}
}
