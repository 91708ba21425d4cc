//go:build integration

package daemon

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/admin"
	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/internal/mtatest"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/quarantine/lifecycle"
)

// ladderLimits is a [[limit]] per step, keyed by SASL user, per hour:
// name, action, mode, limit, and the front end that measures it.
func ladderLimits(via string, steps ...[4]string) string {
	var b strings.Builder
	for _, s := range steps {
		fmt.Fprintf(&b, "\n[[limit]]\nname = %q\nkey = [\"sasl_username\"]\naction = %q\nmode = %q\nlimit = %s\nperiod = \"1h\"\nvia = [%q]\n",
			s[0], s[1], s[2], s[3], via)
	}
	return b.String()
}

// sendOutcome sends mtatest.Newsletter(user, n) to the MTA at addr and
// returns "sent" or the SMTP code.
func sendOutcome(t *testing.T, addr, user string, n int) string {
	err := mtatest.Send(t, addr, mtatest.Newsletter(user, n))
	if err == nil {
		return "sent"
	}
	code, _ := smtpCode(err)
	if code == 0 {
		t.Fatalf("%s message %d: %v", user, n, err)
	}
	return fmt.Sprint(code)
}

// ladderWarnings is the configuration's ladder warnings at cfgPath, a
// "warning: " line each, as `ratelimitd config check` prints them.
func ladderWarnings(t *testing.T, cfgPath string) string {
	t.Helper()
	f, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, w := range append(policy.LadderWarnings(f.PolicyConfig()), f.Warnings()...) {
		b.WriteString("warning: " + w + "\n")
	}
	return b.String()
}

// TestIntegrationLadderThroughPolicyDelegation: a real Postfix asking
// policy delegation at RCPT and END-OF-MESSAGE. [hold 8/h strict, defer
// 5/h leaky] delivers 1–5, defers 6–8 (450 at RCPT) and holds from 9;
// [defer 5/h leaky, hold 8/h strict] delivers 1–5 and defers from 6, and
// config check warns that hold never answers. Each ladder is played by
// three users in turn, so one user's state cannot make another's answer.
func TestIntegrationLadderThroughPolicyDelegation(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps [][4]string
		want  func(n int) string // per message, 1-based
		held  int                // per user
		warn  string
	}{
		{"hold first", [][4]string{{"hold", "hold", "strict", "8"}, {"hourly", "defer", "leaky", "5"}},
			func(n int) string {
				if n >= 6 && n <= 8 {
					return "450"
				}
				return "sent"
			}, 4, ""},
		{"defer first", [][4]string{{"hourly", "defer", "leaky", "5"}, {"hold", "hold", "strict", "8"}},
			func(n int) string {
				if n >= 6 {
					return "450"
				}
				return "sent"
			}, 0, "warning: limit hold can never answer: hourly, earlier over the same key and counting, defers above 5/h first"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := loopback(t)
			sink := mtatest.StartSink(t)
			pf := mtatest.StartPostfix(t, mtatest.PostfixOptions{SinkAddr: sink.Addr(), PolicyService: "inet:" + addr})
			cfgPath := testConfig(t, t.TempDir(), addr, "\n[quarantine]\n"+pf.HoldCommands()+ladderLimits("policy", tc.steps...))
			if out := ladderWarnings(t, cfgPath); (tc.warn != "") != strings.Contains(out, "warning: limit") || !strings.Contains(out, tc.warn) {
				t.Fatalf("config check:\n%s", out)
			}
			td := startTestDaemon(t, cfgPath)
			users := []string{"alice", "bob", "carol"}
			delivered := 0
			for _, u := range users {
				for n := 1; n <= 12; n++ {
					got := sendOutcome(t, pf.Addr(), u, n)
					if got == "sent" && n <= 5 {
						delivered++
					}
					if want := tc.want(n); got != want {
						t.Fatalf("%s message %d: %s, want %s", u, n, got, want)
					}
				}
			}
			sink.WaitCount(t, delivered, 60*time.Second)
			_, held := pf.WaitQueue(t, 30*time.Second, func(all, held []string) bool { return len(held) == tc.held*len(users) })
			if len(held) != tc.held*len(users) {
				t.Fatalf("%d held, want %d", len(held), tc.held*len(users))
			}
			time.Sleep(500 * time.Millisecond)
			if n := sink.Count(); n != 5*len(users) {
				t.Fatalf("sink has %d, want %d", n, 5*len(users))
			}
			if tc.held > 0 {
				if out := td.quarantineList(admin.ListQuery{Sender: "alice@example.org"}); strings.Count(out, " held ") != tc.held {
					t.Fatalf("quarantine list:\n%s", out)
				}
			}
		})
	}
}

// TestIntegrationLadderThroughMilter: a real Postfix with the milter;
// [freeze 8/h strict, defer 5/h leaky], both measured by the milter,
// delivers 1–5, temp-fails 6–8 and freezes from 9; thawed, each frozen
// message is delivered once. Played by two users in turn.
func TestIntegrationLadderThroughMilter(t *testing.T) {
	policyAddr, milterAddr := loopback(t), loopback(t)
	sink := mtatest.StartSink(t)
	pf := mtatest.StartPostfix(t, mtatest.PostfixOptions{SinkAddr: sink.Addr(), ReinjectPort: true,
		PolicyService: "inet:" + policyAddr, Milter: "inet:" + milterAddr})
	milterConf := fmt.Sprintf("\n[milter]\nlisten = %q\n\n[quarantine]\nreinject_addr = %q\n", milterAddr, pf.ReinjectAddr)
	cfgPath := testConfig(t, t.TempDir(), policyAddr,
		milterConf+ladderLimits("milter", [4]string{"freeze", "freeze", "strict", "8"}, [4]string{"hourly", "defer", "leaky", "5"}))
	if out := ladderWarnings(t, cfgPath); strings.Contains(out, "warning: limit") {
		t.Fatalf("config check:\n%s", out)
	}
	td := startTestDaemon(t, cfgPath)
	// Postfix's start-up probe found no milter before the daemon; wait for
	// its line so it is not taken for a warning about the test's mail.
	for i := 0; !strings.Contains(pf.Log(), "Connection refused") && i < 250; i++ {
		time.Sleep(20 * time.Millisecond)
	}
	logFrom := len(pf.Log())

	users := []string{"alice", "bob"}
	for _, u := range users {
		for n := 1; n <= 12; n++ {
			got := sendOutcome(t, pf.Addr(), u, n)
			want := "sent" // delivered, or accepted and frozen
			if n >= 6 && n <= 8 {
				want = "450"
			}
			if got != want {
				t.Fatalf("%s message %d: %s, want %s", u, n, got, want)
			}
		}
	}
	sink.WaitCount(t, 5*len(users), 30*time.Second)
	time.Sleep(time.Second)
	if n := sink.Count(); n != 5*len(users) {
		t.Fatalf("sink has %d before thaw, want %d", n, 5*len(users))
	}
	pf.WaitQueueEmpty(t, 30*time.Second)
	for _, u := range users {
		out := td.quarantineList(admin.ListQuery{Sender: u + "@example.org"})
		if strings.Count(out, " frozen ") != 4 {
			t.Fatalf("quarantine list %s:\n%s", u, out)
		}
		for n := 9; n <= 12; n++ {
			if !strings.Contains(out, fmt.Sprintf("newsletter part %02d", n)) {
				t.Fatalf("%s: list lacks message %d:\n%s", u, n, out)
			}
		}
		out, err := td.thaw(lifecycle.Selection{Sender: u + "@example.org"})
		if err != nil || !strings.Contains(out, "4 thawed, 0 failed") {
			t.Fatalf("thaw %s: %v\n%s", u, err, out)
		}
	}
	sink.WaitCount(t, 9*len(users), 60*time.Second)
	time.Sleep(time.Second) // nothing more may arrive (no duplicates)
	seen := map[string]int{}
	for _, m := range sink.Messages() {
		from, _, _ := strings.Cut(m.From, "@")
		seen[from+" "+m.Header("Subject")]++
		if m.Header("X-Ratelimitd-Thawed") != "" && !bytes.Contains(m.Data, []byte("newsletter")) {
			t.Errorf("thawed message without its body: %q", m.Data)
		}
	}
	for _, u := range users {
		for n := 1; n <= 12; n++ {
			want := 1
			if n >= 6 && n <= 8 {
				want = 0
			}
			if k := fmt.Sprintf("%s newsletter part %02d", u, n); seen[k] != want {
				t.Errorf("%q delivered %d times, want %d", k, seen[k], want)
			}
		}
	}
	if log := pf.Log()[logFrom:]; strings.Contains(log, "warning:") {
		t.Fatalf("Postfix warnings:\n%s", log)
	}
}
