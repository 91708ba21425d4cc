// Package outcome feeds what happened to a sender's mail into the outcome
// limits (per = "bounce", "unknown_rcpt", "deferral"). A Join maps each
// queue ID to the request that submitted the message, and so to its rate
// keys; a Sink counts an outcome of a joined message once per recipient
// and kind. The feeds: LogFeed follows Postfix's mail log (MAILLOG_README);
// NoticeServer reads postmaster notices (RFC 3464) over LMTP; EximServer
// takes Exim's transport event_action requests (Exim specification,
// "Event actions").
package outcome
