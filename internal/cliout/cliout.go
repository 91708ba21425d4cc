// Package cliout prints the ratelimitd command line's tables, JSON, prompts
// and errors for operators. Client-supplied strings pass through termsafe;
// JSON output is exact. Functions keep no state.
package cliout

import (
	"bufio"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ratelimitd/ratelimitd/admin"
	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/events"
	"github.com/ratelimitd/ratelimitd/internal/human"
	"github.com/ratelimitd/ratelimitd/internal/plural"
	"github.com/ratelimitd/ratelimitd/internal/termsafe"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/quarantine"
	"github.com/ratelimitd/ratelimitd/quarantine/lifecycle"
)

// MarkUsageErrors wraps argument-count errors of c and its subcommands
// with usage, and makes an unknown subcommand of a group an error.
func MarkUsageErrors(c *cobra.Command, usage func(error) error) {
	if c.HasSubCommands() && c.Run == nil && c.RunE == nil {
		c.Args = cobra.ArbitraryArgs
		c.RunE = func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return cmd.Help()
			}
			msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
			if cmd.SuggestionsMinimumDistance <= 0 {
				cmd.SuggestionsMinimumDistance = 2
			}
			if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
				msg += "; did you mean " + strings.Join(s, " or ") + "?"
			}
			var names []string
			for _, sub := range cmd.Commands() {
				if sub.IsAvailableCommand() {
					names = append(names, sub.Name())
				}
			}
			return usage(fmt.Errorf("%s (commands: %s)", msg, strings.Join(names, ", ")))
		}
	} else if args := c.Args; args != nil {
		c.Args = func(cmd *cobra.Command, a []string) error {
			if err := args(cmd, a); err != nil {
				return usage(fmt.Errorf("%s: %w (usage: %s)", cmd.CommandPath(), err, cmd.UseLine()))
			}
			return nil
		}
	}
	for _, sub := range c.Commands() {
		MarkUsageErrors(sub, usage)
	}
}

// pkgPrefix matches the "package: " prefixes of our errors.
var pkgPrefix = regexp.MustCompile(`(^|: )(config|config: invalid|policy|quarantine|notify|store|ratelimit|smtp|postfix|milter|bolt|maillog): `)

// ErrorMessage is err's text for an operator, without package prefixes and
// with the fix where one is known; defaultConfig is the --config default.
func ErrorMessage(err error, defaultConfig string) string {
	msg := pkgPrefix.ReplaceAllString(err.Error(), "$1")
	switch {
	case errors.Is(err, admin.ErrNoDaemon):
		msg += "\n  start it (systemctl start ratelimitd, or ratelimitd serve --config FILE), or give the --config the daemon runs with"
	case errors.Is(err, os.ErrPermission):
		msg += "\n  run as root, or as a member of the group that owns the state directory"
	case errors.Is(err, os.ErrNotExist):
		msg += "\n  check the path: --config FILE or $RATELIMITD_CONFIG name the configuration (neither: " + defaultConfig + " if it exists, else the embedded default)"
	}
	return msg
}

// JSON writes v as indented JSON, runes unsafe on a terminal escaped
// (termsafe.NewJSONWriter): exact, and unchanged by the output sanitiser.
func JSON(w io.Writer, v any) error {
	enc := json.NewEncoder(termsafe.NewJSONWriter(w))
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// JSONList writes vs as one JSON array, [] when empty: --json prints one
// document per command.
func JSONList[T any](w io.Writer, vs []T) error {
	if vs == nil {
		vs = []T{}
	}
	return JSON(w, vs)
}

// Confirm asks question with " [y/N] " and reports whether the line read
// from in is "y" or "yes" (any case).
func Confirm(in io.Reader, out io.Writer, question string) bool {
	fmt.Fprintf(out, "%s [y/N] ", question)
	answer, _ := bufio.NewReader(in).ReadString('\n')
	if a := strings.ToLower(strings.TrimSpace(answer)); a == "y" || a == "yes" {
		return true
	}
	fmt.Fprintln(out)
	return false
}

// Create opens the output of a -o flag: the file at path (truncated), or
// stdout for "" and "-"; the function returned closes it.
func Create(path string, stdout io.Writer) (io.Writer, func() error, error) {
	if path == "" || path == "-" {
		return stdout, func() error { return nil }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, nil, err
	}
	return f, f.Close, nil
}

// ConfigReport is `config check --json`: the source, whether it is valid,
// the effective limits, notes on settings without effect, or the errors.
type ConfigReport struct {
	Source string        `json:"source"`
	Valid  bool          `json:"valid"`
	Limits []LimitReport `json:"limits,omitempty"`
	Notes  []string      `json:"notes,omitempty"`
	Errors []string      `json:"errors,omitempty"`
}

// LimitReport is one limit of a ConfigReport.
type LimitReport struct {
	Name          string             `json:"name"`
	Key           []string           `json:"key"`
	Limit         float64            `json:"limit"`
	Period        string             `json:"period"`
	PeriodSeconds float64            `json:"period_seconds"`
	Per           string             `json:"per"`
	Mode          string             `json:"mode"`
	Algorithm     string             `json:"algorithm"`
	Action        string             `json:"action"`
	Via           []string           `json:"via"`
	CountedAt     string             `json:"counted_at"`
	Overrides     map[string]float64 `json:"overrides,omitempty"`
}

// ConfigErrorReport is the report of a configuration from path (""
// means the embedded default) that did not load: one error per problem.
func ConfigErrorReport(path string, err error) ConfigReport {
	return ConfigReport{Source: cmp.Or(path, config.EmbeddedSource), Errors: config.ErrorLines(err)}
}

// NewConfigReport is the report of a valid configuration from source.
func NewConfigReport(source string, eng *policy.Engine, notes []string) ConfigReport {
	r := ConfigReport{Source: source, Valid: true, Notes: notes}
	for _, l := range eng.Limits() {
		r.Limits = append(r.Limits, LimitReport{Name: l.Name, Key: l.Key, Limit: l.Limit, Period: human.Duration(l.Period),
			PeriodSeconds: l.Period.Seconds(), Per: l.Per, Mode: l.Mode, Algorithm: l.Algorithm, Action: l.Action,
			Via: via(l), CountedAt: l.CountAt, Overrides: l.Overrides})
	}
	return r
}

// via is the front ends measuring l: its `via`, or both.
func via(l policy.LimitInfo) []string {
	if len(l.Via) == 0 {
		return []string{policy.ViaPolicy, policy.ViaMilter}
	}
	return l.Via
}

// Limits prints that the configuration is valid and its limit stack, with
// baseline ranges and overrides as rows of their own.
func Limits(w io.Writer, source string, eng *policy.Engine) {
	fmt.Fprintf(w, "configuration %s is valid\n", source)
	fmt.Fprintf(w, "each message is counted once per limit, whichever protocol states the MTA asks at\n\n")
	t := termsafe.NewTable(w, "LIMIT", "KEY", "RATE", "PER", "MODE", "ALGORITHM", "ACTION", "VIA", "COUNTED AT")
	for _, l := range eng.Limits() {
		period := human.Duration(l.Period)
		t.Row(l.Name, strings.Join(l.Key, "+"), human.Number(l.Limit)+"/"+period, l.Per, l.Mode, l.Algorithm, l.Action,
			strings.Join(via(l), "+"), l.CountAt)
		if l.Algorithm == "baseline" {
			t.Row("  baseline", "", human.Number(l.Floor)+"-"+human.Number(l.Limit)+"/"+period, "", "", "", "", "",
				fmt.Sprintf("%g x the key's peak, learned over %s", l.Factor, human.Duration(l.LearnPeriod)))
		}
		for _, k := range slices.Sorted(maps.Keys(l.Overrides)) {
			t.Row("  override", k, human.Number(l.Overrides[k])+"/"+period)
		}
	}
	t.Flush()
}

// Rates prints a row per key and limit, with how long it is refused.
func Rates(w io.Writer, kr []policy.KeyRate) {
	t := termsafe.NewTable(w, "KEY", "LIMIT", "RATE", "MAX", "PERIOD", "STATUS")
	for _, k := range kr {
		status := "ok"
		switch {
		case k.Over:
			status = "over: allowed again in " + human.Duration(k.RetryAfter.Round(time.Second))
		case k.Refusing:
			status = "at limit: allowed again in " + human.Duration(k.RetryAfter.Round(time.Second))
		}
		maxText := human.Number(k.Max)
		if k.Baseline {
			maxText = strconv.FormatFloat(k.Max, 'f', 1, 64)
			status += fmt.Sprintf(" (baseline: learned peak %.1f, max is the allowance, cap %s)", k.Peak, human.Number(k.Cap))
		}
		rate := admin.FormatKeyRate(k)
		if noun := outcomeNouns[k.Per]; noun != "" {
			status += "; counts " + noun + " (" + k.Per + ")"
		}
		if k.Ratio > 0 {
			rate = fmt.Sprintf("%s of %s", human.Number(math.Round(k.Rate)), human.Number(math.Round(k.Recipients)))
			maxText = strconv.FormatFloat(100*k.Ratio, 'g', -1, 64) + "%"
			status += " of at least " + human.Number(k.MinCount) + " recipients"
		}
		if note := admin.ConversionNote(k); note != "" {
			status += "; " + note
		}
		t.Row(k.Key, k.Limit, rate, maxText, human.Duration(k.Period), status)
	}
	t.Flush()
}

// outcomeNouns name what an outcome limit counts, by its per.
var outcomeNouns = map[string]string{"bounce": "bounced recipients", "unknown_rcpt": "unknown recipients",
	"deferral": "deferred recipients"}

// RateRow is one element of `rate show/list --json`: the rate to two
// decimals, the wait in whole seconds rounded up.
type RateRow struct {
	Key               string  `json:"key"`
	Limit             string  `json:"limit"`
	Rate              float64 `json:"rate"`
	Max               float64 `json:"max"`
	Period            string  `json:"period"`
	PeriodSeconds     float64 `json:"period_seconds"`
	Per               string  `json:"per"` // what the limit counts: mail, rcpt, ..., unknown_rcpt
	Over              bool    `json:"over"`
	Refusing          bool    `json:"refusing"`
	RetryAfterSeconds float64 `json:"retry_after_seconds"`
	// Ratio, MinCount, Recipients: a limit of the ratio form, Rate its
	// failures and Max those it permits of Recipients (the recipients'
	// rate to two decimals).
	Ratio      float64 `json:"ratio,omitempty"`
	MinCount   float64 `json:"min_count,omitempty"`
	Recipients float64 `json:"recipients,omitempty"`
	// Converted: the state was converted from the limit's earlier
	// parameters (policy.ConvertedView).
	Converted *ConvertedRow `json:"converted,omitempty"`
}

// ConvertedRow is RateRow's account of a converted state.
type ConvertedRow struct {
	From          string    `json:"from"`
	PeriodSeconds float64   `json:"from_period_seconds"`
	Algorithm     string    `json:"from_algorithm"`
	At            time.Time `json:"at"`
	Cause         string    `json:"cause"`
	// Rate is the key's rate now by the old parameters (rate show only).
	Rate float64 `json:"from_rate,omitempty"`
}

// RateRows converts kr to the rows of `rate show/list --json`.
func RateRows(kr []policy.KeyRate) []RateRow {
	out := make([]RateRow, len(kr))
	for i, k := range kr {
		out[i] = RateRow{Key: k.Key, Limit: k.Limit, Rate: round2(k.Rate), Max: k.Max, Per: k.Per,
			Period: human.Duration(k.Period), PeriodSeconds: k.Period.Seconds(), Over: k.Over, Refusing: k.Refusing,
			RetryAfterSeconds: math.Ceil(k.RetryAfter.Seconds()), Ratio: k.Ratio, MinCount: k.MinCount, Recipients: round2(k.Recipients)}
		if c := k.Converted; c != nil {
			out[i].Converted = &ConvertedRow{From: c.From, PeriodSeconds: c.Period.Seconds(), Algorithm: c.Algorithm,
				At: c.At, Cause: c.Cause, Rate: round2(c.Rate)}
		}
	}
	return out
}

// round2 rounds x to two decimals below 2^52 (x*100 could overflow).
func round2(x float64) float64 {
	if math.Abs(x) >= 1<<52 {
		return x
	}
	return math.Round(x*100) / 100
}

// Events prints one line per event, every field through termsafe; a
// coalesced event shows its count and last time.
func Events(w io.Writer, es []events.Event) {
	if len(es) == 0 {
		fmt.Fprintln(w, "no events")
		return
	}
	t := termsafe.NewTable(w, "TIME", "ACTION", "KEY", "LIMIT", "RATE/MAX", "DETAILS")
	for _, e := range es {
		rate := ""
		if e.Max != 0 {
			rate = human.Number(e.Rate) + "/" + human.Number(e.Max)
		}
		var details []string
		if e.Count > 1 {
			details = append(details, fmt.Sprintf("count=%d last=%s", e.Count, e.Last.Local().Format(time.DateTime)))
		}
		for _, f := range [][2]string{{"sender", e.Sender}, {"client", e.Client}, {"queue_id", e.QueueID}, {"by", e.By}, {"detail", e.Detail}} {
			if f[1] != "" {
				details = append(details, f[0]+"="+termsafe.Line(f[1]))
			}
		}
		t.Row(e.Time.Local().Format(time.DateTime), e.Action, cmp.Or(e.Key, "-"), cmp.Or(e.Limit, "-"), cmp.Or(rate, "-"), strings.Join(details, " "))
	}
	t.Flush()
}

// EventSummary prints one line per key.
func EventSummary(w io.Writer, ks []events.KeySummary) {
	if len(ks) == 0 {
		fmt.Fprintln(w, "no events")
		return
	}
	t := termsafe.NewTable(w, "KEY", "REFUSALS", "FIRST", "LAST", "LIMITS")
	for _, k := range ks {
		t.Row(cmp.Or(k.Key, "-"), strconv.Itoa(k.Refusals), k.First.Local().Format(time.DateTime),
			k.Last.Local().Format(time.DateTime), cmp.Or(strings.Join(k.Limits, ","), "-"))
	}
	t.Flush()
}

// Entries prints one table row per quarantined message (subjects cut to
// 60 characters) and the count.
func Entries(w io.Writer, es []quarantine.Entry) {
	t := termsafe.NewTable(w, "ID", "STATE", "QUEUE_ID", "AGE", "SENDER", "RCPTS", "SIZE", "LIMIT", "SUBJECT", "LAST_THAW")
	now := time.Now()
	for _, e := range es {
		sender := cmp.Or(termsafe.Line(e.Sender), "<>")
		state := e.State.String()
		if e.Unverified != "" {
			state += ":unverified" // the MTA's queue does not confirm its queue ID
		}
		t.Row(e.ID, state, cmp.Or(termsafe.Line(e.QueueID), "-"), human.Duration(now.Sub(e.Created).Round(time.Second)),
			sender, strconv.Itoa(len(e.Recipients)), strconv.FormatInt(e.Size, 10), e.Limit, human.Cut(termsafe.Line(e.Subject), 60, "..."), lastThaw(e))
	}
	t.Flush()
	fmt.Fprintln(w, plural.N(len(es), "message"))
}

// Show prints `quarantine show`: with raw the bytes as they are, else the
// entry, the cleaned preview and why the content is unavailable.
func Show(w io.Writer, res admin.ShowResult, raw bool) {
	if raw {
		// Data for a file (> msg.eml), not text for the terminal.
		io.WriteString(termsafe.Unwrap(w), res.Body)
		return
	}
	res.Entry.WriteTo(w)
	fmt.Fprintln(w)
	// postcat's output for held mail is message content: cleaned too.
	io.WriteString(w, termsafe.Text(res.Body))
	if res.Error != "" {
		fmt.Fprintf(w, "\n(content unavailable: %s)\n", termsafe.Line(res.Error))
	}
}

// Outcomes prints a line per message of a "thaw" or "delete", a count and
// the keys reset; the error says how many failed, or that none matched.
func Outcomes(w io.Writer, op string, sel lifecycle.Selection, out []lifecycle.Outcome) error {
	if len(out) == 0 {
		return NoMatch(sel)
	}
	done := strings.TrimSuffix(op, "e") + "ed" // thawed, deleted
	failed := 0
	var reset []string
	for _, o := range out {
		if o.RateReset && !slices.Contains(reset, o.Key) {
			reset = append(reset, o.Key)
		}
		id, sender := termsafe.Line(o.ID), termsafe.Line(o.Sender)
		if o.OK {
			note := ""
			if o.Note != "" {
				note = " (" + termsafe.Line(o.Note) + ")"
			}
			fmt.Fprintf(w, "%s %s: %s%s\n", id, sender, done, note)
		} else {
			failed++
			fmt.Fprintf(w, "%s %s: FAILED: %s\n", id, sender, termsafe.Line(o.Error))
		}
	}
	fmt.Fprintf(w, "%d %s, %d failed\n", len(out)-failed, done, failed)
	for _, k := range reset {
		fmt.Fprintf(w, "%s: rate reset\n", termsafe.Line(k))
	}
	if failed > 0 {
		return fmt.Errorf("%d of %s could not be %s", failed, plural.N(len(out), "message"), done)
	}
	return nil
}

// NoMatch is the error of a thaw or delete that matched nothing.
func NoMatch(sel lifecycle.Selection) error {
	var what []string
	for _, f := range []struct{ flag, v string }{{"--sender", sel.Sender}, {"--key", sel.Key}} {
		if f.v != "" {
			what = append(what, f.flag+" "+termsafe.Line(f.v))
		}
	}
	if sel.OlderThan > 0 {
		what = append(what, "--older-than "+human.Duration(sel.OlderThan))
	}
	if len(what) == 0 {
		what = append(what, "the IDs given")
	}
	return fmt.Errorf("no message matches %s (held or frozen; see ratelimitd quarantine list)", strings.Join(what, " "))
}

// Suspended prints the result of `quarantine suspend` or `resume`.
func Suspended(w io.Writer, res admin.SuspendResult, resume bool) {
	key := termsafe.Line(res.Key)
	switch {
	case !resume:
		fmt.Fprintf(w, "%s: automatic release suspended\n", key)
	case res.Was:
		fmt.Fprintf(w, "%s: automatic release resumed\n", key)
	default:
		fmt.Fprintf(w, "%s: was not suspended\n", key)
	}
}

// lastThaw says where the last thaw of e went, or why it failed, in at
// most 80 characters; "-" if none.
func lastThaw(e quarantine.Entry) string {
	s := ""
	switch {
	case e.Error != "" && e.State != quarantine.Deleted:
		s = "failed: " + e.Error
	case e.State == quarantine.Thawed && e.ThawedAs != "":
		s = "queued as " + e.ThawedAs + " at " + e.ThawedTo
	}
	return cmp.Or(human.Cut(termsafe.Line(s), 80, "..."), "-")
}
