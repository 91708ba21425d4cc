//go:build integration

package main

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/ratelimitd/ratelimitd/internal/mtatest"
	"github.com/ratelimitd/ratelimitd/quarantine"
)

// TestIntegrationHeldEntryCompleteAtOnce: with check_policy_service at RCPT
// only (no queue ID, no size when Postfix asks), a held message is listed
// right after Postfix accepted it with its queue ID, the size postqueue
// reports and its subject, not only after the periodic completion or a
// quarantine show; three times over.
func TestIntegrationHeldEntryCompleteAtOnce(t *testing.T) {
	dir := t.TempDir()
	port := freePort(t)
	sink := mtatest.StartSink(t)
	pf := mtatest.StartPostfix(t, mtatest.PostfixOptions{SinkAddr: sink.Addr(), PolicyService: fmt.Sprintf("inet:127.0.0.1:%d", port),
		ExtraMainCF: map[string]string{"smtpd_end_of_data_restrictions": ""}})
	cfgPath := writeConfig(t, dir, fmt.Sprintf("127.0.0.1:%d", port), "\n[quarantine]\n"+postfixHoldCommands(pf)+`
[[limit]]
name = "onehold"
key = ["sasl_username"]
limit = 1
period = "1h"
mode = "strict"
action = "hold"
`)
	startTestDaemon(t, cfgPath)
	for _, user := range []string{"alice", "bob", "carol"} {
		var subject string
		for i := range 2 {
			subject = fmt.Sprintf("report %d from %s", i+1, user)
			if err := mtatest.Send(t, pf.Addr(), mtatest.Mail{Login: user, ClientAddr: "192.0.2.7", From: user + "@example.org",
				To: []string{"r@example.net"}, Data: mtatest.BuildMessage(user+"@example.org", "r@example.net", subject, "Figures attached.\n")}); err != nil {
				t.Fatalf("%s message %d: %v", user, i+1, err)
			}
		}
		out, err := cli(t, "--config", cfgPath, "quarantine", "list", "--key", user, "--json")
		if err != nil {
			t.Fatal(err)
		}
		var es []quarantine.Entry
		if err := json.Unmarshal([]byte(out), &es); err != nil || len(es) != 1 {
			t.Fatalf("%s: quarantine list --json: %v\n%s", user, err, out)
		}
		e := es[0]
		var size int64
		for _, q := range pf.Queue(t) {
			if q.QueueID == e.QueueID {
				size = q.MessageSize
			}
		}
		if e.QueueID == "" || e.Subject != subject || size == 0 || e.Size != size {
			t.Fatalf("%s: held entry listed at once: queue ID %q, subject %q, size %d (postqueue: %d); want the queue's", user, e.QueueID, e.Subject, e.Size, size)
		}
	}
}
