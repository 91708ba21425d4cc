package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/internal/daemon"
)

func newServeCmd(ropts *rootOptions) *cobra.Command {
	files := &serveFiles{}
	var opts daemon.Options
	c := &cobra.Command{
		Use:   "serve",
		Short: "Run the policy daemon",
		Long:  helpText("serve"),
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := config.Load(ropts.configPath)
			if err != nil {
				return reportConfigErrors(cmd.ErrOrStderr(), err)
			}
			logw, err := files.writer(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			defer files.close()
			d, err := daemon.StartWith(f, ropts.configPath, logw, opts)
			if err != nil {
				return err
			}
			if err := files.writePid(); err != nil {
				d.Shutdown(context.Background())
				return err
			}
			sig := make(chan os.Signal, 4)
			signal.Notify(sig, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT)
			defer signal.Stop(sig)
			for s := range sig {
				if s == syscall.SIGHUP {
					if err := files.reopen(); err != nil {
						d.Logger().Error("reopening the log file", "err", err)
					}
					d.Reload()
					continue
				}
				d.Logger().Info("shutting down", "signal", s.String())
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				err := d.Shutdown(ctx)
				cancel()
				return err
			}
			return nil
		},
	}
	files.addFlags(c)
	c.Flags().BoolVar(&opts.AcceptStateLoss, "accept-state-loss", false,
		"start on a state file with unreadable records, setting them aside (their keys start afresh; logged and counted)")
	return c
}
