//go:build integration

package daemon

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/emersion/go-smtp"

	"github.com/ratelimitd/ratelimitd/internal/mtatest"
)

// eximOutcomeConf writes an Exim configuration with the shipped ACLs
// (configs/exim-acl.conf) asking the daemon at policyAddr, delivering
// everything to the sink, and the transport event_action of docs/exim.md
// sending delivery failures to eximAddr.
func eximOutcomeConf(t *testing.T, dir, policyAddr, eximAddr string, sinkPort int) string {
	t.Helper()
	acl, err := filepath.Abs("../../configs/exim-acl.conf")
	if err != nil {
		t.Fatal(err)
	}
	// The transport runs as Debian-exim (never as root): it must reach
	// the spool.
	for _, d := range []string{filepath.Dir(dir), dir} {
		os.Chmod(d, 0o755)
	}
	for _, d := range []string{"spool", "log"} {
		os.MkdirAll(filepath.Join(dir, d), 0o777)
		os.Chmod(filepath.Join(dir, d), 0o777)
	}
	conf := filepath.Join(dir, "exim.conf")
	text := fmt.Sprintf(`exim_user = root
exim_group = root
never_users =
spool_directory = %[1]s/spool
log_file_path = %[1]s/log/%%slog
primary_hostname = mx.example.org
RATELIMITD_SOCKET = inet:%[2]s
RATELIMITD_OUTCOME = inet:%[3]s
acl_smtp_rcpt = acl_check_rcpt
acl_smtp_data = acl_check_data
begin acl
.include %[4]s
acl_check_rcpt:
  require acl = acl_ratelimitd_rcpt
  accept
acl_check_data:
  require acl = acl_ratelimitd_data
  accept
begin routers
sink:
  driver = accept
  transport = remote_smtp
begin transports
remote_smtp:
  driver = smtp
  user = Debian-exim
  hosts = 127.0.0.1
  hosts_override
  allow_localhost
  port = %[5]d
  event_action = ${if match{$event_name}{\N^msg:(fail:delivery|fail:internal|defer|rcpt:defer)$\N}\
    {${readsocket{RATELIMITD_OUTCOME}\
      {request=exim_outcome\nevent=$event_name\nqueue_id=$message_exim_id\nrecipient=$local_part@$domain\ndata=${sg{$event_data}{\N[\r\n]\N}{ }}\n\n}\
      {5s}{}{}}}{}}
begin retry
* * F,1h,15m
`, dir, policyAddr, eximAddr, acl, sinkPort)
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return conf
}

// TestIntegrationUnknownRecipientsFreezeThroughExim: a real Exim with
// the documented event_action, delivering to a sink. carol's message
// deferred (451) and removed with exim -Mrm is one deferral and no
// bounce; bob's 100 messages of which 2 bounce are never refused; the sink
// answering 550 5.1.1, alice@example.org's 11th message to unknown
// recipients is frozen (and the rest), after 10 bounces that Exim
// reported at delivery.
func TestIntegrationUnknownRecipientsFreezeThroughExim(t *testing.T) {
	bin := mtatest.EximBinary(t)
	dir := t.TempDir()
	policyAddr, eximAddr := loopback(t), loopback(t)
	sink := mtatest.StartSink(t)
	unknown := &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 1, 1}, Message: "no such user here"}
	path := testConfig(t, dir, policyAddr, fmt.Sprintf(`
[outcome]
exim_listen = %q

[[limit]]
name = "hourly"
key = "sender"
limit = 200
period = "1h"

[[limit]]
name = "unknown"
key = "sender"
per = "unknown_rcpt"
limit = 10
period = "1h"
action = "freeze"

[[limit]]
name = "bounces"
key = "sender"
per = "bounce"
limit = 1000
period = "1h"

[[limit]]
name = "deferrals"
key = "sender"
per = "deferral"
limit = 1000
period = "1h"
`, eximAddr))
	td := startTestDaemon(t, path)
	conf := eximOutcomeConf(t, dir, policyAddr, eximAddr, sink.Port())
	mainlog := filepath.Join(dir, "log", "mainlog")
	// send submits a message over SMTP and returns Exim's message ID.
	send := func(from, rcpt string) string {
		t.Helper()
		cmd := exec.Command(bin, "-C", conf, "-odi", "-bs")
		cmd.Stdin = strings.NewReader("EHLO pc.example.org\r\nMAIL FROM:<" + from + ">\r\nRCPT TO:<" + rcpt +
			">\r\nDATA\r\nSubject: hello\r\n\r\nHello.\r\n.\r\nQUIT\r\n")
		out, err := cmd.CombinedOutput()
		_, id, ok := strings.Cut(string(out), "250 OK id=")
		if err != nil || !ok {
			t.Fatalf("%s to %s: %v\n%s", from, rcpt, err, out)
		}
		return strings.TrimSpace(strings.SplitN(id, "\n", 2)[0])
	}
	rate := func(limit, key string) float64 {
		t.Helper()
		s, err := td.engine.Store().Get(context.Background(), limit, key)
		if err != nil {
			t.Fatal(err)
		}
		return s.Rate
	}
	waitFor := func(limit, key string, want float64) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); rate(limit, key) < want; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s of %s: %v, want %v", limit, key, rate(limit, key), want)
			}
		}
	}

	sink.SetReply(mtatest.StageRcpt, &smtp.SMTPError{Code: 451, EnhancedCode: smtp.EnhancedCode{4, 3, 0}, Message: "try later"})
	id := send("carol@example.org", "later@example.net")
	waitFor("deferrals", "carol@example.org", 0.98)
	if out, err := exec.Command(bin, "-C", conf, "-Mrm", id).CombinedOutput(); err != nil {
		t.Fatalf("exim -Mrm %s: %v\n%s", id, err, out)
	}
	sink.SetReply(mtatest.StageRcpt, unknown)
	send("carol@example.org", "nobody@example.net")
	waitFor("bounces", "carol@example.org", 0.98)
	if d, b := rate("deferrals", "carol@example.org"), rate("bounces", "carol@example.org"); d > 1.01 || b > 1.01 {
		t.Errorf("carol: %v deferrals and %v bounces, want 1 and 1: the removal by exim -Mrm counted", d, b)
	}

	for i := range 100 {
		sink.SetReply(mtatest.StageRcpt, nil)
		if i == 30 || i == 70 {
			sink.SetReply(mtatest.StageRcpt, unknown)
		}
		rcpt := fmt.Sprintf("bob%d@example.net", i)
		send("bob@example.org", rcpt)
		if log, _ := os.ReadFile(mainlog); strings.Contains(string(log), "ratelimitd: HOLD") {
			t.Fatalf("bob's message %d was frozen:\n%s", i+1, log)
		}
	}
	waitFor("bounces", "bob@example.org", 1.9)

	sink.SetReply(mtatest.StageRcpt, unknown)
	for i := range 30 {
		rcpt := fmt.Sprintf("nobody%d@example.net", i)
		send("alice@example.org", rcpt)
		log, _ := os.ReadFile(mainlog)
		bounced := strings.Contains(string(log), "** "+rcpt)
		if i < 10 {
			if !bounced {
				t.Fatalf("message %d did not bounce:\n%s", i+1, log)
			}
			td.waitRate("alice@example.org", float64(i+1)*0.98)
		} else if bounced {
			t.Fatalf("message %d after 10 unknown recipients was delivered (bounced), not frozen:\n%s", i+1, log)
		}
	}
	log, _ := os.ReadFile(mainlog)
	if n := strings.Count(string(log), "ratelimitd: HOLD"); n != 20 {
		t.Errorf("%d messages frozen by the ACL, want 20:\n%s", n, log)
	}
}
