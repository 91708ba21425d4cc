package ratelimit_test

import (
	"fmt"
	"time"

	"github.com/ratelimitd/ratelimitd/ratelimit"
)

// A burst from a fresh sender against 200 messages per hour: the limit is
// also the burst size, so exactly 200 go through. The wait is about one
// message's worth of the hourly budget, period/limit.
func ExampleLimit_Check() {
	l := ratelimit.Limit{Limit: 200, Period: time.Hour} // leaky, exponential
	now := time.Date(2025, 1, 6, 9, 0, 0, 0, time.UTC)
	var s ratelimit.State // a sender never seen
	for i := 1; ; i++ {
		r := l.Check(s, now, 1)
		if r.Over {
			fmt.Printf("message %d refused at %.2f/h; retry after %v\n", i, r.Rate, r.RetryAfter.Round(time.Millisecond))
			// Leaky: the refused message is not counted, s is unchanged.
			r = l.Check(s, now.Add(r.RetryAfter), 1)
			fmt.Printf("after the wait: over=%v rate %.2f/h\n", r.Over, r.Rate)
			return
		}
		s, _ = l.Next(r, true)
	}
	// Output:
	// message 201 refused at 201.00/h; retry after 18s
	// after the wait: over=false rate 200.00/h
}

// What each mode stores when a sender over its limit is refused (Exim's
// modes and Finch's forgiving one): leaky leaves the state alone, strict counts the refused
// message, forgiving counts it but clamps the rate to the limit.
func ExampleLimit_Next() {
	now := time.Date(2025, 1, 6, 9, 0, 0, 0, time.UTC)
	prev := ratelimit.State{Time: now.UnixNano(), Rate: 250} // already over
	for _, m := range []ratelimit.Mode{ratelimit.Leaky, ratelimit.Strict, ratelimit.Forgiving, ratelimit.Readonly} {
		l := ratelimit.Limit{Limit: 200, Period: time.Hour, Mode: m}
		r := l.Check(prev, now.Add(time.Minute), 1)
		s, store := l.Next(r, !r.Over)
		if !store {
			s = prev
		}
		fmt.Printf("%-9s over=%v store=%-5v kept rate %.2f at +%v; retry after %v\n", m, r.Over, store, s.Rate,
			time.Duration(s.Time-now.UnixNano()), r.RetryAfter.Round(time.Second))
	}
	// Output:
	// leaky     over=true store=false kept rate 250.00 at +0s; retry after 12m39s
	// strict    over=true store=true  kept rate 246.86 at +1m0s; retry after 12m54s
	// forgiving over=true store=true  kept rate 200.00 at +1m0s; retry after 18s
	// readonly  over=true store=false kept rate 250.00 at +0s; retry after 12m39s
}

// A per-byte limit (variable cost, as Exim's per_byte): 10 MiB per hour admits ten
// 1 MiB messages back to back; a message larger than the whole limit can
// never be admitted.
func Example_perByte() {
	const mib = 1 << 20
	l := ratelimit.Limit{Limit: 10 * mib, Period: time.Hour}
	now := time.Date(2025, 1, 6, 9, 0, 0, 0, time.UTC)
	var s ratelimit.State
	n := 0
	for !l.Check(s, now, mib).Over {
		s, _ = l.Next(l.Check(s, now, mib), true)
		n++
	}
	fmt.Printf("%d messages of 1 MiB, then %.1f MiB/h\n", n, l.Rate(s, now)/mib)
	r := l.Check(ratelimit.State{}, now, 11*mib)
	fmt.Println("11 MiB message: over", r.Over, "never allowed:", r.RetryAfter == time.Duration(1<<63-1))
	// Output:
	// 10 messages of 1 MiB, then 10.0 MiB/h
	// 11 MiB message: over true never allowed: true
}

// Seed 003's cooldown limiter, 3 per minute: three at once, then refusals
// until the score has come within a minute of the clock again.
func ExampleLimit_Check_cooldown() {
	l := ratelimit.Limit{Limit: 3, Period: time.Minute, Algorithm: ratelimit.Cooldown}
	start := time.Date(2025, 1, 6, 9, 0, 0, 0, time.UTC)
	var s ratelimit.State
	for _, sec := range []int{0, 0, 0, 1, 5, 21} {
		now := start.Add(time.Duration(sec) * time.Second)
		r := l.Check(s, now, 1)
		if r.Over {
			fmt.Printf("+%02ds REJECT, retry after %v\n", sec, r.RetryAfter)
			continue
		}
		s, _ = l.Next(r, true)
		fmt.Printf("+%02ds ALLOW\n", sec)
	}
	// Output:
	// +00s ALLOW
	// +00s ALLOW
	// +00s ALLOW
	// +01s REJECT, retry after 19s
	// +05s REJECT, retry after 15s
	// +21s ALLOW
}

// A store may drop a key whose state is negligible: it measures exactly
// like a key never seen.
func ExampleLimit_Negligible() {
	l := ratelimit.Limit{Limit: 200, Period: time.Hour}
	now := time.Date(2025, 1, 6, 9, 0, 0, 0, time.UTC)
	s := ratelimit.State{Time: now.UnixNano(), Rate: 200}
	for _, h := range []time.Duration{time.Hour, 5 * time.Hour, 6 * time.Hour} {
		fmt.Printf("after %v: rate %.3f/h negligible %v\n", h, l.Rate(s, now.Add(h)), l.Negligible(s, now.Add(h)))
	}
	// Output:
	// after 1h0m0s: rate 73.576/h negligible false
	// after 5h0m0s: rate 1.348/h negligible false
	// after 6h0m0s: rate 0.496/h negligible true
}

func ExampleParseMode() {
	m, err := ratelimit.ParseMode("forgiving")
	fmt.Println(m, err)
	_, err = ratelimit.ParseMode("lenient")
	fmt.Println(err)
	// Output:
	// forgiving <nil>
	// ratelimit: unknown mode: "lenient" (want leaky, strict, forgiving or readonly)
}
