package cliout

import (
	"fmt"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/human"
)

// ParseWhen reads a --since or --until: "" (no bound), a duration back from
// now, an RFC 3339 time, or a local "2006-01-02 15:04[:05]" or date.
func ParseWhen(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := human.ParseDuration(s); err == nil {
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	for _, layout := range []string{time.DateTime, "2006-01-02 15:04", time.DateOnly} {
		if t, err := time.ParseInLocation(layout, s, time.Local); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%q is neither a duration (24h, 7d) nor a time (2025-03-01T12:00:00Z, 2025-03-01 12:00)", s)
}
