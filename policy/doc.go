// Package policy is ratelimitd's MTA-neutral engine: a Request built from
// Postfix policy-delegation attributes (SMTPD_POLICY_README) or milter
// macros, a stack of limits (package ratelimit's arithmetic), and
// Engine.Evaluate, which measures every limit that applies and returns the
// Decision of the first one in stack order that refuses, as Exim's ACL
// statements are evaluated. Stacked limits, per_mail/per_rcpt/per_byte costs and
// the strict/leaky modes follow Exim's ratelimit ACL condition (Exim
// specification, "Rate limiting") and Tony Finch's "ratelimit
// clarifications". The Engine is safe for concurrent use.
package policy
