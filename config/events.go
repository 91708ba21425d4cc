package config

import (
	"fmt"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/human"

	"github.com/ratelimitd/ratelimitd/policy"
)

// Events is the [events] table: the history of refusals, warnings,
// quarantine and operator actions (package events).
type Events struct {
	Enabled         *bool           `toml:"enabled"`
	MaxAge          policy.Duration `toml:"max_age"`
	MaxCount        int             `toml:"max_count"`
	ActionsMaxAge   policy.Duration `toml:"actions_max_age"`
	ActionsMaxCount int             `toml:"actions_max_count"`
	Coalesce        policy.Duration `toml:"coalesce"`
}

// On reports whether events are recorded.
func (e *Events) On() bool { return e.Enabled == nil || *e.Enabled }

func (e *Events) validate() []error {
	var errs []error
	for _, c := range []struct {
		key string
		d   policy.Duration
	}{{"max_age", e.MaxAge}, {"actions_max_age", e.ActionsMaxAge}} {
		if c.d < policy.Duration(time.Minute) {
			errs = append(errs, fmt.Errorf("events.%s: %s is too short: at least 1m", c.key, human.Duration(time.Duration(c.d))))
		}
	}
	for _, c := range []struct {
		key string
		n   int
	}{{"max_count", e.MaxCount}, {"actions_max_count", e.ActionsMaxCount}} {
		if c.n < 1 {
			errs = append(errs, fmt.Errorf("events.%s: %d: at least 1", c.key, c.n))
		}
	}
	if e.Coalesce < policy.Duration(time.Second) || e.Coalesce > policy.Duration(24*time.Hour) {
		errs = append(errs, fmt.Errorf("events.coalesce: %s: from 1s to 1d", human.Duration(time.Duration(e.Coalesce))))
	}
	return errs
}
