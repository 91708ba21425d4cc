// Package web is ratelimitd's browser console: a front end of the daemon
// beside the admin socket, over the same services (the policy engine's
// rate lookup, list and reset; the quarantine life cycle's list, show,
// thaw, delete, suspend and resume; the event log; the daemon's health),
// named by the interfaces in services.go, so it works the same with the
// local and the Redis rate store.
//
// Pages are rendered on the server with html/template and need no
// JavaScript: / (overview), /keys/{key} (rates, events, a PNG chart drawn
// with gonum.org/v1/plot), /quarantine and /quarantine/{id} (envelope,
// header, a text preview: HTML is reduced to text, nothing of a message
// is rendered as HTML), /events; thaw and delete have a confirmation
// page.
//
// Security: every page but /login needs a session (32 random bytes from
// crypto/rand in an HttpOnly, SameSite=Strict cookie, Secure with TLS;
// 30 minutes idle, 12 hours at most; kept in memory, so a restart logs
// everybody out). Every state-changing request is a POST carrying the
// session's CSRF token, from the console's own origin; a viewer's action
// is refused with 403. Failed logins are slowed per user name and per
// client address (after 3 failures, a wait doubling from 2 s to 5 min).
// Passwords are stored as argon2id hashes (RFC 9106) in the users file
// (Users), never logged or shown. Every answer carries a
// Content-Security-Policy without any script source or 'unsafe-inline'
// and with no remote origin. The listener takes at most
// srvconn.HTTPConns() connections at once (16 unless the descriptor limit
// is low) and bounds header, request and idle times.
//
// Every action is logged and recorded as an event with the user's name
// ("NAME (console)"): resets, suspends and resumes by this package, thaws
// and deletes by the quarantine life cycle, which records its own.
//
// A Server is safe for concurrent use. See docs/console.md for set-up.
package web
