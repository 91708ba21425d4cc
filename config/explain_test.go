package config_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/configs"
)

func TestKeyAsStringOrList(t *testing.T) {
	for _, tc := range []struct {
		key  string
		want []string
	}{
		{`"sasl_username"`, []string{"sasl_username"}},
		{`["sasl_username"]`, []string{"sasl_username"}},
		{`["sasl_username", "client_address"]`, []string{"sasl_username", "client_address"}},
	} {
		f, err := config.Parse([]byte("[[limit]]\nname = \"h\"\nkey = "+tc.key+"\nlimit = 5\nperiod = \"1h\"\n"), "t.toml")
		if err != nil {
			t.Fatalf("key = %s: %v", tc.key, err)
		}
		if got := f.Limits[0].Key; strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("key = %s decoded as %q", tc.key, got)
		}
	}
	_, err := config.Parse([]byte("[[limit]]\nname = \"h\"\nkey = 5\n"), "t.toml")
	if err == nil || !strings.Contains(err.Error(), "t.toml:3:7: key must be a string or a list of strings") {
		t.Errorf("key = 5: %v", err)
	}
}

// TestParseErrorPointsAtLine: an array left open on line 6 is found at
// the start of line 7; the message names 7:1 and shows both lines (the
// library's own column was line 6's length, 24).
func TestParseErrorPointsAtLine(t *testing.T) {
	_, err := config.Parse([]byte("[server]\nlog_level = \"info\"\n\n[[limit]]\nname = \"x\"\nkey = [\"sasl_username\"\nlimit = 5\n"), "c.toml")
	if err == nil {
		t.Fatal("accepted an unterminated array")
	}
	msg := err.Error()
	for _, want := range []string{"c.toml:7:1: expected a comma", `6 | key = ["sasl_username"`, "7 | limit = 5", "\n       | ^"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
	_, err = config.Parse([]byte("\n[[limit]]\nname = \"x\"\nlimit = \"5\"\n"), "d.toml")
	if err == nil || !strings.Contains(err.Error(), "d.toml:4:1: incompatible types") {
		t.Errorf("type mismatch: %v", err)
	}
}

func TestNotifySection(t *testing.T) {
	f, err := config.Parse([]byte(`
[notify]
events = ["limit_refused"]
[notify.webhook]
url = "https://hooks.example.org/x"
attempts = 3
backoff = "2s"
[notify.mail]
to = ["postmaster@example.org"]
from = "ratelimitd@example.org"

[[limit]]
name = "hourly"
key = "sasl_username"
limit = 200
period = "1h"
`), "n.toml")
	if err != nil {
		t.Fatal(err)
	}
	w := f.Notify.Webhook
	if w.URL != "https://hooks.example.org/x" || w.Attempts != 3 || time.Duration(w.Backoff) != 2*time.Second ||
		time.Duration(w.Timeout) != 10*time.Second || f.Notify.Mail.Relay != "127.0.0.1:25" {
		t.Errorf("decoded %+v / %+v", w, f.Notify.Mail)
	}
	_, err = config.Parse([]byte("[notify.mail]\nto = [\"pm@example.org\"]\nsubject = \"{{.Nope}}\"\n"), "n.toml")
	for _, want := range []string{"notify.mail.from: is required", "notify.mail.subject:"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
}

func TestDefaultStateDirForRoot(t *testing.T) {
	f, err := config.Load("")
	if err != nil {
		t.Fatal(err)
	}
	want := config.UserStateDir
	if os.Geteuid() == 0 {
		want = config.RootStateDir
	}
	if f.Server.StateDir != want || f.Server.AdminSocket != filepath.Join(want, "admin.sock") {
		t.Errorf("embedded default: state_dir %q, admin socket %q; want %q (euid %d)", f.Server.StateDir, f.Server.AdminSocket, want, os.Geteuid())
	}
}

var example = regexp.MustCompile(`^#(\[|[a-z_]+ = )`)

// TestExampleConfigShowsEverySection: the shipped configuration has every
// section, and with each commented example switched on (except [store],
// which another backend owns) it is still valid.
func TestExampleConfigShowsEverySection(t *testing.T) {
	text := string(configs.Default)
	for _, sec := range []string{"[server]", "[policy]", "#[store]", "[quarantine]", "[milter]", "[notify]", "[notify.webhook]", "[notify.mail]", "[[limit]]"} {
		if !strings.Contains(text, "\n"+sec+"\n") {
			t.Errorf("configs/ratelimitd.toml lacks %s", sec)
		}
	}
	// Switch every example on, and off the active line it replaces.
	lines := strings.Split(text, "\n")
	section := func(l string) (string, bool) {
		l = strings.TrimPrefix(l, "#")
		return l, strings.HasPrefix(l, "[")
	}
	examples := map[string]bool{}
	sec, n := "", 0
	for _, l := range lines {
		if s, ok := section(l); ok {
			sec = s
		} else if example.MatchString(l) && sec != "[store]" {
			examples[sec+" "+strings.SplitN(l[1:], " ", 2)[0]] = true
		}
	}
	out := make([]string, len(lines))
	sec = ""
	// An example may offer alternatives for one key (a TCP or a unix
	// milter listener): the first is switched on.
	switchedOn := map[string]bool{}
	for i, l := range lines {
		out[i] = l
		if s, ok := section(l); ok {
			sec = s
			if sec != "[store]" {
				out[i] = s
			}
			continue
		}
		switch {
		case example.MatchString(l) && sec != "[store]" && !switchedOn[sec+" "+strings.SplitN(l[1:], " ", 2)[0]]:
			switchedOn[sec+" "+strings.SplitN(l[1:], " ", 2)[0]] = !strings.HasPrefix(sec, "[[")
			out[i], n = l[1:], n+1
		case !strings.HasPrefix(l, "#") && examples[sec+" "+strings.SplitN(l, " ", 2)[0]]:
			out[i] = "#" + l
		}
	}
	if n < 20 {
		t.Fatalf("only %d commented examples found", n)
	}
	f, err := config.Parse([]byte(strings.Join(out, "\n")), "examples")
	if err != nil {
		t.Fatalf("the commented examples do not validate:\n%v", err)
	}
	if f.Notify.Webhook.URL == "" || !f.Notify.Mail.NotifySender || f.Milter.Listen == "" || f.Limits[0].Overrides["newsletter"] != 5000 {
		t.Errorf("examples not applied: %+v %+v", f.Notify, f.Milter)
	}
}
