// Package policy is ratelimitd's MTA-neutral policy engine: a Request built
// from Postfix policy-delegation attributes (SMTPD_POLICY_README, "Policy
// protocol description") or milter macros, a stack of configured limits
// (exponential, GCRA or EARRRL rate arithmetic from package ratelimit), and
// Engine.Evaluate, which measures every limit that applies and returns the
// strictest Decision.
//
// The stacked hourly-plus-daily limits, per_mail/per_rcpt/per_byte cost and
// the strict/leaky/forgiving modes follow Tony Finch's "ratelimit
// clarifications" and Exim's ratelimit ACL condition (Exim specification,
// "Rate limiting incoming messages").
//
// # Evaluation
//
// Engine.Evaluate and Engine.Decide run one request through the same
// steps: the message it belongs to (its bookkeeping, shared by the policy
// and milter front ends), the limits that apply and their keys and costs,
// the rate store's evaluation of the whole stack (ratelimit's stack rule),
// the limits that decide, and the bookkeeping committed once the verdict
// is known. A store error fails open (Pass with Decision.Fault set); the
// Engine is safe for concurrent use.
package policy
