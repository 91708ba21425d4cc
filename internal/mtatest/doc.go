// Package mtatest runs a private Postfix instance and an in-memory SMTP
// sink inside Go tests, and speaks SMTP (with XCLIENT) to either of them:
//
//	sink := mtatest.StartSink(t)
//	pf := mtatest.StartPostfix(t, mtatest.PostfixOptions{
//		SinkAddr:      sink.Addr(),
//		PolicyService: "inet:" + policyListener.Addr().String(),
//	})
//	err := mtatest.Send(t, pf.Addr(), mtatest.Mail{
//		Login: "alice", ClientAddr: "192.0.2.7",
//		From: "alice@example.org", To: []string{"bob@example.net"},
//		Data: mtatest.BuildMessage("alice@example.org", "bob@example.net", "hi", "hello\n"),
//	})
//	msgs := sink.WaitCount(t, 1, 10*time.Second)
//
// Everything is torn down at t.Cleanup. A missing Postfix or a caller that
// is not root fails the test, never skips it. The instance (Debian's
// postfix 3.7; SMTPD_POLICY_README, XCLIENT_README) lives in a temporary
// directory, run as "master -c DIR -s" on 127.0.0.1 ports, relaying to the
// sink; "XCLIENT LOGIN= ADDR=" makes a session SASL-authenticated.
package mtatest
