// Package policy is ratelimitd's MTA-neutral engine: a Request (from
// SMTPD_POLICY_README attributes or milter macros), a stack of limits, and
// Engine.Evaluate, which returns the Decision of the first limit in stack
// order that refuses, as Exim evaluates ACL statements. Costs and the
// strict/leaky modes follow Exim's ratelimit ACL condition (Exim
// specification, "Rate limiting") and Tony Finch's "ratelimit
// clarifications". The Engine is safe for concurrent use.
package policy
