package main

import (
	"github.com/spf13/cobra"

	"github.com/ratelimitd/ratelimitd/config"
)

// newConfigReferenceCmd is `ratelimitd config reference`: the Markdown
// reference of every configuration key, committed as docs/configuration.md.
func newConfigReferenceCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "reference",
		Short: "Print every configuration key (Markdown: docs/configuration.md)",
		Long:  helpText("config reference"),
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return config.WriteReference(cmd.OutOrStdout())
		},
	}
}
