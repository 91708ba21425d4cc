package admin

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/ratelimitd/ratelimitd/events"
	"github.com/ratelimitd/ratelimitd/internal/plural"
	"github.com/ratelimitd/ratelimitd/internal/termsafe"
	"github.com/ratelimitd/ratelimitd/notify"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/quarantine/lifecycle"
	"github.com/ratelimitd/ratelimitd/ratestore"
	"github.com/ratelimitd/ratelimitd/ratestore/redisstore"
)

// Status is what GET /v1/status returns and `ratelimitd status` prints.
type Status struct {
	Version     string              `json:"version"`
	Started     time.Time           `json:"started"`
	Uptime      string              `json:"uptime"`
	Config      string              `json:"config"`
	Listeners   []string            `json:"listeners"`
	TrackedKeys int                 `json:"tracked_keys"`
	Requests    int64               `json:"requests"`
	ByAction    map[string]int64    `json:"decisions"` // requests by answer
	Messages    map[string]int64    `json:"messages"`  // messages not passed, by action
	Faults      int64               `json:"faults"`
	BadInput    int64               `json:"bad_input"`
	Limits      []string            `json:"limits"`
	Stages      []policy.StageCount `json:"stages"` // requests per front end and protocol state
	// MessagesInFlight: asked about, admitted so far, not yet at
	// END-OF-MESSAGE (policy.Engine.MessagesOpen).
	MessagesInFlight int                        `json:"messages_in_flight"`
	Advice           []string                   `json:"advice,omitempty"`         // limits that cannot count as the MTA is hooked up
	Notify           *notify.Stats              `json:"notify,omitempty"`         // nil: notifications off
	RestartNeeded    []string                   `json:"restart_needed,omitempty"` // changed keys that need a restart
	Connections      []ConnStatus               `json:"connections"`
	FrontEnds        []FrontEndStatus           `json:"front_ends,omitempty"`
	Quarantine       *lifecycle.Health          `json:"quarantine,omitempty"`
	State            *StateStatus               `json:"state,omitempty"`
	Events           *events.Stats              `json:"events,omitempty"`    // since start; nil: events off
	Store            *redisstore.FailoverStatus `json:"store,omitempty"`     // nil: the local store
	RedisTime        time.Time                  `json:"redis_time,omitzero"` // Redis's TIME; zero without Redis
}

// ConnStatus is one front end's connection budget: open, the caps and
// the connections it closed, by reason (max_connections, max_per_client,
// evicted, first_request_timeout).
type ConnStatus struct {
	FrontEnd  string           `json:"front_end"`
	Open      int              `json:"open"`
	Max       int              `json:"max"`
	PerClient int              `json:"max_per_client"`
	Closed    map[string]int64 `json:"closed"`
}

// String is the front end's line in `ratelimitd status`.
func (c ConnStatus) String() string {
	return fmt.Sprintf("%s %d open of max %d (%d per client); closed: %d at max_connections, %d at max_per_client, %d idle for a new one, %d first_request_timeout",
		c.FrontEnd, c.Open, c.Max, c.PerClient, c.Closed["max_connections"], c.Closed["max_per_client"], c.Closed["evicted"], c.Closed["first_request_timeout"])
}

// FrontEndStatus is one front-end listener's last and total connections.
type FrontEndStatus struct {
	FrontEnd    string    `json:"front_end"`
	Listen      string    `json:"listen"`
	LastConnect time.Time `json:"last_connect,omitzero"`
	Connections int64     `json:"connections"`
}

// String is the listener's line in `ratelimitd status`.
func (f FrontEndStatus) String() string {
	if f.LastConnect.IsZero() {
		return fmt.Sprintf("%s %s: no MTA has connected since start", f.FrontEnd, f.Listen)
	}
	return fmt.Sprintf("%s %s: MTA last connected %s (%s ago), %d connections", f.FrontEnd, f.Listen,
		f.LastConnect.Format(time.RFC3339), time.Since(f.LastConnect).Round(time.Second), f.Connections)
}

// StateStatus is the local rate state's health (ratestore.Stats).
type StateStatus struct {
	LastFlush          time.Time `json:"last_flush"` // zero: never
	LastFlushAge       string    `json:"last_flush_age"`
	LastError          string    `json:"last_error,omitempty"` // of the last failed flush or compaction
	LastErrorAt        time.Time `json:"last_error_at"`
	FlushFailures      int64     `json:"flush_failures"`
	CompactionFailures int64     `json:"compaction_failures"`
	Pending            int       `json:"pending"` // changes waiting for a flush
	MaxKeys            int       `json:"max_keys"`
	Evicted            int64     `json:"evicted"`
	Refused            int64     `json:"keys_refused"` // new keys refused under pressure
	Malformed          int64     `json:"malformed"`
	Converted          int64     `json:"converted"`
	NotConverted       int64     `json:"not_converted"`
	Unconfigured       int64     `json:"unconfigured"`
	RecordsLost        int64     `json:"records_lost"` // set aside by serve --accept-state-loss
	KeysLost           int64     `json:"keys_lost"`
}

// NewStateStatus reads p's health now.
func NewStateStatus(p *ratestore.Persistent) *StateStatus {
	st, m := p.Stats(), p.Memory()
	s := &StateStatus{LastFlush: st.LastFlushAt, LastError: st.LastError, LastErrorAt: st.LastErrorAt,
		FlushFailures: st.Failures, CompactionFailures: st.CompactionFailures, Pending: st.Pending,
		MaxKeys: m.Cap(), Evicted: m.Evicted(), Refused: m.Refused(), Malformed: st.Malformed,
		Converted: st.Converted, NotConverted: st.NotConverted, Unconfigured: st.Unconfigured, LastFlushAge: "never",
		RecordsLost: st.Lost, KeysLost: st.LostKeys}
	if !st.LastFlushAt.IsZero() {
		s.LastFlushAge = time.Since(st.LastFlushAt).Round(time.Second).String()
	}
	return s
}

// Print writes st as `ratelimitd status` shows it, one fact a line.
func (st *Status) Print(w io.Writer) {
	fmt.Fprintf(w, "ratelimitd %s, up %s (since %s)\n", st.Version, st.Uptime, st.Started.Format(time.RFC3339))
	fmt.Fprintf(w, "config: %s\n", st.Config)
	if len(st.RestartNeeded) > 0 {
		fmt.Fprintf(w, "restart needed to apply: %s\n", strings.Join(st.RestartNeeded, ", "))
	}
	for _, l := range st.Listeners {
		fmt.Fprintf(w, "listening: %s\n", l)
	}
	for _, l := range st.Limits {
		fmt.Fprintf(w, "limit %s\n", l)
	}
	printStoreStatus(w, st.Store, st.RedisTime)
	fmt.Fprintf(w, "tracked keys: %d\n", st.TrackedKeys)
	fmt.Fprintf(w, "requests: %d (%d passed)\n", st.Requests, st.ByAction[policy.Pass.String()])
	fmt.Fprintf(w, "messages not passed, each counted once:\n")
	for a := policy.Pass + 1; a <= policy.Reject; a++ {
		fmt.Fprintf(w, "  %-7s %d\n", a, st.Messages[a.String()])
	}
	fmt.Fprintf(w, "faults (answered DUNNO): %d\nbad input (connections closed): %d\n", st.Faults, st.BadInput)
	if len(st.Stages) == 0 {
		fmt.Fprintf(w, "asked at: nothing yet\n")
	}
	for _, sc := range st.Stages {
		fmt.Fprintf(w, "asked at: %s %s (%d requests)\n", sc.Via, sc.State, sc.Requests)
	}
	printInFlight(w, st)
	for _, a := range st.Advice {
		fmt.Fprintf(w, "warning: %s\n", a)
	}
	for _, c := range st.Connections {
		fmt.Fprintf(w, "connections: %s\n", c)
	}
	for _, f := range st.FrontEnds {
		fmt.Fprintf(w, "front end %s\n", termsafe.Line(f.String()))
	}
	if n := st.Notify; n != nil {
		fmt.Fprintf(w, "notifications: %d sent, %d failed, %d dropped (queue full), %d waiting\n", n.Sent, n.Failed, n.Dropped, n.Waiting)
	}
	if q := st.Quarantine; q != nil {
		fmt.Fprintf(w, "quarantine: %d held, %d frozen, %d kept past max_age, %d keys suspended, %d failures\n",
			q.Held, q.Frozen, q.KeptPastMaxAge, q.Suspended, q.Failures)
		if q.LastError != "" {
			fmt.Fprintf(w, "quarantine last error (%s): %s\n", q.LastErrorAt.Format(time.RFC3339), termsafe.Line(q.LastError))
		}
	}
	if st.State != nil {
		st.State.Print(w)
	}
	if e := st.Events; e != nil {
		fmt.Fprintf(w, "events stored: %d refusals and warnings, %s; %d waiting, %d flush failures\n",
			e.Stored, plural.N(e.ActionsStored, "action"), e.Pending, e.Failures)
		fmt.Fprintf(w, "events since start: %d written, %d refusals coalesced, %d dropped (%s), pruned %d refusals and %s\n",
			e.Written, e.Coalesced, e.Dropped, plural.N(int(e.ActionsDropped), "action"), e.Pruned, plural.N(int(e.ActionsPruned), "action"))
		if e.LastError != "" {
			fmt.Fprintf(w, "events last error: %s\n", termsafe.Line(e.LastError))
		}
	}
}

// printInFlight prints messages in flight where END-OF-MESSAGE ends them.
func printInFlight(w io.Writer, st *Status) {
	for _, sc := range st.Stages {
		if sc.State == policy.StateEndOfMessage || sc.Via == policy.ViaMilter {
			fmt.Fprintf(w, "messages in flight: %d\n", st.MessagesInFlight)
			return
		}
	}
	if len(st.Stages) > 0 {
		fmt.Fprintf(w, "messages in flight: not counted (no END-OF-MESSAGE request seen: the MTA asks only at %s)\n",
			st.Stages[0].State)
	}
}

// Print writes s as `ratelimitd status` shows it.
func (s *StateStatus) Print(w io.Writer) {
	flushed := "never flushed yet"
	if !s.LastFlush.IsZero() || s.LastFlushAge != "never" && s.LastFlushAge != "" {
		flushed = "last flush " + s.LastFlushAge + " ago"
	}
	fmt.Fprintf(w, "rate state: %s, %d flush failures, %d compaction failures, %d changes pending\n",
		flushed, s.FlushFailures, s.CompactionFailures, s.Pending)
	if s.LastError != "" {
		fmt.Fprintf(w, "rate state last error (%s): %s\n", s.LastErrorAt.Format(time.RFC3339), s.LastError)
	}
	fmt.Fprintf(w, "rate keys: max %d, evicted %d, new keys refused under pressure %d\n", s.MaxKeys, s.Evicted, s.Refused)
	if s.Malformed+s.Converted+s.Unconfigured > 0 {
		fmt.Fprintf(w, "rate state at start: %d malformed dropped, %d converted to changed limits, %d of unconfigured limits kept\n",
			s.Malformed, s.Converted, s.Unconfigured)
	}
	if s.NotConverted > 0 {
		fmt.Fprintf(w, "RATE STATES NOT CONVERTED to changed limits: %d, kept as they were (a bug: see the ERROR log lines)\n", s.NotConverted)
	}
	if s.RecordsLost > 0 {
		fmt.Fprintf(w, "STATE LOST at start: %d unreadable records set aside (--accept-state-loss), up to %d keys\n",
			s.RecordsLost, s.KeysLost)
	}
}

// printStoreStatus prints the Redis lines; now is Redis's TIME or zero.
func printStoreStatus(w io.Writer, s *redisstore.FailoverStatus, now time.Time) {
	if s == nil {
		return
	}
	state := "shared (redis answering)"
	switch {
	case s.Degraded && !s.Connected:
		state = "DEGRADED, redis not reached since start, deciding per on_redis_error=" + s.OnError
	case s.Degraded:
		state = "DEGRADED since " + s.Since.Format(time.RFC3339) + ", deciding per on_redis_error=" + s.OnError
		if s.Cluster {
			state += fmt.Sprintf(" for %d of 16384 slots", s.SlotsDown)
		}
	}
	fmt.Fprintf(w, "store: redis, %s; outages %d, recoveries %d, %.1fs degraded in all\n", state, s.Switches, s.Recoveries,
		s.DegradedSeconds)
	if s.LastError != "" {
		fmt.Fprintf(w, "store: redis error: %s\n", s.LastError)
	}
	if now.IsZero() {
		fmt.Fprintf(w, "store: redis clock not read (redis not answering): decisions use this host's clock %s\n",
			clockOffset(s.ClockOffset))
	} else {
		fmt.Fprintf(w, "store: redis clock %s (TIME, the clock of decisions and rate show), this host's clock %s\n",
			now.UTC().Format(time.RFC3339Nano), clockOffset(s.ClockOffset))
	}
	if n := s.LocalDecisions["outage"] + s.LocalDecisions["failed"]; n > 0 || s.Merges > 0 || s.PendingMerges > 0 {
		fmt.Fprintf(w, "store: %d requests decided locally (%d in outages, %d failed calls); %d merges added %d states to redis, %d pending\n",
			n, s.LocalDecisions["outage"], s.LocalDecisions["failed"], s.Merges, s.StatesMerged, s.PendingMerges)
	}
	if s.StatesRestored > 0 {
		fmt.Fprintf(w, "store: %d states redis had lost (FLUSHALL, a restart without persistence, eviction) restored from this host's copies\n", s.StatesRestored)
	}
}

// clockOffset describes Redis's clock minus this host's, to the second.
func clockOffset(d time.Duration) string {
	d = d.Round(time.Second)
	switch {
	case d > 0:
		return d.String() + " behind redis"
	case d < 0:
		return (-d).String() + " ahead of redis"
	}
	return "level with redis"
}
