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
	for _, want := range []string{"11 messages (16 recipients) from 6 senders", "4 lines unparsable", "left out: 2 not received over SMTP"} {
		if !strings.Contains(text, want) {
			t.Errorf("summary lacks %q:\n%s", want, text)
		}
	}
	tr, err := simulate.ReadFile(out, "")
	if err != nil {
		t.Fatal(err)
	}
	if n := tr.Len(); n != 16+11 {
		t.Fatalf("%d requests, want 27 (16 RCPT, 11 END-OF-MESSAGE)", n)
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
