package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/ratelimitd/ratelimitd/admin"
	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/internal/cliout"
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
