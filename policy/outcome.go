package policy

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/human"
	"github.com/ratelimitd/ratelimitd/ratelimit"
)

// OutcomeKind is what happened to one recipient of a submitted message, as
// the outcome limits (per = "bounce", "unknown_rcpt", "deferral") count it.
type OutcomeKind uint8

// The outcome kinds. An unknown recipient is a bounce too.
const (
	OutcomeBounce      OutcomeKind = iota + 1 // failed permanently: DSN status 5.x.x
	OutcomeUnknownRcpt                        // failed as unknown: 5.1.0, 5.1.1, 5.1.10 (RFC 3463, RFC 7505)
	OutcomeDeferral                           // deferred: 4.x.x
)

// String returns "bounce", "unknown_rcpt" or "deferral", the per value
// that counts the kind.
func (k OutcomeKind) String() string {
	if k >= OutcomeBounce && k <= OutcomeDeferral {
		return perNames[perBounce+int(k)-1]
	}
	return fmt.Sprintf("OutcomeKind(%d)", uint8(k))
}

// ClassifyDSN returns the kind of an RFC 3463 status code such as "5.1.1"
// (a Postfix dsn=, a DSN's Status field); ok is false for a success (2.x.x)
// and for anything that is not a status code.
func ClassifyDSN(status string) (kind OutcomeKind, ok bool) {
	class, rest, found := strings.Cut(status, ".")
	subject, detail, found2 := strings.Cut(rest, ".")
	if !found || !found2 || !digits(subject, 3) || !digits(detail, 3) {
		return 0, false
	}
	switch class {
	case "4":
		return OutcomeDeferral, true
	case "5":
		if subject == "1" && (detail == "0" || detail == "1" || detail == "10") {
			return OutcomeUnknownRcpt, true
		}
		return OutcomeBounce, true
	}
	return 0, false
}

// digits reports whether s is 1 to n decimal digits.
func digits(s string, n int) bool {
	return s != "" && len(s) <= n && strings.Trim(s, "0123456789") == ""
}

// outcome reports whether l counts outcomes rather than submissions.
func (l *limit) outcome() bool {
	return l.per == perBounce || l.per == perUnknown || l.per == perDeferral
}

// counts reports whether outcome limit l counts an outcome of kind k: its
// own kind (String), and a bounce limit unknown recipients too.
func (l *limit) counts(k OutcomeKind) bool {
	return k >= OutcomeBounce && l.per == perBounce+int(k)-1 || l.per == perBounce && k == OutcomeUnknownRcpt
}

// outcomeNouns describes, per outcome cost unit, what was counted.
var outcomeNouns = map[int]string{
	perBounce:   "bounced",
	perUnknown:  "bounced as unknown users",
	perDeferral: "were deferred",
}

// outcomeText is what outcome limit l saw, over with failures against lim
// per period: "10 recipients per 1h bounced as unknown users (limit 10)",
// or "23 of the last 60 recipients bounced, 19 as unknown users (limit 10%
// of at least 50 per 1h)"; unknown < 0: not known.
func (l *limit) outcomeText(failures, unknown, lim float64, period time.Duration) string {
	noun := outcomeNouns[l.per]
	if unknown >= 0 {
		noun += fmt.Sprintf(", %.0f as unknown users", min(unknown, failures))
	}
	if l.ratio > 0 {
		return fmt.Sprintf("%.0f of the last %.0f recipients %s (limit %g%% of at least %g per %s)", failures, lim/l.ratio,
			noun, 100*l.ratio, l.minCount, human.Duration(period))
	}
	return fmt.Sprintf("%s recipients per %s %s (limit %g)", human.Rate(failures, lim), human.Duration(period),
		noun, lim)
}

// unknownOf is how many of bounce limit l's failures for key were unknown
// users at now (an unknown_rcpt limit's rate on the same key and period,
// both plainCount); negative when there is none or it cannot be read.
func (e *Engine) unknownOf(ctx context.Context, now time.Time, c *compiled, l *limit, req *Request, key string) float64 {
	if l.per != perBounce || !plainCount(l) {
		return -1
	}
	for i := range c.limits {
		s := &c.limits[i]
		if s.per == perUnknown && plainCount(s) && s.rl.Period == l.rl.Period && c.keyOf(s, req) == key {
			st, err := e.store.Get(ctx, s.name, key)
			if err != nil {
				return -1
			}
			return s.rl.Rate(st, now)
		}
	}
	return -1
}

// plainCount reports whether l's stored rate is every outcome it counted,
// decayed: exponential, neither forgiving (clamped) nor readonly.
func plainCount(l *limit) bool {
	return l.rl.Algorithm == ratelimit.Exponential && l.rl.Mode != ratelimit.Forgiving && l.rl.Mode != ratelimit.Readonly
}

// ratioName is the state name of ratio limit name's recipients (limit
// names have no '/').
func ratioName(name string) string { return name + "/rcpt" }

// compileRatio validates lc's ratio form into l.
func (l *limit) compileRatio(lc LimitConfig, at string, bad func(key, format string, a ...any)) {
	l.ratio, l.minCount = lc.Ratio, lc.MinCount
	switch {
	case !l.outcome():
		bad(at+".ratio", "needs per = \"bounce\", \"unknown_rcpt\" or \"deferral\"")
	case !(lc.Ratio > 0 && lc.Ratio < 1):
		bad(at+".ratio", "%v: want more than 0 and less than 1 (0.1 is 10%%)", lc.Ratio)
	case !(lc.MinCount >= 1 && lc.MinCount <= 1e15):
		bad(at+".min_count", "%v: want at least 1 recipient (e.g. 50) with ratio", lc.MinCount)
	case lc.Limit != 0:
		bad(at+".limit", "with ratio the limit is ratio times the recipients: give ratio and min_count, not limit")
	case l.rl.Algorithm != ratelimit.Exponential || len(lc.Overrides) > 0:
		bad(at+".ratio", "works with algorithm = \"exponential\" and without overrides")
	}
	l.rl.Limit = l.minCount // what the rate state is kept under; the limit is set per request
	if lc.Message == "" {
		l.message = "too many of your recent recipients failed; try again in {retry}"
	}
}

// ratioItem sets it to measure the failures against ratio times the
// recipients' rate at now (cost 0); false when fewer than min_count were
// counted or, with the store's error, their rate cannot be read.
func (e *Engine) ratioItem(ctx context.Context, now time.Time, l *limit, it *StackItem) (bool, error) {
	s, err := e.store.Get(ctx, ratioName(l.name), it.Key)
	if err != nil {
		return false, err
	}
	rcpts := l.rl.Rate(s, now)
	if rcpts < l.minCount {
		return false, nil
	}
	it.Params.Limit, it.Cost = l.ratio*rcpts, 0
	return true, nil
}

// ratioWait is how long ratio limit l, over at it, stays over without new
// recipients: until their rate decays below min_count.
func (l *limit) ratioWait(it *StackItem) time.Duration {
	return time.Duration(float64(it.Params.Period) * math.Log(max(it.Params.Limit/l.ratio/l.minCount, 1)))
}

// RecordOutcome counts, at now, one recipient's outcome of kind in every
// outcome limit that counts it, keyed by req, the request that submitted
// the message with Recipient the one the outcome is about; as admitted
// (readonly: never). It returns how many limits counted it and the first
// store error. Safe for concurrent use.
func (e *Engine) RecordOutcome(ctx context.Context, now time.Time, req *Request, kind OutcomeKind) (int, error) {
	return e.record(ctx, now, req, 1, func(l *limit) (string, bool) { return l.name, l.counts(kind) })
}

// RecordRecipients counts, at now, n recipients of a message req submitted
// whose outcomes the feeds will see, in every limit of the ratio form, as
// RecordOutcome does. Safe for concurrent use.
func (e *Engine) RecordRecipients(ctx context.Context, now time.Time, req *Request, n int) (int, error) {
	if n <= 0 {
		return 0, nil
	}
	return e.record(ctx, now, req, float64(n), func(l *limit) (string, bool) { return ratioName(l.name), l.ratio > 0 })
}

// record counts cost in the state of req's key named by of.
func (e *Engine) record(ctx context.Context, now time.Time, req *Request, cost float64, of func(*limit) (string, bool)) (int, error) {
	c := e.cfg.Load()
	if c.exempt(req) {
		return 0, nil
	}
	n := 0
	var first error
	for i := range c.limits {
		l := &c.limits[i]
		name, ok := of(l)
		if !ok {
			continue
		}
		key := c.keyOf(l, req)
		if key == "" {
			continue
		}
		rl := l.params(key)
		err := e.store.Update(ctx, name, key, func(old ratelimit.State) (ratelimit.State, bool) {
			return rl.Next(rl.Check(old, now, cost), true)
		})
		switch {
		case err == nil:
			n++
		case first == nil:
			first = fmt.Errorf("limit %s: %w", l.name, err)
		}
	}
	return n, first
}
