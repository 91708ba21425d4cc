package daemon

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/ratelimitd/ratelimitd/config"
)

// Serve runs the daemon of f: opens the log file, starts the daemon,
// writes the pid file, reopens the log and reloads on SIGHUP, shuts down
// (10 s to finish) on SIGTERM or SIGINT. The error that ends it is also
// logged to the log file.
func Serve(f *config.File, configPath string, files *Files, opts Options, stderr io.Writer) (err error) {
	defer files.Close()
	defer func() {
		if err != nil {
			files.LogFatal(f.Server.LogFormat, "ratelimitd stopped on an error", err)
		}
	}()
	if files.owner, err = lookupRunAs(f.Server); err != nil {
		return err
	}
	logw, err := files.Writer(stderr)
	if err != nil {
		return err
	}
	// Caught before Start: a SIGTERM while starting waits here and shuts
	// the daemon down cleanly, the write-behind state flushed.
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sig)
	d, err := Start(f, configPath, logw, opts)
	if err != nil {
		return err
	}
	if err := files.WritePid(); err != nil {
		d.Shutdown(context.Background())
		return err
	}
	for s := range sig {
		if s == syscall.SIGHUP {
			if err := files.Reopen(); err != nil {
				d.log.Error("reopening the log file", "err", err)
			}
			d.Reload()
			continue
		}
		d.log.Info("shutting down", "signal", s.String())
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := d.Shutdown(ctx)
		cancel()
		return err
	}
	return nil
}
