package ratelimit

import (
	"testing"
	"time"
)

// The stack admits a request unless it was refused before or one of its
// limits is over with a refusing action; only then does a leaky limit
// count it.
func TestStackAdmits(t *testing.T) {
	over := []bool{false, true, false}
	for _, c := range []struct {
		refused bool
		refuses []bool
		want    bool
	}{
		{false, []bool{true, false, true}, true}, // the over limit only warns
		{false, []bool{false, true, false}, false},
		{true, []bool{false, false, false}, false},
		{false, nil, true},
	} {
		got := StackAdmits(c.refused, len(c.refuses), func(i int) bool { return over[i] && c.refuses[i] })
		if got != c.want {
			t.Errorf("refused %v, refuses %v: StackAdmits = %v, want %v", c.refused, c.refuses, got, c.want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { StackAdmits(false, 3, func(i int) bool { return over[i] }) }); n != 0 {
		t.Errorf("StackAdmits allocates %v times", n)
	}
}

// Reapply gives the measured next state while the stored one is
// unchanged, and re-measures the request from a state changed since.
func TestReapply(t *testing.T) {
	l := Limit{Limit: 10, Period: time.Hour}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	prev := State{}
	next, _ := l.Next(l.Check(prev, t0, 1), true)
	if s, ok := l.Reapply(prev, prev, next, t0, 1, true); !ok || s != next {
		t.Errorf("unchanged: Reapply = %v, %v; want %v", s, ok, next)
	}
	want, _ := l.Next(l.Check(next, t0, 1), true)
	if s, ok := l.Reapply(next, prev, next, t0, 1, true); !ok || s != want {
		t.Errorf("changed: Reapply = %v, %v; want %v", s, ok, want)
	}
}
