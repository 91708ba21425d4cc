package daemon

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/mtatest"
	"github.com/ratelimitd/ratelimitd/quarantine/lifecycle"
)

// TestNotifyFirstRefusalAndReset runs the daemon with [notify] pointed at a
// real webhook receiver and the SMTP sink: ten refused messages give one
// limit_refused event (webhook and mail), and a rate reset through the
// admin socket gives a rate_reset naming the local user (SO_PEERCRED).
func TestNotifyFirstRefusalAndReset(t *testing.T) {
	hook, sink := startWebhook(t), mtatest.StartSink(t)
	td := startTestDaemon(t, testConfig(t, t.TempDir(), loopback(t), fmt.Sprintf(`
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
`, hook.URL, sink.Addr())))
	for i := range 10 {
		ans := td.message("rex", "END-OF-MESSAGE")
		if refused := strings.HasPrefix(ans, "action=450 4.7.1"); refused != (i >= 2) {
			t.Fatalf("message %d: %s", i+1, ans)
		}
	}
	if _, err := td.admin().Reset(t.Context(), "rex", ""); err != nil {
		t.Fatal(err)
	}
	td.stop() // drains the notification queue
	ev := hook.Events()
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
}

// TestNotifyQuarantineEvents: a key's first held message is announced as
// quarantine_threshold, and deleting its held messages sends one "deleted"
// event with their number and who ran it, not one per message.
func TestNotifyQuarantineEvents(t *testing.T) {
	hook := startWebhook(t)
	dir := t.TempDir()
	td := startTestDaemon(t, testConfig(t, dir, loopback(t), fmt.Sprintf(`
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
`, hook.URL, mtatest.FakeHeldQueue(t, dir, "ned@example.org", nil, "4A2B1C3DB", "4A2B1C3DC", "4A2B1C3DD"))))
	for i := range 4 {
		ans := td.ask("protocol_state=END-OF-MESSAGE", "sasl_username=ned", "sender=ned@example.org",
			fmt.Sprintf("queue_id=4A2B1C3D%X", 10+i), fmt.Sprintf("instance=n%d", i))
		if held := strings.HasPrefix(ans, "action=HOLD"); held != (i >= 1) {
			t.Fatalf("message %d: %s", i+1, ans)
		}
	}
	if out, err := td.deleteEntries(lifecycle.Selection{Key: "ned"}); err != nil {
		t.Fatalf("delete: %v\n%s", err, out)
	}
	td.stop() // sends the gathered events, then drains the queue
	events := hook.WaitCount(2, 10*time.Second)
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
