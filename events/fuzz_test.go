package events

import (
	"errors"
	"testing"
	"time"
)

// FuzzDecode: any record body decodes to an event or ErrCorrupt, never a
// panic; an encoded event decodes to itself, its fields through clip.
func FuzzDecode(f *testing.F) {
	long := string(make([]byte, 2*MaxField))
	for _, e := range []Event{
		{Key: "alice", Limit: "hourly", Action: Defer, Rate: 201, Max: 200, Sender: "alice@example.org", Count: 7},
		{Action: Reload, Detail: long + "é"},
	} {
		rec := encode(nil, &e)
		f.Add(rec[:len(rec)-4], e.Key, e.Detail, 3)
	}
	f.Fuzz(func(t *testing.T, body []byte, key, detail string, count int) {
		k := recordKey(classDecision, time.Unix(0, 1), 1)
		if _, err := decode(k, body); err != nil && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("decode error %v does not wrap ErrCorrupt", err)
		}
		e := Event{Time: time.Unix(0, 5), Key: key, Action: Warn, Detail: detail, Count: count}
		rec := encode(nil, &e)
		got, err := decode(k, rec[:len(rec)-4])
		if err != nil || got.Key != clip(key) || got.Detail != clip(detail) || got.Count != min(max(count, 1), maxCount) ||
			len(rec) > MaxRecord-keyLen-16 {
			t.Fatalf("round trip of %q, %q, %d: %+v, %v (%d bytes)", key, detail, count, got, err, len(rec))
		}
	})
}
