//go:build integration

package redisstore_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/redistest"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/ratelimit"
	"github.com/ratelimitd/ratelimitd/ratestore/redisstore"
	"github.com/ratelimitd/ratelimitd/ratestore/storetest"
)

// open connects a store to o.Addrs, with a key prefix of its own and a 2s
// timeout unless o sets them.
func open(t testing.TB, o redisstore.Options) *redisstore.Store {
	t.Helper()
	if o.KeyPrefix == "" {
		o.KeyPrefix = fmt.Sprintf("t%d:", prefixes.Add(1))
	}
	if o.Timeout == 0 {
		o.Timeout = 2 * time.Second
	}
	s, err := redisstore.New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

var prefixes atomic.Int64

// TestConformance holds the Redis store to the store conformance suite:
// random traces in every mode agree with policy.EvaluateStack over the
// in-memory store to 1e-12.
//
// It runs three ways: with the fast path (decisions made in Go from the
// records the store remembers, confirmed by the script), with the script
// deciding everything (KnownRecords < 0), and with room for two records
// only, so that fast and script decisions alternate within a trace.
func TestConformance(t *testing.T) {
	srv := redistest.Start(t)
	for _, c := range []struct {
		name  string
		known int
	}{{"FastPath", 0}, {"ScriptOnly", -1}, {"TwoKnown", 2}} {
		t.Run(c.name, func(t *testing.T) {
			storetest.Run(t, func(t *testing.T) policy.Store {
				return open(t, redisstore.AtCallerTime(redisstore.Options{Addrs: []string{srv.Addr}, KnownRecords: c.known}))
			})
		})
	}
}

// TestClusterConformance runs the conformance suite on a real 3-master
// Redis Cluster: the traces' stacks mix keys of several slots, which are
// checked on every slot, then committed.
func TestClusterConformance(t *testing.T) {
	nodes := redistest.StartCluster(t, 3)
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.Addr)
	}
	s := open(t, redisstore.AtCallerTime(redisstore.Options{Addrs: addrs}))
	if !s.Cluster() {
		t.Fatal("store did not detect the cluster")
	}
	// The keys of the suite must span several slots and nodes for the
	// test to mean anything.
	if a, b := redisstore.Slot(s.Key("alice")), redisstore.Slot(s.Key("bob@example.org")); a == b {
		t.Fatalf("test keys share slot %d", a)
	}
	storetest.Run(t, func(t *testing.T) policy.Store {
		return open(t, redisstore.AtCallerTime(redisstore.Options{Addrs: addrs}))
	})
	// Range found the states on every master: each master holds some.
	for _, n := range nodes {
		if v := n.Must("DBSIZE"); v == "0" {
			t.Errorf("master %s holds no key: the suite did not spread over the cluster", n.Addr)
		}
	}
}

// TestSlot checks the hash slot function against Redis Cluster's own
// CLUSTER KEYSLOT.
func TestSlot(t *testing.T) {
	nodes := redistest.StartCluster(t, 3)
	for _, k := range []string{"", "a", "ratelimitd:{alice}hourly", "x{}y", "{user1000}.following", "foo{bar}{zap}", "ratelimitd:{a%7Db}l"} {
		want := nodes[0].Must("CLUSTER", "KEYSLOT", k)
		if got := fmt.Sprint(redisstore.Slot(k)); got != want {
			t.Errorf("Slot(%q) = %s, CLUSTER KEYSLOT says %s", k, got, want)
		}
	}
}

// TestAtomicStack: 64 concurrent requests of one key on Redis's clock
// admit exactly the limit (one script decides each request whole; the
// reference EvaluateStack over a Store can over-admit under concurrency),
// also when one script call decides several of them (batching): each
// sees the states the previous ones stored.
func TestAtomicStack(t *testing.T) {
	srv := redistest.Start(t)
	s := open(t, redisstore.Options{Addrs: []string{srv.Addr}})
	items := []policy.StackItem{
		{Limit: "hourly", Key: "mallory", Params: ratelimit.Limit{Limit: 50, Period: time.Hour}, Cost: 1, Count: true, Refuses: true},
		{Limit: "daily", Key: "mallory", Params: ratelimit.Limit{Limit: 1000, Period: 24 * time.Hour, Mode: ratelimit.Strict}, Cost: 1, Count: true, Refuses: true},
	}
	var admitted, errs atomic.Int64
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 4 {
				out := make([]policy.StackResult, 2)
				if err := s.EvaluateStack(context.Background(), time.Now(), items, false, out); err != nil {
					errs.Add(1)
					continue
				}
				if !out[0].Result.Over && !out[1].Result.Over {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if errs.Load() != 0 || admitted.Load() != 50 {
		t.Fatalf("256 concurrent requests: %d admitted, %d errors; want 50, 0", admitted.Load(), errs.Load())
	}
	// calls=N,usec=...: concurrent requests were batched.
	calls, _, _ := strings.Cut(strings.TrimPrefix(srv.Info("commandstats", "cmdstat_evalsha"), "calls="), ",")
	if n, err := strconv.Atoi(calls); err != nil || n >= 256 {
		t.Errorf("256 concurrent requests took %q script calls, want fewer (batched)", calls)
	}
	// The strict daily limit counted every request; the leaky hourly one
	// only the admitted.
	d, _ := s.Get(context.Background(), "daily", "mallory")
	h, _ := s.Get(context.Background(), "hourly", "mallory")
	if d.Rate < 255 || h.Rate > 50 {
		t.Errorf("stored rates: daily %v (want ~256), hourly %v (want <= 50)", d.Rate, h.Rate)
	}
	// Keys expire: the TTL follows the arithmetic (about ln(2*rate)
	// periods of the state that lives longest, plus an eighth), never
	// none. The hash holds both limits: the daily state at ~256 lives
	// ln(512) days.
	ttl := srv.Must("PTTL", s.Key("mallory"))
	if ms, _ := strconv.ParseInt(ttl, 10, 64); ms < int64(140*time.Hour/time.Millisecond) || ms > int64(175*time.Hour/time.Millisecond) {
		t.Errorf("PTTL of a 1000/day state at rate ~256 = %s ms, want ln(512) days (+1/8) ≈ 150-169 h", ttl)
	}
}

// TestSkewedClocks: two hosts whose clocks differ by 17 minutes share one
// sender; the answers are those of one clock (Redis TIME). With the hosts'
// own clocks (AtCallerTime) the same traffic is measured differently,
// which is what the test would catch.
func TestSkewedClocks(t *testing.T) {
	srv := redistest.Start(t)
	run := func(callerTime bool) (admitted int, retries []time.Duration) {
		prefix := fmt.Sprintf("skew%v%d:", callerTime, prefixes.Add(1))
		o := redisstore.Options{Addrs: []string{srv.Addr}, KeyPrefix: prefix}
		if callerTime {
			o = redisstore.AtCallerTime(o)
		}
		a, b := open(t, o), open(t, o)
		items := []policy.StackItem{{Limit: "hourly", Key: "carol", Params: ratelimit.Limit{Limit: 10, Period: time.Hour},
			Cost: 1, Count: true, Refuses: true}}
		for i := range 30 {
			st, skew := a, -10*time.Minute
			if i%2 == 1 {
				st, skew = b, 7*time.Minute
			}
			out := make([]policy.StackResult, 1)
			if err := st.EvaluateStack(context.Background(), time.Now().Add(skew), items, false, out); err != nil {
				t.Fatal(err)
			}
			if out[0].Result.Over {
				retries = append(retries, out[0].Result.RetryAfter)
			} else {
				admitted++
			}
		}
		return admitted, retries
	}
	admitted, retries := run(false)
	if admitted != 10 {
		t.Errorf("on Redis's clock: %d of 30 admitted, want 10", admitted)
	}
	for _, r := range retries {
		// One clock: every refusal waits about the same (a few
		// minutes at 10/hour), whichever host answered.
		if r < time.Minute || r > 10*time.Minute {
			t.Errorf("retry after %v on Redis's clock, want a few minutes", r)
		}
	}
	skewed, _ := run(true)
	if skewed == 10 {
		t.Errorf("with the hosts' skewed clocks the trace also admitted exactly 10: the test cannot tell the clocks apart")
	}
}

// TestSkewedEngines: two policy engines (two hosts) sharing one Redis,
// one whose clock runs 10 minutes slow and one 7 minutes fast: one
// sender's 30 messages alternating between them get the answers of one
// clock, exactly the limit admitted, and both hosts announce the same
// retry time for the same state.
func TestSkewedEngines(t *testing.T) {
	srv := redistest.Start(t)
	cfg := policy.Config{Limits: []policy.LimitConfig{
		{Name: "hourly", Key: []string{"sasl_username"}, Limit: 10, Period: policy.Duration(time.Hour), Mode: "leaky", Action: "defer"},
	}}
	prefix := fmt.Sprintf("eng%d:", prefixes.Add(1))
	var engines []*policy.Engine
	for range 2 {
		e, err := policy.NewEngine(cfg, open(t, redisstore.Options{Addrs: []string{srv.Addr}, KeyPrefix: prefix}))
		if err != nil {
			t.Fatal(err)
		}
		engines = append(engines, e)
	}
	skews := []time.Duration{-10 * time.Minute, 7 * time.Minute}
	req := &policy.Request{ProtocolState: policy.StateEndOfMessage, SASLUsername: "carol", RecipientCount: 1}
	passed := 0
	var retries []time.Duration
	for i := range 30 {
		d := engines[i%2].Evaluate(context.Background(), time.Now().Add(skews[i%2]), req)
		if d.Fault != nil {
			t.Fatal(d.Fault)
		}
		if d.Action == policy.Pass {
			passed++
		} else {
			retries = append(retries, d.RetryAfter)
		}
	}
	if passed != 10 {
		t.Fatalf("30 messages over two skewed hosts: %d passed, want 10", passed)
	}
	// The leaky state does not change while refused: consecutive
	// refusals from the two hosts differ only by the time between them,
	// and by the error of each host's estimate of Redis's clock (the
	// fast path measures at the host's clock corrected by the offset
	// seen in Redis's last answer: about a round trip).
	for i := 1; i < len(retries); i++ {
		if d := retries[i-1] - retries[i]; d < -10*time.Millisecond || d > time.Second {
			t.Errorf("retry times %v then %v from the other host", retries[i-1], retries[i])
		}
	}
}

// TestStackKeys decides stacks whose keys need escaping ('%', '{', '}')
// and stacks of several limits, one after the other through the store's
// reused requests: each limit's state lands under Key(limit, key), where
// Get (rate show) reads it, and no stack sees another's keys.
func TestStackKeys(t *testing.T) {
	srv := redistest.Start(t)
	s := open(t, redisstore.Options{Addrs: []string{srv.Addr}})
	ctx := context.Background()
	lim := ratelimit.Limit{Limit: 100, Period: time.Hour}
	keys := []string{"alice", "{bob}", "100%", "c%7Bd", "a{b}%c", "alice"}
	for n, key := range keys {
		items := []policy.StackItem{
			{Limit: "hourly", Key: key, Params: lim, Cost: 1, Count: true, Refuses: true},
			{Limit: "daily", Key: key + "-d", Params: lim, Cost: 2, Count: true, Refuses: true},
			{Limit: "x", Key: strings.Repeat("k", 300+n), Params: lim, Cost: 3, Count: true, Refuses: true},
		}
		out := make([]policy.StackResult, len(items))
		if err := s.EvaluateStack(ctx, time.Now(), items, false, out); err != nil {
			t.Fatal(err)
		}
		for i, it := range items {
			if out[i].Err != nil || !out[i].Stored {
				t.Fatalf("%q under %s: %+v", it.Key, it.Limit, out[i])
			}
			st, err := s.Get(ctx, it.Limit, it.Key)
			if err != nil {
				t.Fatal(err)
			}
			want := it.Cost
			if key == "alice" && n > 0 && it.Limit != "x" {
				want = 2 * it.Cost // the second stack of alice
			}
			if st.Rate < want*0.99 || st.Rate > want {
				t.Errorf("%q under %s after stack %d: rate %g, want about %g", it.Key, it.Limit, n, st.Rate, want)
			}
		}
	}
	// Six stacks of three limits, minus alice's repeated two.
	if got := srv.Must("DBSIZE"); got != "16" {
		t.Errorf("DBSIZE %s, want 16", got)
	}
}

// TestStackUnknownAlgorithm: an item whose algorithm the script does not
// know (baseline) gets ErrAlgorithm and takes no part; the stack's other
// items are decided and stored; a stack of such items alone fails.
func TestStackUnknownAlgorithm(t *testing.T) {
	srv := redistest.Start(t)
	s := open(t, redisstore.Options{Addrs: []string{srv.Addr}})
	ctx := context.Background()
	items := []policy.StackItem{
		{Limit: "learned", Key: "carol", Params: ratelimit.Limit{Limit: 100, Period: time.Hour, Algorithm: ratelimit.Baseline}, Cost: 1, Count: true, Refuses: true},
		{Limit: "hourly", Key: "carol", Params: ratelimit.Limit{Limit: 100, Period: time.Hour}, Cost: 1, Count: true, Refuses: true},
	}
	out := make([]policy.StackResult, 2)
	if err := s.EvaluateStack(ctx, time.Now(), items, false, out); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(out[0].Err, redisstore.ErrAlgorithm) {
		t.Errorf("baseline item: err %v, want ErrAlgorithm", out[0].Err)
	}
	if out[1].Err != nil || !out[1].Stored {
		t.Errorf("exponential item: %+v, want decided and stored", out[1])
	}
	if got := srv.Must("DBSIZE"); got != "1" {
		t.Errorf("DBSIZE %s, want 1 (the exponential item's state)", got)
	}
	if err := s.EvaluateStack(ctx, time.Now(), items[:1], false, out[:1]); !errors.Is(err, redisstore.ErrAlgorithm) {
		t.Errorf("a stack of the baseline item alone: %v, want ErrAlgorithm", err)
	}
}

// TestScriptsStartWithShebang: every script as loaded starts with a
// "#!lua" line without flags (no allow-cross-slot-keys, no no-cluster).
func TestScriptsStartWithShebang(t *testing.T) {
	for name, src := range redisstore.Scripts() {
		if first, _, _ := strings.Cut(src, "\n"); first != "#!lua" {
			t.Errorf("%s starts with %q, want the line #!lua", name, first)
		}
	}
}

// TestScriptsDeclareKeys watches (MONITOR) every master while a store
// decides one- and two-slot stacks concurrently (fast path and script),
// updates, resets and merges: each key a script touches is one of the
// call's KEYS, and with a Cluster the KEYS are all of one slot.
func TestScriptsDeclareKeys(t *testing.T) {
	t.Run("Standalone", func(t *testing.T) {
		srv := redistest.Start(t)
		watchScripts(t, []*redistest.Server{srv}, false)
	})
	t.Run("Cluster", func(t *testing.T) {
		watchScripts(t, redistest.StartCluster(t, 3), true)
	})
}

func watchScripts(t *testing.T, nodes []*redistest.Server, cluster bool) {
	var addrs []string
	mons := make([]*monitor, len(nodes))
	for i, n := range nodes {
		addrs = append(addrs, n.Addr)
		mons[i] = startMonitor(t, n)
	}
	limits := map[string]ratelimit.Limit{
		"hourly": {Limit: 5, Period: time.Hour},
		"daily":  {Limit: 50, Period: 24 * time.Hour, Algorithm: ratelimit.GCRA},
	}
	s := open(t, redisstore.Options{Addrs: addrs, Limits: func(name string) (ratelimit.Limit, bool) {
		l, ok := limits[name]
		return l, ok
	}})
	ctx := context.Background()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for k := range 40 {
				user := fmt.Sprintf("user%d@example.org", (g*40+k)%60)
				items := []policy.StackItem{
					{Limit: "hourly", Key: user, Params: limits["hourly"], Cost: 1, Count: true, Refuses: true},
					{Limit: "daily", Key: user, Params: limits["daily"], Cost: 1, Count: true, Refuses: true},
				}
				if k%3 == 0 { // a second rate key: another slot
					items = append(items, policy.StackItem{Limit: "hourly", Key: fmt.Sprintf("192.0.2.%d", k),
						Params: limits["hourly"], Cost: 1, Count: true, Refuses: true})
				}
				out := make([]policy.StackResult, len(items))
				if err := s.EvaluateStack(ctx, time.Now(), items, false, out); err != nil {
					t.Error(err)
					return
				}
				for i := range out {
					if out[i].Err != nil {
						t.Errorf("%s under %s: %v", items[i].Key, items[i].Limit, out[i].Err)
					}
				}
			}
		})
	}
	wg.Wait()
	if err := s.Update(ctx, "hourly", "user1@example.org", func(old ratelimit.State) (ratelimit.State, bool) {
		old.Rate++
		return old, true
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Delete(ctx, "hourly", "user2@example.org"); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixNano()
	if _, err := s.Merge(ctx, "outage1", "hourly", []string{"user2@example.org", "user3@example.org", "new@example.org"},
		[]ratelimit.State{{Time: now, Rate: 1}, {Time: now, Rate: 2}, {Time: now, Rate: 3}}); err != nil {
		t.Fatal(err)
	}
	touched := map[string]bool{}
	for i, m := range mons {
		for _, c := range m.stop(t, nodes[i]) {
			if cluster && len(c.keys) > 0 {
				for _, k := range c.keys[1:] {
					if redisstore.Slot(k) != redisstore.Slot(c.keys[0]) {
						t.Errorf("a call's KEYS %q span several slots", c.keys)
						break
					}
				}
			}
			for _, k := range c.touched {
				touched[k] = true
				if !slices.Contains(c.keys, k) {
					t.Errorf("a script touched %q, not in its KEYS %q", k, c.keys)
				}
			}
		}
	}
	// 60 users, 14 addresses, the merge's 3 markers and 1 new user.
	if len(touched) < 78 {
		t.Errorf("scripts touched %d keys, want at least 78", len(touched))
	}
}

// scriptCall is one EVAL or EVALSHA seen by MONITOR: its KEYS and the
// keys of the commands its script ran.
type scriptCall struct {
	keys, touched []string
}

type monitor struct {
	c     net.Conn
	r     *bufio.Reader
	calls chan []scriptCall
}

// startMonitor sends MONITOR to n and collects the script calls it feeds.
func startMonitor(t *testing.T, n *redistest.Server) *monitor {
	c, err := net.DialTimeout("tcp", n.Addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	m := &monitor{c: c, r: bufio.NewReader(c), calls: make(chan []scriptCall, 1)}
	if _, err := c.Write([]byte("MONITOR\r\n")); err != nil {
		t.Fatal(err)
	}
	if line, err := m.r.ReadString('\n'); err != nil || line != "+OK\r\n" {
		t.Fatalf("MONITOR: %q, %v", line, err)
	}
	go m.read(t)
	return m
}

const monitorEnd = "ratelimitd-test-monitor-end"

// read parses the feed until monitorEnd (a lua command's line follows
// its script call's).
func (m *monitor) read(t *testing.T) {
	var calls []scriptCall
	defer func() { m.calls <- calls }()
	for {
		line, err := m.r.ReadString('\n')
		if err != nil {
			t.Errorf("MONITOR feed: %v", err)
			return
		}
		_, rest, ok := strings.Cut(strings.TrimSuffix(line, "\r\n"), " [")
		src, rest, ok2 := strings.Cut(rest, "] ")
		if !ok || !ok2 {
			continue
		}
		args, err := monitorArgs(rest)
		if err != nil || len(args) == 0 {
			t.Errorf("MONITOR line %q: %v", line, err)
			continue
		}
		cmd := strings.ToUpper(args[0])
		switch {
		case cmd == "ECHO" && len(args) == 2 && args[1] == monitorEnd:
			return
		case cmd == "EVAL" || cmd == "EVALSHA":
			if len(args) < 3 {
				t.Errorf("MONITOR: %q", args)
				continue
			}
			n, err := strconv.Atoi(args[2])
			if err != nil || 3+n > len(args) {
				t.Errorf("MONITOR: %q", args)
				continue
			}
			calls = append(calls, scriptCall{keys: args[3 : 3+n]})
		case strings.HasSuffix(src, " lua"):
			if len(calls) == 0 {
				t.Errorf("MONITOR: %q before any script call", args)
				continue
			}
			c := &calls[len(calls)-1]
			switch cmd {
			case "TIME":
			case "MGET":
				c.touched = append(c.touched, args[1:]...)
			case "GET", "SET", "DEL", "EXISTS", "PEXPIRE", "PEXPIREAT":
				c.touched = append(c.touched, args[1])
			default:
				t.Errorf("a script ran %q: which of its arguments are keys?", args)
			}
		}
	}
}

// stop ends the feed of n and returns the calls seen.
func (m *monitor) stop(t *testing.T, n *redistest.Server) []scriptCall {
	if _, err := n.Do("ECHO", monitorEnd); err != nil {
		t.Fatal(err)
	}
	select {
	case calls := <-m.calls:
		return calls
	case <-time.After(10 * time.Second):
		t.Fatalf("MONITOR of %s: no end", n.Addr)
		return nil
	}
}

// monitorArgs splits a MONITOR line's quoted arguments, undoing the
// escapes of sdscatrepr.
func monitorArgs(s string) ([]string, error) {
	var args []string
	for s != "" {
		if s[0] == ' ' {
			s = s[1:]
			continue
		}
		if s[0] != '"' {
			return nil, fmt.Errorf("unquoted %q", s)
		}
		var b strings.Builder
		i := 1
		for ; i < len(s) && s[i] != '"'; i++ {
			if s[i] != '\\' || i+1 == len(s) {
				b.WriteByte(s[i])
				continue
			}
			i++
			switch s[i] {
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case 't':
				b.WriteByte('\t')
			case 'a':
				b.WriteByte('\a')
			case 'b':
				b.WriteByte('\b')
			case 'x':
				if i+2 >= len(s) {
					return nil, fmt.Errorf("short escape in %q", s)
				}
				v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
				if err != nil {
					return nil, err
				}
				b.WriteByte(byte(v))
				i += 2
			default:
				b.WriteByte(s[i])
			}
		}
		if i == len(s) {
			return nil, fmt.Errorf("unterminated %q", s)
		}
		args = append(args, b.String())
		s = s[i+1:]
	}
	return args, nil
}
