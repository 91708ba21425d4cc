//go:build integration

package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// eximNotSMTPACL returns the acl_ratelimitd_not_smtp ACL as docs/exim.md
// prints it ("Local submissions").
func eximNotSMTPACL(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../docs/exim.md")
	if err != nil {
		t.Fatal(err)
	}
	var acl []string
	in := false
	for _, l := range strings.Split(string(b), "\n") {
		if strings.TrimSpace(l) == "acl_ratelimitd_not_smtp:" {
			in = true
		}
		if in {
			acl = append(acl, strings.TrimPrefix(l, "    "))
			if strings.TrimSpace(l) == "accept" {
				break
			}
		}
	}
	if len(acl) < 5 {
		t.Fatal("docs/exim.md has no acl_ratelimitd_not_smtp ACL")
	}
	return strings.Join(acl, "\n") + "\n"
}

// TestIntegrationEximLocalSubmissionsLimited: a real Exim with
// docs/exim.md's acl_not_smtp recipe and a 5/hour hold limit keyed by
// local_user ($caller_uid): 20 messages submitted with exim -t are 5
// queued and 15 frozen, and 20 more with -f someone-else@… the same,
// because the key is the caller's uid.
func TestIntegrationEximLocalSubmissionsLimited(t *testing.T) {
	bin := eximBinary(t)
	acl, err := filepath.Abs("../../configs/exim-acl.conf")
	if err != nil {
		t.Fatal(err)
	}
	for _, run := range []struct{ name, from string }{{"exim -t", ""}, {"exim -t -f", "someone-else@example.com"}} {
		t.Run(run.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, d := range []string{"spool", "log"} {
				os.MkdirAll(filepath.Join(dir, d), 0o755)
			}
			port := freePort(t)
			conf := filepath.Join(dir, "exim.conf")
			if err := os.WriteFile(conf, []byte(fmt.Sprintf(`exim_user = root
exim_group = root
never_users =
spool_directory = %s/spool
log_file_path = %s/log/%%slog
primary_hostname = mx.example.net
RATELIMITD_SOCKET = inet:127.0.0.1:%d
acl_not_smtp = acl_ratelimitd_not_smtp
begin acl
.include %s
%sbegin routers
begin transports
`, dir, dir, port, acl, eximNotSMTPACL(t))), 0o644); err != nil {
				t.Fatal(err)
			}
			cfgPath := writeConfig(t, dir, fmt.Sprintf("127.0.0.1:%d", port), `
[[limit]]
name = "local"
key = ["local_user"]
limit = 5
period = "1h"
action = "hold"
`)
			startTestDaemon(t, cfgPath)
			for i := 1; i <= 20; i++ {
				args := []string{"-C", conf, "-odq", "-t"}
				if run.from != "" {
					args = append(args, "-f", run.from)
				}
				cmd := exec.Command(bin, args...)
				cmd.Stdin = strings.NewReader(fmt.Sprintf("To: rcpt@example.net\nSubject: local %d\n\nhello\n", i))
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("exim -t message %d: %v\n%s", i, err, out)
				}
			}
			out, err := exec.Command(bin, "-C", conf, "-bp").CombinedOutput()
			if err != nil {
				t.Fatalf("exim -bp: %v\n%s", err, out)
			}
			queued := strings.Count(string(out), "rcpt@example.net")
			frozen := strings.Count(string(out), "*** frozen ***")
			if queued != 20 || frozen != 15 {
				t.Fatalf("%d queued, %d of them frozen; want 20 and 15\n%s", queued, frozen, out)
			}
			if out, _ := cli(t, "--config", cfgPath, "rate", "show", fmt.Sprint(os.Getuid())); !strings.Contains(out, "local") {
				t.Fatalf("rate show %d (the caller's uid):\n%s", os.Getuid(), out)
			}
		})
	}
}
