package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/spf13/cobra"
)

// serveFiles are serve's --log-file and --pid-file, for hosts without
// systemd, where start-stop-daemon runs the daemon in the background
// (docs/debian.md). Without them the log goes to standard error and no
// pid file is written.
type serveFiles struct {
	logPath, pidPath string

	mu  sync.Mutex
	log *os.File // the open log file (nil: standard error)
}

func (s *serveFiles) addFlags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&s.logPath, "log-file", "",
		"append the log to this file instead of standard error (mode 0640; SIGHUP reopens it, for logrotate)")
	cmd.Flags().StringVar(&s.pidPath, "pid-file", "",
		"write the process ID to this file once every listener is open; removed at exit")
}

// writer opens the log file and returns the daemon's log writer: the file
// (reopened by reopen), or stderr without --log-file.
func (s *serveFiles) writer(stderr io.Writer) (io.Writer, error) {
	if s.logPath == "" {
		return stderr, nil
	}
	if err := s.reopen(); err != nil {
		return nil, err
	}
	return s, nil
}

// Write writes one log record to the current log file.
func (s *serveFiles) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.log.Write(p)
}

// reopen opens the log file again (after logrotate moved it); the old
// file stays in use if that fails. A no-op without --log-file.
func (s *serveFiles) reopen() error {
	if s.logPath == "" {
		return nil
	}
	f, err := os.OpenFile(s.logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return fmt.Errorf("--log-file: %w", err)
	}
	s.mu.Lock()
	old := s.log
	s.log = f
	s.mu.Unlock()
	if old != nil {
		old.Close()
	}
	return nil
}

// writePid writes the process ID and a newline to the pid file (through a
// temporary file renamed into place, so a reader never sees it half
// written). A file left by an earlier run is replaced: start-stop-daemon
// --pidfile refuses to start a second daemon, and a second daemon could not
// open the admin socket anyway.
func (s *serveFiles) writePid() error {
	if s.pidPath == "" {
		return nil
	}
	tmp, err := os.CreateTemp(filepath.Dir(s.pidPath), ".ratelimitd-pid-*")
	if err != nil {
		return fmt.Errorf("--pid-file: %w", err)
	}
	_, err = fmt.Fprintf(tmp, "%d\n", os.Getpid())
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), s.pidPath)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("--pid-file: %w", err)
	}
	return nil
}

// close removes the pid file if it still holds this process's ID and
// closes the log file.
func (s *serveFiles) close() {
	if s.pidPath != "" {
		if b, err := os.ReadFile(s.pidPath); err == nil && string(bytes.TrimSpace(b)) == strconv.Itoa(os.Getpid()) {
			os.Remove(s.pidPath)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.log != nil {
		s.log.Close()
		s.log = nil
	}
}
