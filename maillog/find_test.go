package maillog

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakePostconf writes an executable postconf that prints out for
// "postconf -h maillog_file" and returns its path.
func fakePostconf(t *testing.T, out string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "postconf")
	script := "#!/bin/sh\n[ \"$1 $2\" = \"-h maillog_file\" ] || exit 2\nprintf '%s\\n' '" + out + "'\n"
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestFindLogWherePostfixWrites: the log postconf's maillog_file names,
// else /var/log/mail.log when it exists, else an error that names what
// was tried and says to set maillog_file or install rsyslog.
func TestFindLogWherePostfixWrites(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	syslog := filepath.Join(dir, "mail.log")
	if got, err := findLog(ctx, fakePostconf(t, "/var/log/postfix.log"), syslog); err != nil || got != "/var/log/postfix.log" {
		t.Errorf("maillog_file set: %q %v", got, err)
	}
	_, err := findLog(ctx, fakePostconf(t, ""), syslog)
	if !errors.Is(err, ErrNoLog) {
		t.Fatalf("nothing to read: %v", err)
	}
	for _, want := range []string{"postconf -h maillog_file is empty", syslog, "set maillog_file or install rsyslog"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if _, err := findLog(ctx, filepath.Join(dir, "no-postconf"), syslog); err == nil || !strings.Contains(err.Error(), "postconf is not installed") {
		t.Errorf("without postconf: %v", err)
	}
	os.WriteFile(syslog, []byte("Nov  1 00:00:00 mx postfix/master[1]: daemon started\n"), 0o644)
	for _, pc := range []string{fakePostconf(t, ""), filepath.Join(dir, "no-postconf")} {
		if got, err := findLog(ctx, pc, syslog); err != nil || got != syslog {
			t.Errorf("syslog's file: %q %v", got, err)
		}
	}
}

// TestMissingLogErrorNamesTheLog: a log that does not exist is named in
// the error with where Postfix logs; the error is ErrNoLog, not
// os.ErrNotExist (for which the command line advises about --config).
func TestMissingLogErrorNamesTheLog(t *testing.T) {
	err := NewReader(Options{}).ReadFile("/nonexistent/mail.log")
	if err == nil || !strings.Contains(err.Error(), "mail log /nonexistent/mail.log: no such file") ||
		!strings.Contains(err.Error(), "set maillog_file or install rsyslog") {
		t.Fatalf("error %v", err)
	}
	if !errors.Is(err, ErrNoLog) || errors.Is(err, os.ErrNotExist) {
		t.Fatalf("error %v: want ErrNoLog and not os.ErrNotExist", err)
	}
}
