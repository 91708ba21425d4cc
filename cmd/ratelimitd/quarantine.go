package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/ratelimitd/ratelimitd/admin"
	"github.com/ratelimitd/ratelimitd/internal/cliout"
	"github.com/ratelimitd/ratelimitd/internal/daemon"
	"github.com/ratelimitd/ratelimitd/quarantine"
	"github.com/ratelimitd/ratelimitd/quarantine/lifecycle"
)

func newQuarantineCmd(opts *rootOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "quarantine",
		Aliases: []string{"q"},
		Short:   "Review, thaw and delete held and frozen mail",
		Long:    helpText("quarantine"),
	}
	cmd.AddCommand(newQuarantineListCmd(opts), newQuarantineShowCmd(opts), newQuarantineThawCmd(opts),
		newQuarantineDeleteCmd(opts), newQuarantineSuspendCmd(opts, false), newQuarantineSuspendCmd(opts, true))
	return cmd
}

func newQuarantineListCmd(opts *rootOptions) *cobra.Command {
	var lq admin.ListQuery
	var asJSON bool
	list := &cobra.Command{
		Use:   "list",
		Short: "List quarantined messages (newest first)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			es, err := ask(opts, daemon.OpenQuarantine, func(b admin.Backend) ([]quarantine.Entry, error) { return b.List(cmd.Context(), lq) })
			return printList(cmd.OutOrStdout(), asJSON, es, err, cliout.Entries)
		},
	}
	list.Flags().StringVar(&lq.Sender, "sender", "", "only this envelope sender")
	list.Flags().StringVar(&lq.Key, "key", "", "only this rate key (e.g. the SASL user)")
	list.Flags().StringVar(&lq.Limit, "limit", "", "only messages stopped by this limit")
	list.Flags().StringVar(&lq.State, "state", "", "held, frozen, thawed, deleted (comma-separated); default held and frozen")
	list.Flags().DurationVar(&lq.Since, "since", 0, "only messages quarantined within this long (e.g. 2h)")
	list.Flags().BoolVar(&asJSON, "json", false, "print a JSON array, one object per message")
	return list
}

func newQuarantineShowCmd(opts *rootOptions) *cobra.Command {
	var raw, showJSON bool
	show := &cobra.Command{
		Use:   "show ID",
		Short: "Show a message: envelope, decision, headers and a text preview",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			res, err := ask(opts, daemon.OpenQuarantine, func(b admin.Backend) (admin.ShowResult, error) { return b.Show(cmd.Context(), args[0], raw) })
			if err != nil {
				return err
			}
			if showJSON {
				return cliout.JSON(cmd.OutOrStdout(), res)
			}
			cliout.Show(cmd.OutOrStdout(), res, raw)
			return nil
		},
	}
	show.Flags().BoolVar(&raw, "raw", false, "print the stored message bytes (frozen) or the MTA's queue file (held)")
	show.Flags().BoolVar(&showJSON, "json", false, "print a JSON object: the entry, the preview (or --raw bytes) as body, and any error")
	return show
}

func newQuarantineThawCmd(opts *rootOptions) *cobra.Command {
	var sel lifecycle.Selection
	thaw := &cobra.Command{
		Use:   "thaw [ID...] [--sender S | --key K] [--reset-rate] [--force]",
		Short: "Release held or frozen messages for delivery",
		Long:  helpText("quarantine thaw"),
		RunE: func(cmd *cobra.Command, args []string) error {
			sel.IDs = args
			if err := needSelection(cmd, sel); err != nil {
				return err
			}
			return runAction(cmd, opts, "thaw", sel)
		},
	}
	thaw.Flags().StringVar(&sel.Sender, "sender", "", "every held/frozen message from this envelope sender")
	thaw.Flags().StringVar(&sel.Key, "key", "", "every held/frozen message of this rate key")
	thaw.Flags().BoolVar(&sel.ResetRate, "reset-rate", false, "also reset the rate of the keys involved")
	thaw.Flags().BoolVar(&sel.Again, "again", false, "re-inject thawed frozen messages (IDs) once more from the body kept for keep_thawed, e.g. after a thaw went to the wrong listener")
	thaw.Flags().BoolVar(&sel.Force, "force", false, "also re-inject frozen messages whose last thaw was interrupted (they may be delivered twice)")
	return thaw
}

func newQuarantineDeleteCmd(opts *rootOptions) *cobra.Command {
	var dsel lifecycle.Selection
	var yes bool
	del := &cobra.Command{
		Use:   "delete [ID...] [--sender S | --key K | --older-than D] [--yes]",
		Short: "Delete held or frozen messages (held ones from the MTA too)",
		Long:  helpText("quarantine delete"),
		RunE: func(cmd *cobra.Command, args []string) error {
			dsel.IDs = args
			if err := needSelection(cmd, dsel); err != nil {
				return err
			}
			if !yes {
				if err := confirmDelete(cmd, opts, dsel); err != nil {
					return err
				}
			}
			return runAction(cmd, opts, "delete", dsel)
		},
	}
	del.Flags().StringVar(&dsel.Sender, "sender", "", "every held/frozen message from this envelope sender")
	del.Flags().StringVar(&dsel.Key, "key", "", "every held/frozen message of this rate key")
	del.Flags().DurationVar(&dsel.OlderThan, "older-than", 0, "every held/frozen message quarantined longer ago than this")
	del.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation")
	del.Flags().BoolVar(&dsel.Force, "force", false, "also delete frozen messages whose last thaw was interrupted, and forget held entries whose queue ID the MTA's hold queue does not confirm (without touching the MTA's queue)")
	return del
}

// newQuarantineSuspendCmd is `quarantine suspend KEY`, or with resume set
// `quarantine resume KEY`.
func newQuarantineSuspendCmd(opts *rootOptions, resume bool) *cobra.Command {
	use, short := "suspend KEY", "Stop automatic release (auto_release = \"drip\") of a key's held and frozen mail"
	if resume {
		use, short = "resume KEY", "Allow automatic release of a key's held and frozen mail again"
	}
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			res, err := ask(opts, daemon.OpenQuarantine, func(b admin.Backend) (admin.SuspendResult, error) {
				return b.Suspend(cmd.Context(), args[0], resume)
			})
			if err != nil {
				return err
			}
			cliout.Suspended(cmd.OutOrStdout(), res, resume)
			return nil
		},
	}
}

func runAction(cmd *cobra.Command, opts *rootOptions, op string, sel lifecycle.Selection) error {
	out, err := ask(opts, daemon.OpenQuarantine, func(b admin.Backend) ([]lifecycle.Outcome, error) {
		return b.Act(cmd.Context(), op == "thaw", sel)
	})
	if err != nil {
		return err
	}
	return cliout.Outcomes(cmd.OutOrStdout(), op, sel, out)
}

// needSelection refuses a thaw or delete that names nothing.
func needSelection(cmd *cobra.Command, sel lifecycle.Selection) error {
	if len(sel.IDs) > 0 || sel.Sender != "" || sel.Key != "" || sel.OlderThan > 0 {
		return nil
	}
	flags := "--sender ADDRESS, --key KEY"
	if cmd.Flags().Lookup("older-than") != nil {
		flags += ", --older-than DURATION"
	}
	return usageError{fmt.Errorf("name the messages to %s: IDs (see ratelimitd quarantine list) or %s", cmd.Name(), flags)}
}

// confirmDelete asks on stdin before a delete of more than one message.
func confirmDelete(cmd *cobra.Command, opts *rootOptions, sel lifecycle.Selection) error {
	n := len(sel.IDs)
	if n == 0 {
		var err error
		n, err = ask(opts, daemon.OpenQuarantine, func(b admin.Backend) (int, error) { return admin.CountSelected(cmd.Context(), b, sel) })
		if err != nil {
			return err
		}
	}
	if n <= 1 {
		return nil
	}
	if cliout.Confirm(cmd.InOrStdin(), cmd.OutOrStdout(), fmt.Sprintf("Delete %d messages?", n)) {
		return nil
	}
	return fmt.Errorf("nothing deleted: %d messages selected and not confirmed (answer y, or add --yes)", n)
}
