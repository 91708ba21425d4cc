package main

import (
	"embed"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"

	"github.com/ratelimitd/ratelimitd/admin"
	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/internal/cliout"
	"github.com/ratelimitd/ratelimitd/internal/daemon"
	"github.com/ratelimitd/ratelimitd/internal/termsafe"
)

// rootOptions are the flags every subcommand shares.
type rootOptions struct {
	configPath string
}

// DefaultConfigPath is where `make install` puts the configuration.
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
		Use:           "ratelimitd",
		Short:         "Rate limiting policy daemon for Postfix, Exim and milter MTAs",
		Long:          strings.NewReplacer("DEFAULT_CONFIG", DefaultConfigPath, "ROOT_STATE_DIR", config.RootStateDir).Replace(helpText("ratelimitd")),
		Version:       daemon.BuildVersion(),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	cmd.SetVersionTemplate("ratelimitd {{.Version}}\n")
	cmd.PersistentFlags().StringVarP(&opts.configPath, "config", "c", "",
		"configuration file (TOML); default $RATELIMITD_CONFIG, else "+DefaultConfigPath+" if it exists, else the embedded default")
	cmd.PersistentPreRun = func(c *cobra.Command, _ []string) {
		// Output may carry client data: through termsafe (data streams
		// use termsafe.Unwrap).
		cmd.SetOut(termsafe.NewWriter(cmd.OutOrStdout()))
		cmd.SetErr(termsafe.NewWriter(cmd.ErrOrStderr()))
		if f := c.Flag("config"); f == nil || !f.Changed {
			opts.configPath = defaultConfig()
		}
	}
	cmd.AddCommand(newConfigCmd(opts), newSimulateCmd(opts), newServeCmd(opts), newStatusCmd(opts), newRateCmd(opts), newQuarantineCmd(opts), newManCmd(), newStateCmd(opts))
	cmd.AddCommand(newTraceCmd(), newSuggestCmd(opts), newWebCmd(opts), newEventsCmd(opts))
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageError{fmt.Errorf("%w (see %s --help)", err, c.CommandPath())}
	})
	cliout.MarkUsageErrors(cmd, func(err error) error { return usageError{err} })
	return cmd
}

// usageError is a command-line mistake: exit status 2.
type usageError struct{ error }

func (u usageError) Unwrap() error { return u.error }

// exitStatus prints err for the operator and returns the exit status.
func exitStatus(err error, stderr io.Writer) int {
	if err == nil {
		return 0
	}
	fmt.Fprintln(stderr, "ratelimitd: "+cliout.ErrorMessage(err, DefaultConfigPath))
	var u usageError
	if errors.As(err, &u) {
		return 2
	}
	return 1
}

// withBackend asks the running daemon (admin socket), else opens its state
// file with offline, runs fn on the backend and closes it (admin.With).
func withBackend(opts *rootOptions, offline func(*config.File) (*admin.Local, error), fn func(admin.Backend, *config.File) error) error {
	f, err := config.Load(opts.configPath)
	if err != nil {
		return err
	}
	return admin.With(f.Server.AdminSocket, func() (admin.Backend, error) { return offline(f) }, func(b admin.Backend) error { return fn(b, f) })
}

// ask returns what fn gets from the backend of withBackend.
func ask[T any](opts *rootOptions, offline func(*config.File) (*admin.Local, error), fn func(admin.Backend) (T, error)) (v T, err error) {
	err = withBackend(opts, offline, func(b admin.Backend, _ *config.File) (err error) {
		v, err = fn(b)
		return err
	})
	return v, err
}

// helpFiles are the commands' long help texts, one per command path
// (help/quarantine-thaw.txt is `ratelimitd quarantine thaw --help`).
//
//go:embed help/*.txt
var helpFiles embed.FS

// helpText returns the long help of the command at path ("quarantine
// thaw"); it panics if the file is missing (a build mistake).
func helpText(path string) string {
	b, err := helpFiles.ReadFile("help/" + strings.ReplaceAll(path, " ", "-") + ".txt")
	if err != nil {
		panic("ratelimitd: no help text for " + path + ": " + err.Error())
	}
	return strings.TrimSuffix(string(b), "\n")
}

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
