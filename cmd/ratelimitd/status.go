package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/ratelimitd/ratelimitd/admin"
	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/internal/cliout"
	"github.com/ratelimitd/ratelimitd/internal/daemon"
	"github.com/ratelimitd/ratelimitd/ratestore"
	"github.com/ratelimitd/ratelimitd/statedb"
)

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
			st, err := admin.NewClient(f.Server.AdminSocket).Status(cmd.Context())
			if err != nil {
				if errors.Is(err, admin.ErrNoDaemon) {
					return fmt.Errorf("%w (no answer on %s)", err, f.Server.AdminSocket)
				}
				return err
			}
			if asJSON {
				return cliout.JSON(cmd.OutOrStdout(), st)
			}
			st.Print(cmd.OutOrStdout())
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the status as a JSON object")
	return cmd
}

func newStateCmd(opts *rootOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "state",
		Short: "Inspect the daemon's state file (BoltDB)",
	}
	var salvage string
	check := &cobra.Command{
		Use:   "check",
		Short: "Check the state file and report what is readable",
		Long:  helpText("state check"),
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := config.Load(opts.configPath)
			if err != nil {
				return err
			}
			err = statedb.Check(cmd.OutOrStdout(), f.Server.DBPath(), daemon.StateFormats(), daemon.InspectState(f))
			if salvage != "" && (err == nil || errors.Is(err, ratestore.ErrDamaged)) {
				if serr := statedb.Salvage(cmd.OutOrStdout(), f.Server.DBPath(), salvage, daemon.StateFormats()); serr != nil {
					return errors.Join(err, serr)
				}
			}
			return err
		},
	}
	check.Flags().StringVar(&salvage, "salvage", "", "copy every readable bucket and record into a new state file at this path")
	cmd.AddCommand(check)
	return cmd
}
