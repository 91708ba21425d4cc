package srvconn

import (
	"log/slog"
	"sync"
	"time"
)

// ThrottledLog logs each message at most once per every, with the number
// of occurrences it stands for. Safe for concurrent use.
type ThrottledLog struct {
	log   *slog.Logger
	every time.Duration
	mu    sync.Mutex
	last  map[string]time.Time
	count map[string]int
}

// NewThrottledLog returns a ThrottledLog on log.
func NewThrottledLog(log *slog.Logger, every time.Duration) *ThrottledLog {
	return &ThrottledLog{log: log, every: every, last: map[string]time.Time{}, count: map[string]int{}}
}

// Warn logs msg with args and "occurrences" at Warn, unless msg was logged
// less than every ago.
func (t *ThrottledLog) Warn(msg string, args ...any) {
	t.mu.Lock()
	t.count[msg]++
	now := time.Now()
	if now.Sub(t.last[msg]) < t.every {
		t.mu.Unlock()
		return
	}
	n := t.count[msg]
	t.last[msg], t.count[msg] = now, 0
	t.mu.Unlock()
	t.log.Warn(msg, append(args, "occurrences", n, "per", t.every.String())...)
}
