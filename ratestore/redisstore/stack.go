package redisstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/ratelimit"
)

// request is a policy request's items of one slot, copied for the script.
type request struct {
	idx   []int    // indexes into the caller's items
	keys  []string // the distinct hashes of the items' rate keys
	kidx  []int    // per item, the index of its hash in keys
	names []string // per item, its limit's name
	lims  []ratelimit.Limit
	bits  []int // count + 2*refuses
	costs []float64
	flag  bool // "d": already refused; "w": admitted
	base  int  // index of the request's first item in the answer (set by assemble)
	// ctx is the caller's while queued; dropped is set before done closes
	// if it was not sent because the caller gave up.
	ctx     context.Context
	dropped bool
	kb      []byte // the keys' bytes (EvaluateStack)
	// fast is set by assemble when decided in Go, for the script to confirm.
	fast bool
	spec speculation
	// Room for a few items without allocations.
	idxBuf  [4]int
	keyBuf  [4]string
	kidxBuf [4]int
	nameBuf [4]string
	limBuf  [4]ratelimit.Limit
	bitBuf  [4]int
	costBuf [4]float64
}

func (r *request) init() {
	r.idx, r.keys, r.kidx, r.names = r.idxBuf[:0], r.keyBuf[:0], r.kidxBuf[:0], r.nameBuf[:0]
	r.lims, r.bits, r.costs = r.limBuf[:0], r.bitBuf[:0], r.costBuf[:0]
}

func (r *request) reset() {
	kb := r.kb[:0]
	*r = request{kb: kb}
	r.init()
}

func (r *request) add(i, k int, it *policy.StackItem) {
	r.idx = append(r.idx, i)
	r.kidx = append(r.kidx, k)
	r.names = append(r.names, it.Limit)
	r.lims = append(r.lims, it.Params)
	r.bits = append(r.bits, int(b2u(it.Count)+2*b2u(it.Refuses)))
	r.costs = append(r.costs, it.Cost)
}

type spec struct {
	name string
	l    ratelimit.Limit
}

// specArgs returns a limit's 6 script ARGV values, formatted once.
func (s *Store) specArgs(sp spec) *[6]string {
	if v, ok := s.specs.Load(sp); ok {
		return v.(*[6]string)
	}
	l := sp.l
	a := &[6]string{sp.name, strconv.FormatFloat(l.Limit, 'g', -1, 64), strconv.FormatInt(int64(l.Period), 10),
		strconv.Itoa(int(l.Mode)), strconv.Itoa(int(l.Algorithm)), strconv.FormatInt(int64(l.HalfLife), 10)}
	v, _ := s.specs.LoadOrStore(sp, a)
	return v.(*[6]string)
}

// assemble builds KEYS and ARGV for reqs (stack.lua), sets each base and
// returns the item count.
func (s *Store) assemble(phase, ts, tns string, reqs []*request) (keys, args []string, items int) {
	nk := 0
	for _, r := range reqs {
		items += len(r.idx)
		nk += len(r.keys)
	}
	var sbuf [4]spec
	specs := sbuf[:0]
	codes := make([]int, 0, items)
	for _, r := range reqs {
		for j, l := range r.lims {
			sp := spec{r.names[j], l}
			si := slices.Index(specs, sp)
			if si < 0 {
				si = len(specs)
				specs = append(specs, sp)
			}
			codes = append(codes, si*4+r.bits[j])
		}
	}
	fastKeys := 0
	fastOn := phase == "d" && s.known != nil
	if fastOn {
		// (ts, tns), or this host's clock corrected to Redis's.
		now := time.Now().Add(s.ClockOffset())
		if ts != "" && ts != "?" {
			sec, _ := strconv.ParseInt(ts, 10, 64)
			nsec, _ := strconv.ParseInt(tns, 10, 64)
			now = time.Unix(sec, nsec)
		}
		for _, r := range reqs {
			r.fast = s.speculate(r, now)
			if r.fast {
				fastKeys += len(r.keys)
			}
		}
	}
	keys = make([]string, 0, nk)
	args = make([]string, 0, 5+6*len(specs)+2*fastKeys)
	args = append(args, phase, ts, tns, strconv.Itoa(len(specs)))
	for _, sp := range specs {
		a := s.specArgs(sp)
		args = append(args, a[:]...)
	}
	// The fast requests' records come last, from ARGV[recBase+1].
	recBase := len(args) + 1
	recs := make([]string, 0, 2*fastKeys)
	packed := make([]byte, 0, 5+7*len(reqs)+16*items+17*fastKeys)
	// Keys the script decides come first, for one MGET; then the fast
	// requests' keys.
	kbases := make([]int, len(reqs))
	for pass := range 2 {
		for ri, r := range reqs {
			if r.fast == (pass == 1) {
				kbases[ri] = len(keys)
				keys = append(keys, r.keys...)
			}
		}
		if pass == 0 {
			packed = binary.LittleEndian.AppendUint32(packed, uint32(len(keys)))
			packed = append(packed, b2u(fastOn))
		}
	}
	c, base := 0, 0
	for ri, r := range reqs {
		r.base = base
		base += len(r.idx)
		kbase := kbases[ri]
		packed = binary.LittleEndian.AppendUint32(packed, uint32(len(r.idx)))
		packed = append(packed, b2u(r.flag))
		if !r.fast {
			packed = binary.LittleEndian.AppendUint16(packed, 0)
		} else {
			packed = binary.LittleEndian.AppendUint16(packed, uint16(len(r.keys)))
			for k := range r.keys {
				packed = binary.LittleEndian.AppendUint32(packed, uint32(kbase+k+1))
				packed = binary.LittleEndian.AppendUint32(packed, uint32(recBase+len(recs)+1))
				packed = append(packed, r.spec.kinds[k])
				packed = binary.LittleEndian.AppendUint64(packed, math.Float64bits(float64(r.spec.ms[k])))
				recs = append(recs, r.spec.expect[k], r.spec.recs[k])
			}
		}
		for j := range r.idx {
			packed = binary.LittleEndian.AppendUint32(packed, uint32(codes[c]))
			packed = binary.LittleEndian.AppendUint32(packed, uint32(kbase+r.kidx[j]+1))
			packed = binary.LittleEndian.AppendUint64(packed, math.Float64bits(r.costs[j]))
			c++
		}
	}
	args = append(args, string(packed))
	return keys, append(args, recs...), items
}

// b2u is 1 for true, else 0.
func b2u(b bool) byte {
	if b {
		return 1
	}
	return 0
}

// answer is a script call's answer (stack.lua): Redis's now, per item
// itemLen bytes (flag, previous state or zeros), and in phase "d" records.
type answer struct {
	now   time.Time
	items string
	recs  string
}

const itemLen = 1 + stateLen

// The flags of an item in answer.items (and flagFast, fast.go).
const (
	flagOver     = 1
	flagStored   = 2
	flagPrevious = 4 // the item had a state
	flagBad      = 8 // the stored value was undecodable and replaced
)

// item returns the k-th item's flag and previous state ("" for none).
func (a answer) item(k int) (flag byte, prev string) {
	p := a.items[k*itemLen : (k+1)*itemLen]
	if p[0]&flagPrevious != 0 {
		prev = p[1 : 1+stateLen]
	}
	return p[0], prev
}

// exec runs the script on reqs (with a Cluster, of one slot: the client
// routes the call by its KEYS) and updates the known records.
func (s *Store) exec(ctx context.Context, phase, ts, tns string, reqs ...*request) (answer, error) {
	c, err := s.client()
	if err != nil {
		return answer{}, err
	}
	keys, args, items := s.assemble(phase, ts, tns, reqs)
	start := time.Now()
	var a answer
	v, err := s.stack.Exec(ctx, c, keys, args).ToArray()
	if err != nil {
		err = unavailable(err)
	} else {
		a, err = s.parseAnswer(v, items, start)
	}
	switch phase {
	case "d":
		if lerr := s.learn(reqs, a, err); lerr != nil && err == nil {
			return answer{}, lerr
		}
	case "w":
		for _, r := range reqs {
			s.forget(r)
		}
	}
	return a, err
}

// parseAnswer checks the answer's shape and measures the clock offset.
func (s *Store) parseAnswer(v []rueidis.RedisMessage, items int, start time.Time) (answer, error) {
	if s.opts.OnRoundTrip != nil {
		s.opts.OnRoundTrip(time.Since(start))
	}
	if len(v) != 4 {
		return answer{}, fmt.Errorf("%w: script answered %d values, want 4", ErrProtocol, len(v))
	}
	sec, err1 := v[0].AsInt64()
	nsec, err2 := v[1].AsInt64()
	packed, err3 := v[2].ToString()
	recs, err4 := v[3].ToString()
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return answer{}, fmt.Errorf("%w: script answer: %v", ErrProtocol, err)
	}
	if len(packed) != itemLen*items {
		return answer{}, fmt.Errorf("%w: script answered %d bytes for %d items", ErrProtocol, len(packed), items)
	}
	a := answer{now: time.Unix(sec, nsec), items: packed, recs: recs}
	if sec == 0 && nsec == 0 {
		// Every request confirmed: the script did not read TIME.
		a.now = time.Time{}
	} else if !s.opts.callerTime {
		// TIME was read between start and answer: take the midpoint.
		end := time.Now()
		s.offset.Store(int64(a.now.Sub(start.Add(end.Sub(start) / 2))))
		s.offsetAt.Store(end.UnixNano())
	}
	return a, nil
}

// EvaluateStack decides a stack on Redis's clock (now is ignored): one
// script call, batched with other requests' on one server, or with a
// Cluster per hash slot (one allocation for a stack of one slot);
// unscripted items get ErrAlgorithm. Errors wrap ErrUnavailable
// (some slots may have committed) or ErrProtocol.
func (s *Store) EvaluateStack(ctx context.Context, now time.Time, items []policy.StackItem, refused bool, out []policy.StackResult) error {
	r := s.reqs.Get().(*request)
	r.reset()
	var ends [4]int
	end := ends[:0]
	for i := range items {
		it := &items[i]
		if !scriptable(it, &out[i]) {
			continue
		}
		ki := -1
		if j := slices.IndexFunc(r.idx, func(pi int) bool { return items[pi].Key == it.Key }); j >= 0 {
			ki = r.kidx[j]
		}
		if ki < 0 {
			r.kb = s.appendKey(r.kb, it.Key)
			end = append(end, len(r.kb))
			ki = len(r.keys)
			r.keys = append(r.keys, "")
		}
		r.add(i, ki, it)
	}
	if len(r.idx) == 0 {
		s.reqs.Put(r)
		if len(items) == 0 {
			return nil
		}
		return out[0].Err // every item failed alone
	}
	all := string(r.kb)
	start := 0
	for j, e := range end {
		r.keys[j] = all[start:e]
		start = e
	}
	cluster := s.Cluster()
	if cluster {
		slot := Slot(r.keys[0])
		for _, k := range r.keys[1:] {
			if Slot(k) != slot {
				s.reqs.Put(r)
				return s.evaluateSlots(ctx, now, items, refused, out)
			}
		}
	}
	r.flag = refused
	var v answer
	var err error
	if cluster && s.known != nil && !s.opts.callerTime && s.clockArg() == "?" {
		cctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
		ok, err := s.decideFast(cctx, r)
		cancel()
		if err != nil {
			return err
		}
		if ok {
			s.read(confirmed(len(r.idx)), r, items, out)
			s.reqs.Put(r)
			return nil
		}
	}
	if s.opts.callerTime || cluster {
		ts, tns := s.timeArgs(now)
		if ts == "" {
			ts = s.clockArg()
		}
		cctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
		v, err = s.exec(cctx, "d", ts, tns, r)
		cancel()
	} else {
		v, err = s.decideBatched(ctx, &s.batch, r)
	}
	if err != nil {
		// A batch may still hold r: left to the garbage collector.
		return err
	}
	s.read(v, r, items, out)
	s.reqs.Put(r)
	return nil
}

// evaluateSlots checks every Cluster slot, then commits the verdict on all.
func (s *Store) evaluateSlots(ctx context.Context, now time.Time, items []policy.StackItem, refused bool, out []policy.StackResult) error {
	// One request per slot; never reallocated.
	reqs := make([]request, 0, len(items))
	slots := make(map[uint16]int, 2)
	for i := range items {
		it := &items[i]
		if !scriptable(it, &out[i]) {
			continue
		}
		k := s.Key(it.Key)
		slot := Slot(k)
		ri, ok := slots[slot]
		if !ok {
			ri = len(reqs)
			slots[slot] = ri
			reqs = append(reqs, request{})
			reqs[ri].init()
		}
		r := &reqs[ri]
		ki := slices.Index(r.keys, k)
		if ki < 0 {
			ki = len(r.keys)
			r.keys = append(r.keys, k)
		}
		r.add(i, ki, it)
	}
	ts, tns := s.timeArgs(now)
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	res := s.execSlots(ctx, reqs, "c", ts, tns)
	for ri := range reqs {
		if res[ri].err != nil {
			return res[ri].err
		}
		s.read(res[ri].v, &reqs[ri], items, out)
	}
	admitted := ratelimit.StackAdmits(refused, len(items), func(i int) bool {
		return out[i].Err == nil && out[i].Result.Over && items[i].Refuses
	})
	for ri := range reqs {
		reqs[ri].flag = admitted
	}
	res = s.execSlots(ctx, reqs, "w", ts, tns)
	for ri := range reqs {
		r := &reqs[ri]
		if err := res[ri].err; err != nil {
			// A failed slot's items carry its error; others stand.
			for _, i := range r.idx {
				out[i].Err = err
			}
			continue
		}
		v := res[ri].v
		for j, i := range r.idx {
			code, _ := v.item(r.base + j)
			out[i].Stored = code&flagStored != 0
		}
	}
	return nil
}

// clockArg is ARGV[2] for phase "d": "?" (TIME only if the script decides)
// while the offset is under 1s old, else "".
func (s *Store) clockArg() string {
	if time.Now().UnixNano()-s.offsetAt.Load() < int64(time.Second) {
		return "?"
	}
	return ""
}

// timeArgs is ARGV[2:4]: now as Unix s and ns with callerTime, else "".
func (s *Store) timeArgs(now time.Time) (ts, tns string) {
	if !s.opts.callerTime {
		return "", ""
	}
	sec, nsec := splitNs(now.UnixNano())
	return strconv.FormatInt(sec, 10), strconv.FormatInt(nsec, 10)
}

// scriptable clears out and reports whether the script implements its
// algorithm; if not, out.Err wraps ErrAlgorithm.
func scriptable(it *policy.StackItem, out *policy.StackResult) bool {
	*out = policy.StackResult{}
	if it.Params.Algorithm > ratelimit.EARRRL {
		out.Err = fmt.Errorf("%w: %s (limit %s)", ErrAlgorithm, it.Params.Algorithm, it.Limit)
		return false
	}
	return true
}

type slotResult struct {
	v   answer
	err error
}

// execSlots runs the script concurrently on each request (one slot each).
func (s *Store) execSlots(ctx context.Context, reqs []request, phase, ts, tns string) []slotResult {
	res := make([]slotResult, len(reqs))
	var wg sync.WaitGroup
	for ri := range reqs {
		wg.Go(func() {
			res[ri].v, res[ri].err = s.exec(ctx, phase, ts, tns, &reqs[ri])
		})
	}
	wg.Wait()
	return res
}

// read fills out for r's items from v: previous state, Result recomputed
// in Go at Redis's now, and whether stored (never in phase "c").
func (s *Store) read(v answer, r *request, items []policy.StackItem, out []policy.StackResult) {
	now := v.now
	for j, i := range r.idx {
		code, raw := v.item(r.base + j)
		if code&flagFast != 0 {
			out[i].Prev, out[i].Result, out[i].Stored = r.spec.prevs[j], r.spec.results[j], r.spec.stored[j]
			continue
		}
		prev, err := decode(raw)
		if err != nil {
			out[i].Err = err
			continue
		}
		if code&flagBad != 0 && s.opts.OnBadState != nil {
			s.opts.OnBadState(items[i].Limit, items[i].Key)
		}
		over := code&flagOver != 0
		it := &items[i]
		res := it.Params.Check(prev, now, it.Cost)
		if res.Over != over {
			// Lua and Go differ by an ulp; at the boundary the script wins.
			res.Over = over
			if res.Over {
				res.RetryAfter = max(res.RetryAfter, time.Nanosecond)
			} else {
				res.RetryAfter = 0
			}
		}
		out[i].Prev, out[i].Result, out[i].Stored = prev, res, code&flagStored != 0
	}
}
