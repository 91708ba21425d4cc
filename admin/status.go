package admin

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/ratelimitd/ratelimitd/notify"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/quarantine"
	"github.com/ratelimitd/ratelimitd/quarantine/lifecycle"
	"github.com/ratelimitd/ratelimitd/ratestore"
	"github.com/ratelimitd/ratelimitd/ratestore/redisstore"
)

// Status is what GET /v1/status returns and `ratelimitd status` prints.
type Status struct {
	Version     string    `json:"version"`
	Started     time.Time `json:"started"`
	Uptime      string    `json:"uptime"`
	Config      string    `json:"config"`
	Listeners   []string  `json:"listeners"`
	TrackedKeys int       `json:"tracked_keys"`
	Requests    int64     `json:"requests"`
	// ByAction counts the requests answered with each action (a message
	// asked about at several requests counts at each).
	ByAction map[string]int64 `json:"decisions"`
	// Messages counts the messages refused, held, frozen or marked, by
	// action: each once, however many requests repeated its verdict.
	Messages map[string]int64 `json:"messages"`
	Faults   int64            `json:"faults"`
	BadInput int64            `json:"bad_input"`
	Limits   []string         `json:"limits"`
	// Stages are the protocol states each front end has asked at since
	// start (the hook layout the daemon learned), with request counts.
	Stages []policy.StageCount `json:"stages"`
	// MessagesInFlight is the number of messages whose per-message
	// bookkeeping is remembered (bounded).
	MessagesInFlight int `json:"messages_in_flight"`
	// Advice lists limits that cannot count as the MTA is hooked up, in
	// plain words with the line to add.
	Advice []string `json:"advice,omitempty"`
	// Notify counts notifications; nil when none are configured.
	Notify *notify.Stats `json:"notify,omitempty"`
	// RestartNeeded lists the settings (TOML keys) of the configuration
	// file that differ from the running ones and take effect only after a
	// restart (listeners, state, quarantine, milter); empty when the
	// running daemon matches its file.
	RestartNeeded []string `json:"restart_needed,omitempty"`
	// Connections are the policy and milter connections against their
	// cap (server.max_connections).
	Connections ConnStatus `json:"connections"`
	// FrontEnds says, per policy and milter listener, when an MTA last
	// connected since start.
	FrontEnds []FrontEndStatus `json:"front_ends,omitempty"`
	// Quarantine: held/frozen counts and the quarantine's faults.
	Quarantine *lifecycle.Health `json:"quarantine,omitempty"`
	// State is the rate state's flush health and key pressure.
	State *StateStatus `json:"state,omitempty"`
	// Store is the Redis backend's state (nil with the local backend).
	Store *redisstore.FailoverStatus `json:"store,omitempty"`
	// RedisTime is Redis's clock (TIME) as the status was read: the
	// clock the decisions, `rate show` and `rate list` use with the
	// Redis backend. It is zero with the local backend and while Redis
	// does not answer (decisions then use this host's clock corrected
	// by Store.ClockOffset, Redis's clock minus this host's when last
	// read).
	RedisTime time.Time `json:"redis_time,omitzero"`
}

// ConnStatus is the connection cap's state in Status: connections open
// now, the cap, and how many were closed at once because it was reached.
type ConnStatus struct {
	Open    int   `json:"open"`
	Max     int   `json:"max"`
	Refused int64 `json:"refused"`
}

// FrontEndStatus is one front-end listener in Status: when an MTA last
// connected to it (the zero time: never since start) and how many
// connections it accepted.
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

// StateStatus is the rate-state part of `ratelimitd status`: the health of
// the write-behind to BoltDB and the pressure on the key bound (max_keys).
type StateStatus struct {
	// LastFlush is when a flush last succeeded, LastFlushAge how long ago
	// (rounded to the second); the zero time means never.
	LastFlush    time.Time `json:"last_flush"`
	LastFlushAge string    `json:"last_flush_age"`
	// LastError is the last failed flush's or compaction's error, at
	// LastErrorAt; empty when none failed since the start.
	LastError          string    `json:"last_error,omitempty"`
	LastErrorAt        time.Time `json:"last_error_at"`
	FlushFailures      int64     `json:"flush_failures"`
	CompactionFailures int64     `json:"compaction_failures"`
	// Pending is how many changes wait for a flush after a failed one.
	Pending int `json:"pending"`
	// MaxKeys is the bound on (limit, key) pairs; Evicted how many were
	// evicted to respect it; Refused how many new keys were refused (fail
	// open) because every evictable candidate was over or near its limit.
	MaxKeys int   `json:"max_keys"`
	Evicted int64 `json:"evicted"`
	Refused int64 `json:"keys_refused"`
	// Malformed is how many stored states were dropped at start-up as not
	// states (NaN or infinite rate, wrong length); Converted how many were
	// converted to changed limit parameters; Unconfigured how many states
	// of limits the configuration does not name were restored and kept;
	// NotConverted how many conversions were refused (a NaN in the state,
	// or a result that is not finite: a bug, logged at ERROR), the states
	// kept as they were.
	Malformed    int64 `json:"malformed"`
	Converted    int64 `json:"converted"`
	NotConverted int64 `json:"not_converted"`
	Unconfigured int64 `json:"unconfigured"`
	// RecordsLost is how many unreadable records of the state file were
	// set aside at start-up (serve --accept-state-loss), KeysLost the keys
	// they held as far as could be told.
	RecordsLost int64 `json:"records_lost"`
	KeysLost    int64 `json:"keys_lost"`
}

// NewStateStatus reads the rate state p's health now (p is safe for
// concurrent use).
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

// Print writes st as `ratelimitd status` shows it, one fact a line;
// operator-facing text from the quarantine is cleaned of control
// characters.
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
	printDecisions(w, st)
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
	fmt.Fprintf(w, "connections: %d open of max %d, %d closed at the cap\n", st.Connections.Open, st.Connections.Max, st.Connections.Refused)
	for _, f := range st.FrontEnds {
		fmt.Fprintf(w, "front end %s\n", quarantine.CleanLine(f.String()))
	}
	if n := st.Notify; n != nil {
		fmt.Fprintf(w, "notifications: %d sent, %d failed, %d dropped (queue full), %d waiting\n", n.Sent, n.Failed, n.Dropped, n.Waiting)
	}
	if q := st.Quarantine; q != nil {
		fmt.Fprintf(w, "quarantine: %d held, %d frozen, %d kept past max_age, %d keys suspended, %d failures\n",
			q.Held, q.Frozen, q.KeptPastMaxAge, q.Suspended, q.Failures)
		if q.LastError != "" {
			fmt.Fprintf(w, "quarantine last error (%s): %s\n", q.LastErrorAt.Format(time.RFC3339), quarantine.CleanLine(q.LastError))
		}
	}
	if st.State != nil {
		st.State.Print(w)
	}
}

// printDecisions prints the requests and, by action, the messages that
// did not pass: each message once, so 3 frozen messages read "freeze 3"
// however many requests (RCPT, END-OF-MESSAGE) were answered for them.
func printDecisions(w io.Writer, st *Status) {
	fmt.Fprintf(w, "requests: %d (%d passed)\n", st.Requests, st.ByAction[policy.Pass.String()])
	fmt.Fprintf(w, "messages not passed, each counted once:\n")
	for a := policy.Pass + 1; a <= policy.Reject; a++ {
		name := a.String()
		fmt.Fprintf(w, "  %-7s %d\n", name, st.Messages[name])
	}
}

// printInFlight prints the messages in flight where END-OF-MESSAGE can
// come to end them: with no END-OF-MESSAGE request seen (Postfix asking
// only at RCPT), every message stays remembered until the table forgets
// it, and a count would say mail is in flight that finished long ago.
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

// printStoreStatus prints the Redis backend's lines of `ratelimitd
// status`; now is Redis's TIME (zero: Redis did not answer).
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
}

// clockOffset says how this host's clock stands to Redis's, given
// Redis's minus this host's.
func clockOffset(d time.Duration) string {
	// Known to within a round trip to Redis: shown to the second.
	d = d.Round(time.Second)
	switch {
	case d > 0:
		return d.String() + " behind redis"
	case d < 0:
		return (-d).String() + " ahead of redis"
	}
	return "level with redis"
}
