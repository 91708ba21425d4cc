package main

import (
	"os"

	"github.com/spf13/cobra"
)

// rootOptions are the flags every subcommand shares.
type rootOptions struct {
	configPath string
}

func newRootCmd() *cobra.Command {
	opts := &rootOptions{}
	cmd := &cobra.Command{
		Use:   "ratelimitd",
		Short: "Rate limiting policy daemon for Postfix, Exim and milter MTAs",
		Long: `ratelimitd measures how fast each sender sends mail, using Exim's
exponentially weighted moving average, and applies stacked limits (for
example 200/hour plus 1000/day per authenticated user). Over a limit it
answers the MTA with a 450 4.7.1 defer, a 550 5.7.1 reject, a warning
header, or puts the message on hold / freezes it into a quarantine that
the postmaster reviews with "ratelimitd quarantine".

It speaks Postfix's policy delegation protocol (check_policy_service in
smtpd_recipient_restrictions and smtpd_end_of_data_restrictions), which
Exim can use through ${readsocket}, and the milter protocol.

Without --config the file named by $RATELIMITD_CONFIG is used, and without
either the embedded default configuration: 200/hour (leaky) and 1000/day
(strict) per SASL user, deferring with 450. The CLI commands (status, rate,
quarantine) read the configuration only to find the daemon's admin socket
and state directory, so give them the same file as "serve".`,
		SilenceUsage:  true,
		SilenceErrors: false,
	}
	cmd.PersistentFlags().StringVarP(&opts.configPath, "config", "c", os.Getenv("RATELIMITD_CONFIG"),
		"configuration file (TOML); empty means the embedded default")
	cmd.AddCommand(newConfigCmd(opts), newSimulateCmd(opts), newServeCmd(opts), newStatusCmd(opts), newRateCmd(opts), newQuarantineCmd(opts))
	return cmd
}
