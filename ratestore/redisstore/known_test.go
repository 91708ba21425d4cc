package redisstore

import (
	"strconv"
	"strings"
	"testing"
)

// TestKnownRecords: a record is remembered as it was set, inline or
// (longer than knownInline) as a string; an empty record forgets the key;
// the cache never holds more than its capacity.
func TestKnownRecords(t *testing.T) {
	k := newKnownRecords(64)
	short, long := strings.Repeat("s", knownInline), strings.Repeat("l", knownInline+1)
	k.set("a", short)
	k.set("b", long)
	if rec, ok := k.get("a"); !ok || rec != short {
		t.Errorf("get(a) = %q, %v; want the %d-byte record", rec, ok, len(short))
	}
	if rec, ok := k.get("b"); !ok || rec != long {
		t.Errorf("get(b) = %q, %v; want the %d-byte record", rec, ok, len(long))
	}
	k.set("b", short) // from long to inline
	if rec, _ := k.get("b"); rec != short {
		t.Errorf("get(b) after a shorter record = %q", rec)
	}
	k.set("a", "")
	if _, ok := k.get("a"); ok {
		t.Error("a still known after it was forgotten")
	}
	for i := range 10000 {
		k.set("key"+strconv.Itoa(i), short)
	}
	if n := k.len(); n > 64 {
		t.Errorf("%d records remembered, capacity 64", n)
	}
}

// len returns the number of records remembered.
func (k *knownRecords) len() int {
	n := 0
	for i := range k.shards {
		sh := &k.shards[i]
		sh.mu.Lock()
		n += len(sh.m) + len(sh.long)
		sh.mu.Unlock()
	}
	return n
}
