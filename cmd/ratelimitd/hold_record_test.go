//go:build integration

package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestIntegrationHoldNeverUntracked: with the state directory's file
// system full (a 1 MiB tmpfs; the test needs root), a hold the quarantine
// cannot record is answered 450 4.7.1, never HOLD: a real Postfix ends
// with no message in its hold queue that the quarantine has no entry for.
func TestIntegrationHoldNeverUntracked(t *testing.T) {
	dir := t.TempDir()
	stateDir := filepath.Join(dir, "state")
	mountTmpfs(t, stateDir)
	cfgPath, pf, sink := postfixOneHold(t, dir, "")
	td := startTestDaemon(t, cfgPath)
	if err := sendNumbered(t, pf.Addr(), "alice", 1); err != nil {
		t.Fatal(err)
	}
	sink.WaitCount(t, 1, 30*time.Second)

	fillFileSystem(t, stateDir)
	deferred, accepted := 0, 0
	for i := 2; deferred < 3 && i < 600; i++ {
		err := sendNumbered(t, pf.Addr(), "alice", i)
		switch {
		case err == nil:
			accepted++
		case strings.Contains(err.Error(), "450") && strings.Contains(err.Error(), "cannot be held"):
			deferred++
		default:
			t.Fatalf("message %d: %v", i, err)
		}
	}
	if deferred == 0 {
		t.Fatalf("%d messages held with the disk full, none deferred", accepted)
	}
	if !strings.Contains(td.logs.String(), "deferring it instead of holding it") {
		t.Errorf("the deferral is not logged:\n%s", td.logs.String())
	}
	_, held := pf.WaitQueue(t, 30*time.Second, func(all, held []string) bool { return len(held) == accepted })
	out, err := cli(t, "--config", cfgPath, "quarantine", "list", "--json")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out, `"state": "held"`); n != len(held) || len(held) != accepted {
		t.Fatalf("%d messages in Postfix's hold queue, %d accepted, %d held entries:\n%s", len(held), accepted, n, out)
	}
	t.Logf("disk full: %d holds recorded, then %d deferred", accepted, deferred)
}

// mountTmpfs mounts a 1 MiB tmpfs at dir (created), unmounted at cleanup;
// the test needs root.
func mountTmpfs(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m,mode=0750", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount a tmpfs (this test runs as root): %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
}

// fillFileSystem writes dir/filler until the file system is full and
// returns its path.
func fillFileSystem(t *testing.T, dir string) string {
	t.Helper()
	filler, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
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
