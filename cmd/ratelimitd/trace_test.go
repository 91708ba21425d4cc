package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ratelimitd/ratelimitd/simulate"
)

// TestTraceFromMaillogCLI runs "trace from-maillog" on the syslog and Exim
// fixtures together: the trace loads in simulate, and the summary reports
// the messages, the unparsable lines and what was left out.
func TestTraceFromMaillogCLI(t *testing.T) {
	out := filepath.Join(t.TempDir(), "trace.jsonl")
	text, err := cli(t, "trace", "from-maillog", "--tz", "UTC", "--log-end", "2027-01-02T00:00:00Z", "-o", out,
		"../../testdata/maillog/postfix-classic.log", "../../testdata/maillog/postfix-rfc3339.log", "../../testdata/maillog/exim-mainlog")
	if err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	for _, want := range []string{"11 messages (16 recipients) from 6 senders", "4 lines unparsable", "left out: 2 not received over SMTP",
		"4 recipient outcomes (bounces, deferrals, unknown recipients)"} {
		if !strings.Contains(text, want) {
			t.Errorf("summary lacks %q:\n%s", want, text)
		}
	}
	tr, err := simulate.ReadFile(out, "")
	if err != nil {
		t.Fatal(err)
	}
	if n := tr.Len(); n != 16+11+4 {
		t.Fatalf("%d requests and outcomes, want 31 (16 RCPT, 11 END-OF-MESSAGE, 2 deferrals, 2 unknown recipients)", n)
	}
	out2, err := cli(t, "simulate", "--summary", out)
	if err != nil || !strings.Contains(out2, "alice") || !strings.Contains(out2, "www-data") {
		t.Fatalf("simulate: %v\n%s", err, out2)
	}
	data, _ := os.ReadFile(out)
	if !strings.HasPrefix(string(data), "# ratelimitd trace from-maillog") {
		t.Fatalf("no header comment: %.80s", data)
	}
	if _, err := cli(t, "trace", "from-maillog", "/nonexistent/maillog"); err == nil {
		t.Fatal("a missing file was not an error")
	}
}

// TestSuggestReadsTraceWhateverItsName: "trace from-maillog -o
// month.trace" then "suggest month.trace" and "simulate month.trace": the
// trace is read by its content (before: "cannot tell the format ... from
// its extension").
func TestSuggestReadsTraceWhateverItsName(t *testing.T) {
	out := filepath.Join(t.TempDir(), "month.trace")
	if text, err := cli(t, "trace", "from-maillog", "--tz", "UTC", "--log-end", "2027-01-02T00:00:00Z", "-o", out,
		"../../testdata/maillog/postfix-classic.log"); err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	if text, err := cli(t, "suggest", out); err != nil || strings.Contains(text, "extension") {
		t.Fatalf("suggest %s: %v\n%s", out, err, text)
	}
	if text, err := cli(t, "simulate", "--summary", out); err != nil || !strings.Contains(text, "alice") {
		t.Fatalf("simulate %s: %v\n%s", out, err, text)
	}
}

// TestTraceFromMaillogFindsTheLog: without a file argument, "trace
// from-maillog" reads the log "postconf -h maillog_file" names (here a
// stand-in postconf naming the classic fixture); a log that does not
// exist is named in the error, which says to set maillog_file or install
// rsyslog and says nothing about --config (before: "requires at least 1
// arg(s)", and "no such file or directory" with advice about --config).
func TestTraceFromMaillogFindsTheLog(t *testing.T) {
	bin := t.TempDir()
	logPath, err := filepath.Abs("../../testdata/maillog/postfix-classic.log")
	if err != nil {
		t.Fatal(err)
	}
	script := "#!/bin/sh\n[ \"$1 $2\" = \"-h maillog_file\" ] || exit 2\necho " + logPath + "\n"
	if err := os.WriteFile(filepath.Join(bin, "postconf"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	out := filepath.Join(t.TempDir(), "trace.jsonl")
	code, _, stderr := runCLI(t, "", "trace", "from-maillog", "--tz", "UTC", "--log-end", "2027-01-02T00:00:00Z", "-o", out)
	if code != 0 || !strings.Contains(stderr, "reading "+logPath) || !strings.Contains(stderr, "5 messages") {
		t.Fatalf("exit %d:\n%s", code, stderr)
	}
	code, _, stderr = runCLI(t, "", "trace", "from-maillog", "/nonexistent/mail.log")
	if code != 1 || !strings.Contains(stderr, "mail log /nonexistent/mail.log: no such file") ||
		!strings.Contains(stderr, "set maillog_file or install rsyslog") || strings.Contains(stderr, "--config") {
		t.Fatalf("exit %d:\n%s", code, stderr)
	}
}
