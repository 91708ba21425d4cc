package main

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ratelimitd/ratelimitd/internal/cliout"
	"github.com/ratelimitd/ratelimitd/internal/termsafe"
	"github.com/ratelimitd/ratelimitd/maillog"
	"github.com/ratelimitd/ratelimitd/simulate"
)

// maillogOptions are the mail log flags of trace from-maillog and suggest.
type maillogOptions struct {
	tz     string
	logEnd string
}

func (mo *maillogOptions) addFlags(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&mo.tz, "tz", "", "time `ZONE` of timestamps without an offset, e.g. Europe/Berlin (default: the local zone)")
	fl.StringVar(&mo.logEnd, "log-end", "", "date year-less syslog lines so that each file ends no later than `TIME` (RFC 3339; default: the file's modification time)")
}

// reader returns a Reader that has dated the logs at paths.
func (mo *maillogOptions) reader(paths []string) (*maillog.Reader, error) {
	opts := maillog.Options{}
	if mo.tz != "" {
		loc, err := time.LoadLocation(mo.tz)
		if err != nil {
			return nil, fmt.Errorf("--tz: %w", err)
		}
		opts.Location = loc
	}
	if mo.logEnd != "" {
		t, err := simulate.ParseTime(mo.logEnd)
		if err != nil {
			return nil, fmt.Errorf("--log-end: %w", err)
		}
		opts.End = t
	}
	r := maillog.NewReader(opts)
	for _, p := range paths {
		if err := r.ReadFile(p); err != nil {
			return nil, err
		}
	}
	return r, nil
}

func newTraceCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "trace",
		Short: "Make traces for simulate and suggest",
	}
	cmd.AddCommand(newTraceFromMaillogCmd())
	return cmd
}

func newTraceFromMaillogCmd() *cobra.Command {
	mo := &maillogOptions{}
	var output string
	cmd := &cobra.Command{
		Use:     "from-maillog [FILE...]",
		Short:   "Turn Postfix or Exim mail logs into a trace for simulate and suggest",
		Long:    helpText("trace from maillog"),
		Example: helpText("trace from maillog examples"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				p, err := maillog.FindLog(cmd.Context())
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "reading %s\n", p)
				args = []string{p}
			}
			r, err := mo.reader(args)
			if err != nil {
				return err
			}
			w, closeOut, err := cliout.Create(output, termsafe.Unwrap(cmd.OutOrStdout())) // a trace is data
			if err != nil {
				return err
			}
			err = r.StreamTrace(w, "ratelimitd trace from-maillog "+strings.Join(args, " "))
			if err = errors.Join(err, closeOut()); err != nil {
				return err
			}
			return r.Stats().WriteSummary(cmd.ErrOrStderr())
		},
	}
	mo.addFlags(cmd)
	cmd.Flags().StringVarP(&output, "output", "o", "", "write the trace to `FILE` instead of standard output")
	return cmd
}
