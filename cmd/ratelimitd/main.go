// Command ratelimitd is a mail policy daemon for Postfix, Exim and milter
// MTAs that measures each sender's rate with exponential moving averages and
// defers, rejects, warns, holds or freezes over-limit mail. See README.md.
package main

import "os"

func main() {
	if err := newRootCmd().Execute(); err != nil {
		os.Exit(1)
	}
}
