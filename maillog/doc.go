// Package maillog joins the lines of MTA mail logs into messages and
// writes them as traces for package simulate (`ratelimitd trace
// from-maillog`, `ratelimitd suggest --maillog`).
//
// It reads Postfix logs in syslog form (RFC 3164 or RFC 3339 stamps,
// several hosts, rotated and gzip files; MAILLOG_README), joining lines by
// host and queue ID, and Exim's mainlog (Exim specification, "Log files").
// Unparsable lines are counted and sampled in Stats, never fatal; memory
// is bounded by the messages open at a time. Follower reads a live log
// across rotation and restarts for package outcome.
package maillog
