package admin

import (
	"math"
	"strconv"
)

// FormatRate prints a rate for people: whole numbers without decimals
// (199.97 is "200"), others with one ("12.3"), never an exponent.
func FormatRate(f float64) string {
	r := math.Round(f*10) / 10
	if r == math.Trunc(r) {
		return strconv.FormatFloat(r, 'f', 0, 64)
	}
	return strconv.FormatFloat(r, 'f', 1, 64)
}
