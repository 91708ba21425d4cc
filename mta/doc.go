// Package mta is the contract between ratelimitd's front ends and the rest
// of the daemon. The front ends speak an MTA's protocol: mta/postfix the
// Postfix SMTP access policy delegation protocol (SMTPD_POLICY_README),
// which Exim's ${readsocket} speaks too, and mta/milter the Sendmail 8 mail
// filter protocol (MILTER_README). Both ask a Decider for every verdict and
// report to a Metrics; neither knows anything of rate limits.
//
// The package declares, once for both front ends:
//
//   - Decider and its DeciderFunc adapter: the seam between a protocol and
//     the rate limits (the daemon's adapter around policy's Engine.Evaluate);
//   - Metrics: the counts every front end reports (connections, bad input,
//     faults); each front end's own Metrics embeds it and adds its
//     protocol's counts;
//   - the Fault kinds passed to Metrics.Fault;
//   - LogDecision: the log lines and fault count of one decision, the same
//     for every front end.
//
// The package holds no state and starts no goroutine; LogDecision is safe
// for concurrent use.
package mta
