package main

import (
	"errors"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/internal/daemon"
)

func newServeCmd(ropts *rootOptions) *cobra.Command {
	files := &daemon.Files{}
	var opts daemon.Options
	c := &cobra.Command{
		Use:   "serve",
		Short: "Run the policy daemon",
		Long:  helpText("serve"),
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := config.Load(ropts.configPath)
			if err != nil {
				// In the log file too: in the background there is no stderr.
				files.LogFatal("text", "ratelimitd not started: configuration is not valid",
					errors.New(strings.Join(config.ErrorLines(err), "; ")))
				return reportConfigErrors(cmd.ErrOrStderr(), err)
			}
			return daemon.Serve(f, ropts.configPath, files, opts, cmd.ErrOrStderr())
		},
	}
	c.Flags().StringVar(&files.LogPath, "log-file", "",
		"append the log to this file instead of standard error (mode 0640; SIGHUP reopens it, for logrotate)")
	c.Flags().StringVar(&files.PidPath, "pid-file", "",
		"write the process ID to this file once every listener is open; removed at exit")
	c.Flags().BoolVar(&opts.AcceptStateLoss, "accept-state-loss", false,
		"start on a state file with unreadable records, setting them aside (their keys start afresh; logged and counted)")
	return c
}
