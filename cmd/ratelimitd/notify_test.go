package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/admin"
	"github.com/ratelimitd/ratelimitd/internal/mtatest"
)

// TestNotifyFirstRefusalAndReset runs the daemon with [notify] pointed at a
// real webhook receiver and the SMTP sink: ten refused messages give one
// limit_refused event (webhook and mail), a rate reset through the admin
// socket gives a rate_reset naming the local user (SO_PEERCRED), and a
// reset by the CLI with no daemon running is sent by the CLI itself.
func TestNotifyFirstRefusalAndReset(t *testing.T) {
	var mu sync.Mutex
	var events []map[string]any
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var e map[string]any
		if err := json.Unmarshal(b, &e); err != nil {
			t.Errorf("webhook body %q: %v", b, err)
		}
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	}))
	defer hook.Close()
	got := func() []map[string]any {
		mu.Lock()
		defer mu.Unlock()
		return append([]map[string]any(nil), events...)
	}
	sink := mtatest.StartSink(t)
	dir := t.TempDir()
	cfgPath := writeConfig(t, dir, fmt.Sprintf("127.0.0.1:%d", freePort(t)), fmt.Sprintf(`
[notify]
[notify.webhook]
url = %q
secret = "k"
[notify.mail]
relay = %q
from = "ratelimitd@mx.example.org"
to = ["postmaster@example.org"]

[[limit]]
name = "hourly"
key = "sasl_username"
limit = 2
period = "1h"
action = "defer"
`, hook.URL, sink.Addr()))
	td := startTestDaemon(t, cfgPath)
	for i := range 10 {
		ans := policyQuery(t, td.policyAddr, "rex", "END-OF-MESSAGE")
		if refused := strings.HasPrefix(ans, "action=450 4.7.1"); refused != (i >= 2) {
			t.Fatalf("message %d: %s", i+1, ans)
		}
	}
	if _, err := cli(t, "--config", cfgPath, "rate", "reset", "rex"); err != nil {
		t.Fatal(err)
	}
	// One message under the limit again, for the offline reset below.
	if ans := policyQuery(t, td.policyAddr, "rex", "END-OF-MESSAGE"); !strings.HasPrefix(ans, "action=DUNNO") {
		t.Fatalf("message after the reset: %s", ans)
	}
	td.stop() // drains the notification queue
	ev := got()
	if len(ev) != 2 {
		t.Fatalf("webhook got %d events, want limit_refused and rate_reset: %v", len(ev), ev)
	}
	if ev[0]["event"] != "limit_refused" || ev[0]["key"] != "rex" || ev[0]["limit"] != "hourly" || ev[0]["period"] != "1h" ||
		ev[0]["sender"] != "rex@example.org" || ev[0]["action"] != "defer" {
		t.Errorf("first event %v", ev[0])
	}
	if by, _ := ev[1]["by"].(string); ev[1]["event"] != "rate_reset" || !strings.Contains(by, fmt.Sprintf("uid %d,", os.Getuid())) {
		t.Errorf("second event %v, want rate_reset by uid %d", ev[1], os.Getuid())
	}
	msgs := sink.WaitCount(t, 2, 10*time.Second)
	if s := msgs[0].Header("Subject"); !strings.Contains(s, "rex is over limit hourly") {
		t.Errorf("first mail subject %q", s)
	}

	out, err := cli(t, "--config", cfgPath, "rate", "reset", "rex")
	if err != nil || strings.Contains(out, "warning") {
		t.Fatalf("offline reset: %v\n%s", err, out)
	}
	ev = got()
	if len(ev) != 3 || ev[2]["event"] != "rate_reset" || ev[2]["by"] != admin.LocalUser() {
		t.Fatalf("offline reset events %v, want a third, rate_reset by %q", ev, admin.LocalUser())
	}
}

// TestNotifyQuarantineEvents: a key's first held message is announced as
// quarantine_threshold, and deleting its held messages sends one "deleted"
// event with their number and who ran it, not one per message.
func TestNotifyQuarantineEvents(t *testing.T) {
	var mu sync.Mutex
	var events []map[string]any
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var e map[string]any
		json.NewDecoder(r.Body).Decode(&e)
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	}))
	defer hook.Close()
	dir := t.TempDir()
	cfgPath := writeConfig(t, dir, fmt.Sprintf("127.0.0.1:%d", freePort(t)), fmt.Sprintf(`
[notify]
events = ["quarantine_threshold", "deleted"]
[notify.webhook]
url = %q

[quarantine]
delete_command = ["true", "{queue_id}"]
%s
[[limit]]
name = "hold"
key = "sasl_username"
limit = 1
period = "1h"
mode = "strict"
action = "hold"
`, hook.URL, mtatest.FakeHeldQueue(t, dir, "ned@example.org", nil, "4A2B1C3DB", "4A2B1C3DC", "4A2B1C3DD")))
	td := startTestDaemon(t, cfgPath)
	for i := range 4 {
		ans := policyAsk(t, td.policyAddr, "protocol_state=END-OF-MESSAGE", "sasl_username=ned", "sender=ned@example.org",
			fmt.Sprintf("queue_id=4A2B1C3D%X", 10+i), fmt.Sprintf("instance=n%d", i))
		if held := strings.HasPrefix(ans, "action=HOLD"); held != (i >= 1) {
			t.Fatalf("message %d: %s", i+1, ans)
		}
	}
	if status, out, stderr := runCLI(t, "", "--config", cfgPath, "quarantine", "delete", "--key", "ned", "--yes"); status != 0 {
		t.Fatalf("delete: %d\n%s%s", status, out, stderr)
	}
	td.stop() // sends the gathered events, then drains the queue
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := len(events)
		mu.Unlock()
		if n >= 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(events) != 2 {
		t.Fatalf("got %d events, want quarantine_threshold and one deleted: %v", len(events), events)
	}
	if e := events[0]; e["event"] != "quarantine_threshold" || e["key"] != "ned" || e["count"] != 1.0 {
		t.Errorf("first event %v", e)
	}
	if e := events[1]; e["event"] != "deleted" || e["key"] != "ned" || e["count"] != 3.0 || !strings.Contains(fmt.Sprint(e["by"]), fmt.Sprintf("uid %d,", os.Getuid())) {
		t.Errorf("second event %v, want deleted, count 3, by uid %d", e, os.Getuid())
	}
}
