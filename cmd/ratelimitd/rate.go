package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/notify"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/quarantine"
)

// rateBackend answers the rate commands, from the running daemon (admin
// socket) or, when none runs, from the BoltDB file opened directly.
type rateBackend interface {
	lookup(key string) ([]policy.KeyRate, error)
	list(top int, over bool) ([]policy.KeyRate, error)
	reset(key, limit string) (resetResult, error)
	close() error
}

type onlineRates struct{ c *adminClient }

func (o onlineRates) lookup(key string) ([]policy.KeyRate, error) {
	var out []policy.KeyRate
	err := o.c.do("GET", "/v1/rate?key="+url.QueryEscape(key), nil, &out)
	return out, err
}

func (o onlineRates) list(top int, over bool) ([]policy.KeyRate, error) {
	q := url.Values{"top": {strconv.Itoa(top)}}
	if over {
		q.Set("over", "1")
	}
	var out []policy.KeyRate
	err := o.c.do("GET", "/v1/rates?"+q.Encode(), nil, &out)
	return out, err
}

func (o onlineRates) reset(key, limit string) (resetResult, error) {
	var out resetResult
	err := o.c.do("POST", "/v1/rate/reset?"+url.Values{"key": {key}, "limit": {limit}}.Encode(), nil, &out)
	return out, err
}

func (onlineRates) close() error { return nil }

// offlineRates opens the daemon's BoltDB file itself (no daemon running).
type offlineRates struct {
	eng    *policy.Engine
	close_ func() error
}

func (o *offlineRates) lookup(key string) ([]policy.KeyRate, error) {
	return o.eng.Lookup(context.Background(), time.Now(), key)
}

func (o *offlineRates) list(top int, over bool) ([]policy.KeyRate, error) {
	all, err := o.eng.All(context.Background(), time.Now())
	return topRates(all, top, over), err
}

func (o *offlineRates) reset(key, limit string) (resetResult, error) {
	n, err := o.eng.Reset(context.Background(), key, limit)
	if errors.Is(err, policy.ErrUnknownLimit) {
		err = fmt.Errorf("no limit named %q", limit)
	}
	return resetResult{Key: key, Limit: limit, Removed: n}, err
}

func (o *offlineRates) close() error { return o.close_() }

// openRates connects to the daemon, or opens its state file when it is not
// running: read-only (shared lock, nothing written, not even decayed
// states deleted) unless write is set (rate reset).
func openRates(opts *rootOptions, write bool) (rateBackend, *config.File, error) {
	f, err := config.Load(opts.configPath)
	if err != nil {
		return nil, nil, err
	}
	c := newAdminClient(f.Server.AdminSocket)
	var st Status
	err = c.do("GET", "/v1/status", nil, &st)
	if err == nil {
		return onlineRates{c}, f, nil
	}
	if !errors.Is(err, errNoDaemon) {
		return nil, nil, err
	}
	if f.Store.Redis() {
		b, err := openRedisRates(f)
		return b, f, err
	}
	o, err := openOfflineMode(f, !write)
	if err != nil {
		return nil, nil, err
	}
	return &offlineRates{eng: o.engine, close_: o.close}, f, nil
}

func newRateCmd(opts *rootOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rate",
		Short: "Show, list and reset senders' measured rates",
		Long: `Inspect and reset the rates ratelimitd has measured. KEY is a rate key
value as it appears in the logs: a SASL user name ("alice"), a sender
address, a client address or subnet ("192.0.2.0/24"), or several values
joined by "|" for combined keys.

The commands talk to the running daemon through its admin socket
(server.admin_socket); when no daemon runs they open the state file
(STATE_DIR/ratelimitd.db) directly.`,
	}
	var asJSON bool
	show := &cobra.Command{
		Use:   "show KEY",
		Short: "Print each limit's current rate for KEY and when it is allowed again",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, _, err := openRates(opts, false)
			if err != nil {
				return err
			}
			defer b.close()
			kr, err := b.lookup(args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), rateRows(kr))
			}
			if len(kr) == 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "%s: no rate recorded (never seen, reset, or decayed away)\n", args[0])
				return nil
			}
			printRates(cmd.OutOrStdout(), kr)
			return nil
		},
	}
	show.Flags().BoolVar(&asJSON, "json", false, "print a JSON array, one object per limit")
	var top int
	var over bool
	var domain string
	list := &cobra.Command{
		Use:   "list",
		Short: "List the keys closest to or over their limits",
		Long: `List the keys closest to or over their limits, nearest first. With
--domain D only keys of that mail domain: SASL user names and addresses
ending in "@D" (also as the first part of a combined key), and sender or
recipient domain keys equal to D.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			b, _, err := openRates(opts, false)
			if err != nil {
				return err
			}
			defer b.close()
			n := top
			if domain != "" {
				n = 0 // filter first, then keep the top
			}
			kr, err := b.list(n, over)
			if err != nil {
				return err
			}
			if domain != "" {
				kr = ofDomain(kr, domain)
				if top > 0 && len(kr) > top {
					kr = kr[:top]
				}
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), rateRows(kr))
			}
			printRates(cmd.OutOrStdout(), kr)
			return nil
		},
	}
	list.Flags().IntVar(&top, "top", 20, "show at most N keys (0 = all)")
	list.Flags().BoolVar(&over, "over", false, "show only keys whose next message would be refused")
	list.Flags().StringVar(&domain, "domain", "", "show only the users and addresses of this domain (e.g. example.org)")
	list.Flags().BoolVar(&asJSON, "json", false, "print a JSON array, one object per key and limit")
	var limit string
	reset := &cobra.Command{
		Use:   "reset KEY",
		Short: "Forget KEY's rate (e.g. after a legitimate newsletter)",
		Long: `Forget the measured rate of KEY under every limit, or only under
--limit NAME, so the sender may send again at once. The daemon logs the
reset with the local user who asked.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, f, err := openRates(opts, true)
			if err != nil {
				return err
			}
			res, err := b.reset(args[0], limit)
			if cerr := b.close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
			if _, offline := b.(*offlineRates); offline {
				// No daemon to send the audit event: send it from here.
				e := notify.Event{Kind: notify.RateReset, Key: args[0], Limit: limit, Count: res.Removed, By: cliUser()}
				if err := notifyOffline(f.Notify, e); err != nil {
					fmt.Fprintf(cmd.ErrOrStderr(), "warning: rate_reset notification not sent: %v\n", err)
				}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: rate reset (%d limit states removed)\n", args[0], res.Removed)
			return nil
		},
	}
	reset.Flags().StringVar(&limit, "limit", "", "reset only this limit")
	cmd.AddCommand(show, list, reset)
	return cmd
}

func printRates(w io.Writer, kr []policy.KeyRate) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tLIMIT\tRATE\tMAX\tPERIOD\tSTATUS")
	for _, k := range kr {
		status := "ok"
		switch {
		case k.Over:
			status = "over: allowed again in " + policy.FormatDuration(k.RetryAfter.Round(time.Second))
		case k.Refusing:
			status = "at limit: allowed again in " + policy.FormatDuration(k.RetryAfter.Round(time.Second))
		}
		maxText := formatRate(k.Max)
		if k.Baseline {
			maxText = strconv.FormatFloat(k.Max, 'f', 1, 64)
			status += fmt.Sprintf(" (baseline: learned peak %.1f, max is the allowance, cap %s)", k.Peak, formatRate(k.Cap))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", k.Key, k.Limit, formatRate(k.Rate), maxText, policy.FormatDuration(k.Period), status)
	}
	tw.Flush()
}

// formatRate prints a rate for people: whole numbers without decimals
// (199.97 is "200"), others with one ("12.3"), never an exponent.
func formatRate(f float64) string {
	r := math.Round(f*10) / 10
	if r == math.Trunc(r) {
		return strconv.FormatFloat(r, 'f', 0, 64)
	}
	return strconv.FormatFloat(r, 'f', 1, 64)
}

// rateRow is one line of `rate show/list --json`.
type rateRow struct {
	Key               string  `json:"key"`
	Limit             string  `json:"limit"`
	Rate              float64 `json:"rate"`
	Max               float64 `json:"max"`
	Period            string  `json:"period"`
	PeriodSeconds     float64 `json:"period_seconds"`
	Over              bool    `json:"over"`
	Refusing          bool    `json:"refusing"`
	RetryAfterSeconds float64 `json:"retry_after_seconds"`
}

func rateRows(kr []policy.KeyRate) []rateRow {
	out := make([]rateRow, len(kr))
	for i, k := range kr {
		out[i] = rateRow{Key: k.Key, Limit: k.Limit, Rate: math.Round(k.Rate*100) / 100, Max: k.Max,
			Period: policy.FormatDuration(k.Period), PeriodSeconds: k.Period.Seconds(), Over: k.Over, Refusing: k.Refusing,
			RetryAfterSeconds: math.Ceil(k.RetryAfter.Seconds())}
	}
	return out
}

// ofDomain keeps the keys of mail domain d (see `rate list --help`).
func ofDomain(kr []policy.KeyRate, d string) []policy.KeyRate {
	d = strings.ToLower(strings.TrimPrefix(d, "@"))
	out := kr[:0:0]
	for _, k := range kr {
		first, _, _ := strings.Cut(strings.ToLower(k.Key), "|")
		if strings.HasSuffix(first, "@"+d) || first == d {
			out = append(out, k)
		}
	}
	return out
}

// printJSON writes v as indented JSON and a newline.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func newStatusCmd(opts *rootOptions) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Print the running daemon's uptime, listeners, keys and counters",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := config.Load(opts.configPath)
			if err != nil {
				return err
			}
			var st Status
			if err := newAdminClient(f.Server.AdminSocket).do("GET", "/v1/status", nil, &st); err != nil {
				if errors.Is(err, errNoDaemon) {
					return fmt.Errorf("%w (no answer on %s)", err, f.Server.AdminSocket)
				}
				return err
			}
			w := cmd.OutOrStdout()
			if asJSON {
				return printJSON(w, st)
			}
			fmt.Fprintf(w, "ratelimitd %s, up %s (since %s)\n", st.Version, st.Uptime, st.Started.Format(time.RFC3339))
			fmt.Fprintf(w, "config: %s\n", st.Config)
			if len(st.RestartNeeded) > 0 {
				fmt.Fprintf(w, "restart needed to apply: %s\n", strings.Join(st.RestartNeeded, ", "))
			}
			for _, l := range st.Listeners {
				fmt.Fprintf(w, "listening: %s\n", l)
			}
			for _, l := range st.Limits {
				fmt.Fprintf(w, "limit %s\n", l)
			}
			printStoreStatus(w, st.Store)
			fmt.Fprintf(w, "tracked keys: %d\nrequests: %d\n", st.TrackedKeys, st.Requests)
			for a := range numActions {
				name := policy.Action(a).String()
				fmt.Fprintf(w, "  %-7s %d\n", name, st.ByAction[name])
			}
			fmt.Fprintf(w, "faults (answered DUNNO): %d\nbad input (connections closed): %d\n", st.Faults, st.BadInput)
			if len(st.Stages) == 0 {
				fmt.Fprintf(w, "asked at: nothing yet\n")
			}
			for _, sc := range st.Stages {
				fmt.Fprintf(w, "asked at: %s %s (%d requests)\n", sc.Via, sc.State, sc.Requests)
			}
			fmt.Fprintf(w, "messages in flight: %d\n", st.MessagesInFlight)
			for _, a := range st.Advice {
				fmt.Fprintf(w, "warning: %s\n", a)
			}
			fmt.Fprintf(w, "connections: %d open of max %d, %d closed at the cap\n", st.Connections.Open, st.Connections.Max, st.Connections.Refused)
			if n := st.Notify; n != nil {
				fmt.Fprintf(w, "notifications: %d sent, %d failed, %d dropped (queue full), %d waiting\n", n.Sent, n.Failed, n.Dropped, n.Waiting)
			}
			if q := st.Quarantine; q != nil {
				fmt.Fprintf(w, "quarantine: %d held, %d frozen, %d kept past max_age, %d keys suspended, %d failures\n",
					q.Held, q.Frozen, q.KeptPastMaxAge, q.Suspended, q.Failures)
				if q.LastError != "" {
					fmt.Fprintf(w, "quarantine last error (%s): %s\n", q.LastErrorAt.Format(time.RFC3339), quarantine.CleanLine(q.LastError))
				}
			}
			if st.State != nil {
				st.State.print(w)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the status as a JSON object")
	return cmd
}
