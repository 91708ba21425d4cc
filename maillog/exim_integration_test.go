//go:build integration

package maillog

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/mtatest"
)

// TestIntegrationEximMainlog runs a real Exim (the binary scripts/deps.sh
// unpacks) for SMTP sessions of authenticated users (-bs with -oMa, -oMaa,
// -oMai: client address, authenticator and authenticated id, as after
// AUTH), delivering to a sink, and reads the mainlog Exim wrote: every line
// parses, and every message is found once with the user, client, sender,
// recipients and Exim's own S= size.
func TestIntegrationEximMainlog(t *testing.T) {
	bin := mtatest.EximBinary(t)
	sink := mtatest.StartSink(t)
	work := t.TempDir()
	// The transport runs as nobody: it must reach the spool.
	for _, d := range []string{filepath.Dir(work), work} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"spool", "spool/db", "log"} {
		// ... and take its locks in spool/db.
		if err := os.MkdirAll(filepath.Join(work, d), 0o777); err != nil {
			t.Fatal(err)
		}
		os.Chmod(filepath.Join(work, d), 0o777)
	}
	conf := filepath.Join(work, "exim.conf")
	err := os.WriteFile(conf, []byte(fmt.Sprintf(`exim_user = root
exim_group = root
never_users =
keep_environment =
spool_directory = %[1]s/spool
log_file_path = %[1]s/log/%%slog
primary_hostname = mx.example.net
log_selector = +received_recipients
acl_smtp_rcpt = acl_check_rcpt
begin acl
acl_check_rcpt:
  accept
begin routers
sink:
  driver = accept
  transport = to_sink
begin transports
to_sink:
  driver = smtp
  hosts = 127.0.0.1
  hosts_override
  port = %[2]d
  allow_localhost
  user = nobody
`, work, sink.Port())), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	type msg struct {
		from string
		to   []string
	}
	session := func(user, addr string, msgs ...msg) {
		var b strings.Builder
		b.WriteString("EHLO pc.example.org\r\n")
		for i, m := range msgs {
			fmt.Fprintf(&b, "MAIL FROM:<%s>\r\n", m.from)
			for _, to := range m.to {
				fmt.Fprintf(&b, "RCPT TO:<%s>\r\n", to)
			}
			fmt.Fprintf(&b, "DATA\r\nSubject: %d\r\n\r\n%s.\r\n", i, strings.Repeat("text\r\n", i+1))
		}
		b.WriteString("QUIT\r\n")
		cmd := exec.Command(bin, "-C", conf, "-odf", "-oMa", addr, "-oMaa", "dovecot_plain", "-oMai", user,
			"-oMs", "host-"+user+".example.org", "-bs")
		cmd.Stdin = strings.NewReader(b.String())
		out, err := cmd.CombinedOutput()
		if err != nil || strings.Count(string(out), "250 OK id=") != len(msgs) {
			t.Fatalf("exim -bs as %s: %v\n%s", user, err, out)
		}
	}
	session("alice", "192.0.2.7", msg{"alice@example.org", []string{"a@example.net", "b@example.net", "c@example.com"}})
	var burst []msg
	for i := 0; i < 8; i++ {
		burst = append(burst, msg{"bob@example.org", []string{fmt.Sprintf("r%d@example.net", i)}})
	}
	session("bob", "192.0.2.8", burst...)
	session("carol", "192.0.2.9", msg{"carol@example.org", []string{"x@example.net"}})
	t.Cleanup(func() {
		if t.Failed() {
			log, _ := os.ReadFile(filepath.Join(work, "log/mainlog"))
			t.Logf("mainlog:\n%s", log)
		}
	})
	sink.WaitCount(t, 10, 30*time.Second)

	r := NewReader(Options{})
	if err := r.ReadFile(filepath.Join(work, "log/mainlog")); err != nil {
		t.Fatal(err)
	}
	msgs := r.Messages()
	st := r.Stats()
	log, _ := os.ReadFile(filepath.Join(work, "log/mainlog"))
	if st.Unparsable != 0 || len(msgs) != 10 || st.Senders != 3 || st.Recipients != 3+8+1 {
		t.Fatalf("stats %+v, %d messages; want 10 from 3 senders to 12 recipients\n%s", st, len(msgs), log)
	}
	users := map[string]int{}
	for _, m := range msgs {
		users[m.SASLUsername]++
		if m.SASLMethod != "dovecot_plain" || m.Sender != m.SASLUsername+"@example.org" || m.Size < 100 ||
			!strings.HasPrefix(m.ClientAddress, "192.0.2.") || m.ClientName != "host-"+m.SASLUsername+".example.org" {
			t.Errorf("message %+v", m)
		}
		if m.SASLUsername == "alice" && !slices.Equal(m.Recipients, []string{"a@example.net", "b@example.net", "c@example.com"}) {
			t.Errorf("alice's recipients %v", m.Recipients)
		}
	}
	if users["alice"] != 1 || users["bob"] != 8 || users["carol"] != 1 {
		t.Fatalf("messages per user %v\n%s", users, log)
	}
	// S= counts the message with LF line ends: bob's eight messages have
	// 1..8 body lines of "text", each 5 bytes more than the last.
	var sizes []int64
	for _, m := range msgs {
		if m.SASLUsername == "bob" {
			sizes = append(sizes, m.Size)
		}
	}
	for i := 1; i < len(sizes); i++ {
		if sizes[i]-sizes[i-1] != int64(len("text\n")) {
			t.Fatalf("bob's sizes %v", sizes)
		}
	}
}
