package web

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"maps"
	"slices"
	"sync"
	"time"
)

// A session ends sessionIdle after its last request or sessionMax after
// login; at most maxSessions are kept (the least recently seen goes).
const (
	sessionIdle = 30 * time.Minute
	sessionMax  = 12 * time.Hour
	maxSessions = 10000
	cookieName  = "ratelimitd_session"
)

type session struct {
	user    string
	entry   string // the user's entryID at login: a change ends the session
	csrf    string
	created time.Time
	seen    time.Time
}

// sessions holds the sessions in memory, by token. Safe for concurrent use.
type sessions struct {
	mu sync.Mutex
	m  map[string]*session
}

func (ss *session) expired(now time.Time) bool {
	return now.Sub(ss.seen) > sessionIdle || now.Sub(ss.created) > sessionMax
}

func randomToken() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// create starts a session for u and returns its token.
func (s *sessions) create(u User, now time.Time) (string, *session) {
	tok := randomToken()
	ss := &session{user: u.Name, entry: u.entryID(), csrf: randomToken(), created: now, seen: now}
	s.mu.Lock()
	defer s.mu.Unlock()
	maps.DeleteFunc(s.m, func(_ string, v *session) bool { return v.expired(now) })
	if len(s.m) >= maxSessions {
		evictOldest(s.m, func(v *session) time.Time { return v.seen })
	}
	s.m[tok] = ss
	return tok, ss
}

// get returns the live session of token and marks it seen.
func (s *sessions) get(token string, now time.Time) (session, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss, ok := s.m[token]
	if !ok {
		return session{}, false
	}
	if ss.expired(now) {
		delete(s.m, token)
		return session{}, false
	}
	ss.seen = now
	return *ss, true
}

func (s *sessions) remove(token string) {
	s.mu.Lock()
	delete(s.m, token)
	s.mu.Unlock()
}

// validCSRF compares a form's token with the session's in constant time.
func validCSRF(ss session, token string) bool {
	return token != "" && subtle.ConstantTimeCompare([]byte(ss.csrf), []byte(token)) == 1
}

// After freeFailures failed logins of a user name or client address, each
// attempt waits a delay doubling from failureDelay to maxFailureDelay;
// failureWindow after the last failure the count is forgotten.
const (
	freeFailures    = 3
	failureDelay    = 2 * time.Second
	maxFailureDelay = 5 * time.Minute
	failureWindow   = 15 * time.Minute
	maxThrottled    = 50000
)

type failures struct {
	n    int
	last time.Time
}

// throttle counts failed logins by key ("user:NAME", "addr:IP"). Safe for
// concurrent use.
type throttle struct {
	mu sync.Mutex
	m  map[string]*failures
}

// charge returns how long the keys must wait; when none must, it counts
// the attempt as a failure of each at once, so parallel attempts cannot
// all pass.
func (t *throttle) charge(now time.Time, keys ...string) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	var longest time.Duration
	for _, k := range keys {
		f, ok := t.m[k]
		if !ok {
			continue
		}
		if now.Sub(f.last) > failureWindow {
			delete(t.m, k)
			continue
		}
		if f.n < freeFailures {
			continue
		}
		d := min(failureDelay<<min(f.n-freeFailures, 16), maxFailureDelay)
		if w := f.last.Add(d).Sub(now); w > longest {
			longest = w
		}
	}
	if longest > 0 {
		return longest
	}
	for _, k := range keys {
		f, ok := t.m[k]
		if !ok {
			if len(t.m) >= maxThrottled {
				evictOldest(t.m, func(f *failures) time.Time { return f.last })
			}
			f = &failures{}
			t.m[k] = f
		}
		f.n++
		f.last = now
	}
	return 0
}

// succeed takes back a charged attempt that logged in.
func (t *throttle) succeed(userKey, addrKey string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.m, userKey)
	if f, ok := t.m[addrKey]; ok && f.n > 0 {
		f.n--
	}
}

// evictOldest deletes the entry of m (not empty) whose time is earliest.
func evictOldest[V any](m map[string]V, at func(V) time.Time) {
	delete(m, slices.MinFunc(slices.Collect(maps.Keys(m)), func(a, b string) int { return at(m[a]).Compare(at(m[b])) }))
}
