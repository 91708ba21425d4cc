package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ratelimitd/ratelimitd/admin"
	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/events"
	"github.com/ratelimitd/ratelimitd/internal/daemon"
	"github.com/ratelimitd/ratelimitd/internal/termsafe"
	"github.com/ratelimitd/ratelimitd/policy"
)

func newEventsCmd(opts *rootOptions) *cobra.Command {
	var q events.Query
	var since, until, actions string
	var asJSON, summary bool
	cmd := &cobra.Command{
		Use:   "events",
		Short: "Print the history of refusals, warnings, quarantine and operator actions (newest first)",
		Long:  helpText("events"),
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) (err error) {
			now := time.Now()
			if q.Since, err = parseWhen(since, now); err != nil {
				return usageError{fmt.Errorf("--since: %w", err)}
			}
			if q.Until, err = parseWhen(until, now); err != nil {
				return usageError{fmt.Errorf("--until: %w", err)}
			}
			if q.Actions, err = admin.ParseActions(actions); err != nil {
				return usageError{fmt.Errorf("--action: %w", err)}
			}
			f, err := config.Load(opts.configPath)
			if err != nil {
				return err
			}
			b, err := admin.Open(f.Server.AdminSocket, func() (admin.Backend, error) { return daemon.OpenEvents(f) })
			if err != nil {
				return err
			}
			defer b.Close()
			w := cmd.OutOrStdout()
			if summary {
				ks, err := b.EventSummary(q)
				if err != nil || asJSON {
					return orJSON(w, ks, err)
				}
				printEventSummary(w, ks)
				return nil
			}
			es, err := b.EventList(q)
			if err != nil || asJSON {
				return orJSON(w, es, err)
			}
			printEvents(w, es)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&since, "since", "", "only events at or after this time, or this long ago (24h, 7d)")
	fl.StringVar(&until, "until", "", "only events at or before this time, or this long ago")
	fl.StringVar(&q.Key, "key", "", "only events of this rate key")
	fl.StringVar(&q.Limit, "limit", "", "only events of this limit")
	fl.StringVar(&actions, "action", "", "only these actions, comma-separated: "+strings.Join(events.Actions, ","))
	fl.IntVar(&q.Max, "max", events.DefaultMax, fmt.Sprintf("print at most this many events (keys with --summary; at most %d)", events.MaxQuery))
	fl.BoolVar(&asJSON, "json", false, "print a JSON array")
	fl.BoolVar(&summary, "summary", false, "print per key: refusals, first and last, limits involved")
	return cmd
}

// orJSON returns err, or prints v as JSON.
func orJSON(w io.Writer, v any, err error) error {
	if err != nil {
		return err
	}
	return printJSON(w, v)
}

// parseWhen reads --since and --until: "" (no bound), a duration back from
// now, an RFC 3339 time, or a local "2006-01-02 15:04[:05]" or date.
func parseWhen(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := policy.ParseDuration(s); err == nil {
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	for _, layout := range []string{time.DateTime, "2006-01-02 15:04", time.DateOnly} {
		if t, err := time.ParseInLocation(layout, s, time.Local); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%q is neither a duration (24h, 7d) nor a time (2025-03-01T12:00:00Z, 2025-03-01 12:00)", s)
}

// printEvents prints one line per event, every field through termsafe.
func printEvents(w io.Writer, es []events.Event) {
	if len(es) == 0 {
		fmt.Fprintln(w, "no events")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tACTION\tKEY\tLIMIT\tRATE/MAX\tDETAILS")
	for _, e := range es {
		rate := ""
		if e.Max != 0 {
			rate = admin.FormatRate(e.Rate) + "/" + admin.FormatRate(e.Max)
		}
		var details []string
		for _, f := range [][2]string{{"sender", e.Sender}, {"client", e.Client}, {"queue_id", e.QueueID}, {"by", e.By}, {"detail", e.Detail}} {
			if f[1] != "" {
				details = append(details, f[0]+"="+termsafe.Line(f[1]))
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", e.Time.Local().Format(time.DateTime), termsafe.Line(e.Action),
			orDash(termsafe.Line(e.Key)), orDash(termsafe.Line(e.Limit)), orDash(rate), strings.Join(details, " "))
	}
	tw.Flush()
}

// printEventSummary prints one line per key.
func printEventSummary(w io.Writer, ks []events.KeySummary) {
	if len(ks) == 0 {
		fmt.Fprintln(w, "no events")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tREFUSALS\tFIRST\tLAST\tLIMITS")
	for _, k := range ks {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", orDash(termsafe.Line(k.Key)), k.Refusals, k.First.Local().Format(time.DateTime),
			k.Last.Local().Format(time.DateTime), orDash(termsafe.Line(strings.Join(k.Limits, ","))))
	}
	tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
