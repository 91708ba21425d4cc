// Package lifecycle records held and frozen mail, thaws it (postsuper -H,
// or SMTP re-injection), deletes it, expires it after max_age (RFC 3464
// DSN, or kept), and releases it at the limit's rate ("drip").
//
// Each action is claim, act, record, so a crash repeats only what is
// harmless. Queue IDs are validated and confirmed in the MTA's queue
// listing before any command runs. The Service is safe for concurrent use.
package lifecycle
