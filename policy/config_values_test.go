package policy

import (
	"math"
	"testing"

	"github.com/ratelimitd/ratelimitd/internal/human"
)

// Non-finite and out-of-range numbers of days or weeks are an error, not
// a duration of math.MinInt64.
func TestParseDurationRejectsNonFinite(t *testing.T) {
	for _, s := range []string{"NaNd", "nand", "infd", "+Infd", "-Infw", "1e300d", "1e20w"} {
		if d, err := human.ParseDuration(s); err == nil {
			t.Errorf("human.ParseDuration(%q) = %v, want an error", s, d)
		}
	}
	for s, want := range map[string]int64{"2d": 2 * 86400e9, "1w": 7 * 86400e9, "1.5d": 36 * 3600e9} {
		if d, err := human.ParseDuration(s); err != nil || int64(d) != want {
			t.Errorf("human.ParseDuration(%q) = %v, %v", s, d, err)
		}
	}
}

func TestParseSizeRejectsNonFinite(t *testing.T) {
	for _, s := range []string{"NaN", "nanK", "Inf", "-Inf", "1e300", "-1"} {
		if n, err := ParseSize(s); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", s, n)
		}
	}
	if n, err := ParseSize("10M"); err != nil || n != 10<<20 {
		t.Errorf("ParseSize(10M) = %d, %v", n, err)
	}
}

func TestOverridesRejectNonFinite(t *testing.T) {
	for _, v := range []float64{math.Inf(1), math.Inf(-1), math.NaN(), -5, 0} {
		c := Config{Limits: []LimitConfig{{Name: "hourly", Key: []string{"sender"}, Limit: 10, Period: Duration(3600e9),
			Overrides: map[string]float64{"news@example.org": v}}}}
		if err := Check(c); err == nil {
			t.Errorf("override %v accepted", v)
		}
	}
}
