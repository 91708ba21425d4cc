// Package simulate replays a trace of policy requests through a policy.Engine
// on a simulated clock, for `ratelimitd simulate`: an operator checks what a
// configuration would have done to real or imagined traffic (a newsletter
// burst, a compromised account sending all weekend, a busy relay) before
// deploying it.
//
// # Trace format
//
// A trace is JSON Lines (one JSON object per line; files named *.jsonl or
// *.json) or CSV with a header row (*.csv). Blank lines and lines whose
// first non-blank character is # are ignored. Every line is one request, or
// a compact stream of identical requests, with these fields:
//
//	time                 when: RFC 3339 ("2026-11-20T18:00:00Z",
//	                     fractional seconds allowed) or Unix seconds as a
//	                     number or a string ("1795197600", "1795197600.25").
//	                     Required.
//	protocol_state       RCPT, DATA, END-OF-MESSAGE (default), CONNECT, ...
//	sasl_username, sender, recipient, client_address, client_name,
//	reverse_client_name, helo_name, queue_id, instance, protocol_name,
//	sasl_method, sasl_sender
//	                     the Postfix policy attributes of the same names
//	                     (SMTPD_POLICY_README).
//	recipient_count      number of recipients; default 1 at DATA and
//	                     END-OF-MESSAGE, 0 elsewhere (as Postfix sends it).
//	size                 message size in bytes ("2048", or "10M").
//	count                repeat the request N times (default 1).
//	every                with count or until: the spacing of the repeats,
//	                     a duration ("24s", "1.5s", "1h", "2d") or seconds
//	                     as a number. Without every, the N repeats happen
//	                     at the same instant (a burst).
//	until                with every, instead of count: repeat at time,
//	                     time+every, ... while strictly before until
//	                     (same syntax as time).
//
// So one line describes a steady stream: a compromised account sending 150
// messages an hour (one every 24 s) for 60 hours is
//
//	{"time":"2026-11-20T18:00:00Z","sasl_username":"mallory","count":9000,"every":"24s"}
//
// or, equivalently, with "until":"2026-11-23T06:00:00Z" instead of count.
// JSON values may be strings or numbers; null is the same as absent. Other
// Postfix policy attributes (request, client_port, encryption_protocol, ...)
// are accepted and ignored; any other field is an error, so a misspelt
// attribute does not silently go unmeasured. Every error names its line.
//
// # Order
//
// Requests need not be written in time order, and streams may overlap: the
// trace is replayed in time order, and requests at the same instant in the
// order they appear in the file (a stable sort), all repeats of one line
// before the next line. Times are reported in UTC.
//
// # Replay
//
// Replay evaluates every request with Engine.Evaluate at the request's time,
// exactly as the daemon would have at that instant with the same
// configuration and an empty rate store. It does not model the client's
// reaction: a deferred message is not retried unless the trace says so.
//
// # Suggest
//
// Suggest, for `ratelimitd suggest`, turns a trace of a site's own mail
// (see package maillog for making one from Postfix or Exim logs) into
// proposed limits: each key's peak rate under each configured limit, a
// limit from a percentile of the peaks with headroom, per-key overrides for
// recurring bulk senders, the outliers it refuses to accommodate, and who
// the proposal would have refused, when and for how long.
package simulate
