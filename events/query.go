package events

import (
	"bytes"
	"cmp"
	"context"
	"slices"

	bolt "go.etcd.io/bbolt"
)

// checkEvery is the records a walk reads between context checks.
const checkEvery = 4096

// Query returns the events q selects, newest first, at most q.Max, after
// a flush. Errors: ctx's, an invalid q.Before, ErrCorrupt, the file's.
func (l *Log) Query(ctx context.Context, q Query) ([]Event, error) {
	if err := l.Tick(); err != nil {
		return nil, err
	}
	limit := q.max()
	var out []Event
	err := l.walk(ctx, q, true, func(e Event) bool {
		out = append(out, e)
		return len(out) < limit
	})
	return out, err
}

// Summary returns per key the events q selects (default Refusals), most
// first, at most q.Max keys; errors are Query's.
func (l *Log) Summary(ctx context.Context, q Query) ([]KeySummary, error) {
	if err := l.Tick(); err != nil {
		return nil, err
	}
	if len(q.Actions) == 0 {
		q.Actions = Refusals
	}
	q.Before = ""
	byKey := map[string]*KeySummary{}
	err := l.walk(ctx, q, false, func(e Event) bool {
		s := byKey[e.Key]
		if s == nil {
			// The walk goes oldest first.
			s = &KeySummary{Key: e.Key, First: e.Time, Last: e.Last, Limits: []string{}, Actions: map[string]int{}}
			byKey[e.Key] = s
		}
		s.Refusals += e.Count
		if e.Last.After(s.Last) {
			s.Last = e.Last
		}
		s.Actions[e.Action] += e.Count
		if e.Limit != "" && !slices.Contains(s.Limits, e.Limit) {
			s.Limits = append(s.Limits, e.Limit)
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	out := make([]KeySummary, 0, len(byKey))
	for _, s := range byKey {
		slices.Sort(s.Limits)
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b KeySummary) int {
		return cmp.Or(cmp.Compare(b.Refusals, a.Refusals), b.Last.Compare(a.Last), cmp.Compare(a.Key, b.Key))
	})
	return out[:min(len(out), q.max())], nil
}

// walk calls fn with each event q selects, newest or oldest first, until
// false or an error, walking q's classes side by side.
func (l *Log) walk(ctx context.Context, q Query, newest bool, fn func(Event) bool) error {
	if l == nil {
		return nil
	}
	var lower, upper []byte // time and sequence; lower inclusive, upper exclusive; nil: none
	if !q.Since.IsZero() {
		lower = timeKey(0, q.Since)[1:]
	}
	if !q.Until.IsZero() {
		upper = timeKey(0, q.Until.Add(1))[1:]
	}
	if q.Before != "" {
		b, err := parseID(q.Before)
		if err != nil {
			return err
		}
		if upper == nil || bytes.Compare(b[1:], upper) < 0 {
			upper = b[1:]
		}
	}
	return l.db.View(func(tx *bolt.Tx) error {
		lb := tx.Bucket(bucketLog)
		if lb == nil {
			return nil
		}
		var its []*classIter
		for c := range class(numClasses) {
			if len(q.Actions) == 0 || slices.ContainsFunc(q.Actions, func(a string) bool { return classOf(a) == c }) {
				its = append(its, newClassIter(lb.Cursor(), c, lower, upper, newest))
			}
		}
		for n := 0; ; n++ {
			var it *classIter
			for _, o := range its {
				if o.k != nil && (it == nil || (bytes.Compare(o.k[1:], it.k[1:]) > 0) == newest) {
					it = o
				}
			}
			if it == nil {
				return nil
			}
			k, v := it.k, it.v
			it.step()
			if n%checkEvery == checkEvery-1 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			v, err := recordBody(k, v)
			if err != nil {
				return err
			}
			e, err := decode(k, v)
			if err != nil {
				return err
			}
			if q.selects(&e) && !fn(e) {
				return nil
			}
		}
	})
}

// classIter walks the records of one class within bounds; k is nil
// when it is done.
type classIter struct {
	cur    *bolt.Cursor
	lo, hi []byte // whole keys; lo inclusive, hi exclusive
	newest bool
	k, v   []byte
}

// newClassIter returns an iterator over class c's records with time and
// sequence in [lower, upper) (nil: unbounded), at its first record.
func newClassIter(cur *bolt.Cursor, c class, lower, upper []byte, newest bool) *classIter {
	it := &classIter{cur: cur, newest: newest, lo: append([]byte{byte(c)}, lower...), hi: []byte{byte(c) + 1}}
	if upper != nil {
		it.hi = append([]byte{byte(c)}, upper...)
	}
	if newest {
		if it.k, it.v = cur.Seek(it.hi); it.k == nil {
			it.k, it.v = cur.Last()
		} else {
			it.k, it.v = cur.Prev()
		}
	} else {
		it.k, it.v = cur.Seek(it.lo)
	}
	it.bound()
	return it
}

// step moves to the next record.
func (it *classIter) step() {
	if it.newest {
		it.k, it.v = it.cur.Prev()
	} else {
		it.k, it.v = it.cur.Next()
	}
	it.bound()
}

// bound ends the walk at a key out of bounds.
func (it *classIter) bound() {
	if it.k != nil && (bytes.Compare(it.k, it.lo) < 0 || bytes.Compare(it.k, it.hi) >= 0) {
		it.k, it.v = nil, nil
	}
}
