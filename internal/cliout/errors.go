package cliout

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"

	"github.com/ratelimitd/ratelimitd/admin"
	"github.com/spf13/cobra"
)

// MarkUsageErrors wraps argument-count errors of c and its subcommands
// with usage, and makes an unknown subcommand of a group an error.
func MarkUsageErrors(c *cobra.Command, usage func(error) error) {
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
			return usage(fmt.Errorf("%s (commands: %s)", msg, strings.Join(names, ", ")))
		}
	} else if args := c.Args; args != nil {
		c.Args = func(cmd *cobra.Command, a []string) error {
			if err := args(cmd, a); err != nil {
				return usage(fmt.Errorf("%s: %w (usage: %s)", cmd.CommandPath(), err, cmd.UseLine()))
			}
			return nil
		}
	}
	for _, sub := range c.Commands() {
		MarkUsageErrors(sub, usage)
	}
}

// pkgPrefix matches the "package: " prefixes of our errors.
var pkgPrefix = regexp.MustCompile(`(^|: )(config|config: invalid|policy|quarantine|notify|store|ratelimit|smtp|postfix|milter|bolt|maillog): `)

// ErrorMessage is err's text for an operator, without package prefixes and
// with the fix where one is known; defaultConfig is the --config default.
func ErrorMessage(err error, defaultConfig string) string {
	msg := pkgPrefix.ReplaceAllString(err.Error(), "$1")
	switch {
	case errors.Is(err, admin.ErrNoDaemon):
		msg += "\n  start it (systemctl start ratelimitd, or ratelimitd serve --config FILE), or give the --config the daemon runs with"
	case errors.Is(err, os.ErrPermission):
		msg += "\n  run as root, or as a member of the group that owns the state directory"
	case errors.Is(err, os.ErrNotExist):
		msg += "\n  check the path: --config FILE or $RATELIMITD_CONFIG name the configuration (neither: " + defaultConfig + " if it exists, else the embedded default)"
	}
	return msg
}
