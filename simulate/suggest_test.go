package simulate

import (
	"fmt"
	"testing"
	"time"
)

func TestRoundUp(t *testing.T) {
	for _, c := range []struct{ in, want float64 }{
		{0.4, 1}, {1, 1}, {2.8, 3}, {13.05, 14}, {15, 15}, {15.0000000001, 15}, {152, 160}, {1234, 1300}, {99.1, 100},
	} {
		if got := roundUp(c.in); got != c.want {
			t.Errorf("roundUp(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}

func TestPercentile(t *testing.T) {
	v := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, c := range []struct{ p, want float64 }{{95, 10}, {90, 9}, {50, 5}, {100, 10}, {1, 1}} {
		if got := percentile(v, c.p); got != c.want {
			t.Errorf("p%v = %v, want %v", c.p, got, c.want)
		}
	}
}

// weekly returns sends of n recipients every 7 days at 09:00 (plus
// shift), the recipients drawn by rcpt(week, i).
func weekly(weeks, n int, shift time.Duration, rcpt func(w, i int) string) []send {
	start := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
	var out []send
	for w := 0; w < weeks; w++ {
		at := start.AddDate(0, 0, 7*w).Add(time.Duration(w) * shift)
		for i := 0; i < n; i++ {
			out = append(out, send{t: at.Add(time.Duration(i) * 2 * time.Second), rcpts: []string{rcpt(w, i)}})
		}
	}
	return out
}

// TestRecurringBulk recognises a newsletter and not look-alikes: a spam
// run at the same hour to new addresses, sends drifting through the day,
// too few sends, and sends too small to be bulk.
func TestRecurringBulk(t *testing.T) {
	same := func(w, i int) string { return fmt.Sprintf("s%d@example.com", i) }
	b, ok := recurringBulk(weekly(4, 100, 0, same))
	if !ok || b.Sends != 4 || b.Recipients != 100 || b.Similarity != 1 || b.Interval != 7*24*time.Hour || b.Clock != 9*time.Hour {
		t.Fatalf("newsletter: %+v %v", b, ok)
	}
	for name, sends := range map[string][]send{
		"new addresses each week": weekly(4, 100, 0, func(w, i int) string { return fmt.Sprintf("v%d.%d@example.net", w, i) }),
		"drifting time of day":    weekly(4, 100, 3*time.Hour, same),
		"two sends only":          weekly(2, 100, 0, same),
		"small sends":             weekly(5, 10, 0, same),
	} {
		if b, ok := recurringBulk(sends); ok {
			t.Errorf("%s recognised as bulk: %+v", name, b)
		}
	}
}
