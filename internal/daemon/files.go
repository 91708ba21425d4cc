package daemon

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/ratelimitd/ratelimitd/config"
)

// Files are serve's --log-file and --pid-file, for hosts without systemd;
// without them the log goes to standard error. Safe for concurrent use.
type Files struct {
	LogPath, PidPath string

	mu    sync.Mutex
	log   *os.File // nil: standard error
	owner *runAs   // given the log file root makes (nil: none)
}

// Writer opens the log file and returns the daemon's log writer: the file
// (reopened by Reopen), or stderr without --log-file.
func (s *Files) Writer(stderr io.Writer) (io.Writer, error) {
	if s.LogPath == "" {
		return stderr, nil
	}
	if err := s.Reopen(); err != nil {
		return nil, err
	}
	return s, nil
}

// Write writes one log record to the current log file.
func (s *Files) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.log.Write(p)
}

// Reopen opens the log file again (after logrotate); the old one stays
// in use if that fails. A no-op without a log file.
func (s *Files) Reopen() error {
	if s.LogPath == "" {
		return nil
	}
	f, err := os.OpenFile(s.LogPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return fmt.Errorf("--log-file: %w", err)
	}
	if s.owner != nil && os.Geteuid() == 0 {
		// The dropped daemon reopens it after logrotate.
		if err := f.Chown(s.owner.uid, s.owner.gid); err != nil {
			f.Close()
			return fmt.Errorf("--log-file: %w", err)
		}
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

// LogFatal writes the error that stops the daemon to the log file,
// opening it if need be: start-stop-daemon --background discards standard
// error. A no-op without a log file.
func (s *Files) LogFatal(format string, msg string, err error) {
	if s.LogPath == "" {
		return
	}
	s.mu.Lock()
	open := s.log != nil
	s.mu.Unlock()
	if !open && s.Reopen() != nil {
		return
	}
	newLogger(config.Server{LogFormat: format}, s).Error(msg, "err", err)
}

// WritePid writes the process ID to the pid file (a renamed temporary).
func (s *Files) WritePid() error {
	if s.PidPath == "" {
		return nil
	}
	tmp, err := os.CreateTemp(filepath.Dir(s.PidPath), ".ratelimitd-pid-*")
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
		err = os.Rename(tmp.Name(), s.PidPath)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("--pid-file: %w", err)
	}
	return nil
}

// Close removes the pid file if it still holds this process's ID and
// closes the log file.
func (s *Files) Close() {
	if s.PidPath != "" {
		if b, err := os.ReadFile(s.PidPath); err == nil && string(bytes.TrimSpace(b)) == strconv.Itoa(os.Getpid()) {
			os.Remove(s.PidPath)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.log != nil {
		s.log.Close()
		s.log = nil
	}
}

// Serve runs the daemon of f: opens the log file, starts the daemon,
// writes the pid file, reopens the log and reloads on SIGHUP, shuts down
// (10 s to finish) on SIGTERM or SIGINT. The error that ends it is also
// logged to the log file.
func Serve(f *config.File, configPath string, files *Files, opts Options, stderr io.Writer) (err error) {
	defer files.Close()
	defer func() {
		if err != nil {
			files.LogFatal(f.Server.LogFormat, "ratelimitd stopped on an error", err)
		}
	}()
	if files.owner, err = lookupRunAs(f.Server); err != nil {
		return err
	}
	logw, err := files.Writer(stderr)
	if err != nil {
		return err
	}
	// Caught before Start: a SIGTERM while starting waits here and shuts
	// the daemon down cleanly, the write-behind state flushed.
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sig)
	d, err := Start(f, configPath, logw, opts)
	if err != nil {
		return err
	}
	if err := files.WritePid(); err != nil {
		d.Shutdown(context.Background())
		return err
	}
	for s := range sig {
		if s == syscall.SIGHUP {
			if err := files.Reopen(); err != nil {
				d.log.Error("reopening the log file", "err", err)
			}
			d.Reload()
			continue
		}
		d.log.Info("shutting down", "signal", s.String())
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := d.Shutdown(ctx)
		cancel()
		return err
	}
	return nil
}
