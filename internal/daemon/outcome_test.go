package daemon

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const outcomeLimits = `
[outcome]
maillog = %q
poll = "20ms"

[[limit]]
name = "volume"
key = "sasl_username"
limit = 200
period = "1h"

[[limit]]
name = "unknown"
key = "sasl_username"
per = "unknown_rcpt"
limit = 3
period = "1h"
action = "hold"
`

// eom asks END-OF-MESSAGE for a message of user with queue ID id.
func (td *testDaemon) eom(user, id string) string {
	td.t.Helper()
	return td.ask("protocol_state=END-OF-MESSAGE", "sasl_username="+user, "sender="+user+"@example.org",
		"recipient_count=1", "client_address=192.0.2.9", "queue_id="+id)
}

func appendLog(t *testing.T, path string, lines ...string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, l := range lines {
		fmt.Fprintln(f, l)
	}
}

func bounceLine(id string, i int) string {
	return fmt.Sprintf("Dec  1 10:00:01 mx postfix/smtp[12]: %s: to=<nobody%d@example.net>, relay=mx[192.0.2.9]:25, delay=1, delays=0/0/0/1, dsn=5.1.1, status=bounced (host mx said: 550 5.1.1 no such user)", id, i)
}

// unknownRate is the stored rate of user's "unknown" limit.
func (td *testDaemon) unknownRate(user string) float64 {
	td.t.Helper()
	s, err := td.engine.Store().Get(context.Background(), "unknown", user)
	if err != nil {
		td.t.Fatal(err)
	}
	return s.Rate
}

// waitRate waits until user's unknown-recipient rate reaches at least want.
func (td *testDaemon) waitRate(user string, want float64) {
	td.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for td.unknownRate(user) < want {
		if time.Now().After(deadline) {
			td.t.Fatalf("%s's unknown-recipient rate %v, want %v", user, td.unknownRate(user), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestOutcomeFeedHoldsTheNextMessage: the daemon joins each message's
// queue ID at END-OF-MESSAGE, reads the bounces in the mail log, and holds
// the first message after the third unknown recipient; after a restart
// the log is resumed where it stopped, no line counted twice, and a held
// message's bounce is not the sender's.
func TestOutcomeFeedHoldsTheNextMessage(t *testing.T) {
	dir := t.TempDir()
	logPath := filepath.Join(dir, "mail.log")
	appendLog(t, logPath, "Dec  1 09:00:00 mx postfix/smtp[1]: 0AAAAAAAAA: to=<old@example.net>, relay=none, delay=1, dsn=5.1.1, status=bounced (before the daemon)")
	path := testConfig(t, dir, loopback(t), fmt.Sprintf(outcomeLimits, logPath))
	td := startTestDaemon(t, path)
	for i := range 3 {
		id := fmt.Sprintf("1BCDEF%04d", i)
		if got := td.eom("alice", id); got != "action=DUNNO" {
			t.Fatalf("message %d: %s, want DUNNO", i+1, got)
		}
		appendLog(t, logPath, bounceLine(id, i))
		td.waitRate("alice", float64(i+1)*0.99)
	}
	got := td.eom("alice", "1BCDEF0003")
	if !strings.HasPrefix(got, "action=HOLD") {
		t.Fatalf("message after 3 unknown recipients: %s, want HOLD", got)
	}
	// The held message bounces after a release: not counted.
	appendLog(t, logPath, bounceLine("1BCDEF0003", 3))
	if got := td.eom("bob", "2BCDEF0000"); got != "action=DUNNO" {
		t.Fatalf("bob: %s", got)
	}
	appendLog(t, logPath, bounceLine("2BCDEF0000", 0))
	td.waitRate("bob", 0.99) // read past the held message's line
	if got, all := td.outcomeMetric("counted", "unknown_rcpt"), td.outcomeMetric("counted", ""); got != 4 || all != 4 {
		t.Errorf("ratelimitd_outcomes_total{result=\"counted\",kind=\"unknown_rcpt\"} = %v of %v counted, want 4 of 4 (3 of alice, 1 of bob)", got, all)
	}
	if got, bounce := td.outcomeMetric("unjoined", "unknown_rcpt"), td.outcomeMetric("unjoined", "bounce"); got != 1 || bounce != 0 {
		t.Errorf("ratelimitd_outcomes_total{result=\"unjoined\"}: unknown_rcpt %v, bounce %v; want 1 (the held message), 0", got, bounce)
	}
	before := td.unknownRate("alice")
	if before > 3.01 {
		t.Errorf("alice's rate %v counts the held message's bounce or the line before the start", before)
	}
	td.stop()

	// Restart: nothing read twice; a new line after the restart counts.
	appendLog(t, logPath, bounceLine("2BCDEF0000", 1))
	td = startTestDaemon(t, path)
	td.waitRate("bob", 1.98)
	if after := td.unknownRate("alice"); after > before+1e-9 {
		t.Errorf("alice's rate went from %v to %v over a restart", before, after)
	}
	if b := td.unknownRate("bob"); b > 2.01 {
		t.Errorf("bob's rate %v after the restart, want 2: a line read twice", b)
	}
}

// outcomeMetric is ratelimitd_outcomes_total{result,kind}, summed over
// the kinds when kind is "".
func (td *testDaemon) outcomeMetric(result, kind string) float64 {
	td.t.Helper()
	mfs, err := td.metrics.Registry().Gather()
	if err != nil {
		td.t.Fatal(err)
	}
	sum, found := 0.0, false
	for _, mf := range mfs {
		if mf.GetName() != "ratelimitd_outcomes_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["result"] == result && (kind == "" || labels["kind"] == kind) {
				sum, found = sum+m.GetCounter().GetValue(), true
			}
		}
	}
	if !found {
		td.t.Fatalf("no ratelimitd_outcomes_total{result=%q,kind=%q}", result, kind)
	}
	return sum
}

// TestRatioLimitCountsEachMessagesRecipientsOnce: a message joined at
// END-OF-MESSAGE by both front ends counts its recipients once in a ratio
// limit; a held message's none. Once 50 recipients were counted and 20
// of them bounced in the log, the next message is held.
func TestRatioLimitCountsEachMessagesRecipientsOnce(t *testing.T) {
	dir := t.TempDir()
	logPath := filepath.Join(dir, "mail.log")
	appendLog(t, logPath)
	td := startTestDaemon(t, testConfig(t, dir, loopback(t), fmt.Sprintf(`
[outcome]
maillog = %q
poll = "20ms"

[[limit]]
name = "unknown"
key = "sasl_username"
per = "bounce"
ratio = 0.1
min_count = 50
period = "1h"
action = "hold"
`, logPath)))
	recipients := func() float64 {
		s, err := td.engine.Store().Get(context.Background(), "unknown/rcpt", "alice")
		if err != nil {
			t.Fatal(err)
		}
		return s.Rate
	}
	held := 0
	for i := 0; held == 0 && i < 60; i++ {
		id := fmt.Sprintf("1BCDEF%04d", i)
		for range 2 { // the policy service and the milter
			if got := td.eom("alice", id); strings.HasPrefix(got, "action=HOLD") {
				held = i + 1
				break
			} else if got != "action=DUNNO" {
				t.Fatalf("message %d: %s, want DUNNO", i+1, got)
			}
		}
		if r := recipients(); r > float64(i+1)+0.01 {
			t.Fatalf("after message %d: %v recipients", i+1, r)
		}
		if i%3 == 0 && held == 0 {
			appendLog(t, logPath, bounceLine(id, i))
			td.waitRate("alice", 0.9*float64(i/3+1))
		}
	}
	// A third bounced: held once the recipients' rate (decayed) is 50.
	if held <= 50 || !strings.Contains(td.logs.String(), "of the last") {
		t.Fatalf("held at message %d (0: never), want after the 50th", held)
	}
	if r := recipients(); r < 49 || r > float64(held) {
		t.Errorf("%v recipients counted, want %d decayed, the held message's none", r, held-1)
	}
}
