package notify

import (
	"strings"
	"testing"
	"time"
)

// TestRateTextReadsOverTheLimit: a refusal at 200.01 per hour over a
// limit of 200 says 200.01, not "200 per 1h (limit 200)", in the summary
// and the default mail body; rates at or under the limit keep one decimal.
func TestRateTextReadsOverTheLimit(t *testing.T) {
	e := Event{Kind: LimitRefused, Time: time.Unix(1700000000, 0), Key: "carol", Limit: "hourly", Period: time.Hour,
		Action: "defer", Rate: 200.01, Max: 200}
	if got := e.RateText(); got != "200.01" {
		t.Errorf("RateText = %q, want 200.01", got)
	}
	if s := e.Summary(); !strings.Contains(s, "200.01 per 1h (limit 200)") {
		t.Errorf("summary %q", s)
	}
	for _, c := range []struct {
		rate, max float64
		want      string
	}{{201, 200, "201"}, {12.34, 12, "12.3"}, {12.04, 12, "12.04"}, {3.00001, 3, "3.00001"}, {150, 200, "150"}, {12.26, 200, "12.3"}} {
		if got := (Event{Rate: c.rate, Max: c.max}).RateText(); got != c.want {
			t.Errorf("rate %v max %v: RateText = %q, want %q", c.rate, c.max, got, c.want)
		}
	}
}

// TestSummaryPlurals: counts of one read in the singular.
func TestSummaryPlurals(t *testing.T) {
	for _, c := range []struct {
		e    Event
		want string
	}{
		{Event{Kind: QuarantineThreshold, Key: "dave", Count: 1}, "dave has 1 quarantined message"},
		{Event{Kind: QuarantineThreshold, Key: "dave", Count: 10}, "dave has 10 quarantined messages"},
		{Event{Kind: Thawed, Key: "dave", Count: 1, By: "root"}, "1 quarantined message thawed of dave by root"},
		{Event{Kind: Deleted, Key: "dave", Count: 2}, "2 quarantined messages deleted of dave"},
		{Event{Kind: Released, Key: "alice", Count: 40}, "alice: 40 messages released automatically"},
		{Event{Kind: Released, Key: "alice", Count: 1}, "alice: 1 message released automatically"},
	} {
		if got := c.e.Summary(); got != c.want {
			t.Errorf("%s %d: %q, want %q", c.e.Kind, c.e.Count, got, c.want)
		}
	}
}
