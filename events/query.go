package events

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"slices"

	bolt "go.etcd.io/bbolt"
)

// checkEvery is how many records a walk reads between looks at its
// context.
const checkEvery = 4096

// Query returns the events q selects, newest first, at most q.Max, after
// a flush. Errors: ctx's, an invalid q.Before, ErrCorrupt, the file's.
func (l *Log) Query(ctx context.Context, q Query) ([]Event, error) {
	if err := l.flushForRead(); err != nil {
		return nil, err
	}
	limit := q.max()
	var out []Event
	err := l.walk(ctx, q, true, func(k, v []byte) (bool, error) {
		e, err := decode(k, v)
		if err != nil {
			return false, err
		}
		out = append(out, e)
		return len(out) < limit, nil
	})
	return out, err
}

// Summary returns, per key, the events q selects (default Refusals), most
// events first, then latest, at most q.Max keys, after a flush. It ignores
// q.Before; errors are Query's.
func (l *Log) Summary(ctx context.Context, q Query) ([]KeySummary, error) {
	if err := l.flushForRead(); err != nil {
		return nil, err
	}
	if len(q.Actions) == 0 {
		q.Actions = Refusals
	}
	q.Before = ""
	byKey := map[string]*KeySummary{}
	err := l.walk(ctx, q, false, func(k, v []byte) (bool, error) {
		e, err := decode(k, v)
		if err != nil {
			return false, err
		}
		s := byKey[e.Key]
		if s == nil {
			s = &KeySummary{Key: e.Key, First: e.Time, Last: e.Time, Actions: map[string]int{}}
			byKey[e.Key] = s
		}
		s.Refusals++
		s.Last = e.Time // the walk goes oldest first
		s.Actions[e.Action]++
		if e.Limit != "" && !slices.Contains(s.Limits, e.Limit) {
			s.Limits = append(s.Limits, e.Limit)
		}
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]KeySummary, 0, len(byKey))
	for _, s := range byKey {
		slices.Sort(s.Limits)
		if s.Limits == nil {
			s.Limits = []string{}
		}
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b KeySummary) int {
		if c := cmp.Compare(b.Refusals, a.Refusals); c != 0 {
			return c
		}
		if c := b.Last.Compare(a.Last); c != 0 {
			return c
		}
		return cmp.Compare(a.Key, b.Key)
	})
	return out[:min(len(out), q.max())], nil
}

// flushForRead writes the queue before a read (nothing on a nil or
// read-only Log, or after Close).
func (l *Log) flushForRead() error {
	if l == nil {
		return nil
	}
	if err := l.Flush(); err != nil && err != ErrClosed {
		return err
	}
	return nil
}

// walk calls fn with each record q selects, newest first (or oldest first),
// until fn returns false or an error; the slices are valid during the call.
func (l *Log) walk(ctx context.Context, q Query, newest bool, fn func(k, v []byte) (bool, error)) error {
	if l == nil {
		return nil
	}
	var lower, upper []byte // lower inclusive, upper exclusive; nil: none
	if !q.Since.IsZero() {
		lower = timeKey(q.Since)
	}
	if !q.Until.IsZero() {
		upper = timeKey(q.Until.Add(1))
	}
	if q.Before != "" {
		b, err := parseID(q.Before)
		if err != nil {
			return err
		}
		if upper == nil || bytes.Compare(b, upper) < 0 {
			upper = b
		}
	}
	return l.db.View(func(tx *bolt.Tx) error {
		lb := tx.Bucket(bucketLog)
		if lb == nil {
			return nil
		}
		c := lb.Cursor()
		var k, v []byte
		var step func() ([]byte, []byte)
		inRange := func(k []byte) bool { return k != nil && (upper == nil || bytes.Compare(k, upper) < 0) }
		if newest {
			step = c.Prev
			if upper == nil {
				k, v = c.Last()
			} else if k, _ = c.Seek(upper); k == nil {
				k, v = c.Last()
			} else {
				k, v = c.Prev()
			}
			inRange = func(k []byte) bool { return k != nil && (lower == nil || bytes.Compare(k, lower) >= 0) }
		} else {
			step = c.Next
			if lower == nil {
				k, v = c.First()
			} else {
				k, v = c.Seek(lower)
			}
		}
		for n := 0; inRange(k); k, v = step() {
			if n++; n%checkEvery == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			v, err := recordBody(k, v)
			if err != nil {
				return err
			}
			ok, err := matches(v, &q)
			if err != nil {
				return fmt.Errorf("%w: event %x", err, k)
			}
			if !ok {
				continue
			}
			if more, err := fn(k, v); err != nil || !more {
				return err
			}
		}
		return nil
	})
}
