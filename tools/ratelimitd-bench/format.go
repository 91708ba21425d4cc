package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// against formats a measured ratio v for a line that compares it with
// target: with two decimals, or with as many more (up to six) as it takes
// to tell it from target, so that a MISS never reads "0.50 >= 0.50".
func against(v, target float64) string {
	for d := 2; d < 6; d++ {
		s := strconv.FormatFloat(v, 'f', d, 64)
		if v == target || s != strconv.FormatFloat(target, 'f', d, 64) {
			return s
		}
	}
	return strconv.FormatFloat(v, 'f', 6, 64)
}

func verdict(ok bool) string {
	if ok {
		return "PASS"
	}
	return "MISS"
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// latency formats d with three significant digits.
func latency(d time.Duration) string {
	switch {
	case d < time.Microsecond:
		return fmt.Sprintf("%dns", d)
	case d < time.Millisecond:
		return fmt.Sprintf("%.1fµs", float64(d)/1e3)
	case d < time.Second:
		return fmt.Sprintf("%.2fms", float64(d)/1e6)
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}

func round(d time.Duration) time.Duration {
	if d > time.Second {
		return d.Round(10 * time.Millisecond)
	}
	return d.Round(time.Millisecond)
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// thousands formats n with commas: 1,234,567.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	if n < 0 {
		return "-" + thousands(-n)
	}
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}

// cpuString is a list of CPU numbers for the output: "1", "1,2,3".
func cpuString(cpus []int) string {
	s := make([]string, len(cpus))
	for i, c := range cpus {
		s[i] = strconv.Itoa(c)
	}
	return strings.Join(s, ",")
}
