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
	if e.MaxAge < policy.Duration(time.Minute) {
		errs = append(errs, fmt.Errorf("events.max_age: %s is too short: at least 1m", human.Duration(time.Duration(e.MaxAge))))
	}
	if e.MaxCount < 1 {
		errs = append(errs, fmt.Errorf("events.max_count: %d: at least 1", e.MaxCount))
	}
	if e.ActionsMaxAge < policy.Duration(time.Minute) {
		errs = append(errs, fmt.Errorf("events.actions_max_age: %s is too short: at least 1m", human.Duration(time.Duration(e.ActionsMaxAge))))
	}
	if e.ActionsMaxCount < 1 {
		errs = append(errs, fmt.Errorf("events.actions_max_count: %d: at least 1", e.ActionsMaxCount))
	}
	if e.Coalesce < policy.Duration(time.Second) || e.Coalesce > policy.Duration(24*time.Hour) {
		errs = append(errs, fmt.Errorf("events.coalesce: %s: from 1s to 1d", human.Duration(time.Duration(e.Coalesce))))
	}
	return errs
}
