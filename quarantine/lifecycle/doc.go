// Package lifecycle records held and frozen mail, thaws, deletes and
// expires it (RFC 3464 DSN), and releases it at the limit's rate ("drip").
// Each action is claim, act, record, so a crash repeats only what is
// harmless; queue IDs are confirmed in the MTA's queue listing before any
// command runs. The Service is safe for concurrent use.
package lifecycle
