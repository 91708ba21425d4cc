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

// convert returns the state under to of a key whose state under from is s,
// at now, for a reload or restart that changed the limit's algorithm,
// period or half-life (see sameMeaning): ratelimit.Limit.Convert. A key
// refused for a wait w stays refused for w (never longer; shorter only
// where the new state cannot hold so long a wait), a key not refused keeps
// its share of the headroom and stays not refused, and converting there
// and back returns the same state. The error wraps ratelimit.ErrNotFinite
// when s holds a NaN or the result would not be finite; the state returned
// is then s, which the callers keep, log and count (PersistStats.NotConverted).
func convert(s ratelimit.State, from, to ratelimit.Limit, now time.Time) (ratelimit.State, error) {
	return to.Convert(s, from, now)
}
