// Package notify tells the postmaster what ratelimitd did, off the request
// path: a webhook (JSON POST, retried, optionally HMAC-SHA256 signed) and
// mail through an SMTP relay (RFC 5321, RFC 5322 text/plain). Events
// (Kind) are a key's first refusal by a limit in its period, quarantine
// thresholds, releases and operator actions.
//
// Notifier.Notify never blocks: a bounded queue feeds one goroutine;
// overflow is dropped and counted. Users declare, satisfied by *Notifier:
//
//	type notifier interface{ Notify(notify.Event) bool }
package notify
