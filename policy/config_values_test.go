package policy

import (
	"math"
	"testing"
)

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
