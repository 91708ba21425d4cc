package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ratelimitd/ratelimitd/admin"
	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/internal/daemon"
)

// rootOptions are the flags every subcommand shares.
type rootOptions struct {
	configPath string
}

// DefaultConfigPath is where `make install` puts the configuration; used
// when neither --config nor $RATELIMITD_CONFIG names one and the file
// exists.
const DefaultConfigPath = "/etc/ratelimitd/ratelimitd.toml"

// defaultConfig is the --config default: $RATELIMITD_CONFIG, else
// DefaultConfigPath if it exists, else "" (the embedded default).
func defaultConfig() string {
	if p := os.Getenv("RATELIMITD_CONFIG"); p != "" {
		return p
	}
	if _, err := os.Stat(DefaultConfigPath); err == nil {
		return DefaultConfigPath
	}
	return ""
}

func newRootCmd() *cobra.Command {
	opts := &rootOptions{}
	cmd := &cobra.Command{
		Use:   "ratelimitd",
		Short: "Rate limiting policy daemon for Postfix, Exim and milter MTAs",
		Long: `ratelimitd measures how fast each sender sends mail, using Exim's
exponentially weighted moving average, and applies stacked limits (for
example 200/hour plus 1000/day per authenticated user). Over a limit it
answers the MTA with a 450 4.7.1 defer, a 550 5.7.1 reject, a warning
header, or puts the message on hold / freezes it into a quarantine that
the postmaster reviews with "ratelimitd quarantine".

It speaks Postfix's policy delegation protocol (check_policy_service in
smtpd_recipient_restrictions and smtpd_end_of_data_restrictions), which
Exim can use through ${readsocket}, and the milter protocol.

Without --config the file named by $RATELIMITD_CONFIG is used, else
` + DefaultConfigPath + ` if it exists, else the embedded default
configuration: 200/hour (leaky) and 1000/day (strict) per SASL user,
deferring with 450, state in ` + config.RootStateDir + ` when run as root.
The CLI commands (status, rate, quarantine) read the configuration only to
find the daemon's admin socket and state directory, so they find a daemon
started the same way without any flag.

Exit status: 0 success, 1 error, 2 usage error.`,
		Version:       daemon.BuildVersion(),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	cmd.SetVersionTemplate("ratelimitd {{.Version}}\n")
	cmd.PersistentFlags().StringVarP(&opts.configPath, "config", "c", "",
		"configuration file (TOML); default $RATELIMITD_CONFIG, else "+DefaultConfigPath+" if it exists, else the embedded default")
	cmd.PersistentPreRun = func(c *cobra.Command, _ []string) {
		if f := c.Flag("config"); f == nil || !f.Changed {
			opts.configPath = defaultConfig()
		}
	}
	cmd.AddCommand(newConfigCmd(opts), newSimulateCmd(opts), newServeCmd(opts), newStatusCmd(opts), newRateCmd(opts), newQuarantineCmd(opts), newManCmd(), newStateCmd(opts))
	cmd.AddCommand(newTraceCmd(), newSuggestCmd(opts), newWebCmd(opts), newEventsCmd(opts))
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageError{fmt.Errorf("%w (see %s --help)", err, c.CommandPath())}
	})
	markUsageErrors(cmd)
	return cmd
}

// usageError is a command-line mistake: exit status 2.
type usageError struct{ error }

func (u usageError) Unwrap() error { return u.error }

// markUsageErrors makes argument-count errors usage errors and gives every
// command group (rate, quarantine, config, the root) an unknown-subcommand
// error instead of printing its help and exiting 0.
func markUsageErrors(c *cobra.Command) {
	if c.HasSubCommands() && c.Run == nil && c.RunE == nil {
		c.Args = cobra.ArbitraryArgs
		c.RunE = func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return cmd.Help()
			}
			msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
			if cmd.SuggestionsMinimumDistance <= 0 {
				cmd.SuggestionsMinimumDistance = 2
			}
			if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
				msg += "; did you mean " + strings.Join(s, " or ") + "?"
			}
			var names []string
			for _, sub := range cmd.Commands() {
				if sub.IsAvailableCommand() {
					names = append(names, sub.Name())
				}
			}
			return usageError{fmt.Errorf("%s (commands: %s)", msg, strings.Join(names, ", "))}
		}
	} else if args := c.Args; args != nil {
		c.Args = func(cmd *cobra.Command, a []string) error {
			if err := args(cmd, a); err != nil {
				return usageError{fmt.Errorf("%s: %w (usage: %s)", cmd.CommandPath(), err, cmd.UseLine())}
			}
			return nil
		}
	}
	for _, sub := range c.Commands() {
		markUsageErrors(sub)
	}
}

// exitStatus prints err for the operator and returns the exit status.
func exitStatus(err error, stderr io.Writer) int {
	if err == nil {
		return 0
	}
	fmt.Fprintln(stderr, "ratelimitd: "+userMessage(err))
	var u usageError
	if errors.As(err, &u) {
		return 2
	}
	return 1
}

// pkgPrefix matches the "package: " prefixes of our packages' errors
// (STYLE.md's convention inside the code), which mean nothing to an
// operator.
var pkgPrefix = regexp.MustCompile(`(^|: )(config|config: invalid|policy|quarantine|notify|store|ratelimit|smtp|postfix|milter|bolt|maillog): `)

// userMessage is err's text without package prefixes, followed by the fix
// where one is known.
func userMessage(err error) string {
	msg := pkgPrefix.ReplaceAllString(err.Error(), "$1")
	switch {
	case errors.Is(err, admin.ErrNoDaemon):
		msg += "\n  start it (systemctl start ratelimitd, or ratelimitd serve --config FILE), or give the --config the daemon runs with"
	case errors.Is(err, os.ErrPermission):
		msg += "\n  run as root, or as a member of the group that owns the state directory"
	case errors.Is(err, os.ErrNotExist):
		msg += "\n  check the path: --config FILE or $RATELIMITD_CONFIG name the configuration (neither: " + DefaultConfigPath + " if it exists, else the embedded default)"
	}
	return msg
}

// withBackend asks the running daemon (admin socket), else opens its state
// file with offline, runs fn on the backend and closes it; it returns fn's
// error, else the error of closing.
func withBackend(opts *rootOptions, offline func(*config.File) (*admin.Local, error), fn func(admin.Backend, *config.File) error) error {
	f, err := config.Load(opts.configPath)
	if err != nil {
		return err
	}
	b, err := admin.Open(f.Server.AdminSocket, func() (admin.Backend, error) { return offline(f) })
	if err != nil {
		return err
	}
	err = fn(b, f)
	if cerr := b.Close(); err == nil {
		err = cerr
	}
	return err
}
