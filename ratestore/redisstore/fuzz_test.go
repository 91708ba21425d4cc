package redisstore

import (
	"testing"

	"github.com/ratelimitd/ratelimitd/ratelimit"
)

// FuzzDecode: whatever bytes Redis holds under a state key, decode never
// panics, accepts exactly the 20-byte form, the decision script's 28-byte
// form (state and expiry) or none, and a state it reads is written back in
// a form that reads the same.
func FuzzDecode(f *testing.F) {
	f.Add("")
	f.Add(encode(ratelimit.State{Time: 1_790_000_000_123_456_789, Rate: 199.5}))
	f.Add("short")
	f.Add(encode(ratelimit.State{Time: 1_790_000_000_123_456_789, Rate: 3}) + "\x00\x00\x00\x00\x00\x00\x00\x00")
	f.Fuzz(func(t *testing.T, v string) {
		st, err := decode(v)
		if (err == nil) != (len(v) == 0 || len(v) == stateLen || len(v) == expiringStateLen) {
			t.Fatalf("decode(%d bytes): %v", len(v), err)
		}
		if err != nil {
			return
		}
		again, err := decode(encode(st))
		if err != nil || again.Time != st.Time || (again.Rate != st.Rate && st.Rate == st.Rate) {
			t.Fatalf("decode(encode(%+v)) = %+v, %v", st, again, err)
		}
	})
}

// FuzzKey: every (limit, rate key) pair has a Redis key that parses back
// to it, and all the limits of one non-empty rate key share a hash slot.
func FuzzKey(f *testing.F) {
	f.Add("hourly", "alice@example.org")
	f.Add("daily", "a}b{c%d")
	f.Add("x}", "{}")
	f.Fuzz(func(t *testing.T, limit, key string) {
		s := &Store{prefix: DefaultKeyPrefix}
		k := s.Key(limit, key)
		l2, k2, ok := s.parseKey(k)
		if !ok || l2 != limit || k2 != key {
			t.Fatalf("parseKey(Key(%q, %q) = %q) = %q, %q, %v", limit, key, k, l2, k2, ok)
		}
		if key != "" && Slot(k) != Slot(s.Key(limit+"x", key)) {
			t.Fatalf("limits of %q in different slots", key)
		}
	})
}
