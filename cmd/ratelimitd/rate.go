package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ratelimitd/ratelimitd/admin"
	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/internal/daemon"
	"github.com/ratelimitd/ratelimitd/notify"
	"github.com/ratelimitd/ratelimitd/policy"
)

// openRates connects to the daemon, or opens its state file when it is not
// running: read-only (shared lock, nothing written, not even decayed
// states deleted) unless write is set (rate reset).
func openRates(opts *rootOptions, write bool) (admin.Backend, *config.File, error) {
	f, err := config.Load(opts.configPath)
	if err != nil {
		return nil, nil, err
	}
	b, err := admin.Open(f.Server.AdminSocket, func() (admin.Backend, error) { return daemon.OpenRates(f, write) })
	return b, f, err
}

func newRateCmd(opts *rootOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rate",
		Short: "Show, list and reset senders' measured rates",
		Long:  helpText("rate"),
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
			defer b.Close()
			kr, err := b.Rate(args[0])
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
		Long:  helpText("rate list"),
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			b, _, err := openRates(opts, false)
			if err != nil {
				return err
			}
			defer b.Close()
			n := top
			if domain != "" {
				n = 0 // filter first, then keep the top
			}
			kr, err := b.Rates(n, over)
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
		Long:  helpText("rate reset"),
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, f, err := openRates(opts, true)
			if err != nil {
				return err
			}
			res, err := b.Reset(args[0], limit)
			if cerr := b.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
			if _, offline := b.(*admin.Local); offline {
				// No daemon to send the audit event: send it from here.
				e := notify.Event{Kind: notify.RateReset, Key: args[0], Limit: limit, Count: res.Removed, By: admin.LocalUser()}
				if err := daemon.NotifyOffline(f.Notify, e); err != nil {
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
		maxText := admin.FormatRate(k.Max)
		if k.Baseline {
			maxText = strconv.FormatFloat(k.Max, 'f', 1, 64)
			status += fmt.Sprintf(" (baseline: learned peak %.1f, max is the allowance, cap %s)", k.Peak, admin.FormatRate(k.Cap))
		}
		if note := admin.ConversionNote(k); note != "" {
			status += "; " + note
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", k.Key, k.Limit, admin.FormatKeyRate(k), maxText, policy.FormatDuration(k.Period), status)
	}
	tw.Flush()
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
	// Converted says the state was converted from the limit's earlier
	// parameters (see policy.ConvertedView).
	Converted *convertedRow `json:"converted,omitempty"`
}

// convertedRow is rateRow's account of a converted state.
type convertedRow struct {
	From          string    `json:"from"`
	PeriodSeconds float64   `json:"from_period_seconds"`
	Algorithm     string    `json:"from_algorithm"`
	At            time.Time `json:"at"`
	Cause         string    `json:"cause"`
	// Rate is the key's rate now by the old parameters (rate show only).
	Rate float64 `json:"from_rate,omitempty"`
}

func rateRows(kr []policy.KeyRate) []rateRow {
	out := make([]rateRow, len(kr))
	for i, k := range kr {
		out[i] = rateRow{Key: k.Key, Limit: k.Limit, Rate: round2(k.Rate), Max: k.Max,
			Period: policy.FormatDuration(k.Period), PeriodSeconds: k.Period.Seconds(), Over: k.Over, Refusing: k.Refusing,
			RetryAfterSeconds: math.Ceil(k.RetryAfter.Seconds())}
		if c := k.Converted; c != nil {
			out[i].Converted = &convertedRow{From: c.From, PeriodSeconds: c.Period.Seconds(), Algorithm: c.Algorithm,
				At: c.At, Cause: c.Cause, Rate: round2(c.Rate)}
		}
	}
	return out
}

// round2 rounds x to two decimals, or returns it as it is when it has
// none to round (at 2^52 and above; x*100 would overflow to an infinity,
// which JSON cannot encode, for x near math.MaxFloat64).
func round2(x float64) float64 {
	if math.Abs(x) >= 1<<52 {
		return x
	}
	return math.Round(x*100) / 100
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
