//go:build integration

package redisstore_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/redistest"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/ratelimit"
	"github.com/ratelimitd/ratelimitd/ratestore/redisstore"
)

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
