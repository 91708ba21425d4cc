package daemon

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/mtatest"
	"github.com/ratelimitd/ratelimitd/quarantine"
)

// TestExpiryKeepsHeldWithoutQueueID: a held message
// whose queue ID was never learnt (the client never reached
// END-OF-MESSAGE, or the ID was refused as here) may still sit in the MTA's hold
// queue, so expiry past max_age must keep its record and flag it, not
// forget it.
func TestExpiryKeepsHeldWithoutQueueID(t *testing.T) {
	cfgPath := testConfig(t, t.TempDir(), loopback(t), `
[quarantine]
max_age = "1s"
delete_command = ["false", "{queue_id}"]
expire_command = ["false", "{queue_id}"]
`+mtatest.OneHoldLimit)
	td := startTestDaemon(t, cfgPath)
	for i := range 2 { // the first is within the limit
		td.forgedEndOfMessage("mallory", fmt.Sprintf("ALL%d", i))
	}
	if es := td.listed(""); len(es) != 1 {
		t.Fatalf("list: %s", entriesText(es))
	}
	td.stop()
	time.Sleep(1100 * time.Millisecond) // older than max_age
	td = startTestDaemon(t, cfgPath)    // expiry runs at start
	var es []quarantine.Entry
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		es = td.listed("")
		if len(es) == 1 && strings.Contains(es[0].Error, "past max_age") || time.Now().After(deadline) {
			break
		}
	}
	if len(es) != 1 || es[0].State != quarantine.Held || !strings.Contains(es[0].Error, "past max_age") {
		t.Fatalf("held entry without a queue ID after expiry:\n%s\nlog:\n%s", entriesText(es), td.logs.String())
	}
	if !strings.Contains(td.logs.String(), "level=ERROR") {
		t.Fatalf("kept entry not logged as an error:\n%s", td.logs.String())
	}
	q := td.adminStatus().Quarantine
	if q == nil || q.Held != 1 || q.Frozen != 0 || q.KeptPastMaxAge != 1 || !strings.Contains(q.LastError, "no MTA queue ID") {
		t.Fatalf("status does not show the kept message: %+v", q)
	}
}
