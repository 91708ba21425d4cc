package main

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestExpiryKeepsHeldWithoutQueueID: a held message
// whose queue ID was never learnt (the client never reached
// END-OF-MESSAGE, or the ID was refused as here) may still sit in the MTA's hold
// queue, so expiry past max_age must keep its record and flag it, not
// forget it.
func TestExpiryKeepsHeldWithoutQueueID(t *testing.T) {
	dir := t.TempDir()
	port := freePort(t)
	cfgPath := writeConfig(t, dir, fmt.Sprintf("127.0.0.1:%d", port), `
[quarantine]
max_age = "1s"
delete_command = ["false", "{queue_id}"]
expire_command = ["false", "{queue_id}"]
`+oneHoldLimit)
	td := startTestDaemon(t, cfgPath)
	for i := range 2 { // the first is within the limit
		forgedEndOfMessage(t, td.policyAddr, "mallory", fmt.Sprintf("ALL%d", i))
	}
	out, err := cli(t, "--config", cfgPath, "quarantine", "list")
	if err != nil || !strings.Contains(out, "1 message\n") {
		t.Fatalf("list: %v\n%s", err, out)
	}
	td.stop()
	time.Sleep(1100 * time.Millisecond) // older than max_age
	td = startTestDaemon(t, cfgPath)    // expiry runs at start
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, _ = cli(t, "--config", cfgPath, "quarantine", "list", "--json")
		if strings.Contains(out, "past max_age") || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(out, `"state": "held"`) || !strings.Contains(out, "past max_age") {
		t.Fatalf("held entry without a queue ID after expiry:\n%s\nlog:\n%s", out, td.logs.String())
	}
	if !strings.Contains(td.logs.String(), "level=ERROR") {
		t.Fatalf("kept entry not logged as an error:\n%s", td.logs.String())
	}
	out, err = cli(t, "--config", cfgPath, "status")
	if err != nil || !strings.Contains(out, "quarantine: 1 held, 0 frozen, 1 kept past max_age") ||
		!strings.Contains(out, "quarantine last error") || !strings.Contains(out, "no MTA queue ID") {
		t.Fatalf("status does not show the kept message:\n%s %v", out, err)
	}
}
