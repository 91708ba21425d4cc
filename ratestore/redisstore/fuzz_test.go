package redisstore

import (
	"testing"

	"github.com/ratelimitd/ratelimitd/ratelimit"
)

// FuzzDecode: whatever bytes Redis holds as a state, decode never panics,
// accepts exactly the 20-byte form or none, and a state it reads is
// written back in a form that reads the same.
func FuzzDecode(f *testing.F) {
	f.Add("")
	f.Add(encode(ratelimit.State{Time: 1_790_000_000_123_456_789, Rate: 199.5}))
	f.Add("short")
	f.Fuzz(func(t *testing.T, v string) {
		st, err := decode(v)
		if (err == nil) != (len(v) == 0 || len(v) == stateLen) {
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

// FuzzKey: every rate key's record name parses back to it and has the
// rate key as its hash tag.
func FuzzKey(f *testing.F) {
	f.Add("alice@example.org")
	f.Add("a}b{c%d")
	f.Add("{}")
	f.Add("")
	f.Fuzz(func(t *testing.T, key string) {
		s := &Store{prefix: DefaultKeyPrefix}
		k := s.Key(key)
		if k2, ok := s.parseKey(k); !ok || k2 != key {
			t.Fatalf("parseKey(Key(%q) = %q) = %q, %v", key, k, k2, ok)
		}
		if got := string(s.appendKey(nil, key)); got != k {
			t.Fatalf("appendKey(%q) = %q, Key = %q", key, got, k)
		}
		if Slot(k) != Slot(k+"hourly#outage") {
			t.Fatalf("the merge marker of %q is in another slot", key)
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

// TestParseKeyOnlyRecordNames: a key under the prefix that Key does not
// write (another program's, or an escape Key never makes) is no rate
// key's record: Range must not report a key whose record Get cannot find.
func TestParseKeyOnlyRecordNames(t *testing.T) {
	s := &Store{prefix: DefaultKeyPrefix}
	for _, k := range []string{"ratelimitd:{x%4}", "ratelimitd:{a%20b}", "ratelimitd:{%7b}", "ratelimitd:{%zz}",
		"ratelimitd:{}", "ratelimitd:{a}b}", "ratelimitd:{a}x", "other:{a}"} {
		if key, ok := s.parseKey(k); ok {
			t.Errorf("parseKey(%q) = %q, true; Key(%q) = %q", k, key, key, s.Key(key))
		}
	}
	for k, want := range map[string]string{"ratelimitd:{%}": "", "ratelimitd:{a%7Db%25}": "a}b%", "ratelimitd:{bob}": "bob"} {
		if key, ok := s.parseKey(k); !ok || key != want {
			t.Errorf("parseKey(%q) = %q, %v; want %q", k, key, ok, want)
		}
	}
}
