package main

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ratelimitd/ratelimitd/ratestore"
	"github.com/ratelimitd/ratelimitd/statedb"
)

func rcptQuery(t testing.TB, addr, user, rcpt string) string {
	t.Helper()
	return policyAsk(t, addr, "protocol_state=RCPT", "sasl_username="+user, "sender="+user+"@example.org",
		"recipient="+rcpt, "client_address=192.0.2.9")
}

const uniqueBaselineLimits = `
[[limit]]
name = "uniq"
key = ["sasl_username"]
per = "addr"
limit = 2
period = "1h"

[[limit]]
name = "usual"
key = ["sasl_username"]
algorithm = "baseline"
floor = 50
cap = 100
period = "1h"
`

// The daemon keeps a per = "addr" limit's recipients across a restart (the
// "rcptsets" bucket): after the restart the two known recipients cost
// nothing and a third, new one is deferred. rate show prints the baseline
// limit's allowance and learned peak.
func TestDaemonRecipientSetsPersist(t *testing.T) {
	dir := t.TempDir()
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cfg := writeConfig(t, dir, addr, uniqueBaselineLimits)
	td := startTestDaemon(t, cfg)
	for _, r := range []string{"a@example.net", "b@example.net"} {
		if got := rcptQuery(t, addr, "uma", r); got != "action=DUNNO" {
			t.Fatalf("%s: %s", r, got)
		}
	}
	out, err := cli(t, "-c", cfg, "rate", "show", "uma")
	if err != nil || !strings.Contains(out, "baseline: learned peak 0.0, max is the allowance, cap 100") ||
		!strings.Contains(out, "usual  2     50.0") {
		t.Errorf("rate show: %v\n%s", err, out)
	}
	td.stop()

	db, err := statedb.Open(filepath.Join(dir, "state", "ratelimitd.db"), false, 0)
	if err != nil {
		t.Fatal(err)
	}
	pairs, err := ratestore.StoredRecipientPairs(db)
	db.Close()
	if err != nil || !slices.Equal(pairs, []string{"uniq|uma"}) {
		t.Fatalf("stored pairs %v %v", pairs, err)
	}

	startTestDaemon(t, cfg)
	for _, r := range []string{"a@example.net", "B@example.net"} {
		if got := rcptQuery(t, addr, "uma", r); got != "action=DUNNO" {
			t.Fatalf("known recipient %s after restart: %s", r, got)
		}
	}
	if got := rcptQuery(t, addr, "uma", "c@example.net"); !strings.HasPrefix(got, "action=450 4.7.1") {
		t.Fatalf("new recipient over the limit after restart: %s", got)
	}
}
