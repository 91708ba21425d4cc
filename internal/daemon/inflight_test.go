package daemon

import (
	"fmt"
	"strings"
	"testing"
)

// TestStatusMessagesInFlight: messages that reached END-OF-MESSAGE and
// messages refused at RCPT are not in flight, whatever the bookkeeping
// still remembers of them; a message admitted at RCPT and not ended is.
func TestStatusMessagesInFlight(t *testing.T) {
	td := startTestDaemon(t, testConfig(t, t.TempDir(), loopback(t), `
[[limit]]
name = "hourly"
key = ["sasl_username"]
limit = 3
period = "1h"
`))
	for round := range 3 { // the same again: entries are reused
		for i := range 8 {
			attrs := []string{"sasl_username=alice", "sender=alice@example.org", "client_address=192.0.2.9",
				fmt.Sprintf("instance=r%d.m%d", round, i)}
			ans := td.ask(append(attrs, "protocol_state=RCPT", "recipient=bob@example.net")...)
			if strings.HasPrefix(ans, "action=DUNNO") {
				td.ask(append(attrs, "protocol_state=END-OF-MESSAGE", "recipient_count=1", fmt.Sprintf("queue_id=4F3A21C0%d%d", round, i))...)
			}
		}
		if n := td.adminStatus().MessagesInFlight; n != 0 {
			t.Fatalf("round %d: %d messages in flight after every message ended or was refused, want 0", round+1, n)
		}
	}
	td.ask("sasl_username=carol", "sender=carol@example.org", "client_address=192.0.2.9", "instance=open.1",
		"protocol_state=RCPT", "recipient=bob@example.net")
	if n := td.adminStatus().MessagesInFlight; n != 1 {
		t.Fatalf("%d messages in flight with one admitted at RCPT and not ended, want 1", n)
	}
}
