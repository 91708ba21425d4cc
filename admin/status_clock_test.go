package admin

import (
	"testing"
	"time"
)

// TestClockOffsetToTheSecond: the offset to Redis's clock is measured to
// within a round trip, so status shows it to the second: a host 2 hours
// behind measured over a 4-ms round trip is "2h0m0s behind redis", not
// "1h59m59.996s" (what TestStatusShowsRedisClock saw on a busy machine).
func TestClockOffsetToTheSecond(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string
	}{
		{2*time.Hour - 4*time.Millisecond, "2h0m0s behind redis"},
		{-90*time.Second + 300*time.Millisecond, "1m30s ahead of redis"},
		{400 * time.Millisecond, "level with redis"},
	} {
		if got := clockOffset(c.d); got != c.want {
			t.Errorf("clockOffset(%v) = %q, want %q", c.d, got, c.want)
		}
	}
}
