package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ratelimitd/ratelimitd/admin"
	"github.com/ratelimitd/ratelimitd/events"
	"github.com/ratelimitd/ratelimitd/internal/cliout"
	"github.com/ratelimitd/ratelimitd/internal/daemon"
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
			if q.Since, err = admin.ParseWhen(since, now); err != nil {
				return usageError{fmt.Errorf("--since: %w", err)}
			}
			if q.Until, err = admin.ParseWhen(until, now); err != nil {
				return usageError{fmt.Errorf("--until: %w", err)}
			}
			if q.Actions, err = admin.ParseActions(actions); err != nil {
				return usageError{fmt.Errorf("--action: %w", err)}
			}
			w := cmd.OutOrStdout()
			if summary {
				ks, err := ask(opts, daemon.OpenEvents, func(b admin.Backend) ([]events.KeySummary, error) { return b.EventSummary(cmd.Context(), q) })
				return printList(w, asJSON, ks, err, cliout.EventSummary)
			}
			es, err := ask(opts, daemon.OpenEvents, func(b admin.Backend) ([]events.Event, error) { return b.EventList(cmd.Context(), q) })
			return printList(w, asJSON, es, err, cliout.Events)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&since, "since", "", "only events at or after this time, or this long ago (24h, 7d)")
	fl.StringVar(&until, "until", "", "only events at or before this time, or this long ago")
	fl.StringVar(&q.Key, "key", "", "only events of this rate key")
	fl.StringVar(&q.Limit, "limit", "", "only events of this limit")
	fl.StringVar(&actions, "action", "", "only these actions, comma-separated: "+strings.Join(events.Actions, ","))
	fl.IntVar(&q.Max, "max", events.DefaultMax, fmt.Sprintf("print at most this many events (keys with --summary; at most %d)", events.MaxQuery))
	fl.BoolVar(&asJSON, "json", false, "print a JSON array, one object per event (per key with --summary)")
	fl.BoolVar(&summary, "summary", false, "print per key: refusals, first and last, limits involved")
	return cmd
}

// printList prints vs with print, or as a JSON array with asJSON; an err
// is returned instead.
func printList[T any](w io.Writer, asJSON bool, vs []T, err error, print func(io.Writer, []T)) error {
	switch {
	case err != nil:
		return err
	case asJSON:
		return cliout.JSONList(w, vs)
	}
	print(w, vs)
	return nil
}
