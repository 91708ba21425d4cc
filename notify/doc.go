// Package notify tells the postmaster what ratelimitd did, off the request
// path: a webhook (a JSON POST, retried with exponential back-off,
// optionally signed with HMAC-SHA256) and mail through an SMTP relay (RFC
// 5321 with emersion/go-smtp; RFC 5322 text/plain built with
// emersion/go-message).
//
// Events are a key's first refusal by a limit in the limit's period (as
// Exim's ratelimit ACL condition reports a sender once it is over, Exim
// specification chapter "Access control lists"), a key's quarantined
// messages crossing a threshold, automatic release, and the operator
// actions thaw, delete and rate reset with who ran them.
//
// Notifier.Notify never blocks: events wait in a bounded queue served by
// one goroutine; one that does not fit is dropped and counted. Users
// declare their own one-method interface, satisfied by *Notifier:
//
//	type notifier interface{ Notify(notify.Event) bool }
package notify
