package redisstore

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/ratelimitd/ratelimitd/ratelimit"
)

// The fast path: a request whose records are known is decided in Go on
// the corrected clock, and the script stores the new records only if the
// old ones are unchanged (flagFast), else decides itself.

// What the script does with the expiry of a fast request's key (stack.lua).
const (
	expiryKeep  = 0 // store the record, keep the key's expiry
	expiryAt    = 1 // store it, then PEXPIREAT ms
	expiryIn    = 2 // store it, then PEXPIRE ms (Options.callerTime)
	expiryCheck = 3 // only compare: nothing of this key changes
)

// flagFast marks an item of a fast request the script confirmed.
const flagFast = 32

// speculation is the fast path's decision: per item the previous state,
// result and whether stored; per key the expected and new record, expiry.
type speculation struct {
	prevs   []ratelimit.State
	results []ratelimit.Result
	stored  []bool
	expect  []string
	recs    []string
	kinds   []byte
	ms      []int64
	// Room for a few items and keys without allocations.
	prevBuf   [4]ratelimit.State
	resultBuf [4]ratelimit.Result
	storedBuf [4]bool
	expectBuf [2]string
	recBuf    [2]string
	kindBuf   [2]byte
	msBuf     [2]int64
}

// speculate decides r in Go at now from s.known (not nil) and remembers
// the new records; false unless every key's record was known with every
// limit of r.
func (s *Store) speculate(r *request, now time.Time) bool {
	sp := &r.spec
	sp.expect, sp.recs, sp.kinds, sp.ms = sp.expectBuf[:0], sp.recBuf[:0], sp.kindBuf[:0], sp.msBuf[:0]
	for _, k := range r.keys {
		rec, ok := s.known.get(k)
		if !ok {
			return false
		}
		sp.expect = append(sp.expect, rec)
	}
	sp.prevs, sp.results, sp.stored = sp.prevBuf[:0], sp.resultBuf[:0], sp.storedBuf[:0]
	for j := range r.idx {
		st := recordState(sp.expect[r.kidx[j]], r.names[j])
		if st == "" {
			return false
		}
		prev, err := decode(st)
		if err != nil {
			return false
		}
		sp.prevs = append(sp.prevs, prev)
		sp.results = append(sp.results, r.lims[j].Check(prev, now, r.costs[j]))
		sp.stored = append(sp.stored, false)
	}
	admitted := ratelimit.StackAdmits(r.flag, len(r.idx), func(j int) bool {
		return sp.results[j].Over && r.bits[j]&2 != 0
	})
	nowms := now.UnixMilli()
	caller := s.opts.callerTime
	for k := range r.keys {
		var rec []byte // the new record, once a state of k changes
		var need, slack int64
		for j := range r.idx {
			if r.kidx[j] != k || r.bits[j]&1 == 0 {
				continue
			}
			l := r.lims[j]
			next, ok := l.Next(sp.results[j], admitted)
			if !ok {
				continue
			}
			if rec == nil {
				rec = []byte(sp.expect[k])
			}
			patchState(rec, r.names[j], encode(next))
			sp.stored[j] = true
			if ttl := expiryOf(l, next) - nowms; ttl > need {
				need, slack = ttl, ttl/8
			}
		}
		kind, ms := byte(expiryCheck), int64(0)
		switch {
		case rec == nil:
		case caller:
			// As the script does: at least an hour on Redis's clock.
			kind, ms = expiryIn, max(need, 3600000)
		default:
			at := math.Float64frombits(binary.LittleEndian.Uint64(rec))
			kind = expiryKeep
			if at < float64(nowms+need) {
				kind, ms = expiryAt, nowms+need+slack
				binary.LittleEndian.PutUint64(rec, math.Float64bits(float64(ms)))
			}
		}
		sp.kinds, sp.ms = append(sp.kinds, kind), append(sp.ms, ms)
		if rec == nil {
			sp.recs = append(sp.recs, sp.expect[k])
		} else { // known to the next requests
			sp.recs = append(sp.recs, string(rec))
			s.known.set(r.keys[k], sp.recs[k])
		}
	}
	return true
}

// patchState overwrites limit's state in rec with st.
func patchState(rec []byte, limit, st string) {
	for p := recordExpiryLen; p < len(rec); {
		n := int(rec[p])
		if string(rec[p+1:p+1+n]) == limit {
			copy(rec[p+1+n:], st)
			return
		}
		p += 1 + n + stateLen
	}
}

// learn updates the known records from a phase "d" answer (a.recs: per
// key a length, then the record); undecided or failed requests forget.
func (s *Store) learn(reqs []*request, a answer, err error) error {
	if s.known == nil {
		return nil
	}
	recs := a.recs
	for _, r := range reqs {
		if len(r.idx) == 0 {
			continue
		}
		if err != nil {
			s.forget(r)
			continue
		}
		flag, _ := a.item(r.base)
		if r.fast && flag&flagFast != 0 {
			s.fastConfirmed.Add(1)
		} else if r.fast {
			s.fastRefused.Add(1)
		}
		if flag&flagFast != 0 {
			continue // known since assemble (speculate)
		}
		for _, key := range r.keys {
			if len(recs) < 2 {
				return fmt.Errorf("%w: script answered too few records", ErrProtocol)
			}
			n := int(binary.LittleEndian.Uint16([]byte(recs[:2])))
			if len(recs) < 2+n {
				return fmt.Errorf("%w: script answered a record of %d bytes with %d left", ErrProtocol, n, len(recs)-2)
			}
			rec := recs[2 : 2+n]
			recs = recs[2+n:]
			if !recordValid(rec) {
				rec = ""
			}
			s.known.set(key, rec)
		}
	}
	return nil
}

// forget drops the known records of r's keys.
func (s *Store) forget(r *request) {
	if s.known == nil {
		return
	}
	for _, key := range r.keys {
		s.known.set(key, "")
	}
}

// FastPath returns the fast requests the script confirmed and refused.
func (s *Store) FastPath() (confirmed, refused int64) {
	return s.fastConfirmed.Load(), s.fastRefused.Load()
}

// decideFast decides r, a request of one slot sent alone (a Cluster call),
// by the fast path with confirm.lua, whose cost per call is about a
// third of stack.lua's: true if Redis held the records expected and now
// holds r's new ones. False with no error if a record was unknown or had
// changed (then r's records are forgotten and nothing changed in Redis:
// the caller decides r with stack.lua).
func (s *Store) decideFast(ctx context.Context, r *request) (bool, error) {
	if !s.speculate(r, time.Now().Add(s.ClockOffset())) {
		return false, nil
	}
	c, err := s.client()
	if err != nil {
		s.forget(r)
		return false, err
	}
	sp := &r.spec
	args := make([]string, 0, 4*len(r.keys))
	for k := range r.keys {
		args = append(args, sp.expect[k], sp.recs[k], strconv.Itoa(int(sp.kinds[k])), strconv.FormatInt(sp.ms[k], 10))
	}
	start := time.Now()
	done, err := s.confirm.Exec(ctx, c, r.keys, args).AsInt64()
	if err != nil {
		s.forget(r)
		return false, unavailable(err)
	}
	if s.opts.OnRoundTrip != nil {
		s.opts.OnRoundTrip(time.Since(start))
	}
	if done != 1 {
		s.fastRefused.Add(1)
		s.forget(r)
		return false, nil
	}
	s.fastConfirmed.Add(1)
	return true, nil
}

// confirmedItems holds the answer items of up to 8 items decided by the
// fast path, so that confirmed allocates nothing for a usual stack.
var confirmedItems = strings.Repeat(string(rune(flagFast))+strings.Repeat("\x00", stateLen), 8)

// confirmed is the answer of n items all decided by the fast path.
func confirmed(n int) answer {
	if n*itemLen <= len(confirmedItems) {
		return answer{items: confirmedItems[:n*itemLen]}
	}
	return answer{items: strings.Repeat(confirmedItems[:itemLen], n)}
}
