package ratelimit

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"time"
)

// AddrSet remembers the recipients one key has sent to in the current or
// previous generation of one period, for a per = "addr" limit (Exim's
// per_addr with unique=, Exim specification, "Rate limiting incoming
// messages"). A generation is an exact set of FNV-1a hashes up to
// AddrExactMax, then a Bloom filter (k = 8, Kirsch-Mitzenmacher) of about
// 0.5% false positives. The zero AddrSet is empty; not safe for concurrent
// use.
type AddrSet struct {
	start     int64 // of the current generation, Unix ns; 0: never added
	cur, prev addrGen
}

// addrGen is one generation: an exact set (bits == nil) or a Bloom filter.
type addrGen struct {
	exact []uint64
	bits  []uint64
}

// Limits of AddrSet.
const (
	AddrExactMax       = 64       // addresses held exactly before a filter
	AddrMaxFilterBytes = 64 << 10 // bound on one generation's filter
	addrBitsPerEntry   = 11.03    // -ln(0.005)/ln(2)^2: 0.5% with k = 8
	addrProbes         = 8
)

// HashAddr is the hash AddrSet keeps of addr: 64-bit FNV-1a.
func HashAddr(addr string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(addr))
	return h.Sum64()
}

// AddrFilterBits is the filter size in bits for capacity addresses, in
// whole 64-bit words, at most AddrMaxFilterBytes*8.
func AddrFilterBits(capacity int) int {
	m := int(math.Ceil(float64(max(capacity, 1))*addrBitsPerEntry/64)) * 64
	return min(m, AddrMaxFilterBytes*8)
}

func (g *addrGen) has(h uint64) bool {
	if g.bits == nil {
		return slices.Contains(g.exact, h)
	}
	return g.bloom(h, false)
}

func (g *addrGen) add(h uint64, capacity int) {
	if g.bits == nil {
		if len(g.exact) < AddrExactMax {
			g.exact = append(g.exact, h)
			return
		}
		exact := g.exact
		g.exact, g.bits = nil, make([]uint64, AddrFilterBits(capacity)/64)
		for _, x := range exact {
			g.bloom(x, true)
		}
	}
	g.bloom(h, true)
}

// bloom reports whether the filter has all of h's bits, after setting them
// if set.
func (g *addrGen) bloom(h uint64, set bool) bool {
	m := uint64(len(g.bits)) * 64
	h1, h2 := h&0xffffffff, h>>32|1
	for i := range uint64(addrProbes) {
		b := (h1 + i*h2) % m
		if set {
			g.bits[b/64] |= 1 << (b % 64)
		} else if g.bits[b/64]&(1<<(b%64)) == 0 {
			return false
		}
	}
	return true
}

// rotate moves the generations on to now.
func (s *AddrSet) rotate(now int64, period time.Duration) {
	if s.start == 0 || period <= 0 || now < s.start {
		return
	}
	n := (now - s.start) / int64(period)
	switch {
	case n == 0:
		return
	case n == 1:
		s.prev, s.cur = s.cur, addrGen{}
	default:
		s.prev, s.cur = addrGen{}, addrGen{}
	}
	s.start += n * int64(period)
}

// Seen reports whether hash h was added in the current or previous
// generation of length period at now.
func (s *AddrSet) Seen(h uint64, now time.Time, period time.Duration) bool {
	s.rotate(now.UnixNano(), period)
	return s.cur.has(h) || s.prev.has(h)
}

// Add records hash h at now; capacity (addresses per generation, twice the
// limit) sizes the filter if the generation becomes one.
func (s *AddrSet) Add(h uint64, now time.Time, period time.Duration, capacity int) {
	t := now.UnixNano()
	if s.start == 0 {
		s.start = t
	}
	s.rotate(t, period)
	s.cur.add(h, capacity)
}

// Empty reports whether s remembers nothing at now.
func (s *AddrSet) Empty(now time.Time, period time.Duration) bool {
	s.rotate(now.UnixNano(), period)
	return s.Bytes() == 0 // a filter is never empty
}

// Bytes is the memory s holds for addresses, in bytes.
func (s *AddrSet) Bytes() int {
	return 8 * (len(s.cur.exact) + len(s.cur.bits) + len(s.prev.exact) + len(s.prev.bits))
}

// MarshalBinary encodes s: a format byte (1), the generation start, then
// per generation (current, previous) a kind byte (0 exact, 1 filter), a
// uint32 word count and the words, little-endian.
func (s *AddrSet) MarshalBinary() ([]byte, error) {
	b := make([]byte, 0, 9+2*5+s.Bytes())
	b = append(b, 1)
	b = binary.LittleEndian.AppendUint64(b, uint64(s.start))
	for _, g := range []*addrGen{&s.cur, &s.prev} {
		words, kind := g.exact, byte(0)
		if g.bits != nil {
			words, kind = g.bits, 1
		}
		b = append(b, kind)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(words)))
		for _, w := range words {
			b = binary.LittleEndian.AppendUint64(b, w)
		}
	}
	return b, nil
}

// UnmarshalBinary decodes what MarshalBinary wrote into s; it returns an
// error wrapping ErrAddrSetFormat for anything else.
func (s *AddrSet) UnmarshalBinary(b []byte) error {
	if len(b) < 9 || b[0] != 1 {
		return fmt.Errorf("%w: bad header", ErrAddrSetFormat)
	}
	out := AddrSet{start: int64(binary.LittleEndian.Uint64(b[1:]))}
	b = b[9:]
	for _, g := range []*addrGen{&out.cur, &out.prev} {
		if len(b) < 5 || b[0] > 1 {
			return fmt.Errorf("%w: bad generation", ErrAddrSetFormat)
		}
		kind, n := b[0], int(binary.LittleEndian.Uint32(b[1:]))
		b = b[5:]
		limit := AddrExactMax
		if kind == 1 {
			limit = AddrMaxFilterBytes / 8
		}
		if n > limit || (kind == 1 && n == 0) || len(b) < 8*n {
			return fmt.Errorf("%w: bad length", ErrAddrSetFormat)
		}
		words := make([]uint64, n)
		for i := range words {
			words[i] = binary.LittleEndian.Uint64(b[8*i:])
		}
		b = b[8*n:]
		if kind == 1 {
			g.bits = words
		} else if n > 0 {
			g.exact = words
		}
	}
	if len(b) != 0 {
		return fmt.Errorf("%w: trailing bytes", ErrAddrSetFormat)
	}
	*s = out
	return nil
}
