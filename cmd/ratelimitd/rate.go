package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/ratelimitd/ratelimitd/admin"
	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/internal/cliout"
	"github.com/ratelimitd/ratelimitd/internal/daemon"
	"github.com/ratelimitd/ratelimitd/internal/plural"
	"github.com/ratelimitd/ratelimitd/internal/termsafe"
	"github.com/ratelimitd/ratelimitd/notify"
	"github.com/ratelimitd/ratelimitd/policy"
)

// readRates opens the rates read-only when no daemon runs (daemon.OpenRates).
func readRates(f *config.File) (*admin.Local, error) { return daemon.OpenRates(f, false) }

func newRateCmd(opts *rootOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rate",
		Short: "Show, list and reset senders' measured rates",
		Long:  helpText("rate"),
	}
	cmd.AddCommand(newRateShowCmd(opts), newRateListCmd(opts), newRateResetCmd(opts))
	return cmd
}

func newRateShowCmd(opts *rootOptions) *cobra.Command {
	var asJSON bool
	show := &cobra.Command{
		Use:   "show KEY",
		Short: "Print each limit's current rate for KEY, when it is allowed again and which limit answers its next message",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			kr, err := ask(opts, readRates, func(b admin.Backend) ([]policy.KeyRate, error) { return b.Rate(cmd.Context(), args[0]) })
			if err != nil {
				return err
			}
			if asJSON {
				return cliout.JSONList(cmd.OutOrStdout(), cliout.RateRows(kr))
			}
			if len(kr) == 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "%s: no rate recorded (never seen, reset, or decayed away)\n", args[0])
				return nil
			}
			cliout.Rates(cmd.OutOrStdout(), kr)
			if line := admin.AnswerLine(kr); line != "" {
				fmt.Fprintf(cmd.OutOrStdout(), "next message: %s\n", termsafe.Line(line))
			}
			return nil
		},
	}
	show.Flags().BoolVar(&asJSON, "json", false, "print a JSON array, one object per limit")
	return show
}

func newRateListCmd(opts *rootOptions) *cobra.Command {
	var asJSON bool
	var top int
	var over bool
	var domain string
	list := &cobra.Command{
		Use:   "list",
		Short: "List the keys closest to or over their limits",
		Long:  helpText("rate list"),
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			n := top
			if domain != "" {
				n = 0 // filter first, then keep the top
			}
			kr, err := ask(opts, readRates, func(b admin.Backend) ([]policy.KeyRate, error) { return b.Rates(cmd.Context(), n, over) })
			if err != nil {
				return err
			}
			if domain != "" {
				kr = admin.OfDomain(kr, domain)
				if top > 0 && len(kr) > top {
					kr = kr[:top]
				}
			}
			if asJSON {
				return cliout.JSONList(cmd.OutOrStdout(), cliout.RateRows(kr))
			}
			cliout.Rates(cmd.OutOrStdout(), kr)
			return nil
		},
	}
	list.Flags().IntVar(&top, "top", 20, "show at most N keys (0 = all)")
	list.Flags().BoolVar(&over, "over", false, "show only keys whose next message would be refused")
	list.Flags().StringVar(&domain, "domain", "", "show only the users and addresses of this domain (e.g. example.org)")
	list.Flags().BoolVar(&asJSON, "json", false, "print a JSON array, one object per key and limit")
	return list
}

func newRateResetCmd(opts *rootOptions) *cobra.Command {
	var limit string
	reset := &cobra.Command{
		Use:   "reset KEY",
		Short: "Forget KEY's rate (e.g. after a legitimate newsletter)",
		Long:  helpText("rate reset"),
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var res admin.ResetResult
			var f *config.File
			offline := false
			write := func(f *config.File) (*admin.Local, error) { return daemon.OpenRates(f, true) }
			if err := withBackend(opts, write, func(b admin.Backend, cf *config.File) (err error) {
				_, offline = b.(*admin.Local)
				f = cf
				res, err = b.Reset(cmd.Context(), args[0], limit)
				return err
			}); err != nil {
				return err
			}
			if res.Removed == 0 {
				what := "no rate recorded"
				if limit != "" {
					what += " under limit " + limit
				}
				return fmt.Errorf("%s: %s (never seen, already reset, or decayed away): nothing reset; `ratelimitd rate list` shows the keys",
					termsafe.Line(args[0]), what)
			}
			if offline {
				// No daemon to send the audit event: send it from here.
				e := notify.Event{Kind: notify.RateReset, Key: args[0], Limit: limit, Count: res.Removed, By: admin.LocalUser()}
				if err := daemon.NotifyOffline(f.Notify, e); err != nil {
					fmt.Fprintf(cmd.ErrOrStderr(), "warning: rate_reset notification not sent: %v\n", err)
				}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: rate reset (%s removed)\n", args[0], plural.N(res.Removed, "limit state"))
			return nil
		},
	}
	reset.Flags().StringVar(&limit, "limit", "", "reset only this limit")
	return reset
}
