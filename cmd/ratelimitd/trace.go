package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ratelimitd/ratelimitd/maillog"
	"github.com/ratelimitd/ratelimitd/simulate"
)

// maillogOptions are the flags that say how to read mail logs, shared by
// "trace from-maillog" and "suggest --maillog".
type maillogOptions struct {
	tz     string
	logEnd string
}

func (mo *maillogOptions) addFlags(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&mo.tz, "tz", "", "time `ZONE` of timestamps without an offset, e.g. Europe/Berlin (default: the local zone)")
	fl.StringVar(&mo.logEnd, "log-end", "", "date year-less syslog lines so that each file ends no later than `TIME` (RFC 3339; default: the file's modification time)")
}

// read reads the logs at paths and returns their messages and statistics.
func (mo *maillogOptions) read(paths []string) ([]maillog.Message, maillog.Stats, error) {
	opts := maillog.Options{}
	if mo.tz != "" {
		loc, err := time.LoadLocation(mo.tz)
		if err != nil {
			return nil, maillog.Stats{}, fmt.Errorf("--tz: %w", err)
		}
		opts.Location = loc
	}
	if mo.logEnd != "" {
		t, err := simulate.ParseTime(mo.logEnd)
		if err != nil {
			return nil, maillog.Stats{}, fmt.Errorf("--log-end: %w", err)
		}
		opts.End = t
	}
	r := maillog.NewReader(opts)
	for _, p := range paths {
		if err := r.ReadFile(p); err != nil {
			return nil, maillog.Stats{}, err
		}
	}
	msgs := r.Messages()
	return msgs, r.Stats(), nil
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
		Use:   "from-maillog FILE...",
		Short: "Turn Postfix or Exim mail logs into a trace for simulate and suggest",
		Long: `Read Postfix mail logs (syslog format, as Postfix's maillog_file,
rsyslog or syslog-ng write them) or Exim's mainlog and write the policy
requests the MTA would have made to ratelimitd as a JSON Lines trace for
"ratelimitd simulate" and "ratelimitd suggest".

Postfix lines are joined by host and queue ID: smtpd's client= (client
address, sasl_username), cleanup's message-id=, qmgr's from=, size= and
nrcpt=, and the delivery agents' to= (orig_to= when present). A message
that qmgr retried after a deferral is one message. Exim: the <= line (H=,
A=, U=, S=) and the recipient lines =>, ->, *>, ** and ==.

Give the files in any order: the current log, rotated ones (maillog.1) and
compressed ones (maillog.2.gz); "-" reads standard input. Several hosts
may log into one file. Classic syslog timestamps have no year: each file's
last line is put at or before its modification time (or --log-end), and a
year boundary is recognised where the month goes back (December →
January). Timestamps without an offset are in --tz (default: local time).

For every message the trace has one RCPT request per recipient, at the
time smtpd accepted the client, and one END-OF-MESSAGE request with
queue_id, size and recipient_count when it was queued. Mail that did not
arrive over SMTP (Postfix pickup, bounces) is left out: no smtpd asked a
policy service about it; so are messages rejected after they had a queue
ID. Messages put on hold and never released are kept (without a size).

Unparsable lines are counted, never fatal. A summary on standard error
says how many messages, recipients and senders were found, over what time
span, how many lines could not be parsed (with examples) and what was left
out.`,
		Example: `  ratelimitd trace from-maillog /var/log/mail.log /var/log/mail.log.1 /var/log/mail.log.*.gz > month.jsonl
  ratelimitd trace from-maillog --tz Europe/Berlin -o exim.jsonl /var/log/exim4/mainlog
  ratelimitd simulate --summary month.jsonl`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			msgs, st, err := mo.read(args)
			if err != nil {
				return err
			}
			var w io.Writer = cmd.OutOrStdout()
			var f *os.File
			if output != "" && output != "-" {
				if f, err = os.Create(output); err != nil {
					return err
				}
				w = f
			}
			err = maillog.WriteMessages(w, msgs, "ratelimitd trace from-maillog "+strings.Join(args, " "))
			if f != nil {
				err = errors.Join(err, f.Close())
			}
			if err != nil {
				return err
			}
			return st.WriteSummary(cmd.ErrOrStderr())
		},
	}
	mo.addFlags(cmd)
	cmd.Flags().StringVarP(&output, "output", "o", "", "write the trace to `FILE` instead of standard output")
	return cmd
}
