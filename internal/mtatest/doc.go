// Package mtatest runs a private Postfix instance and an in-memory SMTP
// sink inside Go tests, and speaks SMTP (with XCLIENT) to either:
//
//	sink := mtatest.StartSink(t)
//	pf := mtatest.StartPostfix(t, mtatest.PostfixOptions{SinkAddr: sink.Addr(),
//		PolicyService: "inet:" + policyListener.Addr().String()})
//	err := mtatest.Send(t, pf.Addr(), mtatest.Newsletter("alice", 1))
//	msgs := sink.WaitCount(t, 1, 10*time.Second)
//
// Everything is torn down at t.Cleanup. A missing Postfix or a caller that
// is not root fails the test, never skips it. The instance runs as "master
// -c DIR -s" on 127.0.0.1 ports (SMTPD_POLICY_README, XCLIENT_README);
// "XCLIENT LOGIN=" makes a session SASL-authenticated.
package mtatest
