package policy

import (
	"strconv"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/human"

	"github.com/ratelimitd/ratelimitd/ratelimit"
)

// Conversion records that a store converted a limit's states to changed
// parameters (ratelimit.Limit.Convert).
type Conversion struct {
	From  ratelimit.Limit // the parameters converted from (without the mode)
	At    time.Time
	Cause string // "reload" or "restore"
}

// Conversions is implemented by a store that converts states.
type Conversions interface {
	// LastConversion returns limit's last conversion since the store
	// opened, if any. Safe for concurrent use.
	LastConversion(limit string) (Conversion, bool)
}

// ConvertedView says a KeyRate's state was converted: a refused key keeps
// its wait, so its new rate may look huge.
type ConvertedView struct {
	From      string        `json:"from"` // "5/1h", or "5/1h gcra" when the algorithm changed
	Limit     float64       `json:"from_limit"`
	Period    time.Duration `json:"from_period"`
	Algorithm string        `json:"from_algorithm"`
	At        time.Time     `json:"at"`
	Cause     string        `json:"cause"`
	Rate      float64       `json:"from_rate,omitempty"` // by the old parameters (Lookup only)
}

// convertedView returns what c says of l's state s at now, or nil when c
// did not convert s; back computes the old rate.
func (l *limit) convertedView(c Conversion, s ratelimit.State, refusing bool, now time.Time, back bool) *ConvertedView {
	gcra := l.rl.Algorithm == ratelimit.GCRA || l.rl.Algorithm == ratelimit.Cooldown
	if gcra && !refusing || !gcra && s.Time > c.At.UnixNano() {
		return nil
	}
	v := &ConvertedView{From: strconv.FormatFloat(c.From.Limit, 'f', -1, 64) + "/" + human.Duration(c.From.Period),
		Limit: c.From.Limit, Period: c.From.Period, Algorithm: c.From.Algorithm.String(), At: c.At, Cause: c.Cause}
	if c.From.Algorithm != l.rl.Algorithm {
		v.From += " " + v.Algorithm
	}
	if back {
		if old, err := c.From.Convert(s, l.rl, now); err == nil {
			v.Rate = human.Finite(c.From.Rate(old, now))
		}
	}
	return v
}
