// Package notify tells the postmaster what ratelimitd did, off the request
// path: a webhook (a JSON POST, retried with exponential back-off, optionally
// signed with HMAC-SHA256) and mail through an SMTP relay (RFC 5321, with
// the emersion/go-smtp client; messages built with emersion/go-message as
// RFC 5322 text/plain mail).
//
// Events are the first refusal of a key by a limit (at most one per key,
// limit and period: a spam run from a compromised account produces one
// message, not thousands), a key's quarantined messages crossing a
// threshold, and the operator actions thaw, delete and rate reset with who
// ran them (the audit trail). The refusal dedup follows the spirit of Exim's
// "ratelimit" ACL condition, which reports a sender once it is over its
// limit rather than on every message (Exim specification, chapter
// "Access control lists", section "Rate limiting incoming messages").
//
// Notifier.Notify never blocks: events wait in a bounded queue served by
// one goroutine, and an event that does not fit is dropped and counted
// (ratelimitd_notify_dropped_total). Packages that want to notify declare
// their own one-method interface, satisfied by *Notifier:
//
//	type notifier interface{ Notify(notify.Event) bool }
package notify
