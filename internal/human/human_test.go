package human

import (
	"math"
	"testing"
	"time"
)

// Non-finite and out-of-range numbers of days or weeks are an error, not
// a duration of math.MinInt64.
func TestParseDurationRejectsNonFinite(t *testing.T) {
	for _, s := range []string{"NaNd", "nand", "infd", "+Infd", "-Infw", "1e300d", "1e20w"} {
		if d, err := ParseDuration(s); err == nil {
			t.Errorf("ParseDuration(%q) = %v, want an error", s, d)
		}
	}
	for s, want := range map[string]int64{"2d": 2 * 86400e9, "1w": 7 * 86400e9, "1.5d": 36 * 3600e9} {
		if d, err := ParseDuration(s); err != nil || int64(d) != want {
			t.Errorf("ParseDuration(%q) = %v, %v", s, d, err)
		}
	}
}

// TestRateAndRetry: the figures of a refusal never read "200 messages per
// 1h (limit 200); try again in 0s".
func TestRateAndRetry(t *testing.T) {
	for _, c := range []struct {
		rate, limit float64
		want        string
	}{{200.01, 200, "200.01"}, {200.0000001, 200, "200.0000001"}, {201, 200, "201"}, {3.04, 3, "3.04"},
		{200, 200, "200"}, {150.26, 200, "150"}, {2.26, 3, "2.3"}} {
		if got := Rate(c.rate, c.limit); got != c.want {
			t.Errorf("Rate(%v, %v) = %q, want %q", c.rate, c.limit, got, c.want)
		}
	}
	for _, c := range []struct {
		d    time.Duration
		want string
	}{{236 * time.Millisecond, "1s"}, {0, "1s"}, {18*time.Second + time.Millisecond, "19s"}, {time.Hour, "1h"},
		{time.Duration(math.MaxInt64), Never}} {
		if got := Retry(c.d); got != c.want {
			t.Errorf("Retry(%v) = %q, want %q", c.d, got, c.want)
		}
	}
}

func TestNumber(t *testing.T) {
	for in, want := range map[float64]string{200: "200", 199.97: "200", 12.34: "12.3", 0.04: "0", 1e6: "1000000", 2.25: "2.3"} {
		if got := Number(in); got != want {
			t.Errorf("Number(%v) = %q, want %q", in, got, want)
		}
	}
}

func TestFineRateSpanDurationFinite(t *testing.T) {
	for in, want := range map[float64]string{1.5: "1.50", 123456.7: "123457", 2e12: "2e+12"} {
		if got := FineRate(in); got != want {
			t.Errorf("FineRate(%v) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[time.Duration]string{0: "0s", 12 * time.Minute: "12m", 185 * time.Minute: "3h05m", 108 * time.Hour: "4.5 days"} {
		if got := Span(in); got != want {
			t.Errorf("Span(%v) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[time.Duration]string{time.Hour: "1h", 24 * time.Hour: "24h", 7 * 24 * time.Hour: "7d", 90 * time.Second: "1m30s"} {
		if got := Duration(in); got != want {
			t.Errorf("Duration(%v) = %q, want %q", in, got, want)
		}
	}
	if Finite(math.NaN()) != 0 || Finite(math.Inf(1)) != math.MaxFloat64 || Finite(math.Inf(-1)) != -math.MaxFloat64 || Finite(2) != 2 {
		t.Error("Finite")
	}
}

func TestCut(t *testing.T) {
	for _, c := range []struct {
		s, ellipsis, want string
		n                 int
	}{{"abcdef", "...", "abcdef", 6}, {"abcdefg", "...", "abc...", 6}, {"äöüßéè", "…", "äöüßéè", 6}, {"äöüßéèx", "…", "äöüßé…", 6}} {
		if got := Cut(c.s, c.n, c.ellipsis); got != c.want {
			t.Errorf("Cut(%q, %d, %q) = %q, want %q", c.s, c.n, c.ellipsis, got, c.want)
		}
	}
}
