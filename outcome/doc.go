// Package outcome feeds what happened to a sender's mail into the outcome
// limits (policy.OutcomeKind; per = "bounce", "unknown_rcpt",
// "deferral"). A Join maps each queue ID to the request that submitted the
// message (the policy delegation END-OF-MESSAGE request's queue_id, or the
// milter's queue ID at end of message) and so to its rate keys; a Sink
// counts an outcome of a joined message once per recipient and kind.
//
// The feed here is Postfix's mail log (MAILLOG_README): a delivery agent's
// "to=<...>, ..., dsn=X.Y.Z, status=bounced|deferred" line is an outcome,
// qmgr's "removed" ends the message. The log is followed as it grows
// (maillog.Follower) from the position the Join keeps.
package outcome
