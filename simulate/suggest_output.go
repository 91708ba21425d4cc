package simulate

import (
	"bytes"
	"cmp"
	"fmt"
	"io"
	"reflect"
	"strings"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/human"
	"github.com/ratelimitd/ratelimitd/internal/termsafe"

	"github.com/BurntSushi/toml"

	"github.com/ratelimitd/ratelimitd/policy"
)

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
					bs.Sends, bs.Recipients, every(bs.Interval, bs.First), clockText(bs.Clock), 100*bs.Similarity)
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

func clockText(d time.Duration) string {
	return fmt.Sprintf("%02d:%02d", int(d.Hours()), int(d.Minutes())%60)
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
