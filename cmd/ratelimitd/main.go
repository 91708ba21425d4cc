// Command ratelimitd is a mail policy daemon for Postfix, Exim and milter
// MTAs that measures each sender's rate with exponential moving averages and
// defers, rejects, warns, holds or freezes over-limit mail. See README.md
// and ratelimitd(8).
package main

import (
	"io"
	"os"

	"github.com/ratelimitd/ratelimitd/internal/termsafe"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run executes the command line and returns the exit status: 0, 1 for an
// error, 2 for a usage error. Errors are printed through termsafe.
func run(args []string, stdout, stderr io.Writer) int {
	stderr = termsafe.NewWriter(stderr)
	cmd := newRootCmd()
	cmd.SetArgs(args)
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	return exitStatus(cmd.Execute(), stderr)
}
