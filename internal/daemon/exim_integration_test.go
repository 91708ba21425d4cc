//go:build integration

package daemon

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ratelimitd/ratelimitd/internal/mtatest"
)

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
	bin := mtatest.EximBinary(t)
	dir := t.TempDir()
	conf := eximConf(t, dir, true)

	addr := loopback(t)
	td := startTestDaemon(t, testConfig(t, dir, addr, senderLimit("leaky")))
	session := eximSession("x@example.net")
	socket := "inet:" + addr
	out := runExim(t, bin, conf, socket, session)
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
	out = runExim(t, bin, conf, socket, session)
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
	bin := mtatest.EximBinary(t)
	for _, withData := range []bool{false, true} {
		name := map[bool]string{false: "rcpt-acl-only", true: "rcpt-and-data-acl"}[withData]
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			conf := eximConf(t, dir, withData)
			addr := loopback(t)
			td := startTestDaemon(t, testConfig(t, dir, addr, senderLimit("strict")))
			out := runExim(t, bin, conf, "inet:"+addr, eximSession("x@example.net", "y@example.net", "z@example.net"))
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
			if r := td.rateOf("bob@example.org", "sender"); r < 2.9 || r > 3.1 {
				t.Fatalf("strict rate %.2f, want 3 (three messages, each once):\n%s", r, td.logs.String())
			}
		})
	}
}

// senderLimit is a 2/hour limit per envelope sender in mode (leaky or
// strict), as TOML.
func senderLimit(mode string) string {
	return fmt.Sprintf("\n[[limit]]\nname = \"sender\"\nkey = [\"sender\"]\nlimit = 2\nperiod = \"1h\"\nmode = %q\n", mode)
}

// eximSession is an SMTP session of three messages from bob@example.org,
// each to rcpts, each followed by RSET.
func eximSession(rcpts ...string) string {
	var b strings.Builder
	b.WriteString("EHLO client.example.com\r\n")
	for i := 1; i <= 3; i++ {
		b.WriteString("MAIL FROM:<bob@example.org>\r\n")
		for _, r := range rcpts {
			fmt.Fprintf(&b, "RCPT TO:<%s>\r\n", r)
		}
		fmt.Fprintf(&b, "DATA\r\nSubject: %d\r\n\r\nhello\r\n.\r\nRSET\r\n", i)
	}
	b.WriteString("QUIT\r\n")
	return b.String()
}

// eximConf writes an Exim configuration whose RCPT ACL (and, with
// withData, DATA ACL) include the shipped configs/exim-acl.conf.
func eximConf(t *testing.T, dir string, withData bool) string {
	t.Helper()
	hooks, acls := "acl_smtp_rcpt = acl_check_rcpt\n", "acl_check_rcpt:\n  require acl = acl_ratelimitd_rcpt\n  accept\n"
	if withData {
		hooks += "acl_smtp_data = acl_check_data\n"
		acls += "acl_check_data:\n  require acl = acl_ratelimitd_data\n  accept\n"
	}
	return eximConfWith(t, dir, hooks, acls)
}

// eximConfWith writes dir/exim.conf: a root-run Exim with its spool and
// log in dir, the main-section lines hooks, configs/exim-acl.conf and
// acls in the ACL section, and no routers.
func eximConfWith(t *testing.T, dir, hooks, acls string) string {
	t.Helper()
	acl, err := filepath.Abs("../../configs/exim-acl.conf")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"spool", "log"} {
		os.MkdirAll(filepath.Join(dir, d), 0o755)
	}
	conf := filepath.Join(dir, "exim.conf")
	err = os.WriteFile(conf, []byte(fmt.Sprintf(`exim_user = root
exim_group = root
never_users =
spool_directory = %s/spool
log_file_path = %s/log/%%slog
primary_hostname = mx.example.net
%sbegin acl
.include %s
%sbegin routers
begin transports
`, dir, dir, hooks, acl, acls)), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	return conf
}

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
	bin := mtatest.EximBinary(t)
	for _, run := range []struct{ name, from string }{{"exim -t", ""}, {"exim -t -f", "someone-else@example.com"}} {
		t.Run(run.name, func(t *testing.T) {
			dir := t.TempDir()
			addr := loopback(t)
			conf := eximConfWith(t, dir, "RATELIMITD_SOCKET = inet:"+addr+"\nacl_not_smtp = acl_ratelimitd_not_smtp\n", eximNotSMTPACL(t))
			td := startTestDaemon(t, testConfig(t, dir, addr, "\n[[limit]]\nname = \"local\"\nkey = [\"local_user\"]\nlimit = 5\nperiod = \"1h\"\naction = \"hold\"\n"))
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
			if out := td.rateShow(fmt.Sprint(os.Getuid())); !strings.Contains(out, "local") {
				t.Fatalf("rate show %d (the caller's uid):\n%s", os.Getuid(), out)
			}
		})
	}
}
