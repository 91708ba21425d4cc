package config

import (
	"fmt"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/human"

	"github.com/ratelimitd/ratelimitd/policy"
)

// Events is the [events] table: the history of refusals, warnings,
// quarantine and operator actions kept in the state file (package events,
// `ratelimitd events`).
type Events struct {
	// Enabled records events; default true.
	Enabled *bool `toml:"enabled"`
	// MaxAge: events older than this are deleted; default 30 days.
	MaxAge policy.Duration `toml:"max_age"`
	// MaxCount: beyond this many events the oldest are deleted; default
	// 1,000,000 (docs/performance.md has the state file's growth per
	// million events).
	MaxCount int `toml:"max_count"`
}

// Defaults for Events.
const (
	DefaultEventsMaxAge   = 30 * 24 * time.Hour
	DefaultEventsMaxCount = 1_000_000
)

// On reports whether events are recorded.
func (e *Events) On() bool { return e.Enabled == nil || *e.Enabled }

func (e *Events) withDefaults() {
	if e.Enabled == nil {
		on := true
		e.Enabled = &on
	}
	if e.MaxAge == 0 {
		e.MaxAge = policy.Duration(DefaultEventsMaxAge)
	}
	if e.MaxCount == 0 {
		e.MaxCount = DefaultEventsMaxCount
	}
}

func (e *Events) validate() []error {
	var errs []error
	if e.MaxAge < policy.Duration(time.Minute) {
		errs = append(errs, fmt.Errorf("events.max_age: %s is too short: at least 1m", human.Duration(time.Duration(e.MaxAge))))
	}
	if e.MaxCount < 1 {
		errs = append(errs, fmt.Errorf("events.max_count: %d: at least 1", e.MaxCount))
	}
	return errs
}
