//go:build integration

package redisstore_test

import (
	"context"
	"crypto/sha1"
	"fmt"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/redistest"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/ratelimit"
	"github.com/ratelimitd/ratelimitd/ratestore/redisstore"
)

// admit decides the stack on s at now and reports whether it admitted.
func admit(t *testing.T, s policy.StackEvaluator, now time.Time, items []policy.StackItem) bool {
	t.Helper()
	out := make([]policy.StackResult, len(items))
	if err := s.EvaluateStack(context.Background(), now, items, false, out); err != nil {
		t.Fatal(err)
	}
	for i := range out {
		if out[i].Err != nil {
			t.Fatal(out[i].Err)
		}
		if out[i].Result.Over && items[i].Refuses {
			return false
		}
	}
	return true
}

// TestFastPathDecidesKnownSenders: a host that remembers a sender's
// record decides in Go and the script only confirms: of 30 messages one
// second apart, the first is decided by the script (nothing known) and
// the 29 others by the fast path; the verdicts and the stored state are
// those of the script alone (KnownRecords < 0) to 1e-12.
func TestFastPathDecidesKnownSenders(t *testing.T) {
	srv := redistest.Start(t)
	fast := open(t, redisstore.AtCallerTime(redisstore.Options{Addrs: []string{srv.Addr}}))
	script := open(t, redisstore.AtCallerTime(redisstore.Options{Addrs: []string{srv.Addr}, KnownRecords: -1}))
	t0 := time.Now()
	for i := range 30 {
		now := t0.Add(time.Duration(i) * time.Second)
		a, b := admit(t, fast, now, hourly("alice")), admit(t, script, now, hourly("alice"))
		if a != b {
			t.Fatalf("message %d: fast path admitted %v, script %v", i, a, b)
		}
		if want := i < 10; a != want {
			t.Fatalf("message %d admitted %v, want %v", i, a, want)
		}
	}
	if c, r := fast.FastPath(); c != 29 || r != 0 {
		t.Errorf("fast path confirmed %d, refused %d; want 29 and 0", c, r)
	}
	if c, r := script.FastPath(); c != 0 || r != 0 {
		t.Errorf("store without the fast path counted %d confirmed, %d refused", c, r)
	}
	a, err := fast.Get(context.Background(), "hourly", "alice")
	if err != nil {
		t.Fatal(err)
	}
	b, err := script.Get(context.Background(), "hourly", "alice")
	if err != nil {
		t.Fatal(err)
	}
	if a.Time != b.Time || math.Abs(a.Rate-b.Rate) > 1e-12*b.Rate {
		t.Errorf("fast path stored %+v, script %+v", a, b)
	}
}

// TestFastPathRefusedWhenAnotherHostWrote: two hosts alternate one
// sender's messages. While the sender is under the limit each host finds
// the record the other wrote: the script refuses the fast decision and
// decides itself. Once the sender is over the (leaky) limit, refused
// messages change nothing and both hosts' fast decisions are confirmed.
// Exactly the limit is admitted, and a `rate reset` on a third host is
// seen by the next message although both hosts remembered the old
// record.
func TestFastPathRefusedWhenAnotherHostWrote(t *testing.T) {
	srv := redistest.Start(t)
	o := redisstore.Options{Addrs: []string{srv.Addr}, KeyPrefix: fmt.Sprintf("t%d:", prefixes.Add(1))}
	hosts := alternate(t, o, "bob")
	// Host 0 sends messages 0, 2, ..., 28: the first decided by the
	// script (nothing known), 2 to 10 refused (host 1 wrote 1 to 9), 12
	// to 28 confirmed. Host 1: 1 by the script, 3 to 9 refused, 11 to 29
	// confirmed (message 10 was refused and stored nothing).
	want := [][2]int64{{9, 5}, {10, 4}}
	for i, h := range hosts {
		if c, r := h.FastPath(); c != want[i][0] || r != want[i][1] {
			t.Errorf("host %d: fast path confirmed %d, refused %d; want %d and %d", i, c, r, want[i][0], want[i][1])
		}
	}
	if _, err := open(t, o).Delete(context.Background(), "hourly", "bob"); err != nil {
		t.Fatal(err)
	}
	out := make([]policy.StackResult, 1)
	if err := hosts[0].EvaluateStack(context.Background(), time.Now(), hourly("bob"), false, out); err != nil {
		t.Fatal(err)
	}
	if out[0].Result.Over || out[0].Result.Rate != 1 {
		t.Errorf("after rate reset: %+v, want a fresh rate of 1, admitted", out[0].Result)
	}
}

// TestFastPathRefusalKeepsExpiry: a refused fast decision puts the old
// record back before the script decides, and nothing of the key's expiry
// is lost: after another host's write the key keeps an expiry, and after
// the key was deleted behind the host's back the script decides from
// nothing and gives the new record an expiry.
func TestFastPathRefusalKeepsExpiry(t *testing.T) {
	srv := redistest.Start(t)
	o := redisstore.Options{Addrs: []string{srv.Addr}, KeyPrefix: fmt.Sprintf("t%d:", prefixes.Add(1))}
	a, b := open(t, o), open(t, o)
	key := a.Key("carol")
	pttl := func() int64 {
		v, err := strconv.ParseInt(srv.Must("PTTL", key), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	admit(t, a, time.Now(), hourly("carol"))
	admit(t, a, time.Now(), hourly("carol")) // fast: confirmed
	admit(t, b, time.Now(), hourly("carol")) // b decides: a's record is stale
	if ttl := pttl(); ttl <= 0 {
		t.Fatalf("PTTL %d after another host's write, want an expiry", ttl)
	}
	admit(t, a, time.Now(), hourly("carol")) // refused, decided by the script
	if ttl := pttl(); ttl <= 0 {
		t.Errorf("PTTL %d after a refused fast decision, want the expiry kept", ttl)
	}
	if c, r := a.FastPath(); c != 1 || r != 1 {
		t.Errorf("host a: fast path confirmed %d, refused %d; want 1 and 1", c, r)
	}
	st, err := a.Get(context.Background(), "hourly", "carol")
	if err != nil {
		t.Fatal(err)
	}
	if st.Rate < 3.99 || st.Rate > 4 {
		t.Errorf("rate %v after 4 messages in a row, want about 4", st.Rate)
	}
	srv.Must("DEL", key)
	out := make([]policy.StackResult, 1)
	if err := a.EvaluateStack(context.Background(), time.Now(), hourly("carol"), false, out); err != nil {
		t.Fatal(err)
	}
	if out[0].Result.Rate != 1 || !out[0].Prev.IsZero() {
		t.Errorf("after the key was deleted: previous %+v, rate %v; want none and 1", out[0].Prev, out[0].Result.Rate)
	}
	if ttl := pttl(); ttl <= 0 {
		t.Errorf("PTTL %d of the record written after the key was deleted, want an expiry", ttl)
	}
	if c, r := a.FastPath(); c != 1 || r != 2 {
		t.Errorf("host a: fast path confirmed %d, refused %d; want 1 and 2", c, r)
	}
}

// TestFastPathRefusalPutsBackWhatItDoesNotChange: a host decides from a
// record another host has changed since: its fast decision (admit) is
// refused, the script decides from the record in Redis (the sender is
// over the leaky limit now: refused, nothing stored), and the record the
// host had already replaced is put back byte for byte, with its expiry.
func TestFastPathRefusalPutsBackWhatItDoesNotChange(t *testing.T) {
	srv := redistest.Start(t)
	o := redisstore.Options{Addrs: []string{srv.Addr}, KeyPrefix: fmt.Sprintf("t%d:", prefixes.Add(1))}
	a, b := open(t, o), open(t, o)
	if !admit(t, a, time.Now(), hourly("dave")) {
		t.Fatal("first message refused")
	}
	for range 10 {
		admit(t, b, time.Now(), hourly("dave"))
	}
	stalePutBack(t, a, srv, "dave")
	if c, r := a.FastPath(); c != 0 || r != 1 {
		t.Errorf("host a: fast path confirmed %d, refused %d; want 0 and 1", c, r)
	}
}

// TestFastPathBesideScriptInOneCall: one script call holds, for the
// same sender, a request the script decides (its other key is not known)
// after a fast request: the script reads the record the fast request
// stored, not the one it read at the start of the call, and the counts
// are exact. Run through the store's batching, with many concurrent
// requests for a few senders and a per-client-address key that changes.
func TestFastPathBesideScriptInOneCall(t *testing.T) {
	srv := redistest.Start(t)
	s := open(t, redisstore.Options{Addrs: []string{srv.Addr}})
	stack := func(user string, ip int) []policy.StackItem {
		return []policy.StackItem{
			{Limit: "hourly", Key: user, Params: ratelimit.Limit{Limit: 1000, Period: time.Hour}, Cost: 1, Count: true, Refuses: true},
			{Limit: "byip", Key: "10.0.0." + strconv.Itoa(ip), Params: ratelimit.Limit{Limit: 1000, Period: time.Hour}, Cost: 1, Count: true, Refuses: true},
		}
	}
	const users, rounds = 4, 60
	done := make(chan error)
	for g := range 16 {
		go func() {
			var err error
			out := make([]policy.StackResult, 2)
			for i := range rounds {
				// A new client address every few messages: that
				// request's second record is not known.
				if e := s.EvaluateStack(context.Background(), time.Now(), stack(fmt.Sprintf("u%d", g%users), (g*rounds+i)/3), false, out); e != nil && err == nil {
					err = e
				}
			}
			done <- err
		}()
	}
	for range 16 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	c, r := s.FastPath()
	t.Logf("fast path confirmed %d, refused %d", c, r)
	for u := range users {
		st, err := s.Get(context.Background(), "hourly", fmt.Sprintf("u%d", u))
		if err != nil {
			t.Fatal(err)
		}
		// 4 goroutines x 60 messages each, within a second or two: the
		// rate is the count, less a hair of decay.
		if want := float64(16 / users * rounds); st.Rate > want || st.Rate < want*0.999 {
			t.Errorf("user u%d: rate %v, want about %v (every message counted once)", u, st.Rate, want)
		}
	}
}

// TestFastPathForgetsAfterSeveralSlots: on a Redis Cluster a stack whose
// keys fall in several slots is checked, then committed, by the script
// alone; the host forgets the records that commit changed, so its next
// single-slot request for the same sender is decided by the script (and
// learnt) instead of being sent on the fast path to be refused.
func TestFastPathForgetsAfterSeveralSlots(t *testing.T) {
	nodes := redistest.StartCluster(t, 3)
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.Addr)
	}
	s := open(t, redisstore.Options{Addrs: addrs})
	user, ip := "erin", "192.0.2.7"
	if redisstore.Slot(s.Key(user)) == redisstore.Slot(s.Key(ip)) {
		t.Fatal("test keys share a slot")
	}
	both := append(hourly(user), policy.StackItem{Limit: "byip", Key: ip,
		Params: ratelimit.Limit{Limit: 100, Period: time.Hour}, Cost: 1, Count: true, Refuses: true})
	admit(t, s, time.Now(), hourly(user)) // decided by the script, learnt
	admit(t, s, time.Now(), hourly(user)) // fast, confirmed
	admit(t, s, time.Now(), both)         // two slots: check, then commit
	admit(t, s, time.Now(), hourly(user)) // not known any more: the script
	admit(t, s, time.Now(), hourly(user)) // fast again
	if c, r := s.FastPath(); c != 2 || r != 0 {
		t.Errorf("fast path confirmed %d, refused %d; want 2 and 0", c, r)
	}
	st, err := s.Get(context.Background(), "hourly", user)
	if err != nil {
		t.Fatal(err)
	}
	if st.Rate < 4.99 || st.Rate > 5 {
		t.Errorf("rate %v after 5 messages, want about 5", st.Rate)
	}
}

// TestFastPathAloneInCluster: on a Redis Cluster, where a call carries
// one request, a known sender's request is confirmed by confirm.lua.
// Two hosts take turns with one sender: exactly the limit is admitted,
// each host's stale decisions are refused (and then decided by
// stack.lua), and a refused decision leaves the record byte for byte as
// it was, with its expiry.
func TestFastPathAloneInCluster(t *testing.T) {
	nodes := redistest.StartCluster(t, 3)
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.Addr)
	}
	o := redisstore.Options{Addrs: addrs, KeyPrefix: fmt.Sprintf("t%d:", prefixes.Add(1))}
	one := open(t, o)
	for i := range 30 {
		if a, want := admit(t, one, time.Now(), hourly("frank")), i < 10; a != want {
			t.Fatalf("message %d admitted %v, want %v", i, a, want)
		}
	}
	if c, r := one.FastPath(); c != 29 || r != 0 {
		t.Errorf("one host: fast path confirmed %d, refused %d; want 29 and 0", c, r)
	}
	sha := fmt.Sprintf("%x", sha1.Sum([]byte(redisstore.Scripts()["confirm.lua"])))
	if n := nodeOf(t, nodes, one.Key("frank")); n.Must("SCRIPT", "EXISTS", sha) != "1" {
		t.Errorf("the master of frank's record never ran confirm.lua")
	}
	hosts := alternate(t, o, "grace")
	for i, h := range hosts {
		if c, r := h.FastPath(); c == 0 || r == 0 {
			t.Errorf("host %d: fast path confirmed %d, refused %d; want some of both", i, c, r)
		}
	}
	// Host a learns heidi's record, host b changes it under a's feet.
	a, b := hosts[0], hosts[1]
	admit(t, a, time.Now(), hourly("heidi"))
	for range 10 {
		admit(t, b, time.Now(), hourly("heidi"))
	}
	stalePutBack(t, a, nodeOf(t, nodes, a.Key("heidi")), "heidi")
}

// nodeOf returns the master of nodes that holds key.
func nodeOf(t *testing.T, nodes []*redistest.Server, key string) *redistest.Server {
	t.Helper()
	for _, n := range nodes {
		if v, err := n.Do("EXISTS", key); err == nil && v == "1" {
			return n
		}
	}
	t.Fatalf("no master holds %s", key)
	return nil
}

// alternate sends 30 messages of user through two hosts on o in turn
// and checks that exactly the limit, 10, was admitted.
func alternate(t *testing.T, o redisstore.Options, user string) []*redisstore.Store {
	t.Helper()
	hosts := []*redisstore.Store{open(t, o), open(t, o)}
	admitted := 0
	for i := range 30 {
		if admit(t, hosts[i%2], time.Now(), hourly(user)) {
			admitted++
		}
	}
	if admitted != 10 {
		t.Errorf("two hosts admitted %d of 30 messages, want the limit, 10", admitted)
	}
	return hosts
}

// stalePutBack sends the 12th message of user (over the limit of 10)
// through a, whose record of it is stale: refused, and the record that
// srv holds is left byte for byte as it was, with its expiry.
func stalePutBack(t *testing.T, a *redisstore.Store, srv *redistest.Server, user string) {
	t.Helper()
	key := a.Key(user)
	before := srv.Must("GET", key)
	if admit(t, a, time.Now(), hourly(user)) {
		t.Error("the 12th message was admitted: host a decided from its stale record")
	}
	if after := srv.Must("GET", key); after != before {
		t.Errorf("record changed by a refused message: %q, was %q", after, before)
	}
	if ttl, _ := strconv.ParseInt(srv.Must("PTTL", key), 10, 64); ttl <= 0 {
		t.Errorf("PTTL %d after the record was put back, want its expiry", ttl)
	}
}
