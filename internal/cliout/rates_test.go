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
