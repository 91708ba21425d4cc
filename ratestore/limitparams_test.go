package ratestore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/ratelimitd/ratelimitd/ratelimit"
	"github.com/ratelimitd/ratelimitd/statedb"
)

// The stored parameters of each limit: states of a limit no longer
// configured, read-only restore, conversion of states to changed
// parameters at restart and reload.

var (
	hourlyExp  = ratelimit.Limit{Limit: 10, Period: time.Hour}
	hourlyGCRA = ratelimit.Limit{Limit: 10, Period: time.Hour, Algorithm: ratelimit.GCRA}
	t0         = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
)

// burst counts n requests of cost 1 at now under l (strict) on top of s.
func burst(l ratelimit.Limit, s ratelimit.State, now time.Time, n int) ratelimit.State {
	l.Mode = ratelimit.Strict
	for range n {
		s, _ = l.Next(l.Check(s, now, 1), false)
	}
	return s
}

func clock(at *atomic.Int64) func() time.Time {
	return func() time.Time { return time.Unix(0, at.Load()) }
}

// A configuration that no longer names a limit keeps its states until they
// have decayed under their own stored parameters.
func TestPersistentUnconfiguredLimitKept(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ratelimitd.db")
	var now atomic.Int64
	now.Store(t0.UnixNano())
	both := map[string]ratelimit.Limit{"hourly": hourlyExp, "gone": hourlyExp}
	db, closeDB := openDB(t, path)
	p := newPersistent(t, db, MemoryOptions{}, PersistOptions{Limits: both, Now: clock(&now)})
	over := burst(hourlyExp, ratelimit.State{}, t0, 20)
	p.Update(ctx, "hourly", "alice", set(over))
	p.Update(ctx, "gone", "mallory", set(over))
	p.Close()
	closeDB()

	db, closeDB = openDB(t, path)
	p = newPersistent(t, db, MemoryOptions{}, PersistOptions{Limits: map[string]ratelimit.Limit{"hourly": hourlyExp}, Now: clock(&now)})
	if s, _ := p.Get(ctx, "gone", "mallory"); s != over {
		t.Fatalf("state of the unconfigured limit after restart: %v, want %v", s, over)
	}
	if st := p.Stats(); st.Unconfigured != 1 || st.Dropped != 0 {
		t.Errorf("stats %+v, want 1 unconfigured, 0 dropped", st)
	}
	if l, ok := p.Params("gone"); !ok || l != hourlyExp {
		t.Errorf("Params(gone) = %v, %v", l, ok)
	}
	now.Store(t0.Add(time.Hour).UnixNano()) // rate 20/e: not negligible
	if n := p.Sweep(); n != 0 {
		t.Fatalf("sweep dropped %d undecayed states", n)
	}
	now.Store(t0.Add(10 * time.Hour).UnixNano()) // 20*e^-10 < 1: decayed
	if n := p.Sweep(); n != 2 {
		t.Fatalf("sweep of decayed states dropped %d, want 2", n)
	}
	p.Close()
	if got := stored(t, db); len(got) != 0 {
		t.Errorf("decayed states still stored: %v", got)
	}
	closeDB()
}

// Without stored parameters (a file written before they were), states of
// an unconfigured limit are kept for the retention.
func TestPersistentUnknownParamsRetention(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ratelimitd.db")
	db, closeDB := openDB(t, path)
	p := newPersistent(t, db, MemoryOptions{}, PersistOptions{}) // no Limits: no meta
	p.Update(ctx, "old", "mallory", set(ratelimit.State{Time: t0.UnixNano(), Rate: 50}))
	p.Close()
	closeDB()
	var now atomic.Int64
	now.Store(t0.Add(retention - time.Hour).UnixNano())
	db, closeDB = openDB(t, path)
	p = newPersistent(t, db, MemoryOptions{}, PersistOptions{Limits: map[string]ratelimit.Limit{}, Now: clock(&now)})
	if p.Memory().Len() != 1 || p.Sweep() != 0 {
		t.Fatalf("state of unknown parameters dropped within the retention")
	}
	now.Store(t0.Add(retention + time.Hour).UnixNano())
	if n := p.Sweep(); n != 1 {
		t.Fatalf("sweep after the retention dropped %d, want 1", n)
	}
	p.Close()
	closeDB()
}

// ReadOnly restores without writing a byte, even states it would drop.
func TestPersistentReadOnly(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ratelimitd.db")
	db, closeDB := openDB(t, path)
	p := newPersistent(t, db, MemoryOptions{}, PersistOptions{Limits: map[string]ratelimit.Limit{"hourly": hourlyExp}})
	p.Update(ctx, "hourly", "alice", set(ratelimit.State{Time: t0.UnixNano(), Rate: 5}))
	p.Update(ctx, "hourly", "bob", set(ratelimit.State{Time: 1, Rate: 1})) // negligible now
	p.Close()
	closeDB()
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ro, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	now := func() time.Time { return t0.Add(time.Minute) }
	// Another configuration, with a changed algorithm: converted in
	// memory only.
	p, err = NewPersistent(ro, NewMemory(MemoryOptions{}), PersistOptions{ReadOnly: true, Now: now,
		Limits: map[string]ratelimit.Limit{"hourly": hourlyGCRA, "daily": hourlyExp}})
	if err != nil {
		t.Fatal(err)
	}
	if p.Memory().Len() != 1 {
		t.Errorf("read-only restore holds %d states, want 1", p.Memory().Len())
	}
	if err := p.Update(ctx, "hourly", "carol", set(ratelimit.State{Time: 5})); !errors.Is(err, ErrReadOnly) {
		t.Errorf("Update: %v", err)
	}
	if _, err := p.Delete(ctx, "hourly", "alice"); !errors.Is(err, ErrReadOnly) {
		t.Errorf("Delete: %v", err)
	}
	if err := p.Flush(); !errors.Is(err, ErrReadOnly) {
		t.Errorf("Flush: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	ro.Close()
	after, _ := os.ReadFile(path)
	if !bytes.Equal(before, after) {
		t.Fatal("a read-only restore changed the file")
	}
}

// convert keeps a refused sender refused at least as long, and lets a
// sender who was not refused through.
func TestConvertNeverShortensRefusal(t *testing.T) {
	now := t0.Add(5 * time.Minute)
	limits := []ratelimit.Limit{
		hourlyExp, hourlyGCRA,
		{Limit: 10, Period: time.Hour, Algorithm: ratelimit.Cooldown},
		{Limit: 10, Period: time.Hour, Algorithm: ratelimit.EARRRL},
		{Limit: 10, Period: 24 * time.Hour},
		{Limit: 10, Period: 10 * time.Minute, Algorithm: ratelimit.GCRA},
		{Limit: 10, Period: time.Hour, Algorithm: ratelimit.Baseline, Floor: 5},
		{Limit: 10, Period: 24 * time.Hour, Algorithm: ratelimit.Baseline, Floor: 5},
	}
	for _, from := range limits {
		for _, to := range limits {
			if sameMeaning(from, to) {
				continue
			}
			name := fmt.Sprintf("%s/%v->%s/%v", from.Algorithm, from.Period, to.Algorithm, to.Period)
			over := burst(from, ratelimit.State{}, t0, 30)
			w := retryWait(from, over, now)
			if w == 0 {
				t.Fatalf("%s: the burst is not refused under the old parameters", name)
			}
			c, err := to.Convert(over, from, now)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if got := retryWait(to, c, now); got < w {
				t.Errorf("%s: refused for %v after conversion, %v before", name, got, w)
			}
			light := burst(from, ratelimit.State{}, t0, 2)
			if retryWait(from, light, now) != 0 {
				t.Fatalf("%s: 2 messages refused", name)
			}
			cl, err := to.Convert(light, from, now)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if got := retryWait(to, cl, now); got != 0 {
				t.Errorf("%s: a sender of 2 messages is refused for %v after conversion", name, got)
			}
		}
	}
}

// A restart whose configuration changed a limit's algorithm keeps the
// deferred sender deferred, stores the converted state with the new
// parameters, and does not convert again at the next restart.
func TestPersistentRestartConverts(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ratelimitd.db")
	now := func() time.Time { return t0.Add(time.Minute) }
	db, closeDB := openDB(t, path)
	p := newPersistent(t, db, MemoryOptions{}, PersistOptions{Limits: map[string]ratelimit.Limit{"hourly": hourlyExp}, Now: now})
	over := burst(hourlyExp, ratelimit.State{}, t0, 20)
	p.Update(ctx, "hourly", "mallory", set(over))
	p.Close()
	closeDB()
	w := retryWait(hourlyExp, over, now())

	gcra := map[string]ratelimit.Limit{"hourly": hourlyGCRA}
	db, closeDB = openDB(t, path)
	p = newPersistent(t, db, MemoryOptions{}, PersistOptions{Limits: gcra, Now: now})
	s, _ := p.Get(ctx, "hourly", "mallory")
	if got := retryWait(hourlyGCRA, s, now()); got < w {
		t.Fatalf("after exponential -> gcra: refused for %v, want >= %v (state %v)", got, w, s)
	}
	if p.Stats().Converted != 1 {
		t.Errorf("Converted = %d", p.Stats().Converted)
	}
	if got := stored(t, db)[pair{"hourly", "mallory"}]; got != s {
		t.Errorf("stored %v, want the converted %v", got, s)
	}
	p.Close()
	closeDB()
	db, closeDB = openDB(t, path)
	p = newPersistent(t, db, MemoryOptions{}, PersistOptions{Limits: gcra, Now: now})
	if s2, _ := p.Get(ctx, "hourly", "mallory"); s2 != s || p.Stats().Converted != 0 {
		t.Errorf("second restart: %v (converted %d), want %v unconverted", s2, p.Stats().Converted, s)
	}
	p.Close()
	closeDB()
}

// Reconfigure converts while the swap is installed, and a failed swap
// changes nothing.
func TestPersistentReconfigure(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ratelimitd.db")
	now := func() time.Time { return t0.Add(time.Minute) }
	db, closeDB := openDB(t, path)
	p := newPersistent(t, db, MemoryOptions{}, PersistOptions{Limits: map[string]ratelimit.Limit{"hourly": hourlyExp}, Now: now})
	over := burst(hourlyExp, ratelimit.State{}, t0, 20)
	p.Update(ctx, "hourly", "mallory", set(over))
	gcra := map[string]ratelimit.Limit{"hourly": hourlyGCRA}
	if err := p.Reconfigure(gcra, func() error { return errors.New("invalid") }); err == nil {
		t.Fatal("a failed swap was not returned")
	}
	if s, _ := p.Get(ctx, "hourly", "mallory"); s != over {
		t.Fatalf("a failed reconfiguration changed the state to %v", s)
	}
	swapped := false
	if err := p.Reconfigure(gcra, func() error { swapped = true; return nil }); err != nil || !swapped {
		t.Fatal(err, swapped)
	}
	s, _ := p.Get(ctx, "hourly", "mallory")
	if got, want := retryWait(hourlyGCRA, s, now()), retryWait(hourlyExp, over, now()); got < want {
		t.Fatalf("after reload to gcra: refused for %v, want >= %v", got, want)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if got := stored(t, db)[pair{"hourly", "mallory"}]; got != s {
		t.Errorf("stored %v, want %v", got, s)
	}
	if err := db.View(func(tx *bbolt.Tx) error {
		_, v, err := statedb.Unseal([]byte("hourly"), tx.Bucket(metaName).Get([]byte("hourly")))
		if l, ok := decodeParams(v); err != nil || !ok || l != hourlyGCRA {
			t.Errorf("stored parameters %v, %v", l, ok)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	closeDB()
}

// BenchmarkReconfigureConvert measures a reload from exponential to gcra
// over 100,000 states, half of them refused (each of which takes a
// bisection): every request waits for it.
func BenchmarkReconfigureConvert(b *testing.B) {
	db, _ := openDB(b, filepath.Join(b.TempDir(), "ratelimitd.db"))
	now := func() time.Time { return t0.Add(time.Minute) }
	exp := map[string]ratelimit.Limit{"hourly": hourlyExp}
	p := newPersistent(b, db, MemoryOptions{}, PersistOptions{Limits: exp, Now: now})
	defer p.Close()
	const n = 100_000
	states := make([]ratelimit.State, 20)
	for i := range states {
		states[i] = burst(hourlyExp, ratelimit.State{}, t0, i+1) // 11 and more are refused
	}
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		p.Reconfigure(exp, func() error { return nil })
		for i := range n {
			p.Update(context.Background(), "hourly", fmt.Sprintf("user%06d", i), set(states[i%20]))
		}
		b.StartTimer()
		p.Reconfigure(map[string]ratelimit.Limit{"hourly": hourlyGCRA}, func() error { return nil })
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/state")
}

// The stored parameters of a baseline limit (factor, floor, learning
// period) survive a restart: nothing is converted or rewritten.
func TestPersistentBaselineParamsRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ratelimitd.db")
	base := ratelimit.Limit{Limit: 100, Period: time.Hour, Algorithm: ratelimit.Baseline, Factor: 4, Floor: 5, LearnPeriod: 7 * 24 * time.Hour}
	limits := map[string]ratelimit.Limit{"usual": base}
	var logs bytes.Buffer
	for range 2 {
		db, closeDB := openDB(t, path)
		p := newPersistent(t, db, MemoryOptions{}, PersistOptions{Limits: limits, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		p.Update(context.Background(), "usual", "uma", set(ratelimit.State{Time: time.Now().UnixNano(), Rate: ratelimit.PackBaseline(3, 2)}))
		if l, ok := p.Params("usual"); !ok || l != base || p.Stats().Converted != 0 {
			t.Fatalf("Params = %v, %v; converted %d", l, ok, p.Stats().Converted)
		}
		p.Close()
		closeDB()
	}
	if strings.Contains(logs.String(), "malformed") || strings.Contains(logs.String(), "converted") {
		t.Errorf("logs: %s", logs.String())
	}
}

// retryWait is how long a request of cost 1 is refused by l against s at
// now, probing as a leaky limit (without counting the probe); 0 when it is
// allowed, math.MaxInt64 when it can never be allowed.
func retryWait(l ratelimit.Limit, s ratelimit.State, now time.Time) time.Duration {
	l.Mode = ratelimit.Leaky
	if r := l.Check(s, now, 1); r.Over {
		return r.RetryAfter
	}
	return 0
}
