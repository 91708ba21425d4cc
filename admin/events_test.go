package admin

import (
	"net/url"
	"testing"
	"time"
)

// TestParseWhen covers the --since/--until and ?since=/?until= forms:
// periods back from now, RFC 3339, and zoneless times read in now's
// location (local for the CLI, UTC for the admin API and the console).
func TestParseWhen(t *testing.T) {
	zone := time.FixedZone("X", 2*3600)
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, zone)
	for _, c := range []struct {
		in   string
		want time.Time
	}{
		{"", time.Time{}},
		{"24h", now.Add(-24 * time.Hour)},
		{"7d", now.Add(-7 * 24 * time.Hour)},
		{"2025-03-01T12:00:00Z", time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)},
		{"2025-03-01 12:00", time.Date(2025, 3, 1, 12, 0, 0, 0, zone)},
		{"2025-03-01 12:00:30", time.Date(2025, 3, 1, 12, 0, 30, 0, zone)},
		{"2025-03-01T12:00", time.Date(2025, 3, 1, 12, 0, 0, 0, zone)},
		{"2025-03-01", time.Date(2025, 3, 1, 0, 0, 0, 0, zone)},
	} {
		got, err := ParseWhen(c.in, now)
		if err != nil || !got.Equal(c.want) {
			t.Errorf("ParseWhen(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	if _, err := ParseWhen("yesterday", now); err == nil {
		t.Error("ParseWhen(yesterday): no error")
	}
	q, err := ParseEventQuery(url.Values{"since": {"2025-03-01 12:00"}}, now)
	if want := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC); err != nil || !q.Since.Equal(want) {
		t.Errorf("ParseEventQuery since = %v, %v; want %v (UTC)", q.Since, err, want)
	}
}
