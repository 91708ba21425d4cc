package policy

import (
	"context"
	"fmt"
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
	switch k {
	case OutcomeBounce:
		return "bounce"
	case OutcomeUnknownRcpt:
		return "unknown_rcpt"
	case OutcomeDeferral:
		return "deferral"
	}
	return fmt.Sprintf("OutcomeKind(%d)", uint8(k))
}

// DefaultOutcomeMessage is the client text of an outcome limit without one.
const DefaultOutcomeMessage = "too many of your recent recipients failed (limit {limit} per {period}); try again in {retry}"

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
	if s == "" || len(s) > n {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// outcome reports whether l counts outcomes rather than submissions.
func (l *limit) outcome() bool {
	return l.per == perBounce || l.per == perUnknown || l.per == perDeferral
}

// counts reports whether outcome limit l counts an outcome of kind k.
func (l *limit) counts(k OutcomeKind) bool {
	switch l.per {
	case perBounce:
		return k == OutcomeBounce || k == OutcomeUnknownRcpt
	case perUnknown:
		return k == OutcomeUnknownRcpt
	case perDeferral:
		return k == OutcomeDeferral
	}
	return false
}

// outcomeProbe is an outcome limit's share of a request: within a message
// it measures, without counting, whether one more failure would be over,
// so the sender's next message after the limit's last permitted failure
// gets its action.
func outcomeProbe(state string) (cost float64, count, applies bool) {
	if !messageState(state) {
		return 0, false, false
	}
	return 1, false, true
}

// outcomeNouns describes, per outcome cost unit, what was counted.
var outcomeNouns = map[int]string{
	perBounce:   "bounced",
	perUnknown:  "bounced as unknown users",
	perDeferral: "were deferred",
}

// outcomeReason is the log reason of outcome limit l over with r:
// `limit unknown key "alice": 10 of her recipients per 1h bounced as
// unknown users (limit 10, ...)`.
func outcomeReason(l *limit, it *StackItem, r *ratelimit.Result, lim float64) string {
	return fmt.Sprintf("limit %s key %q: %s of the sender's recipients per %s %s (limit %g, %s, %s)", l.name, it.Key,
		human.Rate(r.Before, lim), human.Duration(it.Params.Period), outcomeNouns[l.per], lim, it.Params.Mode,
		it.Params.Algorithm)
}

// RecordOutcome counts, at now, one recipient's outcome of kind in every
// outcome limit that counts it (per = "bounce" counts unknown recipients
// too), keyed by req: the request that submitted the message, with
// Recipient the recipient the outcome is about. An outcome is always
// counted, as an admitted request is (mode readonly: never); exempt
// senders and keys req cannot build count nowhere. It returns how many
// limits counted it and the first store error. Safe for concurrent use.
func (e *Engine) RecordOutcome(ctx context.Context, now time.Time, req *Request, kind OutcomeKind) (int, error) {
	c := e.cfg.Load()
	if c.exempt(req) {
		return 0, nil
	}
	n := 0
	var first error
	for i := range c.limits {
		l := &c.limits[i]
		if !l.counts(kind) {
			continue
		}
		key := c.keyOf(l, req)
		if key == "" {
			continue
		}
		rl := l.rl
		if v, ok := l.override(key); ok {
			rl = overridden(rl, v)
		}
		err := e.store.Update(ctx, l.name, key, func(old ratelimit.State) (ratelimit.State, bool) {
			return rl.Next(rl.Check(old, now, 1), true)
		})
		if err != nil {
			if first == nil {
				first = fmt.Errorf("limit %s: %w", l.name, err)
			}
			continue
		}
		n++
	}
	return n, first
}
