// Package outcome feeds what happened to a sender's mail into the outcome
// limits (policy.OutcomeKind; per = "bounce", "unknown_rcpt",
// "deferral"). A Join maps each queue ID to the request that submitted the
// message (the policy delegation END-OF-MESSAGE request's queue_id, or the
// milter's queue ID at end of message) and so to its rate keys; a Sink
// counts an outcome of a joined message once per recipient and kind.
//
// Three feeds give outcomes: LogFeed follows Postfix's mail log
// (MAILLOG_README: a delivery agent's "dsn=X.Y.Z, status=bounced|deferred"
// line; qmgr's "removed" ends the message) with maillog.Follower;
// NoticeServer receives Postfix's postmaster notices over LMTP (RFC 2033)
// and reads their RFC 3464 reports; EximServer receives Exim's transport
// event_action requests over the readsocket protocol (Exim specification,
// "Event actions").
package outcome
