package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"

	"github.com/ratelimitd/ratelimitd/internal/daemon"
)

// newManCmd is the hidden `ratelimitd man DIR` of `make man`: a section 8
// page per command from its help (spf13/cobra/doc).
func newManCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "man DIR",
		Short:  "Write the manual pages (section 8) into DIR",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := os.MkdirAll(args[0], 0o755); err != nil {
				return err
			}
			root := cmd.Root()
			root.DisableAutoGenTag = true // reproducible pages
			err := doc.GenManTree(root, &doc.GenManHeader{Title: "RATELIMITD", Section: "8", Source: "ratelimitd " + daemon.ReleaseVersion(),
				Manual: "ratelimitd manual"}, args[0])
			if err != nil {
				return fmt.Errorf("writing manual pages: %w", err)
			}
			return nil
		},
	}
}
