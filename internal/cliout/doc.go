// Package cliout is what the ratelimitd command line prints: the tables and
// JSON rows of `rate show/list`, `quarantine list/show/thaw/delete`,
// `events` and `config check`, and the terminal prompt of `web user add`.
// The commands (cmd/ratelimitd) parse flags and call these; the daemon's own
// status is printed by admin.Status.Print.
//
// Text output passes every client-supplied string (keys, senders, subjects,
// MTA output) through termsafe; JSON output is exact (encoding/json
// escapes, it does not strip). Rates are printed with admin.FormatRate,
// durations with policy.FormatDuration. The functions write to the given
// writer and keep no state: safe for concurrent use on distinct writers.
package cliout
