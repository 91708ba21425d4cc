//go:build integration

package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/redistest"
)

// startServe runs `ratelimitd serve` (startSubprocessDaemon) and logs
// its output if the test fails.
func startServe(t *testing.T, cfgPath string) {
	t.Helper()
	_, out := startSubprocessDaemon(t, cfgPath)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("daemon %s log:\n%s", cfgPath, out.String())
		}
	})
}

// TestRedisTwoDaemons: two `ratelimitd serve` processes share one Redis.
// One user's 60 messages alternate between them and exactly the limit (20)
// is admitted; `rate reset` on one host lets the user through on the
// other at once; `rate show` and `status` on either report the shared
// state.
func TestRedisTwoDaemons(t *testing.T) {
	srv := redistest.Start(t)
	var cfgs, addrs []string
	for range 2 {
		dir := t.TempDir()
		addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
		cfgs = append(cfgs, writeConfig(t, dir, addr, redisConfig(srv.Addr, "local")))
		addrs = append(addrs, addr)
		startServe(t, cfgs[len(cfgs)-1])
	}
	admitted := 0
	for i := range 60 {
		got := policyQuery(t, addrs[i%2], "walter", "END-OF-MESSAGE")
		switch {
		case got == "action=DUNNO":
			admitted++
		case !strings.HasPrefix(got, "action=450 4.7.1"):
			t.Fatalf("message %d: %s", i+1, got)
		}
	}
	if admitted != 20 {
		t.Fatalf("60 messages alternating between two hosts: %d admitted, want 20", admitted)
	}
	out, err := cli(t, "--config", cfgs[1], "rate", "show", "walter")
	if err != nil || !strings.Contains(out, "hourly") {
		t.Fatalf("rate show on the second host: %v\n%s", err, out)
	}
	out, err = cli(t, "--config", cfgs[1], "status")
	if err != nil || !strings.Contains(out, "store: redis, shared") {
		t.Fatalf("status on the second host: %v\n%s", err, out)
	}
	if out, err := cli(t, "--config", cfgs[0], "rate", "reset", "walter"); err != nil {
		t.Fatalf("rate reset on the first host: %v\n%s", err, out)
	}
	if got := policyQuery(t, addrs[1], "walter", "END-OF-MESSAGE"); got != "action=DUNNO" {
		t.Fatalf("after a reset on the first host the second answers %s", got)
	}
	// The offline CLI (no daemon behind the config's admin socket) reads
	// Redis directly.
	off := writeConfig(t, t.TempDir(), fmt.Sprintf("127.0.0.1:%d", freePort(t)), redisConfig(srv.Addr, "local"))
	out, err = cli(t, "--config", off, "rate", "list")
	if err != nil || !strings.Contains(out, "walter") {
		t.Fatalf("offline rate list: %v\n%s", err, out)
	}
}

// TestRedisOutcomesShared: an unknown recipient reported to one host
// counts on the other. Two daemons share one Redis with an unknown_rcpt
// limit of 3 per hour; olga's message is submitted through the first,
// which receives three Exim delivery events of unknown recipients for it;
// the second host then refuses olga's next message with the outcome
// limit, its `rate show` lists the failures and its events the refusal.
// Repeated for three users.
func TestRedisOutcomesShared(t *testing.T) {
	srv := redistest.Start(t)
	outcomeLimit := limitTable(`name = "unknown"`, `key = ["sasl_username"]`, `per = "unknown_rcpt"`, `limit = 3`,
		`period = "1h"`, `mode = "strict"`, `action = "defer"`)
	var cfgs, addrs []string
	exim := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	for i := range 2 {
		addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
		feed := fmt.Sprintf("\n[outcome]\nexim_listen = %q\n", exim)
		if i == 1 {
			feed = fmt.Sprintf("\n[outcome]\nexim_listen = \"127.0.0.1:%d\"\n", freePort(t))
		}
		cfgs = append(cfgs, writeConfig(t, t.TempDir(), addr, redisConfig(srv.Addr, "local")+outcomeLimit+feed))
		addrs = append(addrs, addr)
		startServe(t, cfgs[i])
	}
	for round, user := range []string{"olga", "oscar", "otto"} {
		qid := fmt.Sprintf("1wXyZ%d-000Abc-Q1", round)
		eom := func(addr string) string {
			return policyAsk(t, addr, "protocol_state=END-OF-MESSAGE", "sasl_username="+user, "sender="+user+"@example.org",
				"recipient_count=3", "client_address=192.0.2.9", "queue_id="+qid)
		}
		if got := eom(addrs[0]); got != "action=DUNNO" {
			t.Fatalf("%s's message on the first host: %s", user, got)
		}
		for i := range 3 {
			c, err := net.DialTimeout("tcp", exim, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			c.SetDeadline(time.Now().Add(10 * time.Second))
			fmt.Fprintf(c, "request=exim_outcome\nevent=msg:fail:delivery\nqueue_id=%s\nrecipient=nobody%d@example.net\n"+
				"data=SMTP error from remote mail server after RCPT TO:<nobody%d@example.net>: 550 5.1.1 User unknown\n\n", qid, i, i)
			reply, err := bufio.NewReader(c).ReadString('\n')
			c.Close()
			if err != nil || reply != "action=DUNNO\n" {
				t.Fatalf("exim event %d: %q %v", i, reply, err)
			}
		}
		out, err := cli(t, "--config", cfgs[1], "rate", "show", user)
		if err != nil || !regexp.MustCompile(`(?m)^`+user+`\s+unknown\s+3(\.0)? .*; counts unknown recipients \(unknown_rcpt\)$`).MatchString(out) {
			t.Fatalf("rate show %s on the second host: %v\n%s", user, err, out)
		}
		if got := policyQuery(t, addrs[1], user, "END-OF-MESSAGE"); !strings.HasPrefix(got, "action=450 4.7.1") ||
			!strings.Contains(got, "recipients failed") {
			t.Fatalf("%s's next message on the second host after 3 unknown recipients on the first: %s", user, got)
		}
	}
	// The refusals are events of the second host, naming the outcome limit.
	out, err := cli(t, "--config", cfgs[1], "events", "--json")
	var evs []struct{ Key, Limit, Action string }
	if err != nil || json.Unmarshal([]byte(out), &evs) != nil {
		t.Fatalf("events: %v\n%s", err, out)
	}
	var got []string
	for _, e := range evs {
		got = append(got, e.Key+" "+e.Limit+" "+e.Action)
	}
	if slices.Sort(got); strings.Join(got, ", ") != "olga unknown defer, oscar unknown defer, otto unknown defer" {
		t.Fatalf("events of the second host: %v", got)
	}
}
