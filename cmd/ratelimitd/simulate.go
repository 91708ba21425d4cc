package main

import (
	"errors"

	"github.com/spf13/cobra"
)

func newSimulateCmd(opts *rootOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "simulate TRACE",
		Short: "Replay a trace of policy requests through the configured limits",
		RunE: func(cmd *cobra.Command, args []string) error {
			return errors.New("not implemented yet")
		},
	}
}
