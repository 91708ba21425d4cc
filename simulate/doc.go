// Package simulate replays a trace of policy requests through a
// policy.Engine on a simulated clock (`ratelimitd simulate`), and proposes
// limits from a site's own traffic (Suggest, `ratelimitd suggest`).
//
// A trace is JSON Lines, a JSON array or CSV; each line is a request (the
// attributes of SMTPD_POLICY_README plus time, size and via) or, with
// count, every and until, a stream of them (`ratelimitd simulate --help`).
// Requests are replayed in time order, at one instant in file order,
// against an empty store; a deferred message is not retried.
package simulate
