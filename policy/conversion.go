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
	// From are the parameters the states were converted from (as the
	// store keeps them: the mode is not part of them).
	From ratelimit.Limit
	// At is the instant of the conversion: a converted state of an
	// exponential, EARRRL or baseline limit has its Time at or before it.
	At time.Time
	// Cause is "reload" or "restore".
	Cause string
}

// Conversions is implemented by a store that converts states
// (ratestore.Persistent), for KeyRate.
type Conversions interface {
	// LastConversion returns the last conversion of limit's states since
	// the store was opened, and whether there was one. Safe for
	// concurrent use.
	LastConversion(limit string) (Conversion, bool)
}

// ConvertedView says a KeyRate's state was converted: a refused key keeps
// its wait, so its new rate may look huge; Before is its rate by the old
// parameters.
type ConvertedView struct {
	// From is the old limit as "5/1h", followed by its algorithm when
	// that changed ("5/1h gcra").
	From      string        `json:"from"`
	Limit     float64       `json:"from_limit"`
	Period    time.Duration `json:"from_period"`
	Algorithm string        `json:"from_algorithm"`
	// At and Cause are the Conversion's.
	At    time.Time `json:"at"`
	Cause string    `json:"cause"`
	// Rate is the key's rate now by the old parameters (its state
	// converted back, in cost per old period; finite), set by Lookup
	// only (0 in All's views).
	Rate float64 `json:"from_rate,omitempty"`
}

// convertedView returns what l's view of key's state s at now says about
// c, or nil when c did not convert s (a later update, or for GCRA an
// admitted key); back computes the old rate by bisection.
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
