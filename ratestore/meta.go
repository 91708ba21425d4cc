package ratestore

import (
	"encoding/binary"
	"math"
	"time"

	"github.com/ratelimitd/ratelimitd/ratelimit"
)

// Bucket ratemeta holds the parameters each limit's states were written
// under: per limit name a statedb record (metaVersion), 50 bytes
// big-endian: metaFormat (1), Algorithm (1), Limit (float64 bits), Period
// (ns), HalfLife (ns), Factor, Floor (float64 bits), LearnPeriod (ns).
var metaName = []byte("ratemeta")

const (
	metaFormat = 1
	metaLen    = 50
)

const (
	// retention keeps states of unknown parameters after their Time.
	retention = 30 * 24 * time.Hour
	// sweepInterval is how often Tick drops negligible states or sets.
	sweepInterval = time.Minute
)

// ProtectFraction is the share of its limit from which a key is not evicted.
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

// decodeParams is encodeParams' inverse; !ok for a malformed value.
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

// meaning strips l to what gives a stored state its meaning.
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

// sameMeaning reports whether a and b share algorithm, period and half-life.
func sameMeaning(a, b ratelimit.Limit) bool {
	a, b = meaning(a), meaning(b)
	return a.Algorithm == b.Algorithm && a.Period == b.Period && a.HalfLife == b.HalfLife
}
