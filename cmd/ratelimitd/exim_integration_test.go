//go:build integration

package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ratelimitd/ratelimitd/internal/mtatest"
)

// eximBinary is the Exim that scripts/deps.sh unpacks (Debian's exim4
// conflicts with postfix, so it is not installed).
func eximBinary(t *testing.T) string { return mtatest.EximBinary(t) }

// runExim plays an SMTP session through Exim's ACLs with -bh (no
// delivery) and returns Exim's replies.
func runExim(t *testing.T, bin, conf, socket, session string) string {
	t.Helper()
	cmd := exec.Command(bin, "-C", conf, "-DRATELIMITD_SOCKET="+socket, "-bh", "192.0.2.1")
	cmd.Stdin = strings.NewReader(session)
	out, _ := cmd.CombinedOutput() // -bh exits non-zero after refused commands
	var replies []string
	for _, l := range strings.Split(string(out), "\n") {
		if len(l) > 3 && l[0] >= '2' && l[0] <= '5' && (l[3] == ' ' || l[3] == '-') {
			replies = append(replies, strings.TrimRight(l, "\r"))
		}
	}
	return strings.Join(replies, "\n")
}

// TestIntegrationEximReadsocket runs a real Exim whose ACLs include the
// shipped configs/exim-acl.conf: the third message of a 2/hour sender gets
// the daemon's "450 4.7.1 ..." at RCPT, and with the daemon gone mail flows
// (fail open).
func TestIntegrationEximReadsocket(t *testing.T) {
	bin := eximBinary(t)
	dir := t.TempDir()
	conf := eximConf(t, dir, true)

	port := freePort(t)
	cfgPath := writeConfig(t, dir, fmt.Sprintf("127.0.0.1:%d", port), `
[[limit]]
name = "sender"
key = ["sender"]
limit = 2
period = "1h"
`)
	td := startTestDaemon(t, cfgPath)
	var session strings.Builder
	session.WriteString("EHLO client.example.com\r\n")
	for i := 1; i <= 3; i++ {
		fmt.Fprintf(&session, "MAIL FROM:<bob@example.org>\r\nRCPT TO:<x@example.net>\r\nDATA\r\nSubject: %d\r\n\r\nhello\r\n.\r\n", i)
	}
	session.WriteString("QUIT\r\n")
	socket := fmt.Sprintf("inet:127.0.0.1:%d", port)
	out := runExim(t, bin, conf, socket, session.String())
	if n := strings.Count(out, "250 OK id="); n != 2 {
		t.Fatalf("%d messages accepted, want 2:\n%s", n, out)
	}
	if !strings.Contains(out, "450 4.7.1 rate limit exceeded: 3.0 per 1h (limit 2)") {
		t.Fatalf("third message not deferred with the daemon's reply:\n%s", out)
	}
	if !strings.Contains(td.logs.String(), "req.instance=") || !strings.Contains(td.logs.String(), "action=defer") {
		t.Fatalf("daemon log:\n%s", td.logs.String())
	}
	// Without the daemon, Exim's readsocket fails and mail flows.
	td.stop()
	out = runExim(t, bin, conf, socket, session.String())
	if n := strings.Count(out, "250 OK id="); n != 3 {
		t.Fatalf("daemon down: %d accepted, want 3 (fail open):\n%s", n, out)
	}
}

// TestIntegrationEximLayouts runs a real Exim with the shipped ACLs in both
// layouts (the RCPT ACL only; RCPT and DATA ACLs): messages of three
// recipients from a 2/hour sender are counted once each, the third is
// deferred at every one of its RCPTs with the same text, and the DATA ACL
// does not count a message again.
func TestIntegrationEximLayouts(t *testing.T) {
	bin := eximBinary(t)
	for _, withData := range []bool{false, true} {
		name := map[bool]string{false: "rcpt-acl-only", true: "rcpt-and-data-acl"}[withData]
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			conf := eximConf(t, dir, withData)
			port := freePort(t)
			cfgPath := writeConfig(t, dir, fmt.Sprintf("127.0.0.1:%d", port), `
[[limit]]
name = "sender"
key = ["sender"]
limit = 2
period = "1h"
mode = "strict"
`)
			td := startTestDaemon(t, cfgPath)
			var session strings.Builder
			session.WriteString("EHLO client.example.com\r\n")
			for i := 1; i <= 3; i++ {
				fmt.Fprintf(&session, "MAIL FROM:<bob@example.org>\r\nRCPT TO:<x@example.net>\r\nRCPT TO:<y@example.net>\r\nRCPT TO:<z@example.net>\r\nDATA\r\nSubject: %d\r\n\r\nhello\r\n.\r\nRSET\r\n", i)
			}
			session.WriteString("QUIT\r\n")
			out := runExim(t, bin, conf, fmt.Sprintf("inet:127.0.0.1:%d", port), session.String())
			if n := strings.Count(out, "250 OK id="); n != 2 {
				t.Fatalf("%d messages accepted, want 2:\n%s", n, out)
			}
			deferrals := 0
			var texts []string
			for _, l := range strings.Split(out, "\n") {
				if strings.HasPrefix(l, "450 4.7.1 ") {
					deferrals++
					texts = append(texts, l)
				}
			}
			if deferrals != 3 || texts[0] != texts[1] || texts[1] != texts[2] {
				t.Fatalf("third message: %d deferrals, want 3 with one text:\n%s", deferrals, out)
			}
			if r := rateFromCLI(t, cfgPath, "bob@example.org", "sender"); r < 2.9 || r > 3.1 {
				t.Fatalf("strict rate %.2f, want 3 (three messages, each once):\n%s", r, td.logs.String())
			}
		})
	}
}

// eximConf writes an Exim configuration whose RCPT ACL (and, with
// withData, DATA ACL) include the shipped configs/exim-acl.conf.
func eximConf(t *testing.T, dir string, withData bool) string {
	t.Helper()
	acl, err := filepath.Abs("../../configs/exim-acl.conf")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"spool", "log"} {
		os.MkdirAll(filepath.Join(dir, d), 0o755)
	}
	dataACL, dataHook := "", ""
	if withData {
		dataHook = "acl_smtp_data = acl_check_data\n"
		dataACL = "acl_check_data:\n  require acl = acl_ratelimitd_data\n  accept\n"
	}
	conf := filepath.Join(dir, "exim.conf")
	err = os.WriteFile(conf, []byte(fmt.Sprintf(`exim_user = root
exim_group = root
never_users =
spool_directory = %s/spool
log_file_path = %s/log/%%slog
primary_hostname = mx.example.net
acl_smtp_rcpt = acl_check_rcpt
%sbegin acl
.include %s
acl_check_rcpt:
  require acl = acl_ratelimitd_rcpt
  accept
%sbegin routers
begin transports
`, dir, dir, dataHook, acl, dataACL)), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	return conf
}
