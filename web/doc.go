// Package web is ratelimitd's browser console, a front end beside the
// admin socket over the same services (admin.Rates, admin.Quarantine,
// admin.Events, admin.Status), so it works alike with the local and the
// Redis rate store.
//
// Pages are rendered on the server with html/template and need no
// JavaScript: / (overview), /keys/{key} (rates, events, a PNG chart drawn
// with gonum.org/v1/plot), /quarantine and /quarantine/{id} (nothing of a
// message is rendered as HTML), /events; thaw and delete are confirmed.
//
// Security: every page but /login needs a session (32 random bytes in an
// HttpOnly, SameSite=Strict cookie, Secure with TLS; 30 minutes idle, 12
// hours at most; in memory). Every state-changing request is a POST with
// the session's CSRF token from the console's own origin; a viewer's
// action is refused with 403. Failed logins are slowed per user name and
// client address. Passwords are argon2id hashes (RFC 9106) in the users
// file. The Content-Security-Policy allows no script and no remote origin.
//
// Every action is logged and recorded as an event by "NAME (console)".
// A Server is safe for concurrent use. See docs/console.md for set-up.
package web
