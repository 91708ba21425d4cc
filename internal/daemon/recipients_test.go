package daemon

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/statedb"
)

func (td *testDaemon) rcpt(user, rcpt string) string {
	td.t.Helper()
	return td.ask("protocol_state=RCPT", "sasl_username="+user, "sender="+user+"@example.org",
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
// nothing and a third, new one is deferred. The baseline limit's rate
// carries its allowance and learned peak.
func TestDaemonRecipientSetsPersist(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t, dir, loopback(t), uniqueBaselineLimits)
	td := startTestDaemon(t, cfg)
	for _, r := range []string{"a@example.net", "b@example.net"} {
		if got := td.rcpt("uma", r); got != "action=DUNNO" {
			t.Fatalf("%s: %s", r, got)
		}
	}
	rates, err := td.Rates().Lookup(t.Context(), time.Now(), "uma")
	if i := slices.IndexFunc(rates, func(r policy.KeyRate) bool { return r.Limit == "usual" }); err != nil || i < 0 ||
		!rates[i].Baseline || rates[i].Peak != 0 || rates[i].Cap != 100 || rates[i].Max != 50 || rates[i].Rate < 1.99 || rates[i].Rate > 2 {
		t.Errorf("uma's rates: %+v %v", rates, err)
	}
	td.stop()

	db, err := statedb.Open(filepath.Join(dir, "state", "ratelimitd.db"), false, 0)
	if err != nil {
		t.Fatal(err)
	}
	var pairs []string // "limit|key" of the stored recipient sets
	err = db.View(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("rcptsets")).ForEach(func(k, _ []byte) error {
			pairs = append(pairs, strings.Replace(string(k), "\x00", "|", 1))
			return nil
		})
	})
	db.Close()
	if err != nil || !slices.Equal(pairs, []string{"uniq|uma"}) {
		t.Fatalf("stored pairs %v %v", pairs, err)
	}

	td = startTestDaemon(t, cfg)
	for _, r := range []string{"a@example.net", "B@example.net"} {
		if got := td.rcpt("uma", r); got != "action=DUNNO" {
			t.Fatalf("known recipient %s after restart: %s", r, got)
		}
	}
	if got := td.rcpt("uma", "c@example.net"); !strings.HasPrefix(got, "action=450 4.7.1") {
		t.Fatalf("new recipient over the limit after restart: %s", got)
	}
}
