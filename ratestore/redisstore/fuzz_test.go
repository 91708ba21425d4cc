package redisstore

import (
	"testing"

	"github.com/ratelimitd/ratelimitd/ratelimit"
)

// FuzzDecode: whatever bytes Redis holds under a state key, decode never
// panics, accepts exactly the 20-byte form, the 28-byte form the decision
// script wrote in the earlier layout (state and expiry) or none, and a state it reads is written back in
// a form that reads the same.
func FuzzDecode(f *testing.F) {
	f.Add("")
	f.Add(encode(ratelimit.State{Time: 1_790_000_000_123_456_789, Rate: 199.5}))
	f.Add("short")
	f.Add(encode(ratelimit.State{Time: 1_790_000_000_123_456_789, Rate: 3}) + "\x00\x00\x00\x00\x00\x00\x00\x00")
	f.Fuzz(func(t *testing.T, v string) {
		st, err := decode(v)
		if (err == nil) != (len(v) == 0 || len(v) == stateLen || len(v) == legacyStateLen) {
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

// FuzzKey: every (limit, rate key) pair has a key of the earlier layout
// that parses back to it, every rate key a hash that parses back to it,
// and the hash and all the limits' keys of one non-empty rate key share
// a hash slot.
func FuzzKey(f *testing.F) {
	f.Add("hourly", "alice@example.org")
	f.Add("daily", "a}b{c%d")
	f.Add("x}", "{}")
	f.Fuzz(func(t *testing.T, limit, key string) {
		s := &Store{prefix: DefaultKeyPrefix}
		k := s.LegacyKey(limit, key)
		l2, k2, ok := s.parseKey(k)
		if !ok || l2 != limit || k2 != key {
			t.Fatalf("parseKey(LegacyKey(%q, %q) = %q) = %q, %q, %v", limit, key, k, l2, k2, ok)
		}
		h := s.Key(limit, key)
		if l2, k2, ok := s.parseKey(h); !ok || l2 != "" || k2 != key {
			t.Fatalf("parseKey(Key(%q, %q) = %q) = %q, %q, %v", limit, key, h, l2, k2, ok)
		}
		if key != "" && (Slot(k) != Slot(s.LegacyKey(limit+"x", key)) || Slot(k) != Slot(h)) {
			t.Fatalf("limits of %q in different slots", key)
		}
	})
}

// FuzzRecord: whatever bytes Redis holds under a rate key's record,
// reading it never panics, and a record that parses hands out whole
// entries: names and states of stateLen bytes.
func FuzzRecord(f *testing.F) {
	f.Add("")
	f.Add("\x00\x00\x00\x00\x00\x00\x00\x00\x06hourly" + encode(ratelimit.State{Time: 1_790_000_000_123_456_789, Rate: 3}))
	f.Add("\x00\x00\x00\x00\x00\x00\x00\x00\x06hourly")
	f.Add("xyz")
	f.Fuzz(func(t *testing.T, v string) {
		n := 0
		ok := recordEach(v, func(name, state string) bool {
			n += 1 + len(name) + len(state)
			if len(state) != stateLen {
				t.Fatalf("state of %d bytes", len(state))
			}
			return true
		})
		if ok && n != len(v)-recordExpiryLen {
			t.Fatalf("entries of %d bytes in a record of %d", n, len(v))
		}
		recordState(v, "hourly")
	})
}
