// Package cliout prints the ratelimitd command line's tables, JSON, prompts
// and errors for operators. Client-supplied strings pass through termsafe;
// JSON output is exact. Functions keep no state.
package cliout

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ratelimitd/ratelimitd/admin"
	"github.com/ratelimitd/ratelimitd/internal/termsafe"
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

// JSON writes v as indented JSON, runes unsafe on a terminal escaped
// (termsafe.NewJSONWriter): exact, and unchanged by the output sanitiser.
func JSON(w io.Writer, v any) error {
	enc := json.NewEncoder(termsafe.NewJSONWriter(w))
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// JSONList writes vs as one JSON array, [] when empty: --json prints one
// document per command.
func JSONList[T any](w io.Writer, vs []T) error {
	if vs == nil {
		vs = []T{}
	}
	return JSON(w, vs)
}

// Confirm asks question with " [y/N] " and reports whether the line read
// from in is "y" or "yes" (any case).
func Confirm(in io.Reader, out io.Writer, question string) bool {
	fmt.Fprintf(out, "%s [y/N] ", question)
	answer, _ := bufio.NewReader(in).ReadString('\n')
	if a := strings.ToLower(strings.TrimSpace(answer)); a == "y" || a == "yes" {
		return true
	}
	fmt.Fprintln(out)
	return false
}

// Create opens the output of a -o flag: the file at path (truncated), or
// stdout for "" and "-"; the function returned closes it.
func Create(path string, stdout io.Writer) (io.Writer, func() error, error) {
	if path == "" || path == "-" {
		return stdout, func() error { return nil }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, nil, err
	}
	return f, f.Close, nil
}
