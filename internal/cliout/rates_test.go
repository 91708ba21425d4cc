package cliout

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/policy"
)

// TestRatesSayWhatOutcomeLimitsCount: an outcome limit's row says what it
// counted, a volume limit's does not, and --json carries per for both.
func TestRatesSayWhatOutcomeLimitsCount(t *testing.T) {
	kr := []policy.KeyRate{{Limit: "hourly", Key: "alice", Rate: 4, Max: 200, Period: time.Hour, Per: "mail"},
		{Limit: "unknown", Key: "alice", Rate: 4.2, Max: 10, Period: time.Hour, Per: "unknown_rcpt"}}
	var b bytes.Buffer
	Rates(&b, kr)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 3 || strings.Contains(lines[1], "counts") ||
		!strings.HasSuffix(lines[2], "ok; counts unknown recipients (unknown_rcpt)") {
		t.Fatalf("rates:\n%s", b.String())
	}
	if rows := RateRows(kr); rows[0].Per != "mail" || rows[1].Per != "unknown_rcpt" {
		t.Fatalf("rows %+v", rows)
	}
}

// TestRatesShowARatioLimitsShare: a ratio limit's row shows its failures
// of its recipients, the ratio as its max and the minimum count, and
// --json carries the recipients.
func TestRatesShowARatioLimitsShare(t *testing.T) {
	kr := []policy.KeyRate{{Limit: "bounce-ratio", Key: "alice", Rate: 22.6, Max: 6.04, Period: time.Hour, Per: "bounce",
		Over: true, Refusing: true, RetryAfter: 11 * time.Minute, Ratio: 0.1, MinCount: 50, Recipients: 60.4}}
	var b bytes.Buffer
	Rates(&b, kr)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[1], " 23 of 60 ") || !strings.Contains(lines[1], " 10% ") ||
		!strings.HasSuffix(lines[1], "over: allowed again in 11m; counts bounced recipients (bounce) of at least 50 recipients") {
		t.Fatalf("rates:\n%s", b.String())
	}
	if rows := RateRows(kr); rows[0].Recipients != 60.4 || rows[0].Ratio != 0.1 || rows[0].MinCount != 50 {
		t.Fatalf("rows %+v", rows)
	}
}
