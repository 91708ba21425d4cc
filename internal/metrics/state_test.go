package metrics

import (
	"context"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.etcd.io/bbolt"

	"github.com/ratelimitd/ratelimitd/admin"
	"github.com/ratelimitd/ratelimitd/events"
	"github.com/ratelimitd/ratelimitd/ratelimit"
	"github.com/ratelimitd/ratelimitd/ratestore"
)

// TestRefusedConversionsInMetricsAndStatus: a state the conversion to a
// changed period refuses (a NaN rate) is counted in
// ratelimitd_state_not_converted_total and shown by status.
func TestRefusedConversionsInMetricsAndStatus(t *testing.T) {
	db, err := bbolt.Open(filepath.Join(t.TempDir(), "state.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	hourly := ratelimit.Limit{Limit: 5, Period: time.Hour}
	p, err := ratestore.NewPersistent(db, ratestore.NewMemory(ratestore.MemoryOptions{}),
		ratestore.PersistOptions{Limits: map[string]ratelimit.Limit{"hourly": hourly}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	nan := ratelimit.State{Time: time.Now().UnixNano(), Rate: math.NaN()}
	p.Update(context.Background(), "hourly", "alice", func(ratelimit.State) (ratelimit.State, bool) { return nan, true })
	hourly.Period = 2 * time.Hour
	if err := p.Reconfigure(map[string]ratelimit.Limit{"hourly": hourly}, func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(StateCollectors(p)...)
	want := `
# HELP ratelimitd_state_not_converted_total Rate states whose conversion to a limit's changed parameters was refused (a NaN in the state, or a result that is not finite: a bug, logged at ERROR); they were kept as they were.
# TYPE ratelimitd_state_not_converted_total counter
ratelimitd_state_not_converted_total 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "ratelimitd_state_not_converted_total"); err != nil {
		t.Error(err)
	}
	st := admin.NewStateStatus(p)
	var out strings.Builder
	st.Print(&out)
	if st.NotConverted != 1 || !strings.Contains(out.String(), "RATE STATES NOT CONVERTED to changed limits: 1,") {
		t.Errorf("status: not_converted %d:\n%s", st.NotConverted, out.String())
	}
}

// TestEventFamiliesFromStart: the event-log families are present at zero
// with no log (events off) and before any event, and count the pruned
// and coalesced refusals by class once there are some.
func TestEventFamiliesFromStart(t *testing.T) {
	zero := `
# HELP ratelimitd_events_pruned_total Stored events deleted by [events] max_age and max_count (refusal) or actions_max_age and actions_max_count (action).
# TYPE ratelimitd_events_pruned_total counter
ratelimitd_events_pruned_total{class="action"} 0
ratelimitd_events_pruned_total{class="refusal"} 0
`
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(EventCollectors(nil)...)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(zero), "ratelimitd_events_pruned_total"); err != nil {
		t.Error(err)
	}
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 8 {
		t.Errorf("%d series with events off (%v), want 8", n, err)
	}

	db, err := bbolt.Open(filepath.Join(t.TempDir(), "state.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	t0 := time.Now()
	l, err := events.Open(db, events.Options{MaxCount: 2})
	if err != nil {
		t.Fatal(err)
	}
	reg = prometheus.NewPedanticRegistry()
	reg.MustRegister(EventCollectors(l)...)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(zero), "ratelimitd_events_pruned_total"); err != nil {
		t.Error(err)
	}
	l.Record(events.Event{Time: t0, Action: events.Reload})
	for i := range 5 {
		l.Record(events.Event{Time: t0, Key: string(rune('a' + i)), Limit: "hourly", Action: events.Defer})
		l.Record(events.Event{Time: t0, Key: string(rune('a' + i)), Limit: "hourly", Action: events.Defer})
	}
	l.Tick()
	want := `
# HELP ratelimitd_events_coalesced_total Refusals and warnings added to the count of an event of the same key, limit and action in the same [events] coalesce interval.
# TYPE ratelimitd_events_coalesced_total counter
ratelimitd_events_coalesced_total 5
# HELP ratelimitd_events_pruned_total Stored events deleted by [events] max_age and max_count (refusal) or actions_max_age and actions_max_count (action).
# TYPE ratelimitd_events_pruned_total counter
ratelimitd_events_pruned_total{class="action"} 0
ratelimitd_events_pruned_total{class="refusal"} 3
# HELP ratelimitd_events_stored Events in the state file.
# TYPE ratelimitd_events_stored gauge
ratelimitd_events_stored{class="action"} 1
ratelimitd_events_stored{class="refusal"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "ratelimitd_events_pruned_total",
		"ratelimitd_events_coalesced_total", "ratelimitd_events_stored"); err != nil {
		t.Error(err)
	}
}
