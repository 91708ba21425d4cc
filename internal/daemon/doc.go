// Package daemon is a running ratelimitd built from its configuration:
// Start opens the state file (package statedb), restores the rate state,
// builds the policy engine, the recipient sets, the quarantine and its life
// cycle, the notifier and the metrics, and starts every listener: the
// Postfix policy service (also Exim's ${readsocket}), the milter, the admin
// socket (package admin) and Prometheus metrics. Reload applies a new
// configuration's limits (SIGHUP), Shutdown drains and flushes (SIGTERM),
// Status reports what `ratelimitd status` prints.
//
// The front ends call one Decider (Daemon.decide): evaluate, count, notify,
// record holds; a fault or panic answers DUNNO and is counted. Unless
// GOMEMLIMIT is set, the daemon keeps Go's soft memory limit near what it
// holds and gives freed memory back when a compaction ends or the load
// stops (startMemoryLimit).
//
// Serve runs a daemon as `ratelimitd serve` does: its log and pid files
// (Files; SIGHUP reopens the log), SIGHUP to reload, SIGTERM or SIGINT to
// shut down. BuildVersion is what --version prints.
//
// OpenOffline opens the same state for the CLI when no daemon runs (the
// daemon holds the BoltDB lock while it runs), as an admin.Local backend.
//
// A Daemon's methods are safe for concurrent use; Shutdown is called once.
package daemon
