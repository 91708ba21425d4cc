package main

import (
	"errors"

	"github.com/spf13/cobra"

	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/internal/daemon"
	"github.com/ratelimitd/ratelimitd/ratestore"
	"github.com/ratelimitd/ratelimitd/statedb"
)

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
