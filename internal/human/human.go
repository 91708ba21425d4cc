// Package human parses and formats numbers for people: periods ("90s",
// "1h", "7d"), rates in cost per period, retry waits and the non-finite
// values JSON cannot carry. The CLI, the console, simulate, notifications
// and the engine's refusal texts all print through it, so one rate reads
// the same everywhere.
package human

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// ParseDuration parses time.ParseDuration syntax plus the units "d" (24h)
// and "w" (7d), alone or as the leading term ("1d12h").
func ParseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	var total time.Duration
	for _, u := range []struct {
		suffix string
		unit   time.Duration
	}{{"w", 7 * 24 * time.Hour}, {"d", 24 * time.Hour}} {
		if i := strings.Index(s, u.suffix); i > 0 {
			n, err := strconv.ParseFloat(s[:i], 64)
			// NaN, ±Inf and values past ±292 years do not fit a Duration.
			if err != nil || !(math.Abs(n*float64(u.unit)) < math.MaxInt64/2) {
				return 0, fmt.Errorf("invalid duration %q", s)
			}
			total += time.Duration(n * float64(u.unit))
			s = s[i+1:]
		}
	}
	if s == "" {
		if total == 0 {
			return 0, fmt.Errorf("invalid duration %q", s)
		}
		return total, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q (use e.g. 90s, 1h, 24h, 7d)", s)
	}
	return total + d, nil
}

// Duration prints d the way operators write periods: "1h", "24h", "7d",
// "1m30s"; whole days from 48h.
func Duration(d time.Duration) string {
	switch {
	case d >= 48*time.Hour && d%(24*time.Hour) == 0:
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d"
	case d%time.Hour == 0 && d != 0:
		return strconv.FormatInt(int64(d/time.Hour), 10) + "h"
	case d%time.Minute == 0 && d != 0:
		return strconv.FormatInt(int64(d/time.Minute), 10) + "m"
	case d >= time.Second:
		return d.Round(time.Second).String()
	default:
		return d.String()
	}
}

// Rate prints a measured rate against its limit: whole numbers from 100
// up, one decimal below, and, over the limit, as many more decimals as it
// takes to read as more than the limit (200.01 over 200 prints "200.01",
// never "200").
func Rate(rate, limit float64) string {
	prec := 1
	if rate >= 100 {
		prec = 0
	}
	s := strconv.FormatFloat(rate, 'f', prec, 64)
	if rate <= limit || math.IsInf(rate, 0) || math.IsNaN(rate) {
		return s
	}
	for ; prec <= 15; prec++ {
		s = strconv.FormatFloat(rate, 'f', prec, 64)
		if v, err := strconv.ParseFloat(s, 64); err == nil && v > limit {
			return s
		}
	}
	return strconv.FormatFloat(rate, 'g', -1, 64)
}

// FineRate prints a rate to two decimals, whole from 1e5 and with an
// exponent from 1e12, for tables that show each request's change
// ("1.50→2.49").
func FineRate(v float64) string {
	switch a := math.Abs(v); {
	case a >= 1e12:
		return strconv.FormatFloat(v, 'g', 4, 64)
	case a >= 1e5:
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// Span prints the length of a trace or a log: "0s", "12m", "3h05m",
// "4.5 days".
func Span(d time.Duration) string {
	switch {
	case d >= 48*time.Hour:
		return fmt.Sprintf("%.1f days", d.Hours()/24)
	case d >= time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	case d >= time.Minute:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	}
	return d.Round(time.Second).String()
}

// Number prints a rate or count in a table: whole numbers without
// decimals (199.97 is "200"), others with one ("12.3"), never an exponent.
func Number(f float64) string {
	r := math.Round(f*10) / 10
	if r == math.Trunc(r) {
		return strconv.FormatFloat(r, 'f', 0, 64)
	}
	return strconv.FormatFloat(r, 'f', 1, 64)
}

// Cut shortens s to n runes, the last of them ellipsis.
func Cut(s string, n int, ellipsis string) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-utf8.RuneCountInString(ellipsis)]) + ellipsis
	}
	return s
}

// Never is the retry text of a request no wait lets through (its cost
// alone exceeds the limit).
const Never = "never (message larger than the limit)"

// Retry prints a wait rounded up to whole seconds and at least 1s ("try
// again in 0s" would say there is no need to wait); the largest Duration
// means no wait ends and prints Never.
func Retry(d time.Duration) string {
	if d >= time.Duration(math.MaxInt64) {
		return Never
	}
	return Duration((max(d, time.Second) + time.Second - 1).Truncate(time.Second))
}

// Finite returns f for JSON, which has no NaN or infinity: NaN as 0 and
// an infinity as the largest finite float64 of its sign.
func Finite(f float64) float64 {
	switch {
	case math.IsNaN(f):
		return 0
	case math.IsInf(f, 1):
		return math.MaxFloat64
	case math.IsInf(f, -1):
		return -math.MaxFloat64
	}
	return f
}
