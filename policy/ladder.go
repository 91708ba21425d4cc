package policy

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/human"
	"github.com/ratelimitd/ratelimitd/ratelimit"
)

// Step is one limit's place in its Ladder.
type Step struct {
	Limit  string
	Action Action
	Max    float64       // the limit in cost per Period, before overrides
	Period time.Duration // the limit's period
	Mode   string        // leaky, strict, forgiving, readonly
	Via    []string      // the front ends that measure it; empty: all
	// Shadowed names the earlier limit that always answers first; "" if
	// none does.
	Shadowed string
}

// Ladder is the limits of a stack over one key and cost unit, in stack
// order.
type Ladder struct {
	Key   []string // the key attributes, as configured
	Per   string   // the cost unit: mail, rcpt, byte, conn, addr
	Steps []Step
}

// actionVerbs says, per Action, what a limit does above its threshold.
var actionVerbs = [...]string{"measures", "warns", "holds", "freezes", "defers", "rejects"}

// String is the step as config check prints it: "hourly defers above
// 200/h", "daily freezes above 1,000/24h".
func (s Step) String() string {
	verb, period := s.Action.String(), human.Duration(s.Period)
	if int(s.Action) < len(actionVerbs) {
		verb = actionVerbs[s.Action]
	}
	if s.Period == time.Hour {
		period = "h"
	}
	return fmt.Sprintf("%s %s above %s/%s", s.Limit, verb, thousands(s.Max), period)
}

// thousands prints f as human.Number does, with "," between thousands.
func thousands(f float64) string {
	s := human.Number(f)
	i := strings.IndexByte(s+".", '.')
	for i -= 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// Ladders returns the engine's limits grouped by key and cost unit, in the
// order of each ladder's first limit.
func (e *Engine) Ladders() []Ladder { return e.cfg.Load().ladders() }

// ladders groups c's limits by key and cost unit and marks shadowed steps.
func (c *compiled) ladders() []Ladder {
	var out []Ladder
	for i := range c.limits {
		l := &c.limits[i]
		j := slices.IndexFunc(out, func(ld Ladder) bool {
			return ld.Per == perNames[l.per] && slices.Equal(ld.Key, l.key)
		})
		if j < 0 {
			out = append(out, Ladder{Key: l.key, Per: perNames[l.per]})
			j = len(out) - 1
		}
		s := l.step()
		for k := range i {
			if a := &c.limits[k]; a.per == l.per && slices.Equal(a.key, l.key) && shadows(a, l) {
				s.Shadowed = a.name
				break
			}
		}
		out[j].Steps = append(out[j].Steps, s)
	}
	return out
}

// shadows reports whether a, earlier on b's ladder, answers whenever b is
// over: measured wherever b is, no overrides, and a threshold no higher as
// a count (a burst) and as a rate (a steady sender).
func shadows(a, b *limit) bool {
	if !a.action.Answers() || b.action == Pass || len(a.overrides) > 0 ||
		a.rl.Algorithm == ratelimit.Baseline || b.rl.Algorithm == ratelimit.Baseline {
		return false
	}
	if len(a.via) > 0 && (len(b.via) == 0 || slices.ContainsFunc(b.via, func(v string) bool { return !slices.Contains(a.via, v) })) {
		return false
	}
	return a.rl.Limit <= b.rl.Limit && a.rl.Limit*float64(b.rl.Period) <= b.rl.Limit*float64(a.rl.Period)
}

// LadderWarnings returns config check's warnings about c's ladders: a
// shadowed limit, and a milter-only limit that never counts the attempts
// policy delegation refuses first (Postfix asks the policy service before
// the milters). Nil if c does not validate.
func LadderWarnings(c Config) []string {
	cc, err := compile(c)
	if err != nil {
		return nil
	}
	var out []string
	for _, ld := range cc.ladders() {
		for _, s := range ld.Steps {
			if s.Shadowed != "" {
				a := cc.stateOf(s.Shadowed).step()
				out = append(out, fmt.Sprintf("limit %s can never answer: %s, earlier over the same key and counting, %s first",
					s.Limit, s.Shadowed, strings.TrimPrefix(a.String(), a.Limit+" ")))
			}
		}
	}
	for i := range cc.limits {
		b := &cc.limits[i]
		if len(b.via) == 0 || slices.Contains(b.via, ViaPolicy) || b.rl.Mode == ratelimit.Leaky {
			continue
		}
		for j := range cc.limits {
			if a := &cc.limits[j]; a.action.Refuses() && (len(a.via) == 0 || slices.Contains(a.via, ViaPolicy)) {
				out = append(out, fmt.Sprintf("limit %s (%s, via %s) never counts the attempts %s %s through policy delegation: "+
					"Postfix asks the policy service before the milter, so the milter never sees them; "+
					"measure both on one front end (via = [%q] for %s too) to count them",
					b.name, b.rl.Mode, strings.Join(b.via, ", "), a.name, actionVerbs[a.action], b.via[0], a.name))
			}
		}
	}
	return out
}

// nextStep returns the step of c.limits[i]'s ladder that answers at the
// next higher threshold ("daily freezes above 1,000/24h"), or "".
func (c *compiled) nextStep(i int) string {
	cur := &c.limits[i]
	var next *limit
	for j := range c.limits {
		l := &c.limits[j]
		if j == i || l.per != cur.per || !slices.Equal(l.key, cur.key) || !l.action.Answers() || l.rl.Limit <= cur.rl.Limit {
			continue
		}
		if next == nil || l.rl.Limit < next.rl.Limit {
			next = l
		}
	}
	if next == nil {
		return ""
	}
	return next.step().String()
}

// step is l's Step, without Shadowed.
func (l *limit) step() Step {
	return Step{Limit: l.name, Action: l.action, Max: l.rl.Limit, Period: l.rl.Period, Mode: l.rl.Mode.String(), Via: l.via}
}
