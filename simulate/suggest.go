package simulate

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/ratelimitd/ratelimitd/internal/human"
	"github.com/ratelimitd/ratelimitd/internal/plural"
	"github.com/ratelimitd/ratelimitd/internal/termsafe"
	"github.com/ratelimitd/ratelimitd/policy"
)

// Defaults of SuggestOptions.
const (
	DefaultHeadroom   = 1.5
	DefaultPercentile = 95.0
)

// Recognition of a recurring bulk sender (BulkSender).
const (
	bulkGap           = 30 * time.Minute // between two bursts of one key
	bulkMinRecipients = 20               // distinct recipients of a bulk send
	bulkMinSends      = 3
	bulkClockSlack    = 75 * time.Minute // from the first send's time of day (DST, a late cron job)
	bulkMinSimilarity = 0.5              // Jaccard, of consecutive sends' recipients
)

const measureLimit = 1e300 // of the measuring replay: never reached

// SuggestOptions tunes Suggest (zero: the defaults): the limit is the
// Percentile (0 < p <= 100, nearest rank) of the ordinary keys' peaks
// times Headroom (>= 1); Allow names bulk senders (case-insensitive).
// NewStore (required) and NewRecipientSets (nil: every recipient new)
// return empty stores, one per replay.
type SuggestOptions struct {
	Headroom, Percentile float64
	Allow                []string
	NewStore             func() policy.Store
	NewRecipientSets     func() policy.RecipientSets
}

// Suggestion is Suggest's proposal and the evidence behind it: a proposal
// per configured limit, the keys it refused (most refused first), and the
// configuration with each limit's Limit and Overrides replaced.
type Suggestion struct {
	Start, End           time.Time // of the trace's first and last request
	Requests             int
	Headroom, Percentile float64
	Limits               []LimitProposal
	Refusals             []Refusal
	Config               policy.Config
}

// LimitProposal is the proposal for one configured limit. Proposed, in
// cost per period (baseline: the cap, at least the floor), is Base ×
// headroom rounded up to two significant digits, else the configured
// limit; 0 for the ratio form. Peaks: every key's, highest first; Ordinary
// the keys the percentile is over; Outliers those above Proposed.
// TooShort: the trace is shorter than the period.
type LimitProposal struct {
	Config         policy.LimitConfig
	Proposed, Base float64
	Peaks          []KeyPeak
	Ordinary       int
	Median         float64 // of the ordinary peaks
	Overrides      []Override
	Outliers       []KeyPeak
	TooShort       bool
	Notes          []string
}

// KeyPeak is one key's highest measured rate (cost per period, with no
// limit in the way) under one limit, and when.
type KeyPeak struct {
	Key      string
	Peak     float64
	At       time.Time
	First    time.Time // the key's first counted request
	Requests int
}

// Override is a proposed per-key limit (cost per period). Reason is
// "--allow", "configured override" or "recurring bulk sender" (Bulk set).
type Override struct {
	Key         string
	Limit, Peak float64
	Reason      string
	Bulk        *BulkSender
}

// BulkSender is a newsletter or report, not a spam run: at least three
// sends to 20 or more distinct recipients each, starting at the same time
// of day (within 75 minutes), consecutive sends going mostly to the same
// recipients (Jaccard similarity >= 0.5).
type BulkSender struct {
	Sends      int
	Recipients float64       // mean distinct recipients per send
	Similarity float64       // mean Jaccard similarity of consecutive sends
	Interval   time.Duration // median time between sends, in whole days
	Clock      time.Duration // the first send's time of day, UTC
	First      time.Time
}

// Refusal is a key the proposed configuration refused: by which limits,
// first and last refused request, refused and total messages (distinct
// policy instances), and the key's first request.
type Refusal struct {
	Key               string
	Limits            []string
	First, Last       time.Time
	Refused, Messages int
	KeyFirst          time.Time
}

// ErrSuggest wraps Suggest's errors about its options.
var ErrSuggest = errors.New("simulate: cannot suggest limits")

// Suggest proposes limits for the stack of cfg from tr (SuggestOptions;
// bulk senders, Allow keys and configured overrides get overrides), then
// replays tr through the proposal to list who it refuses; both replays
// ignore via and keep every request's time and recipients in memory.
// Errors wrap ErrSuggest, or are policy.NewEngine's or ctx's.
func Suggest(ctx context.Context, cfg policy.Config, tr *Trace, o SuggestOptions) (*Suggestion, error) {
	o.Headroom, o.Percentile = cmp.Or(o.Headroom, DefaultHeadroom), cmp.Or(o.Percentile, DefaultPercentile)
	switch {
	case !(o.Headroom >= 1) || math.IsInf(o.Headroom, 0):
		return nil, fmt.Errorf("%w: headroom must be a number >= 1, got %v", ErrSuggest, o.Headroom)
	case !(o.Percentile > 0 && o.Percentile <= 100):
		return nil, fmt.Errorf("%w: percentile must be in (0, 100], got %v", ErrSuggest, o.Percentile)
	case o.NewStore == nil:
		return nil, fmt.Errorf("%w: no store", ErrSuggest)
	case len(cfg.Limits) == 0:
		return nil, fmt.Errorf("%w: the configuration has no limits", ErrSuggest)
	}
	s := &Suggestion{Headroom: o.Headroom, Percentile: o.Percentile, Requests: tr.Len()}
	s.Start, s.End = tr.Span()

	stats, err := measure(ctx, cfg, tr, o)
	if err != nil {
		return nil, err
	}
	s.Config = cfg
	s.Config.Limits = slices.Clone(cfg.Limits)
	for i, lc := range cfg.Limits {
		lp := propose(lc, stats[i], o, s.End.Sub(s.Start))
		s.Limits = append(s.Limits, lp)
		pl := &s.Config.Limits[i]
		pl.Limit, pl.Cap = lp.Proposed, 0 // with baseline, the limit is the cap
		pl.Overrides = nil
		if len(lp.Overrides) > 0 {
			pl.Overrides = make(map[string]float64, len(lp.Overrides))
		}
		for _, ov := range lp.Overrides {
			pl.Overrides[ov.Key] = ov.Limit
		}
	}
	replay := s.Config
	replay.Limits = slices.Clone(s.Config.Limits)
	for i := range replay.Limits {
		replay.Limits[i].Via = nil // as measure: every request counts
	}
	if s.Refusals, err = refusals(ctx, replay, tr, o); err != nil {
		return nil, err
	}
	return s, nil
}

// newEngine returns an engine of cfg with a new store and recipient memory.
func newEngine(cfg policy.Config, o SuggestOptions) (*policy.Engine, error) {
	eng, err := policy.NewEngine(cfg, o.NewStore())
	if err != nil {
		return nil, err
	}
	if o.NewRecipientSets != nil {
		eng.UseRecipientSets(o.NewRecipientSets())
	}
	return eng, nil
}

// replayChecked is Replay stopping at the first engine fault.
func replayChecked(ctx context.Context, eng Evaluator, tr *Trace, fn func(*Result) error) error {
	return Replay(ctx, eng, tr.Events(), func(r *Result) error {
		if r.Decision.Fault != nil {
			return fmt.Errorf("line %d: engine fault: %w", r.Line, r.Decision.Fault)
		}
		return fn(r)
	})
}

// keyStat is what the measuring replay keeps per limit and key.
type keyStat struct {
	KeyPeak
	sends []send
}

// send is one counted request: when, and the recipients of its message.
type send struct {
	t     time.Time
	rcpts []string
}

// measure replays tr through cfg's limits made unreachable and returns
// every key's statistics per limit.
func measure(ctx context.Context, cfg policy.Config, tr *Trace, o SuggestOptions) ([]map[string]*keyStat, error) {
	mc := cfg
	mc.Limits = make([]policy.LimitConfig, len(cfg.Limits))
	index := map[string]int{}
	for i, l := range cfg.Limits {
		// No via, so every request counts.
		mc.Limits[i] = policy.LimitConfig{Name: l.Name, Key: l.Key, Period: l.Period, Per: l.Per,
			Limit: measureLimit, Mode: "strict", Action: "warn"}
		index[l.Name] = i
	}
	eng, err := newEngine(mc, o)
	if err != nil {
		return nil, err
	}
	// Outcome limits alone, for a probe of an outcome's rate that counts no message.
	oc := mc
	oc.Limits = slices.DeleteFunc(slices.Clone(mc.Limits), func(l policy.LimitConfig) bool { return !outcomePer(l.Per) })
	oeng, err := newEngine(oc, o)
	if err != nil {
		return nil, err
	}
	stats := make([]map[string]*keyStat, len(mc.Limits))
	for i := range stats {
		stats[i] = map[string]*keyStat{}
	}
	peak := func(i int, key string, rate float64, t time.Time) *keyStat {
		ks := stats[i][key]
		if ks == nil {
			ks = &keyStat{KeyPeak: KeyPeak{Key: key, First: t}}
			stats[i][key] = ks
		}
		ks.Requests++
		if rate > ks.Peak {
			ks.Peak, ks.At = rate, t
		}
		return ks
	}
	// Recipients of messages in progress, by instance, from RCPT requests.
	pending := map[string][]string{}
	err = replayChecked(ctx, eng, tr, func(r *Result) error {
		req := r.Request
		if r.Outcome != 0 {
			if len(oc.Limits) == 0 {
				return nil
			}
			if _, err := oeng.RecordOutcome(ctx, r.Time, req, r.Outcome); err != nil {
				return fmt.Errorf("line %d: %w", r.Line, err)
			}
			probe := *req
			probe.ProtocolState, probe.Instance, probe.QueueID = policy.StateEndOfMessage, "", ""
			for _, m := range oeng.Evaluate(ctx, r.Time, &probe).Measures {
				if i, ok := index[m.Limit]; ok && m.Before > 0 {
					peak(i, m.Key, m.Before, r.Time)
				}
			}
			return nil
		}
		var rcpts []string
		switch {
		case req.ProtocolState == policy.StateRcpt && req.Instance != "":
			if req.Recipient != "" {
				pending[req.Instance] = append(pending[req.Instance], strings.ToLower(req.Recipient))
			}
			rcpts = []string{strings.ToLower(req.Recipient)}
		case req.Instance != "" && pending[req.Instance] != nil:
			rcpts = pending[req.Instance]
			delete(pending, req.Instance)
		case req.Recipient != "":
			rcpts = []string{strings.ToLower(req.Recipient)}
		}
		for _, m := range r.Decision.Measures {
			if !m.Stored {
				continue
			}
			if i, ok := index[m.Limit]; ok {
				ks := peak(i, m.Key, m.After, r.Time)
				ks.sends = append(ks.sends, send{t: r.Time, rcpts: rcpts})
			}
		}
		return nil
	})
	return stats, err
}

// propose computes one limit's proposal; span is the trace's.
func propose(lc policy.LimitConfig, stats map[string]*keyStat, o SuggestOptions, span time.Duration) LimitProposal {
	lp := LimitProposal{Config: lc, Proposed: cmp.Or(lc.Cap, lc.Limit)} // baseline: the cap is the limit
	keys := slices.SortedFunc(maps.Values(stats), func(a, b *keyStat) int {
		return cmp.Or(cmp.Compare(b.Peak, a.Peak), strings.Compare(a.Key, b.Key))
	})
	special := map[string]Override{}
	configured := map[string]float64{}
	for k, v := range lc.Overrides {
		configured[strings.ToLower(k)] = v
	}
	var ordinary []float64
	for _, ks := range keys {
		lp.Peaks = append(lp.Peaks, ks.KeyPeak)
		lk := strings.ToLower(ks.Key)
		switch {
		case slices.ContainsFunc(o.Allow, func(a string) bool { return strings.EqualFold(a, ks.Key) }):
			special[ks.Key] = Override{Key: ks.Key, Peak: ks.Peak, Reason: "--allow"}
		case configured[lk] > 0:
			special[ks.Key] = Override{Key: ks.Key, Peak: ks.Peak, Limit: configured[lk], Reason: "configured override"}
		default:
			if b, ok := recurringBulk(ks.sends); ok {
				special[ks.Key] = Override{Key: ks.Key, Peak: ks.Peak, Reason: "recurring bulk sender", Bulk: &b}
				continue
			}
			ordinary = append(ordinary, ks.Peak)
		}
	}
	lp.Ordinary = len(ordinary)
	if lc.Ratio != 0 {
		return lp // a share of the recipients, not a count: kept as configured
	}
	if len(ordinary) > 0 {
		slices.Sort(ordinary)
		lp.Base = percentile(ordinary, o.Percentile)
		lp.Median = percentile(ordinary, 50)
		lp.Proposed = roundUp(lp.Base * o.Headroom)
		if lc.Algorithm == "baseline" {
			lp.Proposed = max(lp.Proposed, lc.Floor) // a cap below the floor is refused
		}
		if outcomePer(lc.Per) {
			lp.Proposed = max(lp.Proposed, OutcomeFloor)
		}
		if n := len(ordinary); n < MinPercentileKeys && o.Percentile < 100 {
			rank := min(max(int(math.Ceil(o.Percentile/100*float64(n))), 1), n)
			which := "the highest ordinary peak"
			if rank < n {
				which = fmt.Sprintf("peak %d of the %d from the lowest", rank, n)
			}
			lp.Notes = append(lp.Notes, fmt.Sprintf("only %d ordinary %s: too few for a p%g (it takes %d); "+
				"the proposal is based on %s, %s, instead",
				n, plural.Of(n, "key"), o.Percentile, MinPercentileKeys, which, human.Number(lp.Base)))
		}
		if period := time.Duration(lc.Period); span < period {
			lp.TooShort = true
			lp.Notes = append(lp.Notes, fmt.Sprintf("the trace spans %s, less than the period %s: no rate over a whole "+
				"period was measured, so the proposal is based on the partial peaks instead, which may be low; "+
				"give a trace of at least %s", human.Span(span), human.Duration(period), human.Duration(period)))
		}
	}
	for _, ks := range keys {
		ov, ok := special[ks.Key]
		if !ok {
			if ks.Peak > lp.Proposed {
				lp.Outliers = append(lp.Outliers, ks.KeyPeak)
			}
			continue
		}
		need := roundUp(ks.Peak * o.Headroom)
		switch {
		case ov.Reason == "configured override" && ov.Limit >= need:
			// The operator's own override is enough: keep it.
		case need > lp.Proposed:
			ov.Limit = max(need, ov.Limit)
		default:
			continue // the ordinary limit is enough
		}
		lp.Overrides = append(lp.Overrides, ov)
	}
	// Configured overrides of keys the trace never saw are kept.
	for _, k := range slices.Sorted(maps.Keys(lc.Overrides)) {
		_, lower := stats[strings.ToLower(k)]
		if _, seen := stats[k]; !seen && !lower {
			lp.Overrides = append(lp.Overrides, Override{Key: k, Limit: lc.Overrides[k], Reason: "configured override (not in the trace)"})
		}
	}
	return lp
}

// OutcomeFloor is the least limit Suggest proposes for an outcome limit: a
// few failures in a period are any sender's lot.
const OutcomeFloor float64 = 10

// outcomePer reports whether per counts outcomes.
func outcomePer(per string) bool { _, ok := outcomeKinds[per]; return ok }

// MinPercentileKeys is the fewest ordinary keys a percentile below 100 is
// meaningful over.
const MinPercentileKeys = 20

// percentile returns the nearest-rank p-th percentile of sorted.
func percentile(sorted []float64, p float64) float64 {
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

// roundUp rounds x up to two significant digits, and to a whole number
// (at least 1): 14.1 → 15, 152 → 160, 0.4 → 1.
func roundUp(x float64) float64 {
	if !(x > 1) {
		return 1
	}
	step := math.Max(1, math.Pow(10, math.Floor(math.Log10(x))-1))
	return math.Ceil(x/step-1e-9) * step
}

// recurringBulk reports whether a key's sends, in time order, are a BulkSender's.
func recurringBulk(sends []send) (BulkSender, bool) {
	type burst struct {
		start time.Time
		rcpts map[string]bool
	}
	var bursts []burst
	var last time.Time
	for _, s := range sends {
		if len(bursts) == 0 || s.t.Sub(last) > bulkGap {
			bursts = append(bursts, burst{start: s.t, rcpts: map[string]bool{}})
		}
		last = s.t
		for _, r := range s.rcpts {
			if r != "" {
				bursts[len(bursts)-1].rcpts[r] = true
			}
		}
	}
	bursts = slices.DeleteFunc(bursts, func(b burst) bool { return len(b.rcpts) < bulkMinRecipients })
	if len(bursts) < bulkMinSends {
		return BulkSender{}, false
	}
	day := 24 * time.Hour
	clock := func(t time.Time) time.Duration { return t.UTC().Sub(t.UTC().Truncate(day)) }
	first := clock(bursts[0].start)
	b := BulkSender{Sends: len(bursts), Clock: first, First: bursts[0].start}
	var gaps []time.Duration
	for i, bu := range bursts {
		d := (clock(bu.start) - first).Abs()
		if min(d, day-d) > bulkClockSlack {
			return BulkSender{}, false
		}
		b.Recipients += float64(len(bu.rcpts))
		if i == 0 {
			continue
		}
		prev := bursts[i-1]
		inter := 0
		for r := range bu.rcpts {
			if prev.rcpts[r] {
				inter++
			}
		}
		j := float64(inter) / float64(len(bu.rcpts)+len(prev.rcpts)-inter)
		if j < bulkMinSimilarity {
			return BulkSender{}, false
		}
		b.Similarity += j
		gaps = append(gaps, bu.start.Sub(prev.start))
	}
	b.Recipients /= float64(len(bursts))
	b.Similarity /= float64(len(bursts) - 1)
	slices.Sort(gaps)
	b.Interval = max(day, gaps[len(gaps)/2].Round(day))
	return b, true
}

// refusals replays tr through cfg and returns who was refused.
func refusals(ctx context.Context, cfg policy.Config, tr *Trace, o SuggestOptions) ([]Refusal, error) {
	eng, err := newEngine(cfg, o)
	if err != nil {
		return nil, err
	}
	byKey := map[string]*Refusal{}
	seen := map[string]time.Time{}
	// Per key, its messages' instances (a request without one is a message).
	msgs, refused := map[string]map[string]bool{}, map[string]map[string]bool{}
	mark := func(m map[string]map[string]bool, k, inst string) {
		if m[k] == nil {
			m[k] = map[string]bool{}
		}
		m[k][inst] = true
	}
	err = replayChecked(ctx, eng, tr, func(r *Result) error {
		if r.Outcome != 0 {
			return nil
		}
		inst := r.Request.Instance
		if inst == "" {
			inst = fmt.Sprintf("#%d", r.Seq)
		}
		keys := r.Keys()
		if k := r.Decision.Key; k != "" && !slices.Contains(keys, k) {
			// A refused message's later requests are not measured again.
			keys = append(keys, k)
		}
		for _, k := range keys {
			if _, ok := seen[k]; !ok {
				seen[k] = r.Time
			}
			mark(msgs, k, inst)
		}
		if !r.Refused() {
			return nil
		}
		k := r.Decision.Key
		rf := byKey[k]
		if rf == nil {
			rf = &Refusal{Key: k, First: r.Time}
			byKey[k] = rf
		}
		rf.Last = r.Time
		mark(refused, k, inst)
		if !slices.Contains(rf.Limits, r.Decision.Limit) {
			rf.Limits = append(rf.Limits, r.Decision.Limit)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]Refusal, 0, len(byKey))
	for k, rf := range byKey {
		rf.KeyFirst, rf.Refused, rf.Messages = seen[k], len(refused[k]), len(msgs[k])
		out = append(out, *rf)
	}
	slices.SortFunc(out, func(a, b Refusal) int {
		return cmp.Or(cmp.Compare(b.Refused, a.Refused), strings.Compare(a.Key, b.Key))
	})
	return out, nil
}

// WriteText warns of a trace shorter than shortTrace and lists maxListed
// outliers and refusals.
const (
	shortTrace = 14 * 24 * time.Hour
	maxListed  = 20
)

var units = map[string]string{"rcpt": "recipients", "byte": "bytes", "conn": "connections", "bounce": "bounces",
	"unknown_rcpt": "unknown recipients", "deferral": "deferrals"}

// unit names a limit's cost unit.
func unit(lc policy.LimitConfig) string { return cmp.Or(units[lc.Per], "messages") }

func stamp(t time.Time) string { return t.UTC().Format("2006-01-02 15:04 MST") }

// WriteText writes the proposal with its reasoning, who it would have
// refused, and the TOML to paste.
func (s *Suggestion) WriteText(w io.Writer) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "Trace: %d requests from %s to %s (%s).\n", s.Requests, stamp(s.Start), stamp(s.End), human.Span(s.End.Sub(s.Start)))
	fmt.Fprintf(&b, "Method: every key's peak rate under each limit, as ratelimitd measures it (Exim's EWMA over\n"+
		"the limit's period) with no limit in the way; the proposed limit is the %gth percentile of the\n"+
		"ordinary keys' peaks × headroom %g, rounded up. Keys above it are named as outliers, not\n"+
		"accommodated; recurring bulk senders (3+ sends of 20+ recipients at the same time of day to\n"+
		"mostly the same recipients) and --allow keys get an override of their own.\n",
		s.Percentile, s.Headroom)
	if d := s.End.Sub(s.Start); d < shortTrace {
		fmt.Fprintf(&b, "Note: the trace covers only %s; base limits on a few weeks of mail, or a weekly\n"+
			"newsletter or a month-end run will be missing from it.\n", human.Span(d))
	}
	for i := range s.Limits {
		lp := &s.Limits[i]
		lc := lp.Config
		period := human.Duration(time.Duration(lc.Period))
		u := unit(lc)
		configured := human.Number(lc.Limit)
		if lc.Ratio != 0 {
			configured = fmt.Sprintf("ratio %g of at least %s recipients", lc.Ratio, human.Number(lc.MinCount))
		}
		fmt.Fprintf(&b, "\nlimit %q (key %s, %s per %s; configured %s):\n", lc.Name, strings.Join(lc.Key, "+"), u, period, configured)
		if lc.Ratio != 0 {
			b.WriteString("  kept as configured: suggest proposes counts, not shares of recipients.\n")
			continue
		}
		if len(lp.Peaks) == 0 {
			fmt.Fprintf(&b, "  no key of this limit is in the trace: keeping %s.\n", human.Number(lc.Limit))
			continue
		}
		top := lp.Peaks[0]
		fmt.Fprintf(&b, "  %d keys measured (%d ordinary); ordinary peaks: median %s, p%g %s; highest %s (%s at %s)\n",
			len(lp.Peaks), lp.Ordinary, human.Number(lp.Median), s.Percentile, human.Number(lp.Base), human.Number(top.Peak), top.Key, stamp(top.At))
		switch {
		case lp.Ordinary > 0 && lp.Proposed > roundUp(lp.Base*s.Headroom):
			fmt.Fprintf(&b, "  proposed: %s %s per %s, the floor of outcome limits (p%g %s × %g = %s is below it)\n",
				human.Number(lp.Proposed), u, period, s.Percentile, human.Number(lp.Base), s.Headroom, human.Number(lp.Base*s.Headroom))
		case lp.Ordinary > 0:
			fmt.Fprintf(&b, "  proposed: %s %s per %s = p%g %s × %g = %s, rounded up\n", human.Number(lp.Proposed), u, period,
				s.Percentile, human.Number(lp.Base), s.Headroom, human.Number(lp.Base*s.Headroom))
		default:
			fmt.Fprintf(&b, "  no ordinary keys: keeping %s\n", human.Number(lp.Proposed))
		}
		for _, n := range lp.Notes {
			fmt.Fprintf(&b, "  Note: %s.\n", n)
		}
		for _, ov := range lp.Overrides {
			why := ov.Reason
			if bs := ov.Bulk; bs != nil {
				why = fmt.Sprintf("recurring bulk sender: %d sends of about %.0f recipients, %s at %s UTC, %.0f%% the same recipients",
					bs.Sends, bs.Recipients, every(bs.Interval, bs.First), time.Time{}.Add(bs.Clock).Format("15:04"), 100*bs.Similarity)
			}
			if ov.Peak > 0 {
				fmt.Fprintf(&b, "  override (confirm): %s = %s (peak %s × %g) — %s\n", ov.Key, human.Number(ov.Limit), human.Number(ov.Peak), s.Headroom, why)
			} else {
				fmt.Fprintf(&b, "  override: %s = %s — %s\n", ov.Key, human.Number(ov.Limit), why)
			}
		}
		for j, o := range lp.Outliers {
			if j == maxListed {
				fmt.Fprintf(&b, "  ... and %d more outliers\n", len(lp.Outliers)-j)
				break
			}
			fmt.Fprintf(&b, "  outlier: %s peaked at %s (%.1f× the proposal) at %s — not accommodated; if it is legitimate, --allow %s\n",
				o.Key, human.Number(o.Peak), o.Peak/lp.Proposed, stamp(o.At), o.Key)
		}
	}
	b.WriteString("\nReplayed through the proposal (configured modes and actions):\n")
	if len(s.Refusals) == 0 {
		b.WriteString("  nobody would have been refused.\n")
	} else {
		t := termsafe.NewTable(&b, "  KEY", "LIMIT", "FIRST REFUSED", "SINCE KEY'S FIRST REQUEST", "LAST REFUSED", "FOR", "REFUSED MESSAGES")
		for _, rf := range s.Refusals[:min(len(s.Refusals), maxListed)] {
			t.Row("  "+rf.Key, strings.Join(rf.Limits, ","), stamp(rf.First), human.Span(rf.First.Sub(rf.KeyFirst)),
				stamp(rf.Last), human.Span(rf.Last.Sub(rf.First)), fmt.Sprintf("%d of %d", rf.Refused, rf.Messages))
		}
		t.Flush()
		if n := len(s.Refusals) - maxListed; n > 0 {
			fmt.Fprintf(&b, "  ... and %d more keys\n", n)
		}
	}
	toml, err := s.TOML()
	if err != nil {
		return err
	}
	b.WriteString("\nPaste into the configuration (replacing the [[limit]] tables; check with \"ratelimitd config check\"):\n\n")
	b.WriteString(toml)
	_, err = w.Write(b.Bytes())
	return err
}

func every(d time.Duration, first time.Time) string {
	days := int(d / (24 * time.Hour))
	switch {
	case days == 1:
		return "daily"
	case days == 7:
		return "weekly on " + first.UTC().Weekday().String() + "s"
	}
	return fmt.Sprintf("every %d days", days)
}

// limitTOML is policy.LimitConfig with every setting left out when
// empty: a [[limit]] table as an operator writes it, and no copy of the
// fields to keep in step with the configuration.
var limitTOML = func() reflect.Type {
	t := reflect.TypeFor[policy.LimitConfig]()
	fields := make([]reflect.StructField, t.NumField())
	for i := range fields {
		fields[i] = t.Field(i)
		fields[i].Tag = reflect.StructTag(`toml:"` + fields[i].Tag.Get("toml") + `,omitempty,omitzero"`)
	}
	return reflect.StructOf(fields)
}()

// TOML returns the proposed stack as [[limit]] tables.
func (s *Suggestion) TOML() (string, error) {
	var doc struct {
		Limit []any `toml:"limit"`
	}
	for _, l := range s.Config.Limits {
		doc.Limit = append(doc.Limit, reflect.ValueOf(l).Convert(limitTOML).Interface())
	}
	var b bytes.Buffer
	if err := toml.NewEncoder(&b).Encode(doc); err != nil {
		return "", fmt.Errorf("simulate: encoding the proposal: %w", err)
	}
	return b.String(), nil
}
