// Package maillog joins the lines of MTA mail logs into messages and
// writes them as traces for package simulate (`ratelimitd trace
// from-maillog`, `ratelimitd suggest --maillog`).
//
// It reads Postfix logs in syslog form (RFC 3164 or RFC 3339 timestamps,
// several hosts, rotated and gzip files), joining by host and queue ID the
// lines of smtpd(8), cleanup(8), qmgr(8) and the delivery agents
// (MAILLOG_README), and Exim's mainlog (Exim specification, chapter "Log
// files"). Only mail that arrived over SMTP and was queued or held is in
// a trace; unparsable lines are counted and sampled in Stats, never fatal.
// Messages are handed on as they finish, so memory is bounded by the
// messages open at a time.
//
// Follower reads a live log as it grows, across rotation and restarts,
// for the outcome feed (package outcome).
package maillog
