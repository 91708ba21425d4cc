package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestServeLogAndPidFiles checks --log-file and --pid-file: the log is
// appended to the file, a reopen after the file was moved away (logrotate)
// writes to a new file at the path, the pid file holds this process's ID
// and is removed at close.
func TestServeLogAndPidFiles(t *testing.T) {
	dir := t.TempDir()
	s := &serveFiles{logPath: filepath.Join(dir, "ratelimitd.log"), pidPath: filepath.Join(dir, "ratelimitd.pid")}
	w, err := s.writer(os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("first\n")); err != nil {
		t.Fatal(err)
	}
	if err := s.writePid(); err != nil {
		t.Fatal(err)
	}
	pid, err := os.ReadFile(s.pidPath)
	if err != nil || string(pid) != strconv.Itoa(os.Getpid())+"\n" {
		t.Fatalf("pid file %q (%v), want %d", pid, err, os.Getpid())
	}
	if err := os.Rename(s.logPath, s.logPath+".1"); err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("second\n")) // still the moved file, as logrotate expects until the SIGHUP
	if err := s.reopen(); err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("third\n"))
	s.close()
	for path, want := range map[string]string{s.logPath + ".1": "first\nsecond\n", s.logPath: "third\n"} {
		b, err := os.ReadFile(path)
		if err != nil || string(b) != want {
			t.Errorf("%s = %q (%v), want %q", path, b, err, want)
		}
	}
	if st, err := os.Stat(s.logPath); err != nil || st.Mode().Perm()&^0o640 != 0 {
		t.Errorf("log file mode %v (%v), want at most 0640", st.Mode().Perm(), err)
	}
	if _, err := os.Stat(s.pidPath); !os.IsNotExist(err) {
		t.Errorf("pid file left after close: %v", err)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".ratelimitd-pid-") {
			t.Errorf("temporary pid file left: %s", e.Name())
		}
	}
}

// TestServeWithoutFilesUsesStderr checks that without --log-file the log
// goes to standard error and no pid file is written.
func TestServeWithoutFilesUsesStderr(t *testing.T) {
	s := &serveFiles{}
	w, err := s.writer(os.Stderr)
	if err != nil || w != os.Stderr {
		t.Fatalf("writer = %v, %v; want os.Stderr", w, err)
	}
	if err := s.writePid(); err != nil {
		t.Fatal(err)
	}
	s.close()
}
