package main

import (
	"math/bits"
	"time"
)

// histogram counts latencies in log-linear buckets, HDR style: exact below
// 128 ns, then 64 buckets per power of two, so a reported value is within
// 1/64 (1.6 %) of the true one. The zero value is empty and ready to use;
// it is not safe for concurrent use (each connection keeps its own and they
// are merged at the end).
type histogram struct {
	counts [histBuckets]uint64
	n      uint64
	max    time.Duration
}

const (
	histSubBits = 6
	histSub     = 1 << histSubBits // buckets per power of two
	histBuckets = histSub * (64 - histSubBits + 1)
)

// bucketOf returns the bucket of v nanoseconds.
func bucketOf(v uint64) int {
	if v < 2*histSub {
		return int(v)
	}
	shift := bits.Len64(v) - (histSubBits + 1)
	return histSub*shift + int(v>>shift)
}

// bucketValue returns the middle of bucket i, in nanoseconds.
func bucketValue(i int) uint64 {
	if i < 2*histSub {
		return uint64(i)
	}
	shift := i/histSub - 1
	m := uint64(i - histSub*shift)
	return m<<shift + (1<<shift)/2
}

func (h *histogram) record(d time.Duration) {
	if d < 0 {
		d = 0
	}
	h.counts[bucketOf(uint64(d))]++
	h.n++
	h.max = max(h.max, d)
}

func (h *histogram) merge(o *histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.max = max(h.max, o.max)
}

// quantile returns the latency at quantile q (0 < q <= 1): the value of
// the bucket holding the ceil(q*n)-th smallest sample. It is 0 for an
// empty histogram.
func (h *histogram) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q*float64(h.n) + 0.999999)
	rank = min(max(rank, 1), h.n)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return min(time.Duration(bucketValue(i)), h.max)
		}
	}
	return h.max
}
