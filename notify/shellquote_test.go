package notify

import (
	"bytes"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/emersion/go-message"
)

// hostileKeys are rate keys an attacker can choose (a valid address may
// hold quotes, $, backquotes and semicolons; a milter or Exim client can
// put CR and LF into an attribute).
var hostileKeys = []string{
	"alice@example.org",
	"x'&&id&&'@example.org",
	"x'$(id)'@example.org",
	"a`id`b;rm -rf /@example.org",
	"cr\rlf\nin|the middle",
	"back\\slash \"dq\" $HOME\t\x1b[2J\u202e@x",
	"",
}

// TestShellQuoteRoundTrip runs each suggested argument through a real sh:
// it must come back as one argument equal to the key.
func TestShellQuoteRoundTrip(t *testing.T) {
	for _, key := range hostileKeys {
		q := ShellQuote(key)
		if strings.ContainsAny(q, "\r\n\x1b") {
			t.Fatalf("ShellQuote(%q) = %q has a control character", key, q)
		}
		out, err := exec.Command("sh", "-c", `set -- `+q+`; printf '%s' "$#:$1"`).Output()
		if err != nil {
			t.Fatalf("sh with %q: %v", q, err)
		}
		if want := "1:" + key; string(out) != want {
			t.Fatalf("sh parsed %q as %q, want %q", q, out, want)
		}
	}
}

// TestNotificationMailCarriesNoControlCharacters builds the default
// postmaster mail for hostile keys: no CR, LF or ESC from the key reaches
// the message beyond the template's own line breaks, and the Review line
// is a command sh parses back to the key.
func TestNotificationMailCarriesNoControlCharacters(t *testing.T) {
	m := Mail{Subject: DefaultSubject, Body: DefaultBody, SenderSubject: DefaultSenderSubject, SenderBody: DefaultSenderBody}
	ts, errs := m.templates()
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	subj, body := ts["subject"], ts["body"]
	for _, key := range hostileKeys[1:6] {
		msg, err := buildMail("ratelimitd@example.org", []string{"postmaster@example.org"}, subj, body,
			Event{Kind: LimitRefused, Time: time.Unix(1700000000, 0), Key: key, Limit: "hourly", Period: time.Hour, Max: 3, Rate: 4, Sender: key})
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(msg), "\r\n") {
			if strings.ContainsAny(line, "\r\n\x1b\u202e") {
				t.Fatalf("key %q: line %q carries a control character", key, line)
			}
		}
		ent, err := message.Read(bytes.NewReader(msg))
		if err != nil {
			t.Fatal(err)
		}
		raw, err := io.ReadAll(ent.Body)
		if err != nil {
			t.Fatal(err)
		}
		text := strings.ReplaceAll(string(raw), "\r\n", "\n")
		_, afterLF, hasLF := strings.Cut(key, "\n")
		if strings.ContainsAny(text, "\r\x1b\u202e") || hasLF && strings.Contains(text, "\n"+afterLF) {
			t.Fatalf("key %q: decoded body carries control characters or extra lines:\n%q", key, text)
		}
		var cmd string
		for _, line := range strings.Split(text, "\n") {
			if rest, ok := strings.CutPrefix(line, "Review:  ratelimitd rate show "); ok {
				cmd = rest
			}
		}
		if cmd == "" {
			t.Fatalf("key %q: no Review line in\n%s", key, msg)
		}
		out, err := exec.Command("sh", "-c", `set -- `+cmd+`; printf '%s' "$#:$1"`).Output()
		if err != nil || string(out) != "1:"+key {
			t.Fatalf("key %q: Review argument %q parses as %q (%v)", key, cmd, out, err)
		}
	}
}
