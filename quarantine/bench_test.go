package quarantine

import (
	"context"
	"strings"
	"testing"
)

// BenchmarkFreeze freezes 10 KB messages one at a time: each is one
// committed, fsync'd BoltDB transaction, so the disk's fsync latency
// dominates.
func BenchmarkFreeze(b *testing.B) {
	s, _, _ := newStore(b, Options{})
	msg := testMessage("bench", strings.Repeat("0123456789abcdef", 10<<10/16))
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := freeze(s, &Entry{Key: "alice", Sender: "alice@example.com"}, msg); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFreezeParallel: BoltDB has one writer, so concurrent freezes
// queue for it (no group commit).
func BenchmarkFreezeParallel(b *testing.B) {
	s, _, _ := newStore(b, Options{})
	msg := testMessage("bench", strings.Repeat("0123456789abcdef", 10<<10/16))
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := freeze(s, &Entry{Key: "alice"}, msg); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkMessage(b *testing.B) {
	s, _, _ := newStore(b, Options{})
	msg := testMessage("bench", strings.Repeat("0123456789abcdef", 10<<10/16))
	id, err := freeze(s, &Entry{}, msg)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Message(id); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkList lists the 50 newest of 1000 pending entries.
func BenchmarkList(b *testing.B) {
	s, db, _ := newStore(b, Options{})
	db.NoSync = true // setup only
	for range 1000 {
		if _, err := hold(s, &Entry{Key: "alice", Sender: "alice@example.com", Recipients: []string{"bob@example.org"}}); err != nil {
			b.Fatal(err)
		}
	}
	db.NoSync = false
	b.ReportAllocs()
	for b.Loop() {
		if es, err := s.List(Filter{Max: 50}); err != nil || len(es) != 50 {
			b.Fatal(len(es), err)
		}
	}
}

func BenchmarkPreview(b *testing.B) {
	msg := []byte(multipartMsg)
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := PreviewMessage(context.Background(), msg, 0); err != nil {
			b.Fatal(err)
		}
	}
}
