// Package simulate replays a trace of policy requests through a
// policy.Engine on a simulated clock (`ratelimitd simulate`), and proposes
// limits from a site's own traffic (Suggest, `ratelimitd suggest`).
//
// A trace is JSON Lines, a JSON array of the same objects, or CSV with a
// header row; each line is a request (the Postfix policy attributes of
// SMTPD_POLICY_README plus time, size and via) or, with count, every and
// until, a burst or stream of identical requests. The format is described
// in `ratelimitd simulate --help`. Requests are replayed in time order,
// those at the same instant in file order, each with Engine.Evaluate
// against an empty store; a deferred message is not retried unless the
// trace says so.
package simulate
