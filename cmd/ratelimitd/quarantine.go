package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ratelimitd/ratelimitd/admin"
	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/internal/daemon"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/quarantine"
	"github.com/ratelimitd/ratelimitd/quarantine/lifecycle"
)

// withQuarantine opens the quarantine of the running daemon, or of the
// state file when none runs, runs fn on it and closes it; it returns fn's
// error, else the error of closing.
func withQuarantine(opts *rootOptions, fn func(admin.Backend) error) error {
	f, err := config.Load(opts.configPath)
	if err != nil {
		return err
	}
	b, err := admin.Open(f.Server.AdminSocket, func() (admin.Backend, error) { return daemon.OpenQuarantine(f) })
	if err != nil {
		return err
	}
	err = fn(b)
	if cerr := b.Close(); err == nil {
		err = cerr
	}
	return err
}

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
			var es []quarantine.Entry
			if err := withQuarantine(opts, func(b admin.Backend) (err error) {
				es, err = b.List(lq)
				return err
			}); err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				for _, e := range es {
					if err := enc.Encode(e); err != nil {
						return err
					}
				}
				return nil
			}
			printEntries(cmd.OutOrStdout(), es)
			return nil
		},
	}
	list.Flags().StringVar(&lq.Sender, "sender", "", "only this envelope sender")
	list.Flags().StringVar(&lq.Key, "key", "", "only this rate key (e.g. the SASL user)")
	list.Flags().StringVar(&lq.Limit, "limit", "", "only messages stopped by this limit")
	list.Flags().StringVar(&lq.State, "state", "", "held, frozen, thawed, deleted (comma-separated); default held and frozen")
	list.Flags().DurationVar(&lq.Since, "since", 0, "only messages quarantined within this long (e.g. 2h)")
	list.Flags().BoolVar(&asJSON, "json", false, "print JSON Lines")

	return list
}

func newQuarantineShowCmd(opts *rootOptions) *cobra.Command {
	var raw, showJSON bool
	show := &cobra.Command{
		Use:   "show ID",
		Short: "Show a message: envelope, decision, headers and a text preview",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var res admin.ShowResult
			if err := withQuarantine(opts, func(b admin.Backend) (err error) {
				res, err = b.Show(args[0], raw)
				return err
			}); err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if showJSON {
				return printJSON(w, res)
			}
			if raw {
				io.WriteString(w, res.Body)
				return nil
			}
			res.Entry.WriteTo(w)
			fmt.Fprintln(w)
			// Held mail is shown by the MTA (postcat): its output is
			// message content and is cleaned like our own preview.
			io.WriteString(w, quarantine.CleanText(res.Body))
			if res.Error != "" {
				fmt.Fprintf(w, "\n(content unavailable: %s)\n", quarantine.CleanLine(res.Error))
			}
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
	del.Flags().BoolVar(&dsel.Force, "force", false, "also delete frozen messages whose last thaw was interrupted")
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
			var res admin.SuspendResult
			if err := withQuarantine(opts, func(b admin.Backend) (err error) {
				res, err = b.Suspend(args[0], resume)
				return err
			}); err != nil {
				return err
			}
			key := quarantine.CleanLine(res.Key)
			switch {
			case !resume:
				fmt.Fprintf(cmd.OutOrStdout(), "%s: automatic release suspended\n", key)
			case res.Was:
				fmt.Fprintf(cmd.OutOrStdout(), "%s: automatic release resumed\n", key)
			default:
				fmt.Fprintf(cmd.OutOrStdout(), "%s: was not suspended\n", key)
			}
			return nil
		},
	}
}

func runAction(cmd *cobra.Command, opts *rootOptions, op string, sel lifecycle.Selection) error {
	var out []lifecycle.Outcome
	if err := withQuarantine(opts, func(b admin.Backend) (err error) {
		if op == "thaw" {
			out, err = b.Thaw(sel)
		} else {
			out, err = b.Delete(sel)
		}
		return err
	}); err != nil {
		return err
	}
	done := strings.TrimSuffix(op, "e") + "ed" // thawed, deleted
	failed := 0
	for _, o := range out {
		id, sender := quarantine.CleanLine(o.ID), quarantine.CleanLine(o.Sender)
		if o.OK {
			note := ""
			if o.Note != "" {
				note = " (" + quarantine.CleanLine(o.Note) + ")"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s: %s%s\n", id, sender, done, note)
		} else {
			failed++
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s: FAILED: %s\n", id, sender, quarantine.CleanLine(o.Error))
		}
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%d %s, %d failed\n", len(out)-failed, done, failed)
	if failed > 0 {
		return fmt.Errorf("%d of %d messages could not be %s", failed, len(out), done)
	}
	return nil
}

// needSelection refuses a thaw or delete that names nothing, naming the
// selection flags the command has.
func needSelection(cmd *cobra.Command, sel lifecycle.Selection) error {
	if len(sel.IDs) > 0 || sel.Sender != "" || sel.Key != "" || sel.OlderThan > 0 {
		return nil
	}
	var flags []string
	for _, f := range []string{"sender ADDRESS", "key KEY", "older-than DURATION"} {
		if cmd.Flags().Lookup(strings.Fields(f)[0]) != nil {
			flags = append(flags, "--"+f)
		}
	}
	return usageError{fmt.Errorf("name the messages to %s: IDs (see ratelimitd quarantine list) or %s", cmd.Name(), strings.Join(flags, ", "))}
}

// confirmDelete counts the messages a delete would select and, when there
// is more than one, asks on standard input; anything but "y" or "yes"
// (including end of input) cancels.
func confirmDelete(cmd *cobra.Command, opts *rootOptions, sel lifecycle.Selection) error {
	n := len(sel.IDs)
	if n == 0 {
		var es []quarantine.Entry
		if err := withQuarantine(opts, func(b admin.Backend) (err error) {
			es, err = b.List(admin.ListQuery{Sender: sel.Sender, Key: sel.Key})
			return err
		}); err != nil {
			return err
		}
		for _, e := range es {
			if sel.OlderThan <= 0 || time.Since(e.Created) > sel.OlderThan {
				n++
			}
		}
	}
	if n <= 1 {
		return nil
	}
	fmt.Fprintf(cmd.OutOrStdout(), "Delete %d messages? [y/N] ", n)
	answer, _ := bufio.NewReader(cmd.InOrStdin()).ReadString('\n')
	if a := strings.ToLower(strings.TrimSpace(answer)); a == "y" || a == "yes" {
		return nil
	}
	fmt.Fprintln(cmd.OutOrStdout())
	return fmt.Errorf("nothing deleted: %d messages selected and not confirmed (answer y, or add --yes)", n)
}

func printEntries(w io.Writer, es []quarantine.Entry) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tQUEUE_ID\tAGE\tSENDER\tRCPTS\tSIZE\tLIMIT\tSUBJECT")
	now := time.Now()
	for _, e := range es {
		subj := []rune(quarantine.CleanLine(e.Subject))
		if len(subj) > 60 {
			subj = append(subj[:57], []rune("...")...)
		}
		sender := quarantine.CleanLine(e.Sender)
		if sender == "" {
			sender = "<>"
		}
		qid := quarantine.CleanLine(e.QueueID)
		if qid == "" {
			qid = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", quarantine.CleanLine(e.ID), e.State, qid, policy.FormatDuration(now.Sub(e.Created).Round(time.Second)),
			sender, len(e.Recipients), e.Size, quarantine.CleanLine(e.Limit), string(subj))
	}
	tw.Flush()
	fmt.Fprintf(w, "%d messages\n", len(es))
}
