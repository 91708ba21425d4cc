// Package daemon is a running ratelimitd built from its configuration:
// Start opens the state file, the rate state, the engine, the quarantine,
// the notifier and the metrics, and starts the listeners (policy service,
// milter, admin socket, metrics, console). Reload applies a new
// configuration (SIGHUP), Shutdown drains and flushes (SIGTERM). The front
// ends call one Decider, Daemon.Decide. OpenRates and OpenQuarantine open
// the same state for the CLI when no daemon runs. Methods are safe for
// concurrent use; Shutdown is called once.
package daemon
