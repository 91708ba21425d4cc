//go:build integration

package daemon

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/admin"
	"github.com/ratelimitd/ratelimitd/internal/mtatest"
)

// localUserChecks is the header_checks table of docs/postfix.md, "Local
// submissions": the uid pickup records in its Received: header becomes the
// milter's X-Ratelimitd-Local-User header; copies the message brings are
// dropped.
const localUserChecks = `/^Received: by [^ ]+ \(Postfix, from userid ([0-9]+)\)/ PREPEND X-Ratelimitd-Local-User: $1
/^X-Ratelimitd-Local-User:/ IGNORE
`

// TestIntegrationLocalSubmissionsLimited: with the documented recipe (a
// cleanup service for pickup with the header_checks table and
// non_smtpd_milters) and a 5/hour freeze limit keyed by local_user, 20
// messages submitted with sendmail by a non-root user deliver 5 and freeze
// 15 — and so do 20 submitted with sendmail -f someone-else@…, because the
// key is the uid, not the sender.
func TestIntegrationLocalSubmissionsLimited(t *testing.T) {
	u, err := user.Lookup("nobody")
	if err != nil {
		t.Fatalf("a non-root user to submit as: %v", err)
	}
	for _, tool := range []string{"unshare", "setpriv"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s (util-linux) runs sendmail as another user against the private Postfix: %v", tool, err)
		}
	}
	maddr := loopback(t)
	sink := mtatest.StartSink(t)
	pf := mtatest.StartPostfix(t, mtatest.PostfixOptions{SinkAddr: sink.Addr()})
	installLocalRecipe(t, pf, "inet:"+maddr)

	for _, run := range []struct{ name, from string }{{"sendmail", ""}, {"sendmail -f", "someone-else@example.com"}} {
		t.Run(run.name, func(t *testing.T) {
			td := startTestDaemon(t, testConfig(t, t.TempDir(), loopback(t), fmt.Sprintf(`
[milter]
listen = %q

[[limit]]
name = "local"
key = ["local_user"]
limit = 5
period = "1h"
action = "freeze"
`, maddr)))
			before := sink.Count()
			for i := 1; i <= 20; i++ {
				localSendmail(t, pf, u, run.from, fmt.Sprintf("To: rcpt@example.net\nSubject: local %d\n\nhello %d\n", i, i))
			}
			var out string
			deadline := time.Now().Add(90 * time.Second)
			for {
				out = td.quarantineList(admin.ListQuery{})
				if strings.Count(out, " frozen ") >= 15 && sink.Count()-before >= 5 || time.Now().After(deadline) {
					break
				}
				time.Sleep(200 * time.Millisecond)
			}
			pf.WaitQueueEmpty(t, 30*time.Second)
			time.Sleep(500 * time.Millisecond)
			out = td.quarantineList(admin.ListQuery{})
			if got, frozen := sink.Count()-before, strings.Count(out, " frozen "); got != 5 || frozen != 15 {
				t.Fatalf("%d delivered, %d frozen; want 5 and 15\nquarantine list:\n%s\ndaemon log:\n%s", got, frozen, out, td.logs.String())
			}
			if out := td.quarantineList(admin.ListQuery{Key: u.Uid}); strings.Count(out, " frozen ") != 15 {
				t.Fatalf("quarantine list --key %s (the uid):\n%s", u.Uid, out)
			}
			if run.from != "" {
				for _, m := range sink.Messages()[before:] {
					if m.From != run.from {
						t.Fatalf("delivered message from %q, want the -f sender %q", m.From, run.from)
					}
				}
			}
			td.stop()
		})
	}
}

// installLocalRecipe applies docs/postfix.md's recipe to pf: pickup hands
// its mail to a cleanup service of its own with the header_checks table and
// the milter; then reloads Postfix.
func installLocalRecipe(t *testing.T, pf *mtatest.Postfix, milter string) {
	t.Helper()
	checks := filepath.Join(pf.ConfigDir(), "ratelimitd_local_user")
	if err := os.WriteFile(checks, []byte(localUserChecks), 0o644); err != nil {
		t.Fatal(err)
	}
	mcf := filepath.Join(pf.ConfigDir(), "master.cf")
	b, err := os.ReadFile(mcf)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	found := false
	for _, l := range strings.Split(string(b), "\n") {
		out = append(out, l)
		if f := strings.Fields(l); len(f) >= 8 && f[0] == "pickup" && f[1] == "unix" {
			out = append(out, "  -o cleanup_service_name=ratelimitd-cleanup")
			found = true
		}
	}
	if !found {
		t.Fatalf("no pickup service in %s", mcf)
	}
	out = append(out, "ratelimitd-cleanup unix n - n - 0 cleanup",
		"  -o header_checks=regexp:"+checks,
		"  -o non_smtpd_milters="+milter,
		"  -o milter_default_action=tempfail",
		"  -o milter_protocol=6", "")
	if err := os.WriteFile(mcf, []byte(strings.Join(out, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := pf.Command("postfix", "reload").CombinedOutput(); err != nil {
		t.Fatalf("postfix reload: %v\n%s", err, b)
	}
}

// localSendmail submits msg with /usr/sbin/sendmail -t as u (with -f from
// when set), in a mount namespace where /etc/postfix is pf's configuration
// directory: Postfix's set-gid postdrop takes no other directory from a
// user who is not root.
func localSendmail(t *testing.T, pf *mtatest.Postfix, u *user.User, from, msg string) {
	t.Helper()
	args := []string{"--mount", "--propagation", "private", "sh", "-c",
		`dir=$1 gid=$2; shift 2; mount --bind "$dir" /etc/postfix && exec setpriv --reuid="$0" --regid="$gid" --clear-groups /usr/sbin/sendmail "$@"`,
		u.Uid, pf.ConfigDir(), u.Gid, "-t"}
	if from != "" {
		args = append(args, "-f", from)
	}
	cmd := exec.Command("unshare", args...)
	cmd.Stdin = strings.NewReader(msg)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("sendmail as %s: %v\n%s", u.Username, err, b)
	}
}
