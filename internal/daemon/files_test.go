package daemon

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
	s := &Files{LogPath: filepath.Join(dir, "ratelimitd.log"), PidPath: filepath.Join(dir, "ratelimitd.pid")}
	w, err := s.Writer(os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("first\n")); err != nil {
		t.Fatal(err)
	}
	if err := s.WritePid(); err != nil {
		t.Fatal(err)
	}
	pid, err := os.ReadFile(s.PidPath)
	if err != nil || string(pid) != strconv.Itoa(os.Getpid())+"\n" {
		t.Fatalf("pid file %q (%v), want %d", pid, err, os.Getpid())
	}
	if err := os.Rename(s.LogPath, s.LogPath+".1"); err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("second\n")) // still the moved file, as logrotate expects until the SIGHUP
	if err := s.Reopen(); err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("third\n"))
	s.Close()
	for path, want := range map[string]string{s.LogPath + ".1": "first\nsecond\n", s.LogPath: "third\n"} {
		b, err := os.ReadFile(path)
		if err != nil || string(b) != want {
			t.Errorf("%s = %q (%v), want %q", path, b, err, want)
		}
	}
	if st, err := os.Stat(s.LogPath); err != nil || st.Mode().Perm()&^0o640 != 0 {
		t.Errorf("log file mode %v (%v), want at most 0640", st.Mode().Perm(), err)
	}
	if _, err := os.Stat(s.PidPath); !os.IsNotExist(err) {
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
	s := &Files{}
	w, err := s.Writer(os.Stderr)
	if err != nil || w != os.Stderr {
		t.Fatalf("writer = %v, %v; want os.Stderr", w, err)
	}
	if err := s.WritePid(); err != nil {
		t.Fatal(err)
	}
	s.Close()
}
