package ratelimit

import (
	"testing"
	"time"
)

// benchCheck measures Check+Next for a sender at 1.5 times the limit, so
// both the allowed path and the refused path (with its RetryAfter) run.
func benchCheck(b *testing.B, l Limit) {
	b.ReportAllocs()
	var s State
	now := t0
	gap := time.Duration(float64(l.Period) / l.Limit / 1.5)
	over := 0
	for b.Loop() {
		now = now.Add(gap)
		r := l.Check(s, now, 1)
		if r.Over {
			over++
		}
		if ns, ok := l.Next(r, !r.Over); ok {
			s = ns
		}
	}
	b.ReportMetric(float64(over)/float64(b.N), "refused/op")
}

func BenchmarkCheckExponential(b *testing.B) {
	benchCheck(b, Limit{Limit: 200, Period: time.Hour})
}

func BenchmarkCheckGCRA(b *testing.B) {
	benchCheck(b, Limit{Limit: 200, Period: time.Hour, Algorithm: GCRA})
}

func BenchmarkCheckEARRRL(b *testing.B) {
	benchCheck(b, Limit{Limit: 200, Period: time.Hour, Algorithm: EARRRL})
}

// BenchmarkCheckExponentialRefused is the slow path alone: every request
// refused, so every Check solves for RetryAfter.
func BenchmarkCheckExponentialRefused(b *testing.B) {
	b.ReportAllocs()
	l := Limit{Limit: 200, Period: time.Hour, Mode: Strict}
	s := State{Time: t0.UnixNano(), Rate: 300}
	for b.Loop() {
		if !l.Check(s, t0, 1).Over {
			b.Fatal("not refused")
		}
	}
}

func BenchmarkNegligible(b *testing.B) {
	b.ReportAllocs()
	l := Limit{Limit: 200, Period: time.Hour}
	s := State{Time: t0.UnixNano(), Rate: 150}
	now := t0.Add(3 * time.Hour)
	for b.Loop() {
		l.Negligible(s, now)
	}
}
