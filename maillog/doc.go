// Package maillog reads MTA mail logs and turns them into traces for
// package simulate, so that `ratelimitd trace from-maillog` and
// `ratelimitd suggest` can replay a site's own mail through rate limits.
//
// It reads Postfix logs in syslog form, as Postfix's own maillog_file
// (postlogd, Postfix 3.4 and later) and rsyslog or syslog-ng write them:
// classic RFC 3164 timestamps without a year ("Nov 23 13:33:57", with or
// without microseconds) or RFC 3339 ones; several hosts in one file (queue
// IDs are unique per host only); rotated and gzip-compressed files. It
// joins, by host and queue ID, smtpd's "client=" line (client address,
// sasl_method, sasl_username), cleanup's "message-id=", qmgr's "from=",
// "size=" and "nrcpt=" and the delivery agents' "to=" (and "orig_to=")
// lines; a message that qmgr retries after a deferral stays one message.
// The log lines are those described in Postfix's smtpd(8), cleanup(8),
// qmgr(8) manual pages and MAILLOG_README.
//
// It also reads Exim's mainlog (the Exim specification, chapter "Log
// files"): the "<=" arrival line with H=, A= (authenticator:id), U=, S=
// and id=, and the recipient lines "=>", "->", "*>", "**" and "==". A local
// submission (no H=) is keyed by its U= user, as Exim's acl_not_smtp can
// ask the policy service about it; Exim's own bounces (R=) are left out.
//
// Lines that cannot be parsed are counted and sampled in Stats, never
// fatal. Mail that did not arrive over SMTP (Postfix pickup, bounces) is
// left out and counted: the policy service never sees it; so is mail
// rejected after it had a queue ID (reject:, milter-reject:). Mail put on
// hold (hold:) and never released is kept: it was sent.
//
// Reader.Each and Reader.StreamTrace hand on each message once it is
// finished (its "removed" line, a new message under its queue ID, idle
// for an hour before it was queued or a week after, or the end of the
// logs), so memory is bounded by the messages open at a time, not by the
// length of the logs. FindLog finds the log Postfix writes on this host.
package maillog
