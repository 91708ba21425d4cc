// Package daemon is a running ratelimitd built from its configuration:
// Start opens the state and starts the listeners, Reload applies a new
// configuration (SIGHUP), Shutdown drains and flushes (SIGTERM); both front
// ends call Daemon.Decide. OpenRates, OpenQuarantine and OpenEvents open
// the same state for the CLI when no daemon runs. Methods are safe for
// concurrent use; Shutdown is called once.
package daemon
