package ratestore

import (
	"encoding/binary"
	"math"
	"time"

	"github.com/ratelimitd/ratelimitd/ratelimit"
)

// The parameters each limit's states were written under, in bucket
// ratemeta: a stored state means something only under them (an
// exponential {time, rate} read as a GCRA arrival time lets an offender
// through). Under the limit's name, a statedb record (metaVersion) whose
// payload is 50 bytes, big-endian: metaFormat (1), Algorithm (1), Limit
// (float64 bits), Period (ns), HalfLife (ns), Factor, Floor (float64
// bits), LearnPeriod (ns). They are written in the transaction of the
// states converted to them.
var metaName = []byte("ratemeta")

const (
	metaFormat = 1
	metaLen    = 50
)

// DefaultRetention is how long states of a limit with unknown parameters
// are kept after their Time: they cannot be judged decayed.
const DefaultRetention = 30 * 24 * time.Hour

// ProtectFraction is the share of its limit at or above which a key is
// never evicted under key pressure (MaxKeys).
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

// decodeParams is encodeParams' inverse; ok is false for a malformed
// value (restore treats it as unknown parameters).
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

// meaning strips l to what gives a stored state its meaning (not the
// mode, which says how states are updated).
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
// b: same algorithm, period and (EARRRL) half-life; the limit and a
// baseline's factor, floor and learning period do not change it.
func sameMeaning(a, b ratelimit.Limit) bool {
	a, b = meaning(a), meaning(b)
	return a.Algorithm == b.Algorithm && a.Period == b.Period && a.HalfLife == b.HalfLife
}

// convert is ratelimit.Limit.Convert: the state under to of a key whose
// state under from is s, at now (see Reconfigure). The error wraps
// ratelimit.ErrNotFinite; the callers then keep s, log and count it.
func convert(s ratelimit.State, from, to ratelimit.Limit, now time.Time) (ratelimit.State, error) {
	return to.Convert(s, from, now)
}
