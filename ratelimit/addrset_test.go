package ratelimit

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// refAddrSet is the exact reference: the same generations, with maps.
type refAddrSet struct {
	start     int64
	cur, prev map[string]bool
}

func (r *refAddrSet) rotate(now int64, period time.Duration) {
	if r.start == 0 || now < r.start {
		return
	}
	n := (now - r.start) / int64(period)
	switch {
	case n == 0:
		return
	case n == 1:
		r.prev, r.cur = r.cur, map[string]bool{}
	default:
		r.prev, r.cur = map[string]bool{}, map[string]bool{}
	}
	r.start += n * int64(period)
}

func (r *refAddrSet) seenAdd(a string, now int64, period time.Duration) bool {
	if r.start == 0 {
		r.start, r.cur, r.prev = now, map[string]bool{}, map[string]bool{}
	}
	r.rotate(now, period)
	seen := r.cur[a] || r.prev[a]
	r.cur[a] = true
	return seen
}

// Random traces against the exact reference: the set never calls a known
// recipient new (no false negatives), and calls a new one known at most
// at the documented rate (1% per lookup within capacity).
func TestAddrSetAgainstReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	const period = time.Hour
	type trace struct {
		name          string
		keys, sends   int
		pool          int // distinct recipients a key draws from
		capacity      int
		meanGap       time.Duration
		maxFP, wantFP float64
	}
	for _, tc := range []trace{
		{"newsletter-like small pools", 50, 200, 40, 200, 30 * time.Second, 0, 0},
		{"spam run within capacity", 5, 4000, 1 << 30, 2000, 2 * time.Second, 0.01, 0},
		{"mixed", 20, 3000, 800, 1000, 5 * time.Second, 0.01, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			newRef, newSet, fp := 0, 0, 0
			for k := range tc.keys {
				var s AddrSet
				var ref refAddrSet
				now := t0
				for i := range tc.sends {
					now = now.Add(time.Duration(rng.ExpFloat64() * float64(tc.meanGap)))
					a := fmt.Sprintf("r%d@k%d.example", rng.IntN(tc.pool), k)
					h := HashAddr(a)
					known := s.Seen(h, now, period)
					refKnown := ref.seenAdd(a, now.UnixNano(), period)
					// Every send refreshes the address (the engine
					// records every admitted recipient).
					s.Add(h, now, period, tc.capacity)
					if !known {
						newSet++
					}
					if !refKnown {
						newRef++
					}
					switch {
					case known && !refKnown:
						fp++
					case !known && refKnown:
						t.Fatalf("key %d send %d: %s known to the reference, new to the set", k, i, a)
					}
				}
			}
			rate := float64(fp) / float64(max(newRef, 1))
			t.Logf("new (reference) %d, new (set) %d, false positives %d (%.3f%%)", newRef, newSet, fp, 100*rate)
			if rate > tc.maxFP {
				t.Errorf("false positive rate %.4f > %.4f", rate, tc.maxFP)
			}
			if newRef == 0 {
				t.Fatal("trace produced no new recipients")
			}
		})
	}
}

// The filter's measured false positive rate matches falsePositive at
// and beyond capacity.
func TestAddrSetFalsePositiveRate(t *testing.T) {
	for _, fill := range []int{1, 2, 4} {
		const capacity = 2000
		var g addrGen
		n := capacity * fill
		for i := range n {
			g.add(HashAddr(fmt.Sprintf("in%d@example.org", i)), capacity)
		}
		fp := 0
		const probes = 200000
		for i := range probes {
			if g.has(HashAddr(fmt.Sprintf("out%d@example.net", i))) {
				fp++
			}
		}
		got, want := float64(fp)/probes, falsePositive(n, len(g.bits)*64)
		t.Logf("fill %d×capacity: measured %.4f, formula %.4f", fill, got, want)
		if got > want*1.3+0.0005 || got < want*0.7-0.0005 {
			t.Errorf("fill %d: measured %.4f, formula %.4f", fill, got, want)
		}
		if fill == 1 && want > 0.005 {
			t.Errorf("formula at capacity %.4f > 0.5%%", want)
		}
	}
}

// Generations: known for at least one period, at most two.
func TestAddrSetGenerations(t *testing.T) {
	var s AddrSet
	h := HashAddr("bob@example.org")
	s.Add(h, t0, time.Hour, 10)
	for _, c := range []struct {
		at   time.Duration
		want bool
	}{{0, true}, {59 * time.Minute, true}, {119 * time.Minute, true}, {2 * time.Hour, false}} {
		s2 := s
		if got := s2.Seen(h, t0.Add(c.at), time.Hour); got != c.want {
			t.Errorf("at +%v: seen %v, want %v", c.at, got, c.want)
		}
	}
	if !s.Empty(t0.Add(3*time.Hour), time.Hour) {
		t.Error("not empty after two periods")
	}
}

func TestAddrSetMarshal(t *testing.T) {
	var s AddrSet
	for i := range 300 {
		s.Add(HashAddr(fmt.Sprint(i)), t0.Add(time.Duration(i)*time.Second), time.Hour, 200)
	}
	s.Add(HashAddr("late"), t0.Add(90*time.Minute), time.Hour, 200)
	b, _ := s.MarshalBinary()
	var u AddrSet
	if err := u.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	now := t0.Add(100 * time.Minute)
	for i := range 300 {
		if !u.Seen(HashAddr(fmt.Sprint(i)), now, time.Hour) {
			t.Fatalf("%d lost", i)
		}
	}
	if !u.Seen(HashAddr("late"), now, time.Hour) || u.Bytes() != s.Bytes() {
		t.Fatal("round trip differs")
	}
	for _, bad := range [][]byte{nil, {2}, b[:len(b)-1], append(b, 0)} {
		if err := u.UnmarshalBinary(bad); !errors.Is(err, ErrAddrSetFormat) {
			t.Errorf("%x: %v", bad, err)
		}
	}
}

func FuzzAddrSetUnmarshal(f *testing.F) {
	var s AddrSet
	s.Add(1, t0, time.Hour, 10)
	b, _ := s.MarshalBinary()
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		var s AddrSet
		if s.UnmarshalBinary(b) != nil {
			return
		}
		s.Seen(42, t0, time.Hour)
		s.Add(42, t0, time.Hour, 100)
		if !s.Seen(42, t0, time.Hour) {
			t.Fatal("added and not seen")
		}
	})
}

// falsePositive is the false positive rate of a filter of m bits holding n
// addresses: (1 - exp(-k*n/m))^k.
func falsePositive(n, m int) float64 {
	return math.Pow(-math.Expm1(-addrProbes*float64(n)/float64(m)), addrProbes)
}
