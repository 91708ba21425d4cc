// Package cliout is how the ratelimitd command line talks to an operator:
// the tables and JSON rows of `rate show/list`, `quarantine
// list/show/thaw/delete`, `events` and `config check`, the --since/--until
// times of `events`, the y/N prompt of `quarantine delete` (Confirm), the
// -o output file (Create), and errors as an operator reads them
// (ErrorMessage; MarkUsageErrors for cobra command trees). The commands (cmd/ratelimitd) define flags and call these; the
// daemon's own status is printed by admin.Status.Print.
//
// Quarantine and event text passes client-supplied strings (senders,
// subjects, MTA output, event fields) through termsafe (quarantine's
// CleanLine and CleanText use it); JSON output is exact (encoding/json
// escapes, it does not strip). Rates are printed with human.Number,
// durations with human.Duration. The functions keep no state and are
// safe for concurrent use on distinct writers.
package cliout
