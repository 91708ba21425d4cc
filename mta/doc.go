// Package mta is the contract between the front ends (mta/postfix: policy
// delegation, SMTPD_POLICY_README, also Exim's ${readsocket}; mta/milter:
// the Sendmail milter protocol) and the daemon: Decider, Metrics and its
// Fault kinds, LogDecision, and ReplyText, the one sanitiser of text sent
// to an MTA. It holds no state; everything is safe for concurrent use.
package mta
