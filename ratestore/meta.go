package ratestore

import (
	"encoding/binary"
	"math"
	"time"

	"github.com/ratelimitd/ratelimitd/ratelimit"
)

// Limit parameters ("meta"). A stored state means something only under the
// parameters that wrote it: an exponential {time, rate} read as a GCRA
// arrival time lets an offender through, and a state whose limit is no
// longer configured cannot be judged decayed without its own parameters.
// So the BoltDB file keeps, next to the states, the parameters each limit's
// states were written under:
//
//	ratemeta                  top-level bucket
//	  <limit name> -> 50 bytes  metaFormat (1), Algorithm (1), Limit
//	                            (float64 bits), Period (ns, int64),
//	                            HalfLife (ns, int64), Factor, Floor
//	                            (float64 bits), LearnPeriod (ns, int64),
//	                            big-endian
//
// The meta of a limit is written in the same transaction as the states
// converted to it (see Persistent.Reconfigure), so the file never holds
// states under parameters other than their own.
var metaName = []byte("ratemeta")

const (
	metaFormat = 1
	metaLen    = 50
)

// DefaultRetention is how long states of a limit whose parameters are
// unknown (a file written before the parameters were stored, for a limit
// the configuration no longer names) are kept after their Time: they cannot
// be judged decayed, and they weigh on no decision until the limit is
// configured again.
const DefaultRetention = 30 * 24 * time.Hour

// ProtectFraction is the share of its limit at or above which a key's
// decayed rate protects it from eviction under key pressure (MaxKeys): an
// offender, or a sender about to become one, is never evicted to make room
// for a new key.
const ProtectFraction = 0.5

func encodeParams(l ratelimit.Limit) []byte {
	v := make([]byte, 0, metaLen)
	v = append(v, metaFormat, byte(l.Algorithm))
	v = binary.BigEndian.AppendUint64(v, math.Float64bits(l.Limit))
	v = binary.BigEndian.AppendUint64(v, uint64(l.Period))
	v = binary.BigEndian.AppendUint64(v, uint64(l.HalfLife))
	v = binary.BigEndian.AppendUint64(v, math.Float64bits(l.Factor))
	v = binary.BigEndian.AppendUint64(v, math.Float64bits(l.Floor))
	return binary.BigEndian.AppendUint64(v, uint64(l.LearnPeriod))
}

// decodeParams reads a meta value; ok is false for a malformed one (which
// restore treats as unknown parameters).
func decodeParams(v []byte) (ratelimit.Limit, bool) {
	if len(v) != metaLen || v[0] != metaFormat {
		return ratelimit.Limit{}, false
	}
	l := ratelimit.Limit{
		Algorithm:   ratelimit.Algorithm(v[1]),
		Limit:       math.Float64frombits(binary.BigEndian.Uint64(v[2:])),
		Period:      time.Duration(binary.BigEndian.Uint64(v[10:])),
		HalfLife:    time.Duration(binary.BigEndian.Uint64(v[18:])),
		Factor:      math.Float64frombits(binary.BigEndian.Uint64(v[26:])),
		Floor:       math.Float64frombits(binary.BigEndian.Uint64(v[34:])),
		LearnPeriod: time.Duration(binary.BigEndian.Uint64(v[42:])),
	}
	return l, l.Validate() == nil
}

// meaning strips l to what gives a stored state its meaning: the mode only
// says how states are updated.
func meaning(l ratelimit.Limit) ratelimit.Limit {
	l.Mode = ratelimit.Leaky
	if l.Algorithm != ratelimit.EARRRL {
		l.HalfLife = 0
	}
	if l.Algorithm != ratelimit.Baseline {
		l.Factor, l.Floor, l.LearnPeriod = 0, 0, 0
	}
	return l
}

// sameMeaning reports whether states written under a mean the same under
// b: same algorithm, period and (EARRRL) half-life. A changed limit alone
// keeps the meaning: the operator raised or lowered the bar; so do a
// baseline's factor, floor and learning period (its state is the key's
// rate and learned peak, whatever they are).
func sameMeaning(a, b ratelimit.Limit) bool {
	a, b = meaning(a), meaning(b)
	return a.Algorithm == b.Algorithm && a.Period == b.Period && a.HalfLife == b.HalfLife
}

// retryWait is how long a request of cost 1 is refused by l against s at
// now, probing as a leaky limit (without counting the probe); 0 when it is
// allowed, math.MaxInt64 when it can never be allowed.
func retryWait(l ratelimit.Limit, s ratelimit.State, now time.Time) time.Duration {
	l.Mode = ratelimit.Leaky
	if r := l.Check(s, now, 1); r.Over {
		return r.RetryAfter
	}
	return 0
}

// stateAt returns the state under l of a key whose measured rate at now is
// x (cost per l.Period), as if it had been measured under l all along; for
// Baseline, with the learned peak peak.
func stateAt(l ratelimit.Limit, x, peak float64, now time.Time) ratelimit.State {
	if !(x > 0) && !(peak > 0) {
		return ratelimit.State{}
	}
	x = math.Max(x, 0)
	x = math.Min(x, math.MaxFloat64)
	n := now.UnixNano()
	switch l.Algorithm {
	case ratelimit.GCRA, ratelimit.Cooldown:
		ahead := x / l.Limit * float64(l.Period)
		if ahead >= float64(math.MaxInt64-n) {
			return ratelimit.State{Time: math.MaxInt64}
		}
		return ratelimit.State{Time: n + int64(math.Ceil(ahead))}
	case ratelimit.EARRRL:
		lp := 1.0 // lambda*period
		if l.HalfLife > 0 {
			lp = math.Ln2 * float64(l.Period) / float64(l.HalfLife)
		}
		return ratelimit.State{Time: n, Rate: math.Min(x/lp, math.MaxFloat64)}
	case ratelimit.Baseline:
		return ratelimit.State{Time: n, Rate: ratelimit.PackBaseline(x, peak)}
	default:
		return ratelimit.State{Time: n, Rate: x}
	}
}

// convert returns the state under to of a key whose state under from is s,
// at now, for a reload or restart that changed the limit's algorithm,
// period or half-life. It never shortens a refusal and never invents one:
//
//   - a state negligible under from converts to no state;
//   - the measured rate carries over as the lower of the same number and
//     the same rate per unit of time (rate*to.Period/from.Period), so a
//     sender who was not refused is not refused for history the old
//     state did not hold;
//   - if a request of cost 1 was refused under from for a wait w, the
//     converted rate is raised (bisection) until the new parameters
//     refuse it for at least w.
//
// To a baseline limit, a key keeps the peak it learned under another
// baseline (scaled like the rate), or starts learning afresh, as under a
// new limit. Per-key overrides are not seen here: the wait is the one
// under the limit's own value.
func convert(s ratelimit.State, from, to ratelimit.Limit, now time.Time) ratelimit.State {
	if from.Negligible(s, now) {
		return ratelimit.State{}
	}
	scale := math.Min(1, float64(to.Period)/float64(from.Period))
	x := from.Rate(s, now) * scale
	if !(x >= 0) {
		x = 0
	}
	var peak float64
	if from.Algorithm == ratelimit.Baseline {
		_, peak = ratelimit.UnpackBaseline(s.Rate)
		peak *= scale
	}
	wait := retryWait(from, s, now)
	if wait == 0 || wait == math.MaxInt64 { // nothing, or no state, is let through
		return stateAt(to, x, peak, now)
	}
	refuses := func(x float64) bool { return retryWait(to, stateAt(to, x, peak, now), now) >= wait }
	lo, hi := x, math.Max(x, to.Limit)
	for !refuses(hi) {
		if hi > math.MaxFloat64/4 {
			return stateAt(to, math.MaxFloat64, peak, now)
		}
		lo, hi = hi, hi*2
	}
	for range 100 {
		mid := lo + (hi-lo)/2
		if !(mid > lo && mid < hi) {
			break
		}
		if refuses(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return stateAt(to, hi, peak, now)
}
