//go:build integration

package daemon

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/admin"
	"github.com/ratelimitd/ratelimitd/internal/mtatest"
	"github.com/ratelimitd/ratelimitd/quarantine/lifecycle"
)

// TestIntegrationHookLayouts runs the default limits (200/h leaky + 1000/day
// strict per SASL user, plus a per_rcpt limit) behind a real Postfix hooked
// in each layout postmasters use: check_policy_service in
// smtpd_recipient_restrictions only (the most common), in it and
// smtpd_end_of_data_restrictions, in smtpd_end_of_data_restrictions only,
// and in smtpd_data_restrictions only. In each, a 205-message burst of
// single-recipient messages from one XCLIENT user delivers exactly 200 and
// the client is told 450 4.7.1 five times, and a 60-message run of
// 5-recipient messages from another counts 60 messages and 300 recipients.
func TestIntegrationHookLayouts(t *testing.T) {
	const plain = "permit_mynetworks, permit_sasl_authenticated, reject_unauth_destination"
	layouts := []struct {
		name        string
		rcpt, data  bool // policy service in smtpd_recipient_restrictions / smtpd_data_restrictions
		eod         bool // ... in smtpd_end_of_data_restrictions
		refusedStep mtatest.Stage
	}{
		{"rcpt-only", true, false, false, mtatest.StageRcpt},
		{"rcpt+end-of-data", true, false, true, mtatest.StageRcpt},
		{"end-of-data-only", false, false, true, mtatest.StageEndOfData},
		{"data-only", false, true, false, mtatest.StageData},
	}
	for _, lay := range layouts {
		t.Run(lay.name, func(t *testing.T) {
			addr := loopback(t)
			td := startTestDaemon(t, testConfig(t, t.TempDir(), addr, testLimits+`
[[limit]]
name = "rcpts"
key = ["sasl_username"]
limit = 5000
period = "1h"
per = "rcpt"
`))
			sink := mtatest.StartSink(t)
			svc := "check_policy_service { inet:" + addr + ", timeout=10s, default_action=DUNNO }"
			main := map[string]string{"smtpd_recipient_restrictions": plain, "smtpd_end_of_data_restrictions": ""}
			if lay.rcpt {
				main["smtpd_recipient_restrictions"] = svc + ", " + plain
			}
			if lay.eod {
				main["smtpd_end_of_data_restrictions"] = svc
			}
			if lay.data {
				main["smtpd_data_restrictions"] = svc
			}
			pf := mtatest.StartPostfix(t, mtatest.PostfixOptions{SinkAddr: sink.Addr(), ExtraMainCF: main})
			start := time.Now()

			deferred := 0
			for i := 1; i <= 205; i++ {
				res := mtatest.SendResult(t, pf.Addr(), mtatest.Mail{Login: "alice", ClientAddr: "192.0.2.7",
					From: "alice@example.org", To: []string{"rcpt@example.net"},
					Data: mtatest.BuildMessage("alice@example.org", "rcpt@example.net", fmt.Sprintf("burst %d", i), "hello\n")})
				if err := res.Err(); err != nil {
					code, enh := smtpCode(err)
					if i <= 200 || code != 450 || enh != "4.7.1" || len(res.Errors) == 0 || res.Errors[0].Stage != lay.refusedStep {
						t.Fatalf("message %d: %v (stage %v)\n%s", i, err, res.Errors[0].Stage, res.Transcript)
					}
					deferred++
				} else if i > 200 {
					t.Fatalf("message %d accepted, want 450 4.7.1", i)
				}
			}
			if deferred != 5 {
				t.Fatalf("%d deferred, want 5", deferred)
			}
			rcpts := []string{"r1@example.net", "r2@example.net", "r3@example.net", "r4@example.net", "r5@example.net"}
			for i := 1; i <= 60; i++ {
				res := mtatest.SendResult(t, pf.Addr(), mtatest.Mail{Login: "bob", ClientAddr: "192.0.2.8",
					From: "bob@example.org", To: rcpts,
					Data: mtatest.BuildMessage("bob@example.org", "r1@example.net", fmt.Sprintf("run %d", i), "hello\n")})
				if err := res.Err(); err != nil || len(res.Accepted) != 5 {
					t.Fatalf("bob message %d: %v, %d accepted", i, err, len(res.Accepted))
				}
			}
			msgs := sink.WaitCount(t, 260, 60*time.Second)
			time.Sleep(300 * time.Millisecond)
			if n := sink.Count(); n != 260 {
				t.Fatalf("sink received %d messages, want 260 (200 + 60)", n)
			}
			nrcpt := 0
			for _, m := range msgs {
				if m.From == "bob@example.org" {
					nrcpt += len(m.To)
				}
			}
			if nrcpt != 300 {
				t.Fatalf("sink received %d recipients of bob, want 300", nrcpt)
			}
			// The rates have decayed for as long as the test ran (seconds
			// of an hour or a day): allow exactly that much, not a message.
			elapsed := time.Since(start)
			for _, c := range []struct {
				key, limit string
				want       float64
				period     time.Duration
			}{{"alice", "hourly", 200, time.Hour}, {"alice", "daily", 205, 24 * time.Hour}, {"bob", "hourly", 60, time.Hour},
				{"bob", "daily", 60, 24 * time.Hour}, {"bob", "rcpts", 300, time.Hour}} {
				low := c.want*math.Exp(-elapsed.Seconds()/c.period.Seconds()) - 0.1
				if r := td.rateOf(c.key, c.limit); r < low || r > c.want+0.1 {
					t.Errorf("%s %s: rate %.1f, want %.0f (at least %.2f after %v of decay)", c.key, c.limit, r, c.want, low, elapsed)
				}
			}
			out := td.statusText()
			if strings.Contains(out, "warning:") {
				t.Fatalf("status:\n%s", out)
			}
			for _, want := range []string{map[bool]string{true: "asked at: policy RCPT", false: "asked at: policy END-OF-MESSAGE"}[lay.rcpt || !lay.eod]} {
				if lay.data {
					want = "asked at: policy DATA"
				}
				if !strings.Contains(out, want) {
					t.Fatalf("status lacks %q:\n%s", want, out)
				}
			}
			if !strings.Contains(td.logs.String(), "action=defer") {
				t.Fatalf("no defer logged:\n%s", td.logs.String())
			}
		})
	}
}

// TestIntegrationPolicyAndMilterCountOnce: a Postfix that asks through
// policy delegation (RCPT and END-OF-MESSAGE) and the milter, with limits
// that name no front end, counts each message once: 25 messages against
// 20/hour deliver 20 and the stored rate is 20, not 40.
func TestIntegrationPolicyAndMilterCountOnce(t *testing.T) {
	addr, maddr := loopback(t), loopback(t)
	sink := mtatest.StartSink(t)
	pf := mtatest.StartPostfix(t, mtatest.PostfixOptions{SinkAddr: sink.Addr(), PolicyService: "inet:" + addr, Milter: "inet:" + maddr})
	td := startTestDaemon(t, testConfig(t, t.TempDir(), addr, fmt.Sprintf(`
[milter]
listen = %q

[[limit]]
name = "hourly"
key = ["sasl_username"]
limit = 20
period = "1h"

[[limit]]
name = "rcpts"
key = ["sasl_username"]
limit = 1000
period = "1h"
per = "rcpt"
`, maddr)))
	deferred := 0
	for i := 1; i <= 25; i++ {
		err := mtatest.Send(t, pf.Addr(), mtatest.Mail{Login: "alice", ClientAddr: "192.0.2.7",
			From: "alice@example.org", To: []string{"a@example.net", "b@example.net"},
			Data: mtatest.BuildMessage("alice@example.org", "a@example.net", fmt.Sprintf("m %d", i), "hello\n")})
		if err != nil {
			if code, _ := smtpCode(err); code != 450 || i <= 20 {
				t.Fatalf("message %d: %v", i, err)
			}
			deferred++
		}
	}
	sink.WaitCount(t, 20, 30*time.Second)
	time.Sleep(300 * time.Millisecond)
	if sink.Count() != 20 || deferred != 5 {
		t.Fatalf("%d delivered, %d deferred; want 20 and 5", sink.Count(), deferred)
	}
	if r := td.rateOf("alice", "hourly"); r < 19.9 || r > 20.1 {
		t.Fatalf("hourly rate %.2f, want 20 (each message once across both front ends)", r)
	}
	if r := td.rateOf("alice", "rcpts"); r < 39.9 || r > 40.1 {
		t.Fatalf("rcpts rate %.2f, want 40 (each accepted recipient once)", r)
	}
	if out := td.statusText(); !strings.Contains(out, "asked at: milter RCPT") || !strings.Contains(out, "asked at: policy RCPT") {
		t.Fatalf("status:\n%s", out)
	}
}

// TestIntegrationHoldAtRcptOnly: with check_policy_service in
// smtpd_recipient_restrictions only, a hold limit puts messages in
// Postfix's hold queue at RCPT (where HOLD acts), single-recipient messages
// included, although Postfix has no queue ID yet when it asks about the
// first RCPT; the quarantine finds each one's queue ID (postqueue -j) and
// thaw releases every one exactly once.
func TestIntegrationHoldAtRcptOnly(t *testing.T) {
	addr := loopback(t)
	sink := mtatest.StartSink(t)
	const plain = "permit_mynetworks, permit_sasl_authenticated, reject_unauth_destination"
	svc := "check_policy_service { inet:" + addr + ", timeout=10s, default_action=DUNNO }"
	pf := mtatest.StartPostfix(t, mtatest.PostfixOptions{SinkAddr: sink.Addr(), ExtraMainCF: map[string]string{
		"smtpd_recipient_restrictions": svc + ", " + plain, "smtpd_end_of_data_restrictions": ""}})
	c := pf.ConfigDir()
	td := startTestDaemon(t, testConfig(t, t.TempDir(), addr, fmt.Sprintf(`
[quarantine]
release_command = [["postsuper", "-c", %q, "-H", "{queue_id}"], ["postqueue", "-c", %q, "-i", "{queue_id}"]]
delete_command = ["postsuper", "-c", %q, "-d", "{queue_id}"]
show_command = ["postcat", "-c", %q, "-q", "{queue_id}"]
queue_list_command = ["postqueue", "-c", %q, "-j"]

[[limit]]
name = "fivehold"
key = ["sasl_username"]
limit = 5
period = "1h"
mode = "strict"
action = "hold"
`, c, c, c, c, c)))
	for i := 1; i <= 12; i++ {
		to := []string{"rcpt@example.net"}
		if i%2 == 0 {
			to = append(to, "other@example.net")
		}
		if err := mtatest.Send(t, pf.Addr(), mtatest.Mail{Login: "alice", ClientAddr: "192.0.2.7",
			From: "alice@example.org", To: to,
			Data: mtatest.BuildMessage("alice@example.org", to[0], fmt.Sprintf("part %02d", i), "hello\n")}); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	sink.WaitCount(t, 5, 30*time.Second)
	_, held := pf.WaitQueue(t, 30*time.Second, func(all, held []string) bool { return len(held) == 7 })
	if len(held) != 7 {
		t.Fatalf("%d held, want 7", len(held))
	}
	if out := td.quarantineList(admin.ListQuery{}); strings.Count(out, " held ") != 7 {
		t.Fatalf("quarantine list:\n%s", out)
	}
	out, err := td.thaw(lifecycle.Selection{Key: "alice", ResetRate: true})
	if err != nil || !strings.Contains(out, "7 thawed, 0 failed") {
		t.Fatalf("thaw: %v\n%s", err, out)
	}
	msgs := sink.WaitCount(t, 12, 60*time.Second)
	time.Sleep(300 * time.Millisecond)
	seen := map[string]int{}
	for _, m := range msgs {
		seen[m.Header("Subject")]++
	}
	for i := 1; i <= 12; i++ {
		if s := fmt.Sprintf("part %02d", i); seen[s] != 1 {
			t.Fatalf("%q delivered %d times", s, seen[s])
		}
	}
	if all, held := pf.QueueIDs(t); len(all) != 0 || len(held) != 0 {
		t.Fatalf("queue not empty: %v held %v", all, held)
	}
}
