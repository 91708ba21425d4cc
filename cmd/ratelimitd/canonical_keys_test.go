package main

import (
	"fmt"
	"strings"
	"testing"
)

const senderStrict3 = `
[[limit]]
name = "bysender"
key = ["sender"]
limit = 3
period = "1h"
mode = "strict"
action = "defer"
`

// TestUpgradeMergesOldKeySpellings: a state file written with keys as
// sent (as a release without canonical keys did) is read by a daemon that
// folds keys: the offender's state moves to its canonical key, and rate
// show finds it in any spelling; the upgrade forgives nobody.
func TestUpgradeMergesOldKeySpellings(t *testing.T) {
	dir := t.TempDir()
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	old := writeConfig(t, dir, addr, "[policy]\naddress_case = \"keep\"\nrecipient_delimiter = \"\"\n"+senderStrict3)
	td := startTestDaemon(t, old)
	for i := range 6 {
		sendPolicy(t, td.policyAddr, fmt.Sprintf("protocol_state=RCPT\nsender=Alice+news@Example.ORG\nrecipient=r%d@example.net\n"+
			"client_address=192.0.2.7\ninstance=old.%d\n", i, i))
	}
	td.stop()

	cfg := writeConfig(t, dir, addr, senderStrict3)
	td = startTestDaemon(t, cfg)
	defer td.stop()
	out, err := cli(t, "--config", cfg, "rate", "show", "ALICE+other@example.org")
	if err != nil || !strings.Contains(out, "alice@example.org") || strings.Contains(out, "Alice+news") {
		t.Fatalf("rate show after upgrade: %v\n%s", err, out)
	}
	// Still refused: 6 counted (strict) against 3 per hour.
	reply := sendPolicy(t, td.policyAddr, "protocol_state=RCPT\nsender=alice@example.org\nrecipient=x@example.net\nclient_address=192.0.2.7\ninstance=new.1\n")
	if !strings.Contains(reply, "action=DEFER") && !strings.Contains(reply, "action=450") {
		t.Fatalf("merged offender admitted: %q", reply)
	}
}
