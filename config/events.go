package config

import (
	"fmt"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/human"

	"github.com/ratelimitd/ratelimitd/policy"
)

// Events is the [events] table: the history of refusals, warnings,
// quarantine and operator actions (package events, `ratelimitd events`).
type Events struct {
	Enabled  *bool           `toml:"enabled"`
	MaxAge   policy.Duration `toml:"max_age"`
	MaxCount int             `toml:"max_count"`
}

// On reports whether events are recorded.
func (e *Events) On() bool { return e.Enabled == nil || *e.Enabled }

func (e *Events) withDefaults() {
	setDefaultPtr(&e.Enabled, true)
	setDefault(&e.MaxAge, policy.Duration(30*24*time.Hour))
	setDefault(&e.MaxCount, 1_000_000)
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
