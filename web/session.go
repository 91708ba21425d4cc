package web

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
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

func newSessions() *sessions { return &sessions{m: map[string]*session{}} }

func randomToken() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// create starts a session for user and returns its token.
func (s *sessions) create(user string, now time.Time) (string, *session) {
	tok := randomToken()
	ss := &session{user: user, csrf: randomToken(), created: now, seen: now}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expireLocked(now)
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

// removeUser ends every session of user (removed from the users file).
func (s *sessions) removeUser(user string) {
	s.mu.Lock()
	for k, v := range s.m {
		if v.user == user {
			delete(s.m, k)
		}
	}
	s.mu.Unlock()
}

func (s *sessions) expireLocked(now time.Time) {
	for k, v := range s.m {
		if v.expired(now) {
			delete(s.m, k)
		}
	}
}

// validCSRF compares a form's token with the session's in constant time.
func validCSRF(ss session, token string) bool {
	return token != "" && subtle.ConstantTimeCompare([]byte(ss.csrf), []byte(token)) == 1
}

// Failed logins are slowed per user name and client address: after
// freeFailures, each attempt waits a delay doubling from failureDelay to
// maxFailureDelay; the count is forgotten failureWindow after the last
// failure. At most maxThrottled are kept (the oldest goes).
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

func newThrottle() *throttle { return &throttle{m: map[string]*failures{}} }

// wait returns how long the keys must wait before an attempt (0: none).
func (t *throttle) wait(now time.Time, keys ...string) time.Duration {
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
		d := failureDelay << min(f.n-freeFailures, 16)
		d = min(d, maxFailureDelay)
		if w := f.last.Add(d).Sub(now); w > longest {
			longest = w
		}
	}
	return longest
}

// fail counts a failed attempt against each key.
func (t *throttle) fail(now time.Time, keys ...string) {
	t.mu.Lock()
	defer t.mu.Unlock()
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
}

// succeed forgets the failures of key.
func (t *throttle) succeed(key string) {
	t.mu.Lock()
	delete(t.m, key)
	t.mu.Unlock()
}

// evictOldest deletes the entry of m whose time is earliest.
func evictOldest[V any](m map[string]V, at func(V) time.Time) {
	var oldest string
	for k, v := range m {
		if oldest == "" || at(v).Before(at(m[oldest])) {
			oldest = k
		}
	}
	delete(m, oldest)
}
