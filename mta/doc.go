// Package mta is the contract between the front ends (mta/postfix,
// mta/milter) and the daemon: Decider, Metrics and its Fault kinds,
// LogDecision, and ReplyText. It holds no state; everything is safe for
// concurrent use.
package mta
