package daemon

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ratelimitd/ratelimitd/policy"
)

// Stored rate state is never forgiven silently by a reload or restart.

// refuseMallory sends mallory's 200 messages of the hourly default limit
// and checks that the 201st is deferred.
func (td *testDaemon) refuseMallory() {
	td.t.Helper()
	for i := range 200 {
		if got := td.message("mallory", "END-OF-MESSAGE"); got != "action=DUNNO" {
			td.t.Fatalf("mallory message %d: %s", i+1, got)
		}
	}
	td.deferred("mallory")
}

// deferred checks that user's next message is deferred.
func (td *testDaemon) deferred(user string) {
	td.t.Helper()
	if got := td.message(user, "END-OF-MESSAGE"); !strings.HasPrefix(got, "action=450 4.7.1") {
		td.t.Fatalf("%s is let through: %s", user, got)
	}
}

// Neither a reload that drops a limit (and the periodic sweep after it)
// nor a start-up without it forgets its states.
func TestDroppedLimitKeepsState(t *testing.T) {
	dir, addr := t.TempDir(), loopback(t)
	cfg := testConfig(t, dir, addr, "")
	full, _ := os.ReadFile(cfg)
	dailyOnly := func() {
		testConfig(t, dir, addr, "[[limit]]"+testLimits[strings.Index(testLimits, "\nname = \"daily\""):])
	}
	td := startTestDaemon(t, cfg)
	td.refuseMallory()
	dailyOnly()
	td.Reload()
	if n := len(td.engine.Limits()); n != 1 {
		t.Fatalf("reload to one limit: %d limits", n)
	}
	if n := td.state.Sweep(); n != 0 {
		t.Errorf("the sweep after the reload dropped %d states", n)
	}
	if err := td.state.Flush(); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(cfg, full, 0o644)
	td.Reload()
	td.deferred("mallory")

	// A start-up with the limit commented out, then one with it back.
	td.stop()
	dailyOnly()
	td = startTestDaemon(t, cfg)
	if n := td.state.Sweep(); n != 0 {
		t.Errorf("the sweep after a start-up without the limit dropped %d states", n)
	}
	td.stop()
	os.WriteFile(cfg, full, 0o644)
	startTestDaemon(t, cfg).deferred("mallory")
}

// A reload from exponential to gcra must not read the stored {time,
// rate} as an arrival time long past, letting a deferred sender through:
// its state is converted.
func TestReloadAlgorithmChangeKeepsRefused(t *testing.T) {
	cfg := testConfig(t, t.TempDir(), loopback(t), "")
	td := startTestDaemon(t, cfg)
	td.refuseMallory()
	text, _ := os.ReadFile(cfg)
	gcra := strings.Replace(string(text), `period = "1h"`, "period = \"1h\"\nalgorithm = \"gcra\"", 1)
	os.WriteFile(cfg, []byte(gcra), 0o644)
	td.Reload()
	if a := td.engine.Limits()[0].Algorithm; a != "gcra" {
		t.Fatalf("reload: hourly is %s", a)
	}
	td.deferred("mallory")
	if got := td.message("carol", "END-OF-MESSAGE"); got != "action=DUNNO" {
		t.Fatalf("a new sender after the reload: %s", got)
	}
	// And after a restart with the gcra configuration.
	td.stop()
	startTestDaemon(t, cfg).deferred("mallory")
}

// With the daemon stopped, `--config other.toml rate list` (OpenRates)
// deleted every state of the limits other.toml does not name. Offline
// reads open the file read-only.
func TestOfflineReadWithOtherConfigKeepsState(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t, dir, loopback(t), "")
	td := startTestDaemon(t, cfg)
	td.refuseMallory()
	td.stop()
	text, _ := os.ReadFile(cfg)
	server, _, _ := strings.Cut(string(text), "[[limit]]")
	other := filepath.Join(dir, "other.toml")
	os.WriteFile(other, []byte(server+"[[limit]]\nname = \"weekly\"\nkey = [\"sender\"]\nlimit = 5000\nperiod = \"7d\"\n"), 0o644)
	dbPath := filepath.Join(dir, "state", "ratelimitd.db")
	before, err := os.ReadFile(dbPath)
	if err != nil {
		t.Fatal(err)
	}
	read := func(path string) []policy.KeyRate {
		t.Helper()
		l := openRates(t, path)
		defer l.Close()
		for _, over := range []bool{false, true} {
			if _, err := l.Rates(t.Context(), 20, over); err != nil {
				t.Fatalf("rate list (over %v): %v", over, err)
			}
		}
		kr, err := l.Rate(t.Context(), "mallory")
		if err != nil {
			t.Fatalf("rate show mallory: %v", err)
		}
		return kr
	}
	read(other)
	if after, _ := os.ReadFile(dbPath); !bytes.Equal(before, after) {
		t.Fatal("an offline read with another configuration changed the state file")
	}
	if kr := read(cfg); !slices.ContainsFunc(kr, func(r policy.KeyRate) bool { return r.Limit == "hourly" }) {
		t.Fatalf("rate show with the daemon's configuration: %+v", kr)
	}
	startTestDaemon(t, cfg).deferred("mallory")
}

// max_keys 1,000 flooded with 1,500 distinct senders must not evict an
// over-limit sender.
func TestKeyFloodKeepsOffender(t *testing.T) {
	td := startTestDaemon(t, testConfig(t, t.TempDir(), loopback(t), "max_keys = 1000\n"))
	td.refuseMallory()
	for i := range 1500 {
		td.message(fmt.Sprintf("flood%04d", i), "END-OF-MESSAGE")
	}
	td.deferred("mallory")
	if st := td.Status().State; st.Evicted == 0 || st.MaxKeys != 960 {
		t.Errorf("status after the flood: %+v", st)
	}
	if out := td.statusText(); !strings.Contains(out, "rate keys: max 960, evicted ") {
		t.Errorf("status:\n%s", out)
	}
}
